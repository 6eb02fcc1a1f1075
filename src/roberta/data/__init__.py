"""Pretraining data: prepare (text → binarized corpus), corpus reading, packing, masking, loading."""

from roberta.data.corpus import Corpus, check_tokenizer
from roberta.data.masking import IGNORE_INDEX, MaskingConfig, MaskVocab, mask_tokens, masking_rng
from roberta.data.prepare import prepare

__all__ = [
    "IGNORE_INDEX",
    "Corpus",
    "MaskVocab",
    "MaskingConfig",
    "check_tokenizer",
    "mask_tokens",
    "masking_rng",
    "prepare",
]
