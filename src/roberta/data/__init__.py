"""Pretraining data: prepare (text → binarized corpus), corpus reading, packing, masking, loading.

`prepare` lives in `roberta.data.prepare` (imported from there, it does not shadow the module).
"""

from roberta.data.corpus import Corpus, check_tokenizer
from roberta.data.masking import IGNORE_INDEX, MaskingConfig, MaskVocab, mask_tokens, masking_rng

__all__ = [
    "IGNORE_INDEX",
    "Corpus",
    "MaskVocab",
    "MaskingConfig",
    "check_tokenizer",
    "mask_tokens",
    "masking_rng",
]
