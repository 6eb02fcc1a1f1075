"""AdamW with the paper's settings, and the learning-rate schedules as pure functions of the step."""

from __future__ import annotations

import math

import torch
from torch import nn

from roberta.train.config import OptimSection, ScheduleSection


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: matrices decay; biases and LayerNorm weights (all 1-D tensors) do not.

    The rule goes by shape rather than by name so it holds for any head a task adds, and for
    FSDP's sharded parameters (DTensors keep their global shape).
    """
    decay, no_decay = [], []
    seen = set()
    for param in model.parameters():
        if not param.requires_grad or id(param) in seen:
            continue
        seen.add(id(param))  # the LM head's weight is the token embedding: count it once
        (decay if param.ndim >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, cfg: OptimSection) -> torch.optim.AdamW:
    # The fused kernel matters on CPU too: the update is a chain of elementwise passes over every
    # parameter, the embedding's 25M-50M included (benchmarks/experiments/adamw-implementation.md).
    kind = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[
        cfg.implementation
    ]
    return torch.optim.AdamW(
        parameter_groups(model, cfg.weight_decay), lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, **kind
    )


def learning_rate(step: int, peak: float, cfg: ScheduleSection, max_steps: int) -> float:
    """The learning rate for optimizer step `step` (0-based): linear warmup to `peak`, then decay.

    linear/polynomial decay from the end of warmup to `end_lr` at `max_steps` (fairseq's
    polynomial_decay, power 1 = linear); wsd holds the peak until the last `decay_fraction`
    of steps and decays linearly there.
    """
    warmup = cfg.warmup_steps
    if step < warmup:
        return peak * (step + 1) / warmup
    if cfg.kind == "wsd":
        decay_start = max(warmup, max_steps - math.ceil(cfg.decay_fraction * max_steps))
        if step < decay_start:
            return peak
        progress = (step - decay_start) / max(1, max_steps - decay_start)
        return cfg.end_lr + (peak - cfg.end_lr) * (1 - min(1.0, progress))
    power = 1.0 if cfg.kind == "linear" else cfg.power
    progress = min(1.0, (step - warmup) / max(1, max_steps - warmup))
    return cfg.end_lr + (peak - cfg.end_lr) * (1 - progress) ** power


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
