"""What every fine-tuning task shares: the job's [data] section and defaults, the model to start
from, length-grouped batches that resume exactly, and runs over several seeds or a grid.

A task (classify.py, squad.py, race.py) turns its examples into token sequences and brings an
`Objective`; this module cuts those sequences into batches and runs the one Trainer.

A command is planned whole before anything is written (`finetune`): the job of every member
(one run, --seeds, --sweep), every data file, the starting model and its heads, the run
directories and, with --resume, each member's checkpoint. Only then do the runs start, so a
refusal leaves every directory as it was. Warnings raised while planning (a SQuAD answer that
does not match its text) are shown only once the plan has passed.

Run directories: a missing or empty --out starts a run. One that holds a run (finished or not)
or anything else is refused unless --resume (continue: finished members are reported as they
are, interrupted ones continue from their latest checkpoint, members not begun or killed
before their first checkpoint start afresh) or --overwrite (its contents are removed, after
the plan has passed).

Batches are a function of (seed, epoch, position) only (`batching.LengthBatches`): epoch e's
order is a permutation seeded by (seed, e), cut into mega-batches of 50 micro-batches, each sorted
by length so a batch pads little (HF's `group_by_length`). So a resumed run computes where
position p lies instead of replaying what came before.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

from roberta import checkpoint
from roberta.errors import UserError
from roberta.io import read_json, write_json
from roberta.model import RobertaModel, build_head
from roberta.options.finetune import RunOptions
from roberta.runtime.batching import LengthBatches, sorted_batches
from roberta.train import distributed, run_state
from roberta.train.config import JobConfig, ModelSection, load_job_config
from roberta.train.metrics import training_flops_per_token
from roberta.train.trainer import RESULTS_FILE, Batch, Objective, RunPlan, TrainResult, batch_plan, plan_run
from roberta.train.trainer import train as train_run
from roberta.validation import check_fields, check_value

# The paper's fine-tuning recipe (Liu et al. 2019, appendix Table 10, GLUE column: weight decay 0.1,
# 10 epochs, warmup 6% of updates then linear decay) with fairseq's AdamW (0.9, 0.98), eps 1e-6
# (examples/roberta/README.glue.md); dev evaluation each epoch.
COMMON_DEFAULTS = [
    "--optim.betas=[0.9, 0.98]",
    "--optim.eps=1e-6",
    "--optim.weight_decay=0.1",
    "--train.epochs=10",
    "--schedule.kind=linear",
    "--schedule.warmup_steps=0",
    "--schedule.warmup_fraction=0.06",
    "--train.eval_every=0",
    "--train.checkpoint_every=0",
    "--train.eval_batches=0",
    "--train.keep_last=1",
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

    def __post_init__(self) -> None:
        check_fields(self, "job", prefix="data.")


def load_finetune_job(
    path: str | Path | None,
    overrides: Sequence[str],
    lr: float,
    batch_size: int,
    epochs: float = 10,
    extra: Sequence[str] = (),
    eval_every: int | None = None,
) -> JobConfig:
    """The paper's recipe with the task's LR, batch and epochs (and `eval_every`, the command's
    --eval-every: dev evaluations every N updates), then the TOML file, then overrides."""
    check_value(RunOptions, "eval_every", eval_every, "finetune")
    extra = [*extra, *([f"--train.eval_every={eval_every}"] if eval_every else [])]
    defaults = [
        *COMMON_DEFAULTS,
        f"--optim.lr={lr}",
        f"--train.batch_size={batch_size}",
        f"--train.micro_batch_size={batch_size}",
        f"--train.epochs={epochs}",
        *extra,
    ]
    return load_job_config(path, list(overrides), data=FinetuneData(), defaults=defaults)


@dataclass(frozen=True)
class Recipe:
    """A task's fine-tuning recipe: its LR, batch and epochs over the paper's common defaults, and
    the job fields it sets beside them (`--section.key=value`). The command line and a Python caller
    get the same job from it (`recipe_job`); the --config file and the overrides come after it."""

    lr: float
    batch_size: int
    epochs: float = 10
    overrides: tuple[str, ...] = ()


def recipe_job(
    recipe: Recipe,
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    eval_every: int | None = None,
) -> JobConfig:
    """The job `recipe` gives, then the TOML file at `path`, then `overrides` (`load_finetune_job`)."""
    return load_finetune_job(
        path, overrides, recipe.lr, recipe.batch_size, recipe.epochs, recipe.overrides, eval_every
    )


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


# The [model] fields a fine-tuning job applies to the model it loads; the others describe a shape,
# which comes from the checkpoint.
APPLIED_MODEL_FIELDS = ("dropout", "attention_dropout", "classifier_dropout", "init_std")


def with_model_section(model: RobertaModel, section: ModelSection, source: str | Path) -> RobertaModel:
    """`model` with the job's dropout rates (and the init_std of heads it adds); any shape field
    set in [model] is refused rather than recorded and ignored."""
    default = ModelSection()
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        # Pretraining's forward switches have nothing to act on here: accepted, not refused.
        allowed = field.name in APPLIED_MODEL_FIELDS or field.name in ModelSection.PRETRAINING_ONLY
        if not allowed and value != getattr(default, field.name):
            raise UserError(
                f"model.{field.name} = {value!r}: a fine-tuned model's shape comes from {source}; "
                f"fine-tuning applies only model.{', model.'.join(APPLIED_MODEL_FIELDS)}"
            )
    changes = {
        name: getattr(section, name)
        for name in APPLIED_MODEL_FIELDS
        if getattr(section, name) is not None and getattr(section, name) != getattr(model.config, name)
    }
    if not changes:
        return model
    # Dropout rates are read when the modules are built: a model of the new config takes the weights.
    rebuilt = checkpoint.build_model(
        dataclasses.replace(model.config, **changes), checkpoint.head_shapes(model)
    )
    rebuilt.load_state_dict(model.state_dict())
    # A body without a masked-LM head stays marked so: its seeded stand-in must not be saved as trained.
    return checkpoint.mark_without_lm_head(rebuilt, checkpoint.without_lm_head(model)).train()


@dataclass(frozen=True)
class Start:
    """Where every member of a command starts: --model, or --init-task's body without its heads."""

    init: str | Path
    init_task: str | Path | None = None

    @property
    def source(self) -> str | Path:
        return self.init_task or self.init

    def load(self, job: JobConfig) -> tuple[RobertaModel, object]:
        model, tokenizer = start_model(self.init, self.init_task)
        return with_model_section(model, job.model, self.source), tokenizer


