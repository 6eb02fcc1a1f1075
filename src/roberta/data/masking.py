"""Masked-language-model targets: which tokens to predict and what the model sees instead.

`mask_tokens` is pure: the same tokens and the same generator state give the same mask.
Of the candidate tokens (everything but special tokens and padding), `mask_prob` (15%) are chosen,
as fairseq does: floor(mask_prob * candidates + U[0,1)) of them, drawn without replacement, so
every sequence gets its share. Each chosen token becomes `<mask>` (80%), a random non-special
token (10%) or stays unchanged (10%). Labels hold the original token at chosen positions and
IGNORE_INDEX (-100, what torch's cross_entropy ignores by default) everywhere else.

Whole-word masking chooses words instead of tokens. For byte-level BPE a word is a token whose
text starts with the leading-space marker `Ġ` (or that follows a special token or opens the
sequence), plus the continuation tokens after it; `MaskVocab.word_starts` holds that per id.
Span masking (fairseq's `mask_multiple_length`) chooses mask_prob / span_length starting units and
masks span_length consecutive units (tokens, or words) from each.

Where the generator comes from decides dynamic versus static masking (`masking_rng`): dynamic
draws a fresh mask per (seed, epoch, sequence), static reuses the masks of K fixed copies of the
data (the paper's BERT baseline duplicated the data 10 times: copy k = epoch mod K).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from roberta.errors import UserError
from roberta.validation import check_fields

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MaskingConfig:
    mask_prob: float = 0.15
    random_prob: float = 0.1  # share of chosen tokens replaced by a random token
    keep_prob: float = 0.1  # share of chosen tokens left unchanged
    whole_word: bool = False
    span_length: int = 1  # fairseq's mask_multiple_length
    static_copies: int = 0  # 0: dynamic masking; K > 0: static masking with K copies (paper: 10)

    RANGES: ClassVar = {
        "mask_prob": "(0,1)",
        "random_prob": "[0,1]",
        "keep_prob": "[0,1]",
        "span_length": ">=1",
        "static_copies": ">=0",
    }

    def __post_init__(self) -> None:
        check_fields(self, "masking")
        if self.random_prob + self.keep_prob > 1.0:
            raise UserError(
                f"masking: random_prob {self.random_prob} and keep_prob {self.keep_prob} "
                "must sum to at most 1"
            )


@dataclass(frozen=True)
class MaskVocab:
    """What masking needs to know of the vocabulary."""

    mask_id: int
    special_ids: tuple[int, ...]  # never chosen, never drawn as random replacements
    vocab_size: int
    word_starts: np.ndarray | None = None  # bool[vocab_size], needed for whole-word masking
    random_ids: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = np.setdiff1d(
            np.arange(self.vocab_size, dtype=np.int64), np.asarray(self.special_ids, dtype=np.int64)
        )
        object.__setattr__(self, "random_ids", ids)


def masking_rng(seed: int, epoch: int, index: int, static_copies: int = 0) -> np.random.Generator:
    """The generator for sequence `index` in `epoch`: dynamic masking gets a fresh stream per epoch;
    static masking cycles through `static_copies` fixed streams."""
    data_epoch = epoch % static_copies if static_copies else epoch
    # The trailing constant keeps these streams apart from the shuffling streams of the same seed.
    return np.random.default_rng([seed, data_epoch, index, 0x6D61736B])


def mask_tokens(
    tokens: np.ndarray, generator: np.random.Generator, cfg: MaskingConfig, vocab: MaskVocab
) -> tuple[np.ndarray, np.ndarray]:
    """Mask one sequence of token ids. Returns (inputs, labels), both int64 like tokens."""
    tokens = np.asarray(tokens, dtype=np.int64)
    special = np.isin(tokens, np.asarray(vocab.special_ids, dtype=np.int64))
    candidates = np.flatnonzero(~special)
    if cfg.whole_word:
        if vocab.word_starts is None:
            raise ValueError("whole-word masking needs MaskVocab.word_starts")
        after_special = np.concatenate([[True], special[:-1]])
        starts = vocab.word_starts[tokens[candidates]] | after_special[candidates]
        starts[:1] = True
        unit = np.cumsum(starts) - 1  # word number of each candidate
        num_units = int(unit[-1]) + 1 if len(unit) else 0
    else:
        unit = np.arange(len(candidates))
        num_units = len(candidates)

    count = min(num_units, int(cfg.mask_prob * num_units / cfg.span_length + generator.random()))
    chosen_units = np.zeros(num_units, dtype=bool)
    if count:
        first = generator.choice(num_units, count, replace=False)
        spans = (first[:, None] + np.arange(cfg.span_length)).ravel()
        chosen_units[spans[spans < num_units]] = True
    positions = candidates[chosen_units[unit]]

    labels = np.full(len(tokens), IGNORE_INDEX, dtype=np.int64)
    labels[positions] = tokens[positions]
    inputs = tokens.copy()
    u = generator.random(len(positions))
    to_mask = u < 1.0 - cfg.random_prob - cfg.keep_prob
    to_random = ~to_mask & (u < 1.0 - cfg.keep_prob)
    inputs[positions[to_mask]] = vocab.mask_id
    picks = generator.integers(0, len(vocab.random_ids), int(to_random.sum()))
    inputs[positions[to_random]] = vocab.random_ids[picks]
    return inputs, labels
