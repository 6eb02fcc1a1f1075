"""Winograd schemas through the masked LM (the paper's WSC/WNLI method, fairseq's `wsc` task): the
pronoun's place is filled with one `<mask>` per token of a candidate, and the candidate is scored
by the mean log-probability the LM gives its tokens there (the mean, as fairseq's `get_lprobs`,
so a long candidate is not scored down for its length). The query must outscore the others:

- the margin ranking loss of Kocijan et al. (2019), per schema
  `-q + alpha * sum_k max(0, c_k - q + beta)` (fairseq broadcasts `-q` over the candidates, so
  it counts it once per candidate; here it counts once, as in the paper);
- fairseq's cross-entropy variant (`--wsc-cross-entropy`): `-log softmax([q, c_1..c_K])[0]`.

As in fairseq, training reads the positive schemas only (the query is the referent). A SuperGLUE
schema is predicted true when its query scores at least every candidate (`q >= max c`, true with
no candidates); a schema whose query is the right answer among given options (WSC273, WinoGrande)
is counted right only when the query scores strictly more than the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from roberta.checkpoint import require_lm_head
from roberta.errors import UserError
from roberta.model import RobertaModel
from roberta.options.tasks import WscLossOptions
from roberta.runtime.batching import pad
from roberta.tasks.finetune import Batching, Recipe, Task, batched_objective, mean_loss, sequence_length
from roberta.tasks.winograd_data import Schema
from roberta.train.config import JobConfig
from roberta.train.trainer import EXAMPLES, Batch, Objective
from roberta.validation import check_value

# fairseq's WSC recipe (examples/roberta/wsc/README.md): AdamW (0.9, 0.98), weight decay 0.01,
# polynomial (linear) decay, LR 2e-5, batch 16, 2000 updates, 250 warmup.
WSC_RECIPE = Recipe(
    2e-5, 16, 0, ("--optim.weight_decay=0.01", "--train.max_steps=2000", "--schedule.warmup_fraction=0.125")
)
# Determiners and possessives that start a candidate written at a sentence's start ("The city
# councilmen"): lowercased where the pronoun stands mid-sentence.
_CAPITAL_STARTS = frozenset("The A An His Her Their My Our Its Your This That These Those".split())


@dataclass(frozen=True)
class Loss:
    """The ranking loss: "cross-entropy" (fairseq's variant) or "margin" (Kocijan et al. 2019), its
    defaults and rules `finetune wsc`'s options (`roberta.options.tasks.WscLossOptions`)."""

    kind: str = WscLossOptions.loss
    alpha: float = WscLossOptions.margin_alpha
    beta: float = WscLossOptions.margin_beta

    def __post_init__(self) -> None:
        for name, value in (("loss", self.kind), ("margin_alpha", self.alpha), ("margin_beta", self.beta)):
            check_value(WscLossOptions, name, value, "loss")

    def __call__(self, query: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """The loss of one schema from its query's score (0-d) and its candidates' ([K])."""
        if self.kind == "cross-entropy":
            return torch.logsumexp(torch.cat([query[None], candidates]), 0) - query
        return -query + self.alpha * (candidates - query + self.beta).clamp(min=0).sum()


def fit_case(candidate: str, prefix: str) -> str:
    """A candidate as it would be written at the pronoun: capitalized at a sentence's start, its
    leading determiner lowercased elsewhere ("The demonstrators" -> "the demonstrators")."""
    start = not prefix.strip() or prefix.rstrip().endswith((".", "!", "?"))
    first, _, rest = candidate.partition(" ")
    if start:
        return candidate[:1].upper() + candidate[1:]
    if first in _CAPITAL_STARTS:
        return " ".join([first.lower(), rest]) if rest else first.lower()
    return candidate


# One row per scored candidate: the masked ids, and the ids the masks stand for.
Row = tuple[list[int], list[int]]


def encode_schema(tokenizer, schema: Schema, max_length: int) -> list[Row]:
    """The rows of a schema, query first: `<s> prefix <mask>... suffix </s>` with one `<mask>`
    per token of the candidate (tokenized with the space before it, as in the text); the text
    around the pronoun is cut (the prefix's start first) to fit `max_length`."""
    texts = [t for t in (schema.query, *schema.candidates) if t is not None]
    prefix, suffix, *filled = tokenizer.tokenize_ids_batch(
        [schema.prefix, schema.suffix, *(schema.space + fit_case(t, schema.prefix) for t in texts)]
    )
    rows = []
    for ids in filled:
        room = max_length - 2 - len(ids)
        if room < 0:
            raise UserError(
                f"{schema.id}: a candidate of {len(ids)} tokens does not fit max_length={max_length}"
            )
        keep_suffix = suffix[: max(room - len(prefix), min(len(suffix), room // 2))]
        keep_prefix = prefix[max(0, len(prefix) - (room - len(keep_suffix))) :]
        masked = [
            tokenizer.bos_id,
            *keep_prefix,
            *[tokenizer.mask_id] * len(ids),
            *keep_suffix,
            tokenizer.eos_id,
        ]
        rows.append((masked, ids))
    return rows


def collate(encoded: Sequence[list[Row]], labels: Sequence[int], strict: bool, pad_id: int) -> Batch:
    """A batch of schemas: `tokens` [R, T] (every row of every schema), `targets` [M] (the ids the
    masks stand for, in the order `tokens.eq(mask_id)` takes them), `row` [M] (each mask's row),
    `schema` [R] (each row's schema), `label` [B] (1 true, 0 false), `strict` [B]."""
    rows = [row for schema in encoded for row in schema]
    tokens = pad([masked for masked, _ in rows], pad_id)
    return {
        "tokens": tokens,
        "targets": torch.tensor([t for _, ids in rows for t in ids], dtype=torch.long),
        "row": torch.tensor([r for r, (_, ids) in enumerate(rows) for _ in ids], dtype=torch.long),
        "schema": torch.tensor([s for s, schema in enumerate(encoded) for _ in schema], dtype=torch.long),
        "label": torch.tensor(list(labels), dtype=torch.long),
        "strict": torch.full((len(encoded),), strict, dtype=torch.bool),
    }


def row_scores(model: RobertaModel, batch: Batch, mask_id: int) -> torch.Tensor:
    """[R] float32: each row's mean log-probability of its candidate's tokens at the masks."""
    masked = batch["tokens"].eq(mask_id)
    hidden = model(batch["tokens"], unpad=True, select=masked).last_hidden_state  # [M, H]
    picked = model.lm_logits(hidden).float().log_softmax(-1).gather(1, batch["targets"][:, None]).squeeze(1)
    rows = batch["schema"].numel()
    sums = torch.zeros(rows, dtype=picked.dtype, device=picked.device).index_add(0, batch["row"], picked)
    counts = torch.bincount(batch["row"], minlength=rows).clamp(min=1)
    return sums / counts


def judge(scores: torch.Tensor, batch: Batch, loss: Loss) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(summed loss over the positive schemas, predictions [B] 0/1, right [B] bool)."""
    first = torch.zeros_like(batch["label"])
    counts = torch.bincount(batch["schema"], minlength=len(batch["label"]))
    first[1:] = counts.cumsum(0)[:-1]
    total = scores.new_zeros(())
    predictions = []
    for s in range(len(batch["label"])):
        query, others = scores[first[s]], scores[first[s] + 1 : first[s] + counts[s]]
        if batch["label"][s] == 1:
            total = total + loss(query, others)
        best = others.max() if len(others) else None
        if batch["strict"][s]:
            predictions.append(best is None or bool(query > best))
        else:
            predictions.append(best is None or bool(query >= best))
    predictions = torch.tensor(predictions, dtype=torch.long, device=scores.device)
    return total, predictions, predictions.eq(batch["label"])


def wsc_objective(
    train: list[list[Row]],
    eval_sets: dict[str, tuple[list[list[Row]], list[int], bool]],
    loss: Loss,
    batching: Batching,
    mask_id: int,
) -> Objective:
    """The objective: `train` holds the positive schemas' rows; each held-out set is (rows per
    schema, labels 1/0, strict: the query is the right option and must win outright)."""
    pad_id = batching.pad_id

    def batcher(encoded, labels, strict):
        return lambda indices: collate(
            [encoded[i] for i in indices], [labels[i] for i in indices], strict, pad_id
        )

    def lengths(encoded):
        return [sum(len(masked) for masked, _ in rows) for rows in encoded]

    def compute(model: RobertaModel, batch: Batch) -> dict:
        total, predictions, right = judge(row_scores(model, batch, mask_id), batch, loss)
        return {
            "loss": total,
            "correct": right.sum(),
            EXAMPLES: {"prediction": predictions, "label": batch["label"]},
        }

    return batched_objective(
        "wsc",
        batching,
        train_lengths=lengths(train),
        train_batch=batcher(train, [1] * len(train), False),
        eval_sets={name: (lengths(data[0]), batcher(*data)) for name, data in eval_sets.items()},
        heads={},
        loss=compute,
        metrics=_metrics,
        best_metric="accuracy",
        figures={name: ("loss", "accuracy") for name in eval_sets},
        counts=lambda batch: {"loss": int(batch["label"].eq(1).sum())},
    )


def _metrics(sums: dict[str, float], gathered: dict[str, np.ndarray]) -> dict[str, float]:
    figures = mean_loss(sums)
    if gathered:
        figures["accuracy"] = 100.0 * float((gathered["prediction"] == gathered["label"]).mean())
    return figures


def labels_of(schemas: Sequence[Schema]) -> list[int]:
    return [int(bool(s.label)) for s in schemas]


def plan_wsc(
    train: list[Schema],
    eval_sets: dict[str, tuple[list[Schema], bool]],
    loss: Loss,
    job: JobConfig,
    model: RobertaModel,
    tokenizer,
    source: str | Path,
) -> Task:
    """WSC fine-tuning of `model`'s masked LM (from `source`, which must have one) on the positive
    schemas of `train`; each held-out set is (schemas, strict). RUN/best/ holds the best accuracy
    on the first held-out set."""
    require_lm_head(model, "finetune wsc (candidates are scored by the masked LM)")
    max_length = sequence_length(job, model, 4, "<s> text <mask> text </s>")
    positives = [s for s in train if s.label]
    if not positives:
        raise UserError("the training file has no schema labelled true: nothing to learn the referent from")
    encoded = {
        name: ([encode_schema(tokenizer, s, max_length) for s in schemas], labels_of(schemas), strict)
        for name, (schemas, strict) in eval_sets.items()
    }
    train_rows = [encode_schema(tokenizer, s, max_length) for s in positives]
    return Task(
        objective=lambda member, rank, world: wsc_objective(
            train_rows, encoded, loss, Batching(member, tokenizer.pad_id, rank, world), tokenizer.mask_id
        ),
        max_length=max_length,
        run_info={"task": "wsc", "loss": loss.kind, "alpha": loss.alpha, "beta": loss.beta},
    )


def score_schemas(
    model: RobertaModel,
    tokenizer,
    schemas: Sequence[Schema],
    batch_size: int = 32,
    progress: str | None = None,
) -> list[list[float]]:
    """Each schema's scores, query first then its candidates, from `model` as it is (no grad);
    with `progress`, a bar of that name on stderr."""
    from tqdm import tqdm

    length = model.config.max_seq_len
    encoded = [encode_schema(tokenizer, s, length) for s in schemas]
    out: list[list[float]] = []
    with torch.inference_mode():
        bar = tqdm(total=len(encoded), desc=progress, unit="schema", disable=progress is None, leave=False)
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start : start + batch_size]
            batch = collate(chunk, [0] * len(chunk), False, tokenizer.pad_id)
            batch = {k: v.to(model.device) for k, v in batch.items()}
            scores = row_scores(model, batch, tokenizer.mask_id).tolist()
            for rows in chunk:
                out.append(scores[: len(rows)])
                scores = scores[len(rows) :]
            bar.update(len(chunk))
        bar.close()
    return out


def accuracy(schemas: Sequence[Schema], scores: Sequence[Sequence[float]], strict: bool) -> dict:
    """Accuracy in percent and the count: a SuperGLUE schema (not `strict`) predicted true when its
    query scores at least every candidate; a `strict` one right when the query scores most."""
    right = 0
    for schema, (query, *others) in zip(schemas, scores):
        if strict:
            right += all(query > c for c in others)
        else:
            right += (all(query >= c for c in others)) == bool(schema.label)
    return {"accuracy": 100.0 * right / len(schemas), "count": len(schemas)}
