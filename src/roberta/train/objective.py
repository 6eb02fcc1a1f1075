"""What a task brings to the one training loop: its `Objective`, over batches of tensors."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from roberta.config import RobertaConfig
from roberta.model import RobertaModel

Batch = dict[str, torch.Tensor]
EXAMPLES = "examples"  # the key of a loss's per-example outputs, which evaluation gathers


@dataclass(frozen=True)
class Objective:
    """What a task brings to the loop. Every function sees one micro-batch of this rank.

    counts: per loss term, the number of items its summed loss averages over (masked tokens,
        sequences); known before the forward pass so the global normaliser can be all-reduced.
    loss: (model, batch) → summed loss per term (same keys as counts) plus any other summed
        statistics (e.g. correct predictions), as 0-d tensors; under the key EXAMPLES, optionally,
        a dict of per-example tensors (first dimension the example: predictions, labels, ids,
        fixed-width logits) that evaluation gathers from every rank. It runs inside the wrapped
        (DDP/FSDP) module, heads included.
    metrics: (summed statistics and counts, gathered per-example arrays) → the figures reported.
    eval_sets: named held-out sets (MNLI has two), each this rank's share of its batches.
    flops_per_token: the model config → training FLOPs per token, for MFU.
    batches_per_epoch: this rank's micro-batches in one epoch, where an epoch has a fixed length
        (budgets in epochs, evaluation each epoch).
    best_metric: the evaluation figure that picks RUN/best/ ("set/figure" with several sets).
    figures: every figure an evaluation reports, named as `best_metric` is, known before
        training so that a `train.best_metric` outside them is refused before the run starts
        (empty: not declared, checked at the first evaluation).
    row_updates: the loss never reads the masked-LM head (whose weight is the token embedding),
        so the trainer may update the embedding by the rows a batch looked up (`optim.AdamW`).
    """

    name: str
    add_heads: Callable[[RobertaModel], None]
    train_batches: Callable[[int], Iterator[Batch]]  # this rank's micro-batches from a position
    eval_sets: dict[str, Callable[[], Iterable[Batch]]]
    counts: Callable[[Batch], dict[str, float]]
    loss: Callable[[RobertaModel, Batch], dict]
    metrics: Callable[[dict[str, float], dict[str, np.ndarray]], dict[str, float]]
    tokens: Callable[[Batch], int]  # real (non-padding) tokens, for throughput
    flops_per_token: Callable[[RobertaConfig], float]
    batches_per_epoch: int | None = None
    best_metric: str | None = None
    higher_is_better: bool = True
    figures: tuple[str, ...] = ()
    row_updates: bool = False