# What a refused head's message tells the user to do; a verb without --init-task passes its own.
NEW_HEAD_HINT = "start a new head with --init-task"


def check_head(
    model: RobertaModel, name: str, spec: dict, source: str | Path, hint: str | None = None
) -> None:
    """A head already in the starting checkpoint must fit the task (`spec`: its kind, outputs
    and, for classes, labels); a new one is added later (`attach_heads`). A head without label
    names takes the task's; one whose label names differ is refused, since its outputs mean other
    classes. A refusal ends with `hint`, by default fine-tuning's advice."""
    if name not in model.heads:
        return
    have = model.heads[name].spec()
    if have["kind"] != spec["kind"]:
        raise UserError(
            f"{source}: head {name!r} is a {have['kind']} head but the task needs a {spec['kind']} head; "
            f"{hint or NEW_HEAD_HINT}"
        )
    if have.get("num_classes") != spec.get("num_classes"):
        raise UserError(
            f"{source}: head {name!r} has {have.get('num_classes')} outputs but the task has "
            f"{spec.get('num_classes')}; {hint or NEW_HEAD_HINT}"
        )
    labels, wanted = have.get("labels", []), list(spec.get("labels", ()))
    if labels and wanted and labels != wanted:
        raise UserError(
            f"{source}: head {name!r} was trained on the labels {', '.join(labels)} but this data has "
            f"{', '.join(wanted)}; {hint or NEW_HEAD_HINT + ' (or name another head)'}"
        )


def sequence_length(job: JobConfig, model: RobertaModel, least: int, layout: str) -> int:
    """The sequence length a task uses: data.max_length within the model's positions, refused
    when it cannot hold `layout` with one token of each text (`least` tokens)."""
    if job.data.max_length < least:
        raise UserError(
            f"data.max_length = {job.data.max_length} cannot hold {layout} with one token of text "
            f"(it needs at least {least})"
        )
    return min(job.data.max_length, model.config.max_seq_len)


def task_length(
    job: JobConfig, model: RobertaModel, source: str | Path, heads: dict[str, dict], least: int, layout: str
) -> int:
    """What every task checks before it encodes: each head it trains against the starting model
    (`check_head`, `heads` maps a name to its spec), then the sequence length it uses
    (`sequence_length`)."""
    for name, spec in heads.items():
        check_head(model, name, spec, source)
    return sequence_length(job, model, least, layout)


def attach_heads(model: RobertaModel, heads: dict[str, dict]) -> None:
    """The task's heads (name -> spec, as `check_head` takes) on `model`, in order: a new one
    for each it lacks; one from the starting checkpoint, its labels the task's or unnamed
    (`check_head`), takes the task's label names."""
    for name, spec in heads.items():
        if name in model.heads:
            if "labels" in spec:
                model.heads[name].labels = spec["labels"]
        else:
            model.add_head(name, build_head(model.config, spec))


