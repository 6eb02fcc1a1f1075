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


class AdamW(torch.optim.AdamW):
    """torch's AdamW, and one addition: with fused=True, a parameter whose gradient is sparse (the
    rows an `nn.Embedding(sparse=True)` looked up) is updated by rows, bit for bit as the dense
    fused update would update it with the dense gradient. Rows that have never had a gradient
    have no Adam state, so the dense update only decays them: `param * (1 - lr * weight_decay)`,
    one pass over the table; the others (`_rows`: this step's, and every row with state) go
    through the same fused kernel, gathered. A fine-tuning step on short sentences then skips
    writing and reading a dense [vocabulary, hidden] gradient and most of AdamW's passes over the
    embedding (benchmarks/results/2026-11-27-finetune-speed-tag-squad.md). The state and its
    state_dict are torch's, so checkpoints and exact resume are unchanged."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._rows: dict[nn.Parameter, torch.Tensor] = {}  # rows with Adam state, per parameter

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._rows.clear()  # read again from the loaded state

    @torch.no_grad()
    def step(self, closure=None):
        held = [
            (group, p, p.grad)
            for group in self.param_groups
            for p in group["params"]
            if p.grad is not None and p.grad.is_sparse
        ]
        for _, p, _ in held:
            p.grad = None  # torch's step skips a parameter without a gradient
        try:
            loss = super().step(closure)
            for group, p, grad in held:
                self._step_rows(group, p, grad)
        finally:
            for _, p, grad in held:
                p.grad = grad
        return loss

    def _step_rows(self, group: dict, p: nn.Parameter, grad: torch.Tensor) -> None:
        if not group["fused"] or group["amsgrad"] or group["maximize"] or p.dim() != 2:
            raise ValueError("row updates need fused AdamW (no amsgrad, no maximize) on a 2-D parameter")
        state = self.state[p]
        if not state:  # as torch's fused AdamW starts a parameter
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        rows = self._rows.get(p)
        if rows is None:
            rows = exp_avg.ne(0).any(1) | exp_avg_sq.ne(0).any(1)
            self._rows[p] = rows
        # The dense gradient's rows, summed in the order the lookups came, from zero, as
        # embedding's dense backward sums them: the same bits.
        looked_up, inverse = torch.unique(grad._indices()[0], return_inverse=True)
        summed = grad._values().new_zeros(len(looked_up), p.size(1)).index_add_(0, inverse, grad._values())
        rows[looked_up] = True
        kept = rows.nonzero().squeeze(1)
        kept_grad = summed.new_zeros(len(kept), p.size(1))
        kept_grad[torch.searchsorted(kept, looked_up)] = summed
        params, avgs, avg_sqs = p[kept], exp_avg[kept], exp_avg_sq[kept]
        torch._foreach_add_([state["step"]], 1)
        beta1, beta2 = group["betas"]
        torch._fused_adamw_(
            [params],
            [kept_grad],
            [avgs],
            [avg_sqs],
            [],
            [state["step"]],
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            amsgrad=False,
            maximize=False,
        )
        p.mul_(1 - group["lr"] * group["weight_decay"])  # the rows without state: decay alone
        p[kept], exp_avg[kept], exp_avg_sq[kept] = params, avgs, avg_sqs


def row_updates(
    allowed: bool, cfg: OptimSection, world_size: int, precision: str, device: str = "cpu"
) -> bool:
    """Whether a run updates the token embedding by rows (`AdamW`): its objective allows it (its
    loss never reads the masked-LM head, whose weight is the embedding), the update is the fused
    one, on a CPU (whose fused kernel decays as `AdamW._step_rows` does: tested there), one process
    (DDP and FSDP reduce dense gradients), no clipping (a norm over a sparse gradient would sum in
    another order) and no fp16 loss scaling (it unscales dense gradients)."""
    fused = cfg.implementation == "fused"
    one_cpu = device == "cpu" and world_size == 1
    return allowed and fused and one_cpu and cfg.clip_norm == 0 and precision != "fp16"


def build_optimizer(model: nn.Module, cfg: OptimSection) -> AdamW:
    # The fused kernel matters on CPU too: the update is a chain of elementwise passes over every
    # parameter, the embedding's 25M-50M included (benchmarks/experiments/adamw-implementation.md).
    kind = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[
        cfg.implementation
    ]
    return AdamW(
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
