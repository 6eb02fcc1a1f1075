"""roberta: RoBERTa pretraining, fine-tuning and inference, exact to fairseq and HF transformers."""

from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.hub import Roberta, load
from roberta.model import RobertaModel

__all__ = ["Roberta", "RobertaConfig", "RobertaModel", "UserError", "load"]
