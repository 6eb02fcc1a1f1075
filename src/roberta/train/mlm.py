"""The pretraining objective: masked-LM loss on the masked positions only, plus NSP where the
input format has it (the paper's SEGMENT-PAIR+NSP and SENTENCE-PAIR+NSP baselines).

Batches are dicts with `input_ids` [B, T] (padded with the model's padding id), `labels` [B, T]
(the original token at masked positions, IGNORE_INDEX elsewhere) and, for NSP formats,
`nsp_labels` [B] (0: B follows A, 1: B is from another document).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from roberta.data.masking import IGNORE_INDEX
from roberta.model import RobertaModel
from roberta.train.trainer import Batch, Objective

NSP_HEAD = "nsp"
NSP_LABELS = "nsp_labels"


def mlm_objective(
    train_batches: Callable[[int], Iterator[Batch]],
    eval_batches: Callable[[], Iterable[Batch]],
    padding_idx: int,
    nsp: bool = False,
) -> Objective:
    def add_heads(model: RobertaModel) -> None:
        if nsp and NSP_HEAD not in model.heads:
            model.add_classification_head(NSP_HEAD, 2)

    def counts(batch: Batch) -> dict[str, float]:
        found = {"mlm": int(batch["labels"].ne(IGNORE_INDEX).sum())}
        if nsp:
            found["nsp"] = int(batch[NSP_LABELS].numel())
        return found

    def tokens(batch: Batch) -> int:
        return int(batch["input_ids"].ne(padding_idx).sum())

    return Objective(
        name="pretrain",
        add_heads=add_heads,
        train_batches=train_batches,
        eval_batches=eval_batches,
        counts=counts,
        loss=lambda module, model, batch: mlm_loss(module, model, batch, nsp),
        metrics=mlm_metrics,
        tokens=tokens,
    )


def mlm_loss(module: nn.Module, model: RobertaModel, batch: Batch, nsp: bool) -> dict[str, torch.Tensor]:
    hidden = module(batch["input_ids"]).last_hidden_state
    labels = batch["labels"]
    selected = labels.ne(IGNORE_INDEX)
    # Scoring only masked positions skips ~85% of the vocabulary projection (most of a small model's FLOPs).
    logits = model.lm_logits(hidden, selected).float()
    targets = labels[selected]
    out = {
        "mlm": F.cross_entropy(logits, targets, reduction="sum"),
        "mlm_correct": (logits.argmax(-1) == targets).sum(),
    }
    if nsp:
        nsp_logits = model.classify(NSP_HEAD, hidden).float()
        out["nsp"] = F.cross_entropy(nsp_logits, batch[NSP_LABELS], reduction="sum")
        out["nsp_correct"] = (nsp_logits.argmax(-1) == batch[NSP_LABELS]).sum()
    return out


def mlm_metrics(sums: dict[str, float]) -> dict[str, float]:
    """loss (nats per masked token), perplexity, masked-token accuracy; NSP loss and accuracy if present."""
    n = max(sums["mlm_count"], 1.0)
    loss = sums["mlm"] / n
    figures = {"loss": loss, "perplexity": math.exp(min(loss, 50.0)), "accuracy": sums["mlm_correct"] / n}
    if "nsp" in sums:
        m = max(sums["nsp_count"], 1.0)
        figures.update(nsp_loss=sums["nsp"] / m, nsp_accuracy=sums["nsp_correct"] / m)
    return figures
