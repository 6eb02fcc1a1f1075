"""SQuAD fine-tuning: the span objective on the windows of `roberta.qa` (which reads, windows,
decodes and scores SQuAD), and the plan of a `roberta finetune squad` run.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from roberta.errors import UserError
from roberta.model import RobertaModel
from roberta.qa.decode import apply_null_threshold, choose_null_threshold, decode
from roberta.qa.examples import SquadExample, check_version, read_squad
from roberta.qa.metric import squad_scores, write_predictions
from roberta.qa.predict import predict_windows, window_logits
from roberta.qa.windows import SQUAD_MAX_LENGTH, SquadWindow, make_windows
from roberta.runtime.batching import pad
from roberta.tasks.finetune import Batching, Recipe, Task, batched_objective, mean_loss, task_length
from roberta.train import distributed
from roberta.train.config import JobConfig
from roberta.train.trainer import BEST_DIR, EXAMPLES, Batch, Objective, TrainResult

# The paper's SQuAD recipe (Liu et al. 2019, appendix Table 10).
SQUAD_LR, SQUAD_BATCH, SQUAD_EPOCHS = 1.5e-5, 48, 2
SQUAD_RECIPE = Recipe(SQUAD_LR, SQUAD_BATCH, SQUAD_EPOCHS, (f"--data.max_length={SQUAD_MAX_LENGTH}",))


@dataclass(frozen=True)
class SquadTask:
    version: str
    name: str = "squad"  # the span head; v2.0's answerable classifier is "<name>-answerable"

    @property
    def answerable(self) -> str:
        return f"{self.name}-answerable"

    @property
    def heads(self) -> dict[str, dict]:
        """The span head, and for v2.0 the answerable classifier (`finetune.attach_heads`)."""
        heads: dict[str, dict] = {self.name: {"kind": "span"}}
        if self.version == "2.0":
            heads[self.answerable] = {"kind": "classification", "num_classes": 2}
        return heads


def _loss(task: SquadTask, pad_id: int, model: RobertaModel, batch: Batch) -> dict:
    """(CE(start) + CE(end)) / 2 per window, as HF's QA head; for v2.0 plus CE of the answerable
    classifier on `<s>` (the paper sums the two losses). A dev batch gives its logits instead."""
    tokens = batch["tokens"]
    # The layers compute the real tokens only (padding's logits are masked out below): a training
    # batch's padding, and a dev batch's fixed 384-token width, cost nothing but in attention.
    hidden = model(tokens, unpad=True).last_hidden_state
    start, end = window_logits(model, task.name, hidden, tokens, pad_id)
    if "window" in batch:
        return {EXAMPLES: {"window": batch["window"], "start": start, "end": end}}
    total = (
        F.cross_entropy(start, batch["start_position"], reduction="sum")
        + F.cross_entropy(end, batch["end_position"], reduction="sum")
    ) / 2
    if task.version == "2.0":
        # Answerable per window: a window without the answer is trained, like an impossible
        # question, to point at <s>, so its span targets and its class agree.
        answerable = batch["start_position"].gt(0).long()
        answerable_logits = model.classify(task.answerable, hidden).float()
        total = total + F.cross_entropy(answerable_logits, answerable, reduction="sum")
    return {"loss": total}


def squad_objective(
    task: SquadTask,
    train_windows: Sequence[SquadWindow],
    dev: tuple[Sequence[SquadExample], Sequence[SquadWindow]],
    batching: Batching,
    max_length: int,
) -> Objective:
    """Span extraction on windows (`_loss`). Dev: every window's logits gathered, decoded and
    scored with the official metric."""
    pad_id = batching.pad_id
    dev_examples, dev_windows = dev

    def train_batch(indices: np.ndarray) -> Batch:
        chosen = [train_windows[i] for i in indices]
        return {
            "tokens": pad([w.tokens for w in chosen], pad_id),
            "start_position": torch.tensor([w.start_position for w in chosen], dtype=torch.long),
            "end_position": torch.tensor([w.end_position for w in chosen], dtype=torch.long),
        }

    def dev_batch(indices: np.ndarray) -> Batch:
        # A fixed width: gathered [B, T] logits are concatenated across batches and ranks.
        return {
            "tokens": pad([dev_windows[i].tokens for i in indices], pad_id, max_length),
            "window": torch.from_numpy(indices.astype(np.int64)),
        }

    def metrics(sums: dict[str, float], examples: dict[str, np.ndarray]) -> dict[str, float]:
        figures = mean_loss(sums) if "loss" in sums else {}
        if examples:
            # The windows whose logits came back, in any order (as gathered).
            rows = [dev_windows[w] for w in np.asarray(examples["window"], dtype=np.int64)]
            decoded = decode(dev_examples, rows, examples["start"], examples["end"], version=task.version)
            odds = decoded.null_odds if task.version == "2.0" else None
            figures.update(squad_scores(dev_examples, decoded.predictions, task.version, odds))
        return figures

    return batched_objective(
        task.name,
        batching,
        train_lengths=[len(w.tokens) for w in train_windows],
        train_batch=train_batch,
        eval_sets={"dev": ([len(w.tokens) for w in dev_windows], dev_batch)},
        heads=task.heads,
        loss=functools.partial(_loss, task, pad_id),
        metrics=metrics,
        best_metric="f1",
        # The scores' names depend on the dev set (v2.0's HasAns_*/NoAns_* on which kinds it holds).
        figures={
            "dev": tuple(squad_scores(dev_examples, {}, task.version, {} if task.version == "2.0" else None))
        },
        counts=lambda batch: {} if "window" in batch else {"loss": len(batch["tokens"])},
        row_updates=True,
    )


def plan_squad(
    version: str,
    train_path: str | Path,
    dev_path: str | Path,
    job: JobConfig,
    model: RobertaModel,
    tokenizer,
    source: str | Path,
    *,
    name: str = "squad",
    stride: int = 128,
    max_query: int = 64,
) -> Task:
    """SQuAD read, checked and cut into windows for `model` (fine-tuned from `source`); RUN/best/
    holds the best dev F1, and RUN/predictions.json (v2.0: at the null threshold best on dev,
    with RUN/null_odds.json) are that checkpoint's dev answers."""
    task = SquadTask(version, name)
    check_version(version)
    train_examples, dev_examples = read_squad(train_path, version), read_squad(dev_path, version)
    max_length = task_length(job, model, source, task.heads, 6, "<s> question </s></s> context </s>")
    train_windows = make_windows(tokenizer, train_examples, max_length, stride, max_query, train=True).windows
    if not train_windows:
        raise UserError(f"{train_path}: no question could be trained on (every answer_start mismatched)")
    dev_windows = make_windows(tokenizer, dev_examples, max_length, stride, max_query, train=False).windows
    return Task(
        objective=lambda member, rank, world: squad_objective(
            task,
            train_windows,
            (dev_examples, dev_windows),
            Batching(member, tokenizer.pad_id, rank, world),
            max_length,
        ),
        max_length=max_length,
        run_info={"task": f"squad-{version}"},
        outputs=("predictions.json", *(("null_odds.json",) if version == "2.0" else ())),
        finish=functools.partial(_write_dev_answers, task, dev_examples, dev_windows, tokenizer.pad_id),
    )


def _write_dev_answers(
    task: SquadTask,
    dev_examples: Sequence[SquadExample],
    dev_windows: Sequence[SquadWindow],
    pad_id: int,
    run_dir: Path,
    member: JobConfig,
    result: TrainResult,
    placement: distributed.Placement,
) -> None:
    """RUN/predictions.json (v2.0: at the null threshold best on dev, with RUN/null_odds.json):
    the dev answers of a finished run's RUN/best/ checkpoint."""
    from roberta.convert import load_any

    if placement.is_main and result.best is not None:
        best, _ = load_any(Path(run_dir) / BEST_DIR)
        best = best.to(placement.device)
        decoded = predict_windows(
            best, task.name, task.version, dev_examples, dev_windows, pad_id, member.train.micro_batch_size
        )
        predictions = decoded.predictions
        if task.version == "2.0":
            threshold, _ = choose_null_threshold(dev_examples, decoded.best_spans, decoded.null_odds)
            predictions = apply_null_threshold(decoded.best_spans, decoded.null_odds, threshold)
            write_predictions(Path(run_dir) / "null_odds.json", decoded.null_odds)
        write_predictions(Path(run_dir) / "predictions.json", predictions)
