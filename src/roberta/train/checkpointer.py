"""What a run keeps on disk while it trains, owned by one object as torchtitan's checkpoint manager
owns it: RUN/checkpoints/step-N/ (the weights and everything exact resume needs, written by
`run_state`), RUN/best/ (the weights at the best evaluation so far), and what it has written: the
last checkpoint and the best figure, which a resumed run takes back from its checkpoint."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from roberta import checkpoint
from roberta.model import RobertaModel
from roberta.train import distributed, run_state

BEST_DIR = "best"


@dataclass
class Checkpointer:
    """Where a run's checkpoints go, what it has written, and the best figure so far."""

    run_dir: Path
    tokenizer: object
    placement: distributed.Placement
    keep_last: int
    best: dict | None = None  # {"metric", "value", "step"} of RUN/best/
    last: Path | None = None  # the last RUN/checkpoints/step-N written (rank 0 only)

    def save(self, step: int, plain: Callable[[], RobertaModel], state: dict) -> None:
        """RUN/checkpoints/step-N/: the full model (`plain()`, a collective under FSDP) and the
        trainer's `state`, written by rank 0 while the others wait."""
        model = plain()
        if self.placement.is_main:
            self.last = run_state.save_checkpoint(
                self.run_dir, step, model, self.tokenizer, state, self.keep_last
            )
        distributed.barrier()

    def keep_if_best(
        self, step: int, metric: str, value: float, higher_is_better: bool, plain: Callable[[], RobertaModel]
    ) -> None:
        """RUN/best/ rewritten when `value` of `metric` improves on the best so far."""
        if not _improves(value, self.best, higher_is_better):
            return
        self.best = {"metric": metric, "value": value, "step": step}
        model = plain()  # collective under FSDP: every rank gathers the full weights
        if self.placement.is_main:
            checkpoint.save(self.run_dir / BEST_DIR, model, self.tokenizer)
        distributed.barrier()


def _improves(value: float, best: dict | None, higher_is_better: bool) -> bool:
    if not math.isfinite(value):
        return False
    if best is None:
        return True
    return value > best["value"] if higher_is_better else value < best["value"]
