"""The one training loop, shared by pretraining and every fine-tuning task.

A task brings an `Objective` (its data, its heads, its loss, its metrics); the loop brings
everything else: gradient accumulation, precision, data parallelism, the schedule, evaluation,
checkpoints, exact resume, metrics and the progress bar.

`train` reads as the list of its parts, as torchtitan's trainer does: `_start` (the model placed,
wrapped and restored), then per update `train_step` (forward, backward, accumulation, clipping,
the optimizer), `_log_window`, `_evaluate_and_keep_best` and `_write_checkpoint`, each due every
so many steps. They share one `_Run`, the state of the run under way; what it keeps on disk is
its `Checkpointer`'s, what it reports its `TrainingMetrics`' (torchtitan's two components).

Losses are sums, not means: each term is divided by its count over the whole global batch
(all micro-batches on all ranks) before backward, so one process with batch 2b, two
accumulation steps of b, and two ranks of b all compute the same gradient.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from roberta import checkpoint
from roberta.errors import UserError
from roberta.io import write_json
from roberta.model import RobertaModel
from roberta.runtime.precision import compute_dtype
from roberta.runtime.precision import reason as precision_reason
from roberta.train import distributed, evaluation, run_state
from roberta.train.checkpointer import BEST_DIR as BEST_DIR  # where tasks find RUN/best/
from roberta.train.checkpointer import Checkpointer
from roberta.train.config import JobConfig, budget
from roberta.train.metrics import (
    METRICS_FILE,
    MetricsLog,
    TrainingMetrics,
    peak_flops,
    peak_is_measured,
    read_metrics,
)
from roberta.train.objective import EXAMPLES, Batch, Objective
from roberta.train.optim import build_optimizer, learning_rate, row_updates, set_learning_rate
from roberta.train.precision import LossScaler, autocast, resolve_precision

JOB_FILE = "job.json"
RESULTS_FILE = run_state.RESULTS_FILE


@dataclass(frozen=True)
class TrainResult:
    step: int
    checkpoint: Path | None
    valid: dict[str, float]  # the last evaluation's figures ("set/figure" with several sets)
    skipped_steps: int
    best: dict | None = None  # {"metric", "value", "step"} of RUN/best/, if the task keeps one


class _TaskModule(nn.Module):
    """The model and a task's loss as one module, so that DDP and FSDP see every parameter the
    task uses (heads included) inside their forward."""

    def __init__(self, model: RobertaModel, loss: Callable[[RobertaModel, Batch], dict]):
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, batch: Batch) -> dict:
        return self.loss(self.model, batch)


class TrainingDiverged(UserError):
    """The loss became NaN or infinite; the run stopped and kept its last good checkpoint."""


def batch_plan(job: JobConfig, world_size: int) -> tuple[int, int]:
    """(micro-batch size per rank, accumulation steps) that make up train.batch_size sequences."""
    batch, micro_batch_size = job.train.batch_size, job.train.micro_batch_size
    micro_batch_size = max(1, min(micro_batch_size, batch // world_size))
    accumulation, remainder = divmod(batch, micro_batch_size * world_size)
    if remainder or accumulation == 0:
        raise UserError(
            f"train.batch_size = {batch} is not a multiple of train.micro_batch_size ({micro_batch_size}) x "
            f"{world_size} rank(s)"
        )
    return micro_batch_size, accumulation


@dataclass(frozen=True)
class RunPlan:
    """A run checked before anything is written: its job with epochs turned into steps, its
    batch plan, the figure that picks RUN/best/, and the checkpoint it continues from."""

    job: JobConfig
    micro_batch_size: int
    accumulation: int
    per_epoch: int | None  # updates in one epoch, where the objective's epoch has a fixed length
    best_metric: str | None
    resume_from: Path | None


def plan_run(
    model: RobertaModel,
    objective: Objective,
    job: JobConfig,
    run_dir: str | Path,
    *,
    world_size: int,
    resume: bool,
    tokenizer=None,
) -> RunPlan:
    """Everything a run could refuse, checked without writing: the batch plan, the epoch budget,
    `train.best_metric` against the objective's figures, and with `resume` the run's latest
    checkpoint against `model` (its heads added) and `tokenizer`."""
    run_dir = Path(run_dir)
    micro_batch_size, accumulation = batch_plan(job, world_size)
    per_epoch = objective.batches_per_epoch // accumulation if objective.batches_per_epoch else None
    if objective.batches_per_epoch is not None and not per_epoch:
        raise UserError(
            f"{objective.name}: an epoch holds {objective.batches_per_epoch} micro-batches per rank, fewer "
            "than "
            f"the {accumulation} one update needs (train.batch_size = {job.train.batch_size})"
        )
    job = budget(job, per_epoch)
    best_metric = job.train.best_metric or objective.best_metric
    if best_metric and objective.figures and best_metric not in objective.figures:
        raise UserError(
            f"train.best_metric = {best_metric!r} is not one of {objective.name}'s evaluation figures "
            f"({', '.join(objective.figures)})"
        )
    found = None
    if resume:
        found = run_state.latest_checkpoint(run_dir)
        if found is None:
            raise UserError(
                f"{run_dir}: --resume given but no checkpoint found under {run_dir / 'checkpoints'}"
            )
        run_state.check_resumable(model, found, tokenizer)
        state = run_state.load_trainer_state(found, mmap=True)
        if int(state["data"]["micro_batch_size"]) * int(state["world_size"]) != micro_batch_size * world_size:
            raise UserError(
                "--resume: the run's micro-batch size x world size changed; the data position would not match"
            )
    return RunPlan(job, micro_batch_size, accumulation, per_epoch, best_metric, found)


@dataclass
class _Run:
    """A run under way: what the step, logging, evaluation and checkpoint functions share."""

    plan: RunPlan
    objective: Objective
    model: RobertaModel
    module: nn.Module  # the model and the task's loss, wrapped for DDP/FSDP
    optimizer: torch.optim.Optimizer
    scaler: LossScaler
    precision: str
    placement: distributed.Placement
    checkpointer: Checkpointer
    metrics: TrainingMetrics
    params: list[nn.Parameter]  # those the optimizer updates
    step: int = 0
    resumed: bool = False

    @property
    def job(self) -> JobConfig:
        return self.plan.job

    def due(self, every: int) -> bool:
        return self.step % every == 0 or self.step == self.job.train.max_steps

    def plain_model(self) -> RobertaModel:
        """The full model with its heads (a collective under FSDP: every rank gathers the weights)."""
        return distributed.full_model(
            self.module, self.model, self.objective.add_heads, self.job.train.parallel
        )


def train(
    model: RobertaModel,
    objective: Objective,
    job: JobConfig,
    run_dir: str | Path,
    *,
    tokenizer=None,
    resume: bool = False,
    placement: distributed.Placement | None = None,
    run_info: dict | None = None,
    plan: RunPlan | None = None,
) -> TrainResult:
    """Train `model` (a plain module, on the CPU, with this run's initial weights) on `objective`.

    Everything a command could refuse (a missing or incompatible checkpoint to resume, a batch
    plan that does not divide) is checked before anything is written to `run_dir`; `plan` is
    that check made beforehand (`plan_run`), as a command running several members does.
    """
    run_dir = Path(run_dir)
    placement = placement or distributed.setup(job.train.device)
    objective.add_heads(model)
    plan = plan or plan_run(
        model, objective, job, run_dir, world_size=placement.world_size, resume=resume, tokenizer=tokenizer
    )
    run = _start(model, objective, plan, run_dir, tokenizer, placement)
    _open_run_directory(run, run_info)
    cfg = plan.job.train
    batches = objective.train_batches(run.step * plan.accumulation)
    valid: dict[str, float] = {}
    run.metrics.bar = tqdm(
        total=cfg.max_steps,
        initial=run.step,
        disable=not (placement.is_main and cfg.progress),
        desc=objective.name,
        dynamic_ncols=True,
    )
    run.module.train()
    try:
        while run.step < cfg.max_steps:
            train_step(run, batches)
            if run.due(cfg.log_every):
                _log_window(run)
            if run.due(cfg.eval_every):
                valid = _evaluate_and_keep_best(run)
            if run.due(cfg.checkpoint_every):
                _write_checkpoint(run)
            run_state.fault_point(f"step-{run.step}")
    finally:
        model.embed_tokens.sparse = False
        run.metrics.close()
    if placement.is_main:
        _write_results(run_dir, _job_record(plan.job, model), objective, run.checkpointer.best)
    return TrainResult(
        step=run.step,
        checkpoint=run.checkpointer.last,
        valid=valid,
        skipped_steps=run.scaler.skipped_steps,
        best=run.checkpointer.best,
    )


def _start(
    model: RobertaModel,
    objective: Objective,
    plan: RunPlan,
    run_dir: Path,
    tokenizer,
    placement: distributed.Placement,
) -> _Run:
    """The model placed and wrapped, its optimizer and loss scaler, and with a checkpoint to
    resume, every one of them (and this rank's RNG streams, and the log window) as that
    checkpoint left them."""
    cfg = plan.job.train
    state = None
    if plan.resume_from is not None:
        state = run_state.load_trainer_state(plan.resume_from)
        model.load_state_dict(checkpoint.load(plan.resume_from)[0].state_dict())  # plan_run checked it fits
    model.to(placement.device)
    module = distributed.wrap(_TaskModule(model, objective.loss), model.layers, cfg.parallel, placement)
    optimizer = build_optimizer(module, plan.job.optim)
    precision = resolve_precision(cfg.precision, placement.device, model.config.hidden_size)
    # The embedding's gradient as the rows looked up (torch's sparse gradient), updated by rows.
    model.embed_tokens.sparse = row_updates(
        objective.row_updates, plan.job.optim, placement.world_size, precision, placement.device.type
    )
    metrics = TrainingMetrics(
        objective.flops_per_token(model.config),
        peak_flops(placement.device, precision, cfg.peak_tflops) * placement.world_size,
        peak_is_measured(placement.device, cfg.peak_tflops),
        compute_dtype(precision),
        placement.world_size,
    )
    run = _Run(
        plan,
        objective,
        model,
        module,
        optimizer,
        LossScaler(enabled=precision == "fp16"),
        precision,
        placement,
        Checkpointer(run_dir, tokenizer, placement, cfg.keep_last),
        metrics,
        [p for p in module.parameters() if p.requires_grad],
    )
    torch.manual_seed(cfg.seed + 1 + placement.rank)  # dropout differs across ranks, reproducibly
    if state is not None:
        run.step = int(state["step"])
        run.checkpointer.best = state.get("best")
        distributed.load_optimizer(module, optimizer, state["optimizer"], cfg.parallel, placement)
        run.scaler.load_state_dict(state["scaler"])
        if len(state["rng"]) == placement.world_size:
            run_state.set_rng_state(state["rng"][placement.rank])
        metrics.window.sums = dict(state.get("window", {}))
    run.resumed = state is not None
    return run


def _open_run_directory(run: _Run, run_info: dict | None) -> None:
    """Validated: now the run directory may change (rank 0). A resumed run drops what it was
    writing when it was killed, and its metrics past the checkpoint."""
    if not run.placement.is_main:
        return
    run_dir = run.checkpointer.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    if run.resumed:
        run_state.remove_run_temporaries(run_dir)
    job = _job_record(run.job, run.model)
    width = run.model.config.hidden_size
    ran = precision_reason(run.job.train.precision, run.precision, run.placement.device, width)
    print(f"precision: {ran}", file=sys.stderr)
    write_json(run_dir / JOB_FILE, {"job": job, "precision": ran, **(run_info or {})})
    resume_step = run.step if run.resumed else None
    run.metrics.log = MetricsLog(run_dir, resume_step, report_to=run.job.train.report_to, job=job)
    run.checkpointer.last = run_state.latest_checkpoint(run_dir)


def train_step(run: _Run, batches: Iterator[Batch]) -> None:
    """One optimizer update: the accumulated micro-batches forward and backward, the divergence
    check, clipping and the optimizer step; its sums, tokens and time go into the log window."""
    job, placement, objective, window = run.job, run.placement, run.objective, run.metrics.window
    started = time.perf_counter()
    micro_batches = [
        evaluation.to_device(next(batches), placement.device) for _ in range(run.plan.accumulation)
    ]
    window.waited += time.perf_counter() - started
    counts = evaluation.global_counts(objective, micro_batches, placement.device)
    set_learning_rate(run.optimizer, learning_rate(run.step, job.optim.lr, job.schedule, job.train.max_steps))
    totals = _forward_backward(run, micro_batches, counts)
    run.step += 1
    if not all(math.isfinite(totals[k]) for k in counts):
        bad = ", ".join(f"{k} = {totals[k]}" for k in counts)
        where = run.checkpointer.last or "none was written"
        raise TrainingDiverged(
            f"non-finite loss at step {run.step} ({bad}); training stopped. Last good checkpoint: {where}"
        )
    if not apply_update(run.optimizer, run.params, run.scaler, job.optim.clip_norm):
        run.metrics.bar.write(
            f"step {run.step}: fp16 gradient overflow, update skipped; "
            f"loss scale lowered to {run.scaler.scale:g}"
        )
    window.seconds += time.perf_counter() - started
    window.tokens += sum(objective.tokens(b) for b in micro_batches) * placement.world_size
    window.add({**totals, **{f"{k}_count": c for k, c in counts.items()}})
    run.metrics.bar.update(1)


def _forward_backward(run: _Run, micro_batches: list[Batch], counts: dict[str, float]) -> dict[str, float]:
    """Gradients of the global batch's mean loss accumulated over `micro_batches` (synchronised
    across ranks on the last), and the batch's summed statistics from every rank."""
    placement, last = run.placement, len(micro_batches) - 1
    sums: dict[str, torch.Tensor] = {}
    for i, batch in enumerate(micro_batches):
        with distributed.gradient_sync(run.module, enabled=i == last):
            with autocast(run.precision, placement.device):
                out = run.module(batch)
            out.pop(EXAMPLES, None)
            loss = sum(out[k].float() / counts[k] for k in counts) * placement.world_size
            run.scaler.scaled(loss).backward()
        run_state.fault_point(f"step-{run.step + 1}:micro-batch-{i}")
        for k, v in out.items():
            sums[k] = sums.get(k, 0.0) + v.detach().float()
    return evaluation.all_reduce_dict(sums, placement.device)


def _log_window(run: _Run) -> None:
    """The window's figures, throughput and MFU to metrics.jsonl and the progress bar; then a new window."""
    figures = run.objective.metrics(run.metrics.window.sums, {})
    epoch = run.step / run.plan.per_epoch if run.plan.per_epoch else None
    lr = run.optimizer.param_groups[0]["lr"]
    run.metrics.report(run.step, figures, lr, run.scaler.skipped_steps, run.scaler.enabled, epoch)


def _evaluate_and_keep_best(run: _Run) -> dict[str, float]:
    """Evaluate every held-out set, log it, and save RUN/best/ when the chosen figure improves."""
    by_set = evaluation.evaluate(
        run.module, run.objective, run.precision, run.placement, run.job.train.eval_batches
    )
    valid = _flatten(by_set)
    log, bar = run.metrics.log, run.metrics.bar
    if log:
        for name, figures in by_set.items():
            log.log(run.step, name, figures)
        log.plot()
    if not bar.disable:  # rank 0, unless the caller runs its own bar
        bar.write(f"step {run.step}: " + ", ".join(f"{k} {v:.4g}" for k, v in valid.items()))
    best_metric = run.plan.best_metric
    if not best_metric:
        return valid
    if best_metric not in valid:
        raise UserError(
            f"train.best_metric = {best_metric!r} is not an evaluation figure ({', '.join(valid)})"
        )
    higher = run.objective.higher_is_better
    run.checkpointer.keep_if_best(run.step, best_metric, valid[best_metric], higher, run.plain_model)
    return valid


def _write_checkpoint(run: _Run) -> None:
    """RUN/checkpoints/step-N/: the weights and everything exact resume needs."""
    parallel = run.job.train.parallel
    state = {
        "step": run.step,
        "optimizer": distributed.optimizer_state(run.module, run.optimizer, parallel),
        "scaler": run.scaler.state_dict(),
        "rng": distributed.all_gather(run_state.rng_state()),  # every rank's streams
        "data": {"position": run.step * run.plan.accumulation, "micro_batch_size": run.plan.micro_batch_size},
        "world_size": run.placement.world_size,
        "job": run.job.to_dict(),
        "best": run.checkpointer.best,
        "window": dict(run.metrics.window.sums),
    }
    run.checkpointer.save(run.step, run.plain_model, state)


def _flatten(by_set: dict[str, dict[str, float]]) -> dict[str, float]:
    """One set's figures as they are; several sets' as "set/figure"."""
    if len(by_set) == 1:
        return next(iter(by_set.values()))
    return {f"{name}/{k}": v for name, figures in by_set.items() for k, v in figures.items()}


def _job_record(job: JobConfig, model: RobertaModel) -> dict:
    """The job as RUN/job.json and RUN/results.json record it: its [model] section is the model
    actually built (a fine-tuned model's shape comes from its checkpoint, not from a preset)."""
    return {**job.to_dict(), "model": model.config.to_dict()}


def _write_results(run_dir: Path, job: dict, objective: Objective, best: dict | None) -> None:
    """RUN/results.json: every evaluation of the run (from metrics.jsonl), the best, the job."""
    names = set(objective.eval_sets)
    evaluations = [r for r in read_metrics(run_dir / METRICS_FILE) if r["split"] in names]
    write_json(
        run_dir / RESULTS_FILE, {"task": objective.name, "best": best, "evaluations": evaluations, "job": job}
    )


def apply_update(
    optimizer: torch.optim.Optimizer, params: list[nn.Parameter], scaler: LossScaler, clip_norm: float
) -> bool:
    """One optimizer step from accumulated gradients; False when fp16 overflowed and it was skipped."""
    finite = scaler.unscale_and_check(params)
    if finite:
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, clip_norm)
        optimizer.step()
    scaler.update(finite)
    optimizer.zero_grad(set_to_none=True)
    return finite
