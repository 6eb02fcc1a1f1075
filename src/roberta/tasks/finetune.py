"""What every fine-tuning task shares: the job's [data] section and defaults, the model to start
from, length-grouped batches that resume exactly, and runs over several seeds or a grid.

A task (classify.py, squad.py, race.py) turns its examples into token sequences and brings an
`Objective`; this module cuts those sequences into batches and runs the one Trainer.

Batches are a function of (seed, epoch, position) only: epoch e's order is a permutation seeded
by (seed, e), cut into mega-batches of 50 micro-batches, each sorted by length so a batch pads
little (HF's `group_by_length`), the longest first. Rank r of w takes micro-batches r, r + w, ...
So a resumed run computes where position p lies instead of replaying what came before.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from roberta.errors import UserError
from roberta.io import write_json
from roberta.model import RobertaModel
from roberta.train.config import JobConfig, load_job_config
from roberta.train.metrics import training_flops_per_token
from roberta.train.trainer import Batch, Objective, TrainResult, batch_plan

MEGA_BATCH = 50  # micro-batches sorted together: HF's group_by_length factor

# The paper's fine-tuning recipe (shared/docs/REFERENCE.md): AdamW (0.9, 0.98) eps 1e-6, weight
# decay 0.1, 10 epochs, warmup 6% of updates then linear decay; dev evaluation each epoch.
COMMON_DEFAULTS = [
    "--optim.betas=[0.9, 0.98]", "--optim.eps=1e-6", "--optim.weight_decay=0.1", "--train.epochs=10",
    "--schedule.kind=linear", "--schedule.warmup_steps=0", "--schedule.warmup_fraction=0.06",
    "--train.eval_every=0", "--train.checkpoint_every=0", "--train.eval_batches=0", "--train.keep_last=1",
    "--train.log_every=10",
]
# The paper's grid (batch {16, 32} x LR {1e-5, 2e-5, 3e-5}).
SWEEP = [(batch, lr) for batch in (16, 32) for lr in (1e-5, 2e-5, 3e-5)]


@dataclass(frozen=True)
class FinetuneData:
    """The [data] section of a fine-tuning job."""

    max_length: int = 512  # tokens per sequence, <s> and </s> included
    group_by_length: bool = True  # batches of similar lengths (less padding); False: plain shuffling

    RANGES: ClassVar = {"max_length": ">0"}


def load_finetune_job(
    path: str | Path | None, overrides: Sequence[str], lr: float, batch_size: int, epochs: float = 10, extra: Sequence[str] = ()
) -> JobConfig:
    """The paper's recipe with the task's LR, batch and epochs, then the TOML file, then overrides."""
    defaults = [*COMMON_DEFAULTS, f"--optim.lr={lr}", f"--train.batch_size={batch_size}",
                f"--train.micro_batch_size={batch_size}", f"--train.epochs={epochs}", *extra]
    return load_job_config(path, list(overrides), data=FinetuneData(), defaults=defaults)


def start_model(init: str | Path, init_task: str | Path | None = None) -> tuple[RobertaModel, object]:
    """The model to fine-tune: `init` (ours, HF or fairseq) as it is, or with `init_task` a
    fine-tuned checkpoint whose body is kept and whose heads are dropped (the paper starts RTE,
    MRPC and STS-B from the MNLI model with a new head)."""
    from roberta.convert import load_any

    if init_task is not None:
        init = init_task
    model, tokenizer = load_any(init)
    if tokenizer is None:
        raise UserError(f"{init}: holds no tokenizer files; fine-tuning needs the model's tokenizer")
    if init_task is not None:
        for name in list(model.heads):
            model.remove_head(name)
    return model.train(), tokenizer


def check_head(model: RobertaModel, name: str, num_classes: int, source: str | Path) -> None:
    """A head already in the starting checkpoint must fit the task; a new one is added later."""
    if name in model.heads:
        have = model.heads[name].spec().get("num_classes")
        if have != num_classes:
            raise UserError(
                f"{source}: head {name!r} has {have} outputs but the task has {num_classes}; "
                "start a new head with --init-task"
            )


class LengthBatches:
    """This rank's micro-batches of example indices, epoch after epoch, from any position."""

    def __init__(self, lengths: Sequence[int], micro_batch_size: int, seed: int, rank: int, world: int, group_by_length: bool):
        self.lengths, self.micro_batch_size, self.seed = np.asarray(lengths), micro_batch_size, seed
        self.rank, self.world, self.group_by_length = rank, world, group_by_length
        self.per_epoch = -(-len(self.lengths) // micro_batch_size) // world
        if self.per_epoch == 0:
            raise UserError(f"{len(self.lengths)} training examples are too few for micro-batches of {micro_batch_size} on {world} rank(s)")
        self._cache: tuple[int, list[np.ndarray]] | None = None

    def epoch(self, epoch: int) -> list[np.ndarray]:
        if self._cache is None or self._cache[0] != epoch:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.lengths))
            if self.group_by_length:
                size = MEGA_BATCH * self.micro_batch_size
                mega = [order[i : i + size] for i in range(0, len(order), size)]
                order = np.concatenate([m[np.argsort(-self.lengths[m], kind="stable")] for m in mega])
            batches = [order[i : i + self.micro_batch_size] for i in range(0, len(order), self.micro_batch_size)]
            self._cache = (epoch, batches[self.rank :: self.world][: self.per_epoch])
        return self._cache[1]

    def from_position(self, position: int) -> Iterator[np.ndarray]:
        while True:
            epoch, i = divmod(position, self.per_epoch)
            yield self.epoch(epoch)[i]
            position += 1


