"""Which token rows the encoder's layers compute: the real ones, and in the last layer the
selected ones.

A right-padded batch [B, T] wastes the products on its padding (~20% of FULL-SENTENCES batches at
128 tokens): `Unpadded` keeps the real rows [N, H] for the matrix products and LayerNorms and puts
them back in place for attention, as MosaicBERT's and ModernBERT's unpadding does. A task often
reads a few positions only (`<s>` for a classifier, the ~15% masked positions for the masked-LM
loss): `Selected` has the last layer compute those queries alone, their keys and values still
read from every position.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Unpadded(NamedTuple):
    """Where a right-padded batch's real tokens are."""

    index: torch.Tensor  # [N]: the real positions in the flattened [B * T], ascending
    batch: int
    length: int

    @classmethod
    def of(cls, padding: torch.Tensor, bucketed: bool = False) -> Unpadded:
        """`bucketed`: the real rows and as many padding rows (the first in flat order) as round
        the count up to one of few sizes (`bucket_rows`). oneDNN, which runs bf16 matrix products
        on a CPU, builds a kernel for each new shape (8 ms a product, measured on the AMX host:
        benchmarks/results/2026-11-27-finetune-speed-tag-squad.md), so a row count that differs
        in every batch cost more than the products. A padding row's output is never read and
        its gradient is zero (attention masks it as a key), so the real rows' numbers are those
        of the exact count, to rounding."""
        real = ~padding.flatten()
        if bucketed:
            extra = min(bucket_rows(int(real.sum())), real.numel()) - int(real.sum())
            real = real.clone()
            real[(~real).nonzero().squeeze(1)[:extra]] = True
        return cls(real.nonzero().squeeze(1), *padding.shape)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(0, 1)[self.index]

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """[N, ...] → [B, T, ...], zeros at the padding."""
        out = x.new_zeros(self.batch * self.length, *x.shape[1:])
        return out.index_copy_(0, self.index, x).view(self.batch, self.length, *x.shape[1:])


def bucket_rows(n: int) -> int:
    """`n` rounded up to a multiple of a quarter of its power of two (640, 768, 896, 1024, 1280,
    ...; 16 at least): four sizes an octave, at most a quarter more rows."""
    step = max(16, 1 << max(n.bit_length() - 3, 0))
    return -(-n // step) * step


class Layout(NamedTuple):
    """What every layer needs to know of the batch's padding."""

    attn_mask: torch.Tensor | None  # [B, 1, 1, T], True at real keys; None without padding
    unpadded: Unpadded | None  # where the real rows are, when the layers compute those only


class Selected(NamedTuple):
    """The positions the last layer computes: a boolean [B, T] mask's True entries in row-major order."""

    flat: torch.Tensor  # [N]: their places in the flattened [B * T]
    rows: torch.Tensor  # [N]: their rows in the layers' input ([B * T], or the unpadded rows)
    batch: torch.Tensor  # [N]: each one's sequence
    slot: torch.Tensor  # [N]: its place among its sequence's selected positions
    query_positions: torch.Tensor  # [B, slots]: the position each slot holds (0 where a sequence has fewer)

    @classmethod
    def of(cls, mask: torch.Tensor, unpadded: Unpadded | None, slots: int | None = None) -> Selected:
        """`slots`: the most positions one sequence selects, if known (counting them syncs with the
        device)."""
        length = mask.size(1)
        flat = mask.flatten().nonzero().squeeze(1)
        batch, position = flat.div(length, rounding_mode="floor"), flat.remainder(length)
        slot = (mask.cumsum(1) - 1).flatten()[flat]
        slots = slots if slots is not None else int(mask.sum(1).max())
        query_positions = flat.new_zeros(mask.size(0), slots).index_put_((batch, slot), position)
        rows = flat if unpadded is None else torch.searchsorted(unpadded.index, flat)
        return cls(flat, rows, batch, slot, query_positions)

    @classmethod
    def first(cls, padding: torch.Tensor, unpadded: Unpadded | None) -> Selected:
        """Position 0 (`<s>`) of every sequence: all a classification head reads."""
        mask = torch.zeros_like(padding)
        mask[:, 0] = True
        return cls.of(mask, unpadded, slots=1)

    def rows_of(self, x: torch.Tensor) -> torch.Tensor:
        """The selected rows [N, H] of a layer input ([B, T, H], or the unpadded [N_real, H])."""
        return (x.flatten(0, 1) if x.dim() == 3 else x)[self.rows]
