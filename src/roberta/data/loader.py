"""Batches of masked sequences for the trainer, from a prepared corpus directory.

    from roberta.data.loader import DataConfig, build_loader
    loader = build_loader("corpus/", config=DataConfig(), micro_batch_size=16, seed=0,
                          rank=rank, world_size=world_size, start_step=saved["step"])
    for batch in loader:           # endless: epoch after epoch (pass epochs=1 for one pass)
        ...
        saved = loader.state_dict()  # {"step": micro-batches this rank has consumed}

Each batch is a dict of torch tensors:
    tokens       int64 [B, T]  masked sequences, padded with the corpus' pad id to the longest in
                               the batch (attention masks come from `tokens != pad_id`)
    labels       int64 [B, T]  the original token where a prediction is due, IGNORE_INDEX (-100,
                               cross_entropy's default ignore_index) elsewhere, padding included
    nsp_labels   int64 [B]     NSP formats only: 0 = B follows A, 1 = B from another document
    overlap      float32 [B]   OVERLAP-PAIR only: the share of the pair's tokens that occur in the
                               other segment (`packing.token_overlap`)
    shared       float32 [B, T] OVERLAP-PAIR only: per token, 1.0 if it occurs in the other segment's
                               visible tokens, 0.0 if not, -1.0 for no label (`packing.shared_tokens`)

B is `micro_batch_size` for FULL-SENTENCES and SEGMENT-PAIR; for DOC-SENTENCES and SENTENCE-PAIR the
batch holds a token budget of micro_batch_size * seq_len (padded size), so B varies. Gradient
accumulation is the trainer's business.

Everything is a function of (seed, epoch, step): the epoch's order is a permutation seeded by
(seed, epoch); rank r of world_size w takes global batches r, r + w, r + 2w, ... (the last
incomplete round is dropped in training so every rank takes the same number of steps); sequence i
is masked by `masking_rng(seed, epoch, i)`. So resuming at step n is computing where step n lies,
not replaying the n steps before it, and a resumed run sees the same batches and masks.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from roberta.data import packing
from roberta.data.corpus import Corpus
from roberta.data.masking import IGNORE_INDEX, MaskingConfig, MaskVocab, mask_tokens, masking_rng
from roberta.errors import UserError
from roberta.validation import check_fields

_ORDER_STREAM = 0x6F72646572  # keeps the shuffling streams apart from masking and pairing
_PAIR_STREAM = 0x70616972


@dataclass(frozen=True)
class DataConfig:
    format: str = packing.FULL_SENTENCES  # one of packing.FORMATS
    seq_len: int = 512  # tokens per sequence, <s> and </s> included
    masking: MaskingConfig = field(default_factory=MaskingConfig)

    CHOICES: ClassVar = {"format": packing.FORMATS}
    RANGES: ClassVar = {"seq_len": ">0"}

    def __post_init__(self) -> None:
        check_fields(self, "data")


@dataclass(frozen=True)
class _Plan:
    """One epoch on one rank: the sequences (ranges) and the batches of sequence indices."""

    starts: np.ndarray  # pair formats: A ranges
    ends: np.ndarray
    pairs: packing.Pairs | None
    order: np.ndarray | None  # fixed-count formats: a permutation, batch j = order[j*B:(j+1)*B]
    budget: list[np.ndarray] | None  # budget formats: global batches
    num_batches: int  # on this rank


class PretrainDataset(Dataset):
    """Map-style dataset whose item `step` is the whole micro-batch this rank trains on at that step."""

    def __init__(
        self,
        corpus_dir: str | Path,
        *,
        split: str = "train",
        config: DataConfig = DataConfig(),
        micro_batch_size: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ):
        if not 0 <= rank < world_size:
            raise UserError(f"data: rank {rank} is not in [0, world_size={world_size})")
        if micro_batch_size < 1:
            raise UserError(f"data: micro_batch_size must be >= 1, not {micro_batch_size}")
        corpus = Corpus(corpus_dir)
        self.config, self.micro_batch_size, self.seed, self.rank, self.world_size = (
            config,
            micro_batch_size,
            seed,
            rank,
            world_size,
        )
        self.split = corpus.split(split)
        self.specials = corpus.specials
        self.drop_last = split == "train"
        self.vocab = MaskVocab(
            mask_id=self.specials.mask_id,
            special_ids=self.specials.ids,
            vocab_size=self.specials.vocab_size,
            word_starts=corpus.word_starts() if config.masking.whole_word else None,
        )
        if self.split.num_tokens == 0:
            raise UserError(f"{corpus.directory}: the {split} split is empty")
        offsets, documents = self.split.sentence_offsets, self.split.document_offsets
        self._document_tokens = self.split.document_token_offsets
        if config.format in packing.PAIR_FORMATS:
            whole = config.format != packing.SENTENCE_PAIR
            self._segments = packing.segments(offsets, documents, (config.seq_len - 4) // 2, whole)
            self._blocks = None
        else:
            cross = config.format == packing.FULL_SENTENCES
            self._blocks = packing.pack_blocks(offsets, documents, config.seq_len, cross)
        self._plan_cache: tuple[int, _Plan] | None = None
        self._epoch_sizes: dict[int, int] = {}
        # Known (epoch, its first step) pairs: budget formats' epochs differ in length, and an
        # anchor from a checkpoint saves counting every earlier epoch's batches on resume.
        self._epoch_starts: dict[int, int] = {0: 0}
        if self.batches_in_epoch(0) == 0:
            raise UserError(
                f"{corpus.directory}: the {split} split is too small for micro_batch_size "
                f"{micro_batch_size} on {world_size} rank(s)"
            )

    # --- planning --------------------------------------------------------------------------

    def _data_epoch(self, epoch: int) -> int:
        copies = self.config.masking.static_copies
        return epoch % copies if copies else epoch

    def plan(self, epoch: int) -> _Plan:
        if self._plan_cache is None or self._plan_cache[0] != epoch:
            self._plan_cache = (epoch, self._make_plan(epoch))
        return self._plan_cache[1]

    def _make_plan(self, epoch: int) -> _Plan:
        pairs = None
        if self._blocks is None:
            rng = np.random.default_rng([self.seed, self._data_epoch(epoch), _PAIR_STREAM])
            pairs = packing.make_pairs(*self._segments, rng)
            starts, ends = pairs.a_start, pairs.a_end
            lengths = (pairs.a_end - pairs.a_start) + (pairs.b_end - pairs.b_start) + 4
        else:
            starts, ends = self._blocks
            offsets = self.split.sentence_offsets
            closed = np.searchsorted(offsets, ends, side="right") - np.searchsorted(
                offsets, starts, side="right"
            )
            lengths = (ends - starts) + closed + 1
        rng = np.random.default_rng([self.seed, epoch, _ORDER_STREAM])
        world, rank = self.world_size, self.rank
        if self.config.format in packing.BUDGET_FORMATS:
            budget = packing.budget_batches(lengths, self.micro_batch_size * self.config.seq_len, rng)
            total, order = len(budget), None
        else:
            order, budget = rng.permutation(len(starts)), None
            total = (
                len(starts) // self.micro_batch_size
                if self.drop_last
                else -(-len(starts) // self.micro_batch_size)
            )
        num = total // world if self.drop_last else len(range(rank, total, world))
        return _Plan(starts, ends, pairs, order, budget, num)

    def batches_in_epoch(self, epoch: int) -> int:
        if self.config.format not in packing.BUDGET_FORMATS:
            epoch = 0  # the count does not change from epoch to epoch
        if epoch not in self._epoch_sizes:
            self._epoch_sizes[epoch] = self.plan(epoch).num_batches
        return self._epoch_sizes[epoch]

    def locate(self, step: int) -> tuple[int, int]:
        """(epoch, batch within the epoch) of this rank's `step`."""
        if self.config.format not in packing.BUDGET_FORMATS:
            return divmod(step, self.batches_in_epoch(0))
        epoch = max(e for e, first in self._epoch_starts.items() if first <= step)
        step -= self._epoch_starts[epoch]
        while step >= self.batches_in_epoch(epoch):
            step -= self.batches_in_epoch(epoch)
            epoch += 1
            self._epoch_starts[epoch] = self._epoch_starts[epoch - 1] + self.batches_in_epoch(epoch - 1)
        return epoch, step

    def epoch_start(self, epoch: int) -> int:
        """The step at which `epoch` begins on this rank."""
        known = max(e for e in self._epoch_starts if e <= epoch)
        first = self._epoch_starts[known]
        for e in range(known, epoch):
            first += self.batches_in_epoch(e)
        self._epoch_starts[epoch] = first
        return first

    def anchor(self, epoch: int, first_step: int) -> None:
        """Record that `epoch` begins at `first_step` (from a checkpoint's loader state)."""
        self._epoch_starts[epoch] = first_step

    # --- serving ---------------------------------------------------------------------------

    def sequence_indices(self, step: int) -> tuple[int, np.ndarray]:
        epoch, i = self.locate(step)
        plan = self.plan(epoch)
        j = i * self.world_size + self.rank
        if plan.budget is not None:
            return epoch, plan.budget[j]
        return epoch, plan.order[j * self.micro_batch_size : (j + 1) * self.micro_batch_size]

    def sequence(
        self, plan: _Plan, index: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, tuple[float, int] | None]:
        """Sequence `index`'s tokens and, for OVERLAP-PAIR, (its overlap label, A's length); B's
        rewrite is drawn from `rng`, the sequence's own stream, before its masking."""
        bos, eos = self.specials.bos_id, self.specials.eos_id
        start, end = int(plan.starts[index]), int(plan.ends[index])
        if plan.pairs is not None:
            a = self.split.tokens(start, end)
            b = self.split.tokens(int(plan.pairs.b_start[index]), int(plan.pairs.b_end[index]))
            if self.config.format != packing.OVERLAP_PAIR:
                return packing.pair_tokens(a, b, bos, eos), None
            if rng.random() < 0.5:
                b = packing.rewrite(a, b, rng)
            return packing.pair_tokens(a, b, bos, eos), (packing.token_overlap(a, b), len(a))
        separators = self._document_tokens if self.config.format == packing.FULL_SENTENCES else None
        block = packing.block_tokens(
            self.split.tokens(start, end), start, self.split.sentence_offsets, separators, bos, eos
        )
        return block, None

    def __getitem__(self, step: int) -> dict[str, torch.Tensor]:
        epoch, indices = self.sequence_indices(step)
        plan = self.plan(epoch)
        rows, overlaps, shared = [], [], []
        for index in indices:
            rng = masking_rng(self.seed, epoch, int(index), self.config.masking.static_copies)
            sequence, pair = self.sequence(plan, int(index), rng)
            rows.append(mask_tokens(sequence, rng, self.config.masking, self.vocab))
            if pair is not None:
                overlaps.append(pair[0])
                shared.append(packing.shared_tokens(rows[-1][0], pair[1], (self.specials.mask_id,)))
        width = max(len(inputs) for inputs, _ in rows)
        tokens = np.full((len(rows), width), self.specials.pad_id, dtype=np.int64)
        labels = np.full((len(rows), width), IGNORE_INDEX, dtype=np.int64)
        for r, (inputs, targets) in enumerate(rows):
            tokens[r, : len(inputs)] = inputs
            labels[r, : len(targets)] = targets
        batch = {"tokens": torch.from_numpy(tokens), "labels": torch.from_numpy(labels)}
        if self.config.format in packing.NSP_FORMATS:
            batch["nsp_labels"] = torch.from_numpy(plan.pairs.nsp[indices].astype(np.int64))
        if self.config.format == packing.OVERLAP_PAIR:
            batch["overlap"] = torch.tensor(overlaps, dtype=torch.float32)
            flags = np.full((len(rows), width), -1.0, dtype=np.float32)
            for r, row in enumerate(shared):
                flags[r, : len(row)] = row
            batch["shared"] = torch.from_numpy(flags)
        return batch

    def __len__(self) -> int:
        return self.batches_in_epoch(0)


