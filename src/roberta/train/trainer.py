"""The one training loop, shared by pretraining and every fine-tuning task.

A task brings an `Objective` (its data, its heads, its loss, its metrics); the loop brings
everything else: gradient accumulation, precision, data parallelism, the schedule, evaluation,
checkpoints, exact resume, metrics and the progress bar.

Losses are sums, not means: each term is divided by its count over the whole global batch
(all micro-batches on all ranks) before backward, so one process with batch 2b, two
accumulation steps of b, and two ranks of b all compute the same gradient.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from roberta.errors import UserError
from roberta.model import RobertaModel
from roberta.train import distributed, run_state
from roberta.train.config import JobConfig
from roberta.train.metrics import MetricsLog, peak_flops, training_flops_per_token
from roberta.train.optim import build_optimizer, learning_rate, set_learning_rate
from roberta.train.precision import LossScaler, autocast, resolve_precision

Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Objective:
    """What a task brings to the loop. Every function sees one micro-batch of this rank.

    counts: per loss term, the number of items its summed loss averages over (masked tokens,
        sequences); known before the forward pass so the global normaliser can be all-reduced.
    loss: (module, model, batch) → summed loss per term (same keys as counts) plus any other
        summed statistics (e.g. correct predictions). `module` runs the encoder (it may be DDP);
        `model` is the plain RobertaModel for `lm_logits` and `classify`.
    metrics: summed statistics and counts over many batches → the figures reported.
    """

    name: str
    add_heads: Callable[[RobertaModel], None]
    train_batches: Callable[[int], Iterator[Batch]]  # this rank's micro-batches from a position
    eval_batches: Callable[[], Iterable[Batch]]  # this rank's share of the held-out split
    counts: Callable[[Batch], dict[str, float]]
    loss: Callable[[nn.Module, RobertaModel, Batch], dict[str, torch.Tensor]]
    metrics: Callable[[dict[str, float]], dict[str, float]]
    tokens: Callable[[Batch], int]  # real (non-padding) tokens, for throughput


@dataclass(frozen=True)
class TrainResult:
    step: int
    checkpoint: Path | None
    valid: dict[str, float]  # the last evaluation's figures
    skipped_steps: int


class TrainingDiverged(UserError):
    """The loss became NaN or infinite; the run stopped and kept its last good checkpoint."""


def batch_plan(job: JobConfig, world_size: int) -> tuple[int, int]:
    """(micro-batch size per rank, accumulation steps) that make up train.batch_size sequences."""
    batch, micro = job.train.batch_size, job.train.micro_batch_size
    micro = max(1, min(micro, batch // world_size))
    accumulation, remainder = divmod(batch, micro * world_size)
    if remainder or accumulation == 0:
        raise UserError(
            f"train.batch_size = {batch} is not a multiple of train.micro_batch_size ({micro}) x {world_size} rank(s)"
        )
    return micro, accumulation


def train(
    model: RobertaModel,
    objective: Objective,
    job: JobConfig,
    run_dir: str | Path,
    *,
    tokenizer=None,
    resume: bool = False,
    env: distributed.Dist | None = None,
) -> TrainResult:
    """Train `model` (a plain module, on the CPU, with this run's initial weights) on `objective`."""
    run_dir = Path(run_dir)
    env = env or distributed.setup(job.train.device)
    cfg = job.train
    micro, accumulation = batch_plan(job, env.world_size)
    objective.add_heads(model)

    state = None
    if resume:
        found = run_state.latest_checkpoint(run_dir)
        if found is None:
            raise UserError(f"{run_dir}: --resume given but no checkpoint found under {run_dir / 'checkpoints'}")
        state = run_state.load_trainer_state(found)
        _load_model_weights(model, found)
    model.to(env.device)
    module = distributed.wrap(model, cfg.parallel, env)
    optimizer = build_optimizer(module, job.optim)
    precision = resolve_precision(cfg.precision, env.device)
    scaler = LossScaler(enabled=precision == "fp16")
    step = 0
    torch.manual_seed(cfg.seed + 1 + env.rank)  # dropout differs across ranks, reproducibly
    if state is not None:
        step = int(state["step"])
        _load_optimizer(module, optimizer, state["optimizer"], cfg.parallel, env)
        scaler.load_state_dict(state["scaler"])
        if len(state["rng"]) == env.world_size:
            run_state.set_rng_state(state["rng"][env.rank])
        if int(state["data"]["micro_batch_size"]) * int(state["world_size"]) != micro * env.world_size:
            raise UserError("--resume: the run's micro-batch size x world size changed; the data position would not match")

    log = MetricsLog(run_dir, resume_step=step if state else None) if env.is_main else None
    params = [p for p in module.parameters() if p.requires_grad]
    flops_per_token = training_flops_per_token(model.config, job.data.seq_len, job.data.mask_prob)
    peak = peak_flops(env.device, precision, cfg.peak_tflops) * env.world_size
    batches = objective.train_batches(step * accumulation)
    last_checkpoint = run_state.latest_checkpoint(run_dir) if env.is_main else None
    valid: dict[str, float] = {}
    window: dict[str, float] = {}
    window_tokens, window_time = 0, 0.0

    bar = tqdm(total=cfg.max_steps, initial=step, disable=not env.is_main, desc=objective.name, dynamic_ncols=True)
    module.train()
    try:
        while step < cfg.max_steps:
            started = time.perf_counter()
            micro_batches = [_to_device(next(batches), env.device) for _ in range(accumulation)]
            counts = _global_counts(objective, micro_batches, env.device)
            set_learning_rate(optimizer, learning_rate(step, job.optim.lr, job.schedule, cfg.max_steps))
            sums: dict[str, torch.Tensor] = {}
            for i, batch in enumerate(micro_batches):
                with distributed.gradient_sync(module, enabled=i == accumulation - 1):
                    with autocast(precision, env.device):
                        out = objective.loss(module, model, batch)
                    loss = sum(out[k].float() / counts[k] for k in counts) * env.world_size
                    scaler.scaled(loss).backward()
                for k, v in out.items():
                    sums[k] = sums.get(k, 0.0) + v.detach().float()
            totals = _all_reduce_dict(sums, env.device)
            step += 1
            if not all(math.isfinite(totals[k]) for k in counts):
                bad = ", ".join(f"{k} = {totals[k]}" for k in counts)
                where = last_checkpoint or "none was written"
                raise TrainingDiverged(
                    f"non-finite loss at step {step} ({bad}); training stopped. Last good checkpoint: {where}"
                )
            if not apply_update(optimizer, params, scaler, job.optim.clip_norm):
                bar.write(f"step {step}: fp16 gradient overflow, update skipped; loss scale lowered to {scaler.scale:g}")
            window_time += time.perf_counter() - started
            window_tokens += sum(objective.tokens(b) for b in micro_batches) * env.world_size
            for k, v in {**totals, **{f"{k}_count": c for k, c in counts.items()}}.items():
                window[k] = window.get(k, 0.0) + v
            bar.update(1)

            if step % cfg.log_every == 0 or step == cfg.max_steps:
                figures = objective.metrics(window)
                rate = window_tokens / max(window_time, 1e-9)
                figures.update(
                    lr=optimizer.param_groups[0]["lr"],
                    tokens_per_s=rate,
                    mfu=rate * flops_per_token / peak if peak else 0.0,
                    skipped_steps=scaler.skipped_steps,
                )
                if log:
                    log.log(step, "train", figures)
                bar.set_postfix(
                    loss=f"{figures.get('loss', float('nan')):.3f}",
                    tok_s=f"{rate:,.0f}",
                    mfu=f"{figures['mfu']:.1%}",
                    **({"skipped": scaler.skipped_steps} if scaler.enabled else {}),
                )
                window, window_tokens, window_time = {}, 0, 0.0
            if step % cfg.eval_every == 0 or step == cfg.max_steps:
                valid = evaluate(module, model, objective, precision, env, cfg.eval_batches)
                if log:
                    log.log(step, "valid", valid)
                    log.plot()
                bar.write(f"step {step}: " + ", ".join(f"valid {k} {v:.4g}" for k, v in valid.items()))
            if step % cfg.checkpoint_every == 0 or step == cfg.max_steps:
                state_now = {
                    "step": step,
                    "optimizer": _optimizer_state(module, optimizer, cfg.parallel),
                    "scaler": scaler.state_dict(),
                    "rng": distributed.all_gather(run_state.rng_state()),  # every rank's streams
                    "data": {"position": step * accumulation, "micro_batch_size": micro},
                    "world_size": env.world_size,
                    "job": job.to_dict(),
                }
                plain = _full_model(module, model, objective, cfg.parallel)  # collective under FSDP
                if env.is_main:
                    last_checkpoint = run_state.save_checkpoint(run_dir, step, plain, tokenizer, state_now, cfg.keep_last)
                distributed.barrier()
            run_state.fault_point(f"step-{step}")
    finally:
        bar.close()
        if log:
            log.close()
    return TrainResult(step=step, checkpoint=last_checkpoint, valid=valid, skipped_steps=scaler.skipped_steps)


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


@torch.no_grad()
def evaluate(
    module: nn.Module, model: RobertaModel, objective: Objective, precision: str, env: distributed.Dist, max_batches: int
) -> dict[str, float]:
    module.eval()
    sums: dict[str, torch.Tensor] = {}
    for i, batch in enumerate(objective.eval_batches()):
        if i >= max_batches:
            break
        batch = _to_device(batch, env.device)
        with autocast(precision, env.device):
            out = objective.loss(module, model, batch)
        for k, v in {**out, **{f"{k}_count": torch.tensor(float(c)) for k, c in objective.counts(batch).items()}}.items():
            sums[k] = sums.get(k, 0.0) + v.detach().float().to(env.device)
    if hasattr(module, "reshard"):
        # FSDP2 leaves the root unsharded after a forward with no backward; the optimizer and
        # the state-dict helpers expect the sharded parameters back.
        module.reshard()
    module.train()
    return objective.metrics(_all_reduce_dict(sums, env.device))


def _global_counts(objective: Objective, batches: list[Batch], device: torch.device) -> dict[str, float]:
    local: dict[str, float] = {}
    for b in batches:
        for k, v in objective.counts(b).items():
            local[k] = local.get(k, 0.0) + float(v)
    totals = _all_reduce_dict({k: torch.tensor(v) for k, v in local.items()}, device)
    return {k: max(v, 1.0) for k, v in totals.items()}  # a batch with nothing masked adds no loss


def _all_reduce_dict(values: dict[str, torch.Tensor], device: torch.device) -> dict[str, float]:
    if not values:
        return {}
    keys = sorted(values)
    packed = torch.stack([torch.as_tensor(values[k], dtype=torch.float64).to(device).reshape(()) for k in keys])
    packed = distributed.all_reduce_sum(packed)
    return dict(zip(keys, packed.tolist()))


def _to_device(batch: Batch, device: torch.device) -> Batch:
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _load_model_weights(model: RobertaModel, directory: Path) -> None:
    from roberta import checkpoint

    saved, _ = checkpoint.load(directory)
    model.load_state_dict(saved.state_dict())


def _optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, parallel: str) -> dict:
    if parallel == "fsdp" and torch.distributed.is_initialized():
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(module, optimizer, options=options)
    return optimizer.state_dict()


def _load_optimizer(module: nn.Module, optimizer, state: dict, parallel: str, env: distributed.Dist) -> None:
    if parallel == "fsdp" and env.world_size > 1:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(module, optimizer, state, options=StateDictOptions(full_state_dict=True))
        return
    optimizer.load_state_dict(state)


def _full_model(module: nn.Module, model: RobertaModel, objective: Objective, parallel: str) -> RobertaModel:
    """A plain, unsharded model holding the current weights (what `checkpoint.save` writes)."""
    if not (parallel == "fsdp" and torch.distributed.is_initialized()):
        return model
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    with torch.random.fork_rng(devices=[]):  # initialising the copy must not move the training RNG
        plain = RobertaModel(model.config)
        objective.add_heads(plain)
    if torch.distributed.get_rank() == 0:
        plain.load_state_dict(full)
    return plain
