"""Batches by length, and the one pad: every place that groups sequences of similar lengths so
that a batch pads little (fine-tuning's training and held-out batches, the hub's lists) sorts
them here, longest first, and pads them with `pad`.

Longest first: a batch too big for memory fails at once rather than at the end. Sorting is
stable, so sequences of one length keep their order and the batches are a function of the
lengths alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from roberta.errors import UserError

MEGA_BATCH = 50  # micro-batches sorted together: HF's group_by_length factor


def longest_first(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """Indices of `lengths`, longest first, equal lengths in their order."""
    return np.argsort(-np.asarray(lengths), kind="stable")


def cut(order: np.ndarray, size: int) -> list[np.ndarray]:
    """`order` in consecutive batches of `size` (the last one shorter)."""
    return [order[i : i + size] for i in range(0, len(order), size)]


def sorted_batches(lengths: Sequence[int], size: int, rank: int = 0, world: int = 1) -> list[np.ndarray]:
    """Batches of `size` indices sorted by length, and of those rank `rank`'s share of `world`."""
    return cut(longest_first(lengths), size)[rank::world]


def length_batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices grouped by length so that each batch pads to at most `batch_tokens` tokens; a
    sequence longer than `batch_tokens` gets a batch of its own."""
    batches: list[list[int]] = []
    for i in longest_first(lengths).tolist():
        # Sorted descending: the batch's first sequence is its longest, the padded width.
        if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


class LengthBatches:
    """Training micro-batches of example indices for rank `rank` of `world`, epoch after epoch,
    from any position: epoch e's order is a permutation seeded by (seed, e), cut into
    mega-batches of `MEGA_BATCH` micro-batches, each sorted by length (HF's `group_by_length`).
    With `groups` (a function giving each example's group, such as its topic by
    `similarity.topics`, called at the first epoch asked for: after the run's preparation, which
    may make what it reads) a micro-batch is cut from one group instead: the groups in a seeded
    order, each group's examples longest first, cut in turn and the micro-batches then shuffled,
    so only a group's last, short remainder shares a batch.
    Rank r takes micro-batches r, r + world, ... So a resumed run computes where position p lies
    instead of replaying what came before."""

    def __init__(
        self,
        lengths: Sequence[int],
        micro_batch_size: int,
        seed: int,
        rank: int,
        world: int,
        group_by_length: bool,
        groups: Callable[[], np.ndarray] | None = None,
    ):
        self.lengths, self.micro_batch_size, self.seed = np.asarray(lengths), micro_batch_size, seed
        self.rank, self.world, self.group_by_length = rank, world, group_by_length
        self.groups, self._groups = groups, None
        self.per_epoch = -(-len(self.lengths) // micro_batch_size) // world
        if self.per_epoch == 0:
            raise UserError(
                f"{len(self.lengths)} training examples are too few for micro-batches of "
                f"{micro_batch_size} on {world} rank(s)"
            )
        self._cache: tuple[int, list[np.ndarray]] | None = None

    def epoch(self, epoch: int) -> list[np.ndarray]:
        if self._cache is None or self._cache[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            order = rng.permutation(len(self.lengths))
            if self.groups is not None:
                if self._groups is None:
                    self._groups = np.asarray(self.groups())
                rank_of_group = rng.permutation(int(self._groups.max()) + 1)
                # lexsort's last key sorts first; ties keep the permutation's order
                order = order[np.lexsort((-self.lengths[order], rank_of_group[self._groups[order]]))]
                batches = cut(order, self.micro_batch_size)
                batches = [batches[i] for i in rng.permutation(len(batches))]
            else:
                if self.group_by_length:
                    mega = cut(order, MEGA_BATCH * self.micro_batch_size)
                    order = np.concatenate([m[longest_first(self.lengths[m])] for m in mega])
                batches = cut(order, self.micro_batch_size)
            mine = batches[self.rank :: self.world]
            self._cache = (epoch, mine[: self.per_epoch])
        return self._cache[1]

    def from_position(self, position: int) -> Iterator[np.ndarray]:
        while True:
            epoch, i = divmod(position, self.per_epoch)
            yield self.epoch(epoch)[i]
            position += 1


def pad(
    sequences: Sequence[Sequence[int] | np.ndarray | torch.Tensor], pad_id: int, width: int | None = None
) -> torch.Tensor:
    """[B, T] ids right-padded with `pad_id` to the longest sequence, or to `width` (fairseq's
    `collate_tokens`)."""
    width = width or max(len(s) for s in sequences)
    out = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, s in enumerate(sequences):
        out[row, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out