class _Steps(Sampler):
    def __init__(self, start: int, stop: int | None):
        self.start, self.stop = start, stop

    def __iter__(self):
        return iter(range(self.start, self.stop)) if self.stop is not None else itertools.count(self.start)


class PretrainLoader:
    """Iterates this rank's batches from `step` on, through DataLoader workers; the position is one number."""

    def __init__(
        self,
        dataset: PretrainDataset,
        *,
        start_step: int = 0,
        epochs: int | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int = 2,
    ):
        self.dataset, self.step, self.epochs = dataset, start_step, epochs
        self.num_workers, self.pin_memory, self.prefetch_factor = num_workers, pin_memory, prefetch_factor

    @property
    def stop(self) -> int | None:
        if self.epochs is None:
            return None
        return sum(self.dataset.batches_in_epoch(e) for e in range(self.epochs))

    @property
    def epoch(self) -> int:
        return self.dataset.locate(self.step)[0]

    def __iter__(self):
        loader = DataLoader(
            self.dataset,
            batch_size=None,
            sampler=_Steps(self.step, self.stop),
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            prefetch_factor=self.prefetch_factor if self.num_workers else None,
            # DataLoader draws its workers' base seed from this generator when iteration
            # starts; by default that is the global RNG dropout uses, which would make a fresh
            # run and a resumed one diverge. Batches depend on (seed, epoch, step) only.
            generator=torch.Generator().manual_seed(self.dataset.seed),
        )
        for batch in loader:
            self.step += 1
            yield batch

    def state_dict(self) -> dict:
        """{"step": n, "epoch": e, "epoch_start": first step of e}; "step" alone is enough to resume,
        the epoch anchor makes resuming DOC-SENTENCES / SENTENCE-PAIR instant too."""
        epoch = self.epoch
        return {"step": self.step, "epoch": epoch, "epoch_start": self.dataset.epoch_start(epoch)}

    def load_state_dict(self, state: dict) -> None:
        if "epoch" in state:
            self.dataset.anchor(int(state["epoch"]), int(state["epoch_start"]))
        self.step = int(state["step"])


def build_loader(
    corpus_dir: str | Path,
    *,
    start_step: int = 0,
    epochs: int | None = None,
    num_workers: int = 0,
    pin_memory: bool = False,
    prefetch_factor: int = 2,
    **dataset_options: Any,
) -> PretrainLoader:
    """The loader the trainer uses: training data endless from start_step; `split="valid", epochs=1`
    for one evaluation pass (no batch dropped). `dataset_options` are `PretrainDataset`'s (split,
    config, micro_batch_size, seed, rank, world_size)."""
    return PretrainLoader(
        PretrainDataset(corpus_dir, **dataset_options),
        start_step=start_step,
        epochs=epochs,
        num_workers=num_workers,
        pin_memory=pin_memory,
        prefetch_factor=prefetch_factor,
    )
