"""The hub's inputs, checked and shaped: lists of token ids, texts too long for the model."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch

from roberta.errors import UserError

TokenSeqs = Sequence[torch.Tensor | Sequence[int]]


class TooLongError(UserError):
    """A text has more tokens than the model has positions; `index` is its place in the batch."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


def refuse_or_warn(length: int, index: int, truncate: bool, count: int, max_seq_len: int) -> None:
    if not truncate:
        raise TooLongError(
            f"text of {length} tokens is longer than the model's {max_seq_len} positions "
            f"(truncate=True / --truncate cuts it)",
            index,
        )
    warnings.warn(f"truncated {count} text(s) to the model's {max_seq_len} positions", stacklevel=3)


def quote(text: str) -> str:
    """A text as an error message quotes it: its start, never a whole document."""
    return repr(text) if len(text) <= 60 else f"{text[:60]!r}..."


def sequences(seqs: TokenSeqs, vocab: int) -> list[torch.Tensor]:
    """A list of 1-D id sequences, each checked (UserError naming the input)."""
    if isinstance(seqs, (str, bytes)):
        raise UserError(f"token ids expected, got text {seqs[:40]!r} (encode it first: roberta.encode)")
    if not isinstance(seqs, (Sequence, np.ndarray)):
        raise UserError(
            f"token ids expected: a tensor or a list of 1-D id sequences, not {type(seqs).__name__}"
        )
    if len(seqs) == 0:
        raise UserError("an empty list of inputs")
    return [_as_sequence(seq, i, vocab) for i, seq in enumerate(seqs)]


def _as_sequence(seq, index: int, vocab: int) -> torch.Tensor:
    if isinstance(seq, (str, bytes)):
        raise UserError(
            f"input {index}: token ids expected, got text {seq[:40]!r} (encode it first: roberta.encode)"
        )
    try:
        tensor = torch.as_tensor(seq)
    except (TypeError, ValueError, RuntimeError):
        raise UserError(f"input {index}: not a sequence of token ids: {str(seq)[:60]!r}") from None
    if tensor.dim() == 0:
        raise UserError(
            f"input {index}: a single id {seq!r}, not a sequence (the ids of one text: a tensor, or [ids])"
        )
    if tensor.dim() != 1:
        raise UserError(f"input {index}: each sequence in a list must be 1-D, not shape {list(tensor.shape)}")
    check_ids(tensor, vocab, index)
    return tensor.long()


def check_ids(tokens: torch.Tensor, vocab: int, index: int | None = None) -> None:
    """Integer ids inside the model's vocabulary, else a UserError (not an IndexError from the
    embedding)."""
    where = "" if index is None else f"input {index}: "
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise UserError(f"{where}token ids must be integers, not {tokens.dtype}")
    if tokens.numel() == 0:
        raise UserError(f"{where}an empty sequence of token ids")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab:
        raise UserError(
            f"{where}token id {low if low < 0 else high} is outside the model's vocabulary of {vocab} "
            f"(0..{vocab - 1})"
        )


def as_fp32(value):
    """Float tensors (alone, or in lists and tuples) as float32; anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(as_fp32(v) for v in value)
    return value
