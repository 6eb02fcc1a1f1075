"""fairseq's layout of the special tokens around one or more texts' ids, and truncation to a
`max_length` as HF's tokenizers truncate."""

from __future__ import annotations

from typing import Literal

from roberta.errors import UserError

Truncation = Literal["longest_first", "only_first", "only_second"] | None


def assemble(
    seqs: list[list[int]],
    bos_id: int,
    eos_id: int,
    no_separator: bool,
    max_length: int | None,
    truncation: Truncation,
) -> list[int]:
    """`<s> A </s>`, and for each further text `</s> B </s>` (one `</s>` less between texts with
    `no_separator`), the texts cut so that the whole holds at most `max_length` ids."""
    between = [eos_id] if no_separator else [eos_id, eos_id]
    if max_length is not None:
        budget = max_length - 2 - len(between) * (len(seqs) - 1)
        if budget < 0:
            raise UserError(
                f"max_length={max_length} leaves no room for the special tokens of {len(seqs)} text(s)"
            )
        keep = _truncated_lengths([len(s) for s in seqs], budget, truncation, max_length)
        seqs = [s[:n] for s, n in zip(seqs, keep)]
    ids = [bos_id, *seqs[0]]
    for seq in seqs[1:]:
        ids += between + seq
    ids.append(eos_id)
    return ids


def _truncated_lengths(lengths: list[int], budget: int, truncation: Truncation, max_length: int) -> list[int]:
    """How many tokens of each text to keep so that they fit in `budget`."""
    excess = sum(lengths) - budget
    if excess <= 0:
        return lengths
    if truncation in ("only_first", "only_second"):
        which = 0 if truncation == "only_first" else 1
        if which >= len(lengths) or lengths[which] < excess:
            raise UserError(
                f"cannot fit max_length={max_length} by truncating only the "
                f"{'first' if which == 0 else 'second'} text"
            )
        return [n - excess if k == which else n for k, n in enumerate(lengths)]
    if truncation != "longest_first":
        raise UserError(
            f"{sum(lengths)} tokens exceed max_length={max_length} and truncation is {truncation!r}"
        )
    # Remove tokens from the longest text, one at a time, ties taken from the later text (HF's rule):
    # the result caps every text at some c, and the earliest texts above the cap keep one more.
    lo, hi = 0, max(lengths)
    while lo < hi:
        cap = (lo + hi + 1) // 2
        lo, hi = (cap, hi) if sum(min(n, cap) for n in lengths) <= budget else (lo, cap - 1)
    keep = [min(n, lo) for n in lengths]
    spare = budget - sum(keep)
    for k, n in enumerate(lengths):
        if spare and n > lo:
            keep[k] += 1
            spare -= 1
    return keep
