"""The hub: fairseq's `RobertaHubInterface` calls on our model (`Roberta`), and `load` for any
checkpoint layout. `interface.py` holds the class and its batching; each task-level call that is
more than a few lines lives in a module of its own (`embed.py`, `fill_mask.py`, `answer.py`), the
checks of the inputs in `inputs.py`; `files.py` runs the calls over input files (the embed and
predict verbs)."""

from roberta.hub.fill_mask import MASK
from roberta.hub.inputs import TokenSeqs, TooLongError
from roberta.hub.interface import DEFAULT_BATCH_TOKENS, Roberta
from roberta.hub.loading import check_device, load

__all__ = ["DEFAULT_BATCH_TOKENS", "MASK", "Roberta", "TokenSeqs", "TooLongError", "check_device", "load"]
