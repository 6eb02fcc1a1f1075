"""Training's precision: the autocast a job runs under (`roberta.runtime.precision`), and fp16's dynamic loss
scaling.

fp16 gradients underflow unless the loss is multiplied up before backward; too large a scale
overflows instead. The scaler follows fairseq's rule: an overflowing step is skipped and the
scale halved; after `growth_interval` clean steps it doubles again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from roberta.runtime.precision import autocast, resolve

__all__ = ["LossScaler", "autocast", "resolve_precision"]


def resolve_precision(requested: str, device: torch.device, width: int | None = None) -> str:
    """`train.precision` as it runs here for a model `width` wide (`roberta.runtime.precision.resolve`:
    `auto` is bf16 on a GPU or a CPU with native bf16 units, fp32 elsewhere)."""
    return resolve(requested, device, width=width)


@dataclass
class LossScaler:
    """Dynamic loss scale; `enabled=False` (bf16, fp32) makes every method a no-op."""

    enabled: bool = True
    scale: float = 2.0**16
    growth_interval: int = 2000
    min_scale: float = 2.0**-14
    clean_steps: int = 0
    skipped_steps: int = 0

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale if self.enabled else loss

    def unscale_and_check(self, params: list[torch.nn.Parameter]) -> bool:
        """Divide gradients by the scale; True when every gradient on every rank is finite."""
        if not self.enabled:
            return True
        grads = [p.grad for p in params if p.grad is not None]
        finite = torch.ones((), device=grads[0].device if grads else "cpu")
        for g in grads:
            g.mul_(1.0 / self.scale)
            finite = finite * torch.isfinite(_local(g)).all()
        if dist.is_initialized():
            # FSDP ranks hold different gradient shards: one overflow anywhere skips everywhere.
            dist.all_reduce(finite, op=dist.ReduceOp.MIN)
        return bool(finite.item())

    def update(self, finite: bool) -> None:
        if not self.enabled:
            return
        if finite:
            self.clean_steps += 1
            if self.clean_steps % self.growth_interval == 0:
                self.scale *= 2.0
            return
        self.skipped_steps += 1
        self.clean_steps = 0
        self.scale = max(self.min_scale, self.scale / 2.0)

    def state_dict(self) -> dict:
        return {"scale": self.scale, "clean_steps": self.clean_steps, "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict) -> None:
        self.scale = float(state["scale"])
        self.clean_steps = int(state["clean_steps"])
        self.skipped_steps = int(state["skipped_steps"])


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor
