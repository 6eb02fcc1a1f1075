"""Held-out evaluation and the sums every rank adds up: an objective's statistics all-reduced, its
per-example outputs gathered from every rank, so a figure is the whole held-out set's."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from roberta.train import distributed
from roberta.train.objective import EXAMPLES, Batch, Objective
from roberta.train.precision import autocast


@torch.no_grad()
def evaluate(
    module: nn.Module,
    objective: Objective,
    precision: str,
    placement: distributed.Placement,
    max_batches: int = 0,
) -> dict[str, dict[str, float]]:
    """Each held-out set's figures: summed statistics all-reduced, per-example outputs gathered
    from every rank; `max_batches` > 0 stops each set after that many micro-batches per rank."""
    module.eval()
    results = {}
    for name, batches in objective.eval_sets.items():
        sums: dict[str, torch.Tensor] = {}
        examples: dict[str, list[np.ndarray]] = {}
        for i, batch in enumerate(batches()):
            if max_batches and i >= max_batches:
                break
            batch = to_device(batch, placement.device)
            with autocast(precision, placement.device):
                out = module(batch)
            for k, v in out.pop(EXAMPLES, {}).items():
                examples.setdefault(k, []).append(v.detach().float().cpu().numpy())
            counts = {f"{k}_count": torch.tensor(float(c)) for k, c in objective.counts(batch).items()}
            for k, v in {**out, **counts}.items():
                sums[k] = sums.get(k, 0.0) + v.detach().float().to(placement.device)
        gathered = distributed.all_gather({k: np.concatenate(v) for k, v in examples.items()})
        merged = {k: np.concatenate([part[k] for part in gathered if k in part]) for k in examples}
        results[name] = objective.metrics(all_reduce_dict(sums, placement.device), merged)
    if hasattr(module, "reshard"):
        # FSDP2 leaves the root unsharded after a forward with no backward; the optimizer and
        # the state-dict helpers expect the sharded parameters back.
        module.reshard()
    module.train()
    return results


def global_counts(objective: Objective, batches: list[Batch], device: torch.device) -> dict[str, float]:
    local: dict[str, float] = {}
    for b in batches:
        for k, v in objective.counts(b).items():
            local[k] = local.get(k, 0.0) + float(v)
    totals = all_reduce_dict({k: torch.tensor(v) for k, v in local.items()}, device)
    return {k: max(v, 1.0) for k, v in totals.items()}  # a batch with nothing masked adds no loss


def all_reduce_dict(values: dict[str, torch.Tensor], device: torch.device) -> dict[str, float]:
    if not values:
        return {}
    keys = sorted(values)
    packed = torch.stack(
        [torch.as_tensor(values[k], dtype=torch.float64).to(device).reshape(()) for k in keys]
    )
    packed = distributed.all_reduce_sum(packed)
    return dict(zip(keys, packed.tolist()))


def to_device(batch: Batch, device: torch.device) -> Batch:
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
    }