def mean_loss(sums: dict[str, float]) -> dict[str, float]:
    """A held-out set's loss per example, from the summed loss and its count."""
    return {"loss": sums["loss"] / max(sums["loss_count"], 1.0)}


@dataclass(frozen=True)
class Batching:
    """How one process cuts a member's examples into batches: the member's job (batch sizes,
    seed, data.group_by_length), the padding id, and this process's rank of `world`."""

    job: JobConfig
    pad_id: int
    rank: int = 0
    world: int = 1


def batched_objective(
    name: str,
    batching: Batching,
    *,
    train_lengths: Sequence[int],
    train_batch: Callable[[np.ndarray], Batch],
    eval_sets: dict[str, tuple[Sequence[int], Callable[[np.ndarray], Batch]]],
    heads: dict[str, dict],
    loss: Callable,
    metrics: Callable,
    best_metric: str,
    figures: dict[str, Sequence[str]],
    counts: Callable[[Batch], dict[str, float]] = lambda batch: {"loss": len(batch["labels"])},
    row_updates: bool = False,
    train_groups: Callable[[], np.ndarray] | None = None,
) -> Objective:
    """A fine-tuning Objective whose examples are batched here: training micro-batches by
    `LengthBatches` over `train_lengths`, each held-out set (its lengths, its collate) sorted by
    length. `train_batch` and the collates turn example indices into a batch; `figures` names
    what `metrics` reports for each held-out set; `heads` are the task's (`attach_heads`). With
    several held-out sets, figures (and `best_metric`, read from the first) are named "set/figure".
    `row_updates`: the loss never reads the masked-LM head (`Objective.row_updates`);
    `train_groups`: each training example's group, a micro-batch cut from one (`LengthBatches`)."""
    job, rank, world = batching.job, batching.rank, batching.world
    micro_batch_size, _ = batch_plan(job, world)
    batcher = LengthBatches(
        train_lengths, micro_batch_size, job.train.seed, rank, world, job.data.group_by_length, train_groups
    )

    def held_out(
        lengths: Sequence[int], collate: Callable[[np.ndarray], Batch]
    ) -> Callable[[], Iterable[Batch]]:
        return lambda: (collate(b) for b in sorted_batches(lengths, micro_batch_size, rank, world))

    mean_length = round(float(np.mean(train_lengths)))
    return Objective(
        name=name,
        add_heads=functools.partial(attach_heads, heads=heads),
        train_batches=lambda start: (train_batch(b) for b in batcher.from_position(start)),
        eval_sets={set_name: held_out(*data) for set_name, data in eval_sets.items()},
        counts=counts,
        loss=loss,
        metrics=metrics,
        tokens=lambda batch: int(batch["tokens"].ne(batching.pad_id).sum()),
        flops_per_token=lambda config: training_flops_per_token(config, mean_length),
        batches_per_epoch=batcher.per_epoch,
        best_metric=best_metric if len(eval_sets) <= 1 else f"{next(iter(eval_sets))}/{best_metric}",
        figures=tuple(
            figure if len(eval_sets) == 1 else f"{name}/{figure}"
            for name in eval_sets
            for figure in figures[name]
        ),
        row_updates=row_updates,
    )


def runs(job: JobConfig, out: Path, seeds: int, sweep: bool) -> list[tuple[JobConfig, Path]]:
    """The (job, run directory) of each run: one, several seeds, or the paper's grid x seeds."""
    check_value(RunOptions, "seeds", seeds, "finetune")
    cells = [(job.train.batch_size, job.optim.lr)] if not sweep else SWEEP
    planned = []
    for batch, lr in cells:
        for seed in range(job.train.seed, job.train.seed + seeds):
            cell = dataclasses.replace(
                job,
                optim=dataclasses.replace(job.optim, lr=lr),
                # micro-batch: at most batch
                train=dataclasses.replace(job.train, batch_size=batch, seed=seed),
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
    summary = {key: {"runs": rows, "median": _median_best(rows)} for key, rows in cells.items()}
    # A cell none of whose runs found a best (every evaluation undefined, say) is ranked nowhere.
    ranked = [key for key in summary if summary[key]["median"] is not None]
    best_cell = max(ranked, key=lambda k: summary[k]["median"]) if ranked else None
    metric = next((result.best["metric"] for _, _, result in results if result.best), None)
    record = {"metric": metric, "cells": summary, "best_cell": best_cell}
    write_json(out / "results.json", record)
    return record


def _median_best(rows: list[dict]) -> float | None:
    values = [row["best"]["value"] for row in rows if row["best"]]
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class Task:
    """A fine-tuning task with its data read, checked and encoded for the starting model: what
    every member of a command trains on. `plan_*` in each task module builds one."""

    objective: Callable[[JobConfig, int, int], Objective]  # (a member's job, rank, world size)
    max_length: int  # the sequence length used (data.max_length within the model's positions)
    run_info: dict  # recorded in RUN/job.json
    outputs: tuple[str, ...] = ()  # files a finished run holds besides results.json
    finish: Callable[[Path, JobConfig, TrainResult, distributed.Placement], None] | None = None  # after a run
    # Once the plan has passed and --out is cleared, before any member runs: (--out, placement).
    prepare: Callable[[Path, distributed.Placement], None] | None = None
    keep: tuple[str, ...] = ()  # what --overwrite and a restart keep at --out (a cache that checks itself)


# plan_task(job, starting model, tokenizer, where the model came from) -> Task
TaskPlanner = Callable[[JobConfig, RobertaModel, object, str | Path], Task]


@dataclass(frozen=True)
class Member:
    """One run of a command, planned: `mode` is "start", "resume", "restart" (a run killed
    before its first checkpoint, begun again) or "done" (a finished run, reported as it is)."""

    job: JobConfig
    run_dir: Path
    mode: str
    objective: Objective
    plan: RunPlan | None  # None when done


def finetune(
    job: JobConfig,
    out: str | Path,
    start: Start,
    plan_task: TaskPlanner,
    *,
    seeds: int = 1,
    sweep: bool = False,
    resume: bool = False,
    overwrite: bool = False,
) -> dict:
    """Plan every member (one run, `seeds` seeds, or the paper's grid) whole, then run them; the
    summary (RUN/results.json over several members)."""
    out = Path(out)
    with warnings.catch_warnings(record=True) as caught:
        placement = distributed.setup(job.train.device)
        task, tokenizer, members = _plan(
            job, out, start, plan_task, placement, seeds, sweep, resume, overwrite
        )
    for w in caught:  # the plan passed: what it noticed may be shown now
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if placement.is_main and overwrite and out.is_dir():
        run_state.clear_directory(out, keep=task.keep)
    distributed.barrier()
    if task.prepare is not None:
        task.prepare(out, placement)
    results = []
    for member in members:
        if member.mode == "done":
            record = read_json(member.run_dir / RESULTS_FILE)
            results.append(
                (
                    member.job,
                    member.run_dir,
                    TrainResult(step=0, checkpoint=None, valid={}, skipped_steps=0, best=record.get("best")),
                )
            )
            continue
        if placement.is_main and member.mode == "restart":
            run_state.clear_directory(member.run_dir, keep=task.keep)
        distributed.barrier()
        torch.manual_seed(member.job.train.seed)  # the new head's initial weights
        model, _ = start.load(member.job)
        result = train_run(
            model,
            member.objective,
            member.job,
            member.run_dir,
            tokenizer=tokenizer,
            placement=placement,
            run_info={**task.run_info, "init": str(start.source)},
            plan=member.plan,
        )
        if task.finish is not None:
            task.finish(member.run_dir, member.job, result, placement)
        results.append((member.job, member.run_dir, result))
    return summarize(out, results)


def _plan(
    job: JobConfig,
    out: Path,
    start: Start,
    plan_task: TaskPlanner,
    placement: distributed.Placement,
    seeds: int,
    sweep: bool,
    resume: bool,
    overwrite: bool,
) -> tuple[Task, object, list[Member]]:
    if resume and overwrite:
        raise UserError("--resume and --overwrite: give one (continue the run, or replace it)")
    planned = runs(job, out, seeds, sweep)
    modes = run_state.directory_modes(out, [run_dir for _, run_dir in planned], resume, overwrite)
    model, tokenizer = start.load(job)
    task = plan_task(job, model, tokenizer, start.source)
    members = []
    for (member_job, run_dir), mode in zip(planned, modes):
        member_job = dataclasses.replace(
            member_job, data=dataclasses.replace(member_job.data, max_length=task.max_length)
        )
        objective = task.objective(member_job, placement.rank, placement.world_size)
        objective.add_heads(model)
        if mode == "done" and not run_state.latest_checkpoint(run_dir):
            finished = read_json(run_dir / RESULTS_FILE).get("task")
            if finished != objective.name:
                raise UserError(f"{run_dir}: holds a finished {finished!r} run, not a {objective.name!r} one")
            plan = None
        else:
            plan = plan_run(
                model,
                objective,
                member_job,
                run_dir,
                world_size=placement.world_size,
                resume=run_state.resumes(mode),
                tokenizer=tokenizer,
            )
        if (
            mode == "done"
            and plan is not None
            and not all((run_dir / name).exists() for name in task.outputs)
        ):
            mode = "resume"  # killed after its last checkpoint, before its last outputs: finish it
        members.append(Member(member_job, run_dir, mode, objective, None if mode == "done" else plan))
    return task, tokenizer, members