def eval_batches(lengths: Sequence[int], micro_batch_size: int, rank: int, world: int) -> list[np.ndarray]:
    """This rank's share of a held-out set, sorted by length so batches pad little."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches = [order[i : i + micro_batch_size] for i in range(0, len(order), micro_batch_size)]
    return batches[rank::world]


def batched_objective(
    name: str, *, job: JobConfig, pad_id: int, rank: int, world: int,
    train_lengths: Sequence[int], train_batch: Callable[[np.ndarray], Batch],
    eval_sets: dict[str, tuple[Sequence[int], Callable[[np.ndarray], Batch]]],
    add_heads: Callable[[RobertaModel], None], loss: Callable, metrics: Callable, best_metric: str,
    counts: Callable[[Batch], dict[str, float]] = lambda batch: {"loss": len(batch["labels"])},
) -> Objective:
    """A fine-tuning Objective whose examples are batched here: training micro-batches by
    `LengthBatches` over `train_lengths`, each held-out set (its lengths, its collate) sorted by
    length. `train_batch` and the collates turn example indices into a batch. With several
    held-out sets, `best_metric` is read from the first ("set/metric")."""
    micro_batch_size, _ = batch_plan(job, world)
    batcher = LengthBatches(train_lengths, micro_batch_size, job.train.seed, rank, world, job.data.group_by_length)

    def held_out(lengths: Sequence[int], collate: Callable[[np.ndarray], Batch]) -> Callable[[], Iterable[Batch]]:
        return lambda: (collate(b) for b in eval_batches(lengths, micro_batch_size, rank, world))

    mean_length = round(float(np.mean(train_lengths)))
    return Objective(
        name=name,
        add_heads=add_heads,
        train_batches=lambda start: (train_batch(b) for b in batcher.from_position(start)),
        eval_sets={set_name: held_out(*data) for set_name, data in eval_sets.items()},
        counts=counts,
        loss=loss,
        metrics=metrics,
        tokens=lambda batch: int(batch["tokens"].ne(pad_id).sum()),
        flops_per_token=lambda config: training_flops_per_token(config, mean_length),
        batches_per_epoch=batcher.per_epoch,
        best_metric=best_metric if len(eval_sets) <= 1 else f"{next(iter(eval_sets))}/{best_metric}",
    )


def pad(sequences: Sequence[Sequence[int]], pad_id: int, width: int | None = None) -> torch.Tensor:
    """[B, T] ids padded with `pad_id` to the longest sequence (or to `width`)."""
    width = width or max(len(s) for s in sequences)
    out = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    for row, s in enumerate(sequences):
        out[row, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def runs(job: JobConfig, out: Path, seeds: int, sweep: bool) -> list[tuple[JobConfig, Path]]:
    """The (job, run directory) of each run: one, several seeds, or the paper's grid x seeds."""
    if seeds < 1:
        raise UserError(f"--seeds must be at least 1, not {seeds}")
    cells = [(job.train.batch_size, job.optim.lr)] if not sweep else SWEEP
    planned = []
    for batch, lr in cells:
        for seed in range(job.train.seed, job.train.seed + seeds):
            cell = dataclasses.replace(
                job,
                optim=dataclasses.replace(job.optim, lr=lr),
                train=dataclasses.replace(job.train, batch_size=batch, seed=seed),  # micro-batch: at most batch
            )
            name = (f"bs{batch}-lr{lr:g}-" if sweep else "") + f"seed{seed}"
            planned.append((cell, out if len(cells) * seeds == 1 else out / name))
    return planned


def summarize(out: Path, results: list[tuple[JobConfig, Path, TrainResult]]) -> dict:
    """RUN/results.json over several runs: every run's best, and per grid cell the median over seeds."""
    if len(results) == 1:
        return {"best": results[0][2].best}
    cells: dict[str, list[dict]] = {}
    for job, run_dir, result in results:
        key = f"batch {job.train.batch_size}, lr {job.optim.lr:g}"
        cells.setdefault(key, []).append({"run": str(run_dir), "seed": job.train.seed, "best": result.best})
    summary = {
        key: {"runs": rows, "median": statistics.median(r["best"]["value"] for r in rows if r["best"])}
        for key, rows in cells.items()
    }
    best_cell = max(summary, key=lambda k: summary[k]["median"])
    record = {"metric": results[0][2].best["metric"] if results[0][2].best else None, "cells": summary,
              "best_cell": best_cell}
    write_json(out / "results.json", record)
    return record


def run_all(job: JobConfig, out: str | Path, seeds: int, sweep: bool, run_one: Callable[[JobConfig, Path], TrainResult]) -> dict:
    """Run every planned (job, directory) and return the summary."""
    out = Path(out)
    results = [(cell, run_dir, run_one(cell, run_dir)) for cell, run_dir in runs(job, out, seeds, sweep)]
    return summarize(out, results)
