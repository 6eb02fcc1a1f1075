"""Sentence(-pair) classification and regression: the user's own files, and the objective that
fine-tunes a classification head on them (GLUE uses it too, with its own readers and metrics).

Examples are read from CSV, TSV, JSONL or Parquet/Arrow with columns named by header, key or
column name; the label set is the sorted distinct labels of the training file. CSV and TSV labels
are strings, compared as written. JSONL and Parquet labels are typed values compared by value: the
numbers 1 and 1.0 and the strings "1" and "1.0" are one class, named "1"; other strings are
compared as written. Batches
carry `tokens` [B, T] (padded to the longest), `labels` [B] (class ids, or floats for
regression) and `index` [B] (the example's position, so dev predictions can be gathered).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from roberta.errors import UserError
from roberta.inputs.rows import TYPED, parse_number, read_records
from roberta.model import RobertaModel
from roberta.runtime.batching import pad
from roberta.tasks.finetune import Batching, Task, batched_objective, mean_loss, task_length
from roberta.train.config import JobConfig
from roberta.train.trainer import EXAMPLES, Batch, Objective


@dataclass(frozen=True)
class Example:
    text: str
    pair: str | None
    label: str | float | None  # None for unlabelled (test) rows
    index: str  # the row's id in prediction files
    line: int = 0  # 1-based line in the file it was read from, for errors naming it


def read_labelled_file(
    path: str | Path,
    text_column: str,
    pair_column: str | None = None,
    label_column: str | None = None,
    regression: bool = False,
) -> list[Example]:
    """Examples from a .csv, .tsv, .jsonl, .parquet or .arrow file; indices are the 0-based row numbers."""
    path = Path(path)
    columns = [c for c in (text_column, pair_column, label_column) if c is not None]
    texts = [c for c in (text_column, pair_column) if c is not None]
    examples = []
    by_value = path.suffix.lower() in TYPED
    for number, record in read_records(path, columns, strings=texts):
        text = _text(record, text_column, path, number)
        pair = None if pair_column is None else _text(record, pair_column, path, number)
        label = (
            None
            if label_column is None
            else parse_label(record[label_column], regression, path, number, label_column)
        )
        if by_value and isinstance(label, str):
            label = _by_value(label)
        examples.append(Example(text, pair, label, str(len(examples)), number))
    if not examples:
        raise UserError(f"{path}: no examples")
    return examples


def _text(record: dict, column: str, path: Path, line: int) -> str:
    value = record[column]
    if not isinstance(value, str):
        raise UserError(f"{path}:{line}: field {column!r} is {json.dumps(value)}, not a string")
    return value


def _number_name(number: int | float) -> str:
    """A number's class name by its value: 1, 1.0 and 1e0 are all "1"."""
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    return str(number) if isinstance(number, int) else repr(number)


def _by_value(label: str) -> str:
    """A JSONL string label that reads as a finite number, named by that number ("1.0" → "1")."""
    for kind in (int, float):
        try:
            number = kind(label)
        except ValueError:
            continue
        return _number_name(number) if isinstance(number, int) or math.isfinite(number) else label
    return label


def parse_label(value: object, regression: bool, path: Path, line: int, column: str) -> str | float:
    """A label as read from a file (a string, or a JSON value): a string for classification
    (a JSON number by its value: 1 and 1.0 are "1"), a finite float for regression."""
    if regression:
        return parse_number(value, path, line, column)
    if isinstance(value, str):
        label = value
    elif isinstance(value, bool):
        label = json.dumps(value)
    elif isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        label = _number_name(value)
    else:
        raise UserError(
            f"{path}:{line}: {column} {json.dumps(value)} is not a string, a finite number or a boolean"
        )
    if not label.strip():
        raise UserError(f"{path}:{line}: empty {column}")
    return label


def label_set(examples: Sequence[Example], path: str | Path) -> tuple[str, ...]:
    """The distinct labels of a training file, sorted: numerically when they all read as
    numbers (so "2" comes before "10"), else as strings."""
    labels = {e.label for e in examples}
    if not examples or None in labels:
        raise UserError(f"{path}: no labels to learn from")
    if len(labels) == 1:
        raise UserError(
            f"{path}: every example has the label {next(iter(labels))!r}; classification needs two "
            "labels or more (--regression for numbers to predict)"
        )
    try:
        return tuple(sorted(labels, key=float))
    except ValueError:
        return tuple(sorted(labels))


def label_ids(examples: Sequence[Example], labels: Sequence[str], path: str | Path) -> list[int]:
    """Each example's position in `labels`, or an error naming the line of a label outside it
    (a dev label the training file never had)."""
    ids = {label: i for i, label in enumerate(labels)}
    try:
        return [ids[e.label] for e in examples]
    except KeyError:
        bad = next(e for e in examples if e.label not in ids)
        known = ", ".join(labels[:10]) + (", ..." if len(labels) > 10 else "")
        raise UserError(
            f"{path}:{bad.line}: label {bad.label!r} is not one of the training labels ({known})"
        ) from None


# --- the objective: sentence(-pair) classification and regression on the <s> token -----------


@dataclass(frozen=True)
class SentenceTask:
    """What the objective needs to know: the head's name and label names (none: regression,
    one output trained with MSE), and the dev figures from predictions and labels."""

    name: str
    labels: tuple[str, ...]
    metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]]
    best_metric: str
    figures: tuple[str, ...]  # the names `metrics` reports

    @property
    def regression(self) -> bool:
        return not self.labels

    @property
    def heads(self) -> dict[str, dict]:
        """The one head it trains, as `finetune.check_head` and `attach_heads` take it."""
        spec = {"kind": "classification", "num_classes": len(self.labels) or 1, "labels": self.labels}
        return {self.name: spec}


def own_data_task(head: str, labels: tuple[str, ...]) -> SentenceTask:
    """Your own data's task: accuracy (picks RUN/best/) and macro F1 for classes; Pearson
    (picks RUN/best/) and Spearman for regression."""
    figures = ("accuracy", "f1") if labels else ("pearson", "spearman")
    return SentenceTask(head, labels, own_data_metrics(labels), figures[0], figures)


def own_data_metrics(labels: tuple[str, ...]) -> Callable[[np.ndarray, np.ndarray], dict[str, float]]:
    """Accuracy and macro F1 for classes; Pearson and Spearman for regression."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score

    def figures(predictions: np.ndarray, gold: np.ndarray) -> dict[str, float]:
        if not labels:
            return {
                "pearson": float(pearsonr(predictions, gold)[0]),
                "spearman": float(spearmanr(predictions, gold)[0]),
            }
        return {
            "accuracy": float((predictions == gold).mean()),
            "f1": float(f1_score(gold, predictions, average="macro")),
        }

    return figures


def encode(tokenizer, examples: Sequence[Example], max_length: int) -> list[list[int]]:
    """`<s> text </s>` or `<s> text </s></s> pair </s>`, cut to `max_length` (longest text first)."""
    texts = [e.text for e in examples]
    pairs = [e.pair for e in examples] if examples[0].pair is not None else None
    return tokenizer.encode_batch(texts, pairs, max_length=max_length, truncation="longest_first")


def check_labels(
    task: SentenceTask,
    train_examples: Sequence[Example],
    train_path: str | Path,
    dev_sets: dict[str, tuple[Sequence[Example], str | Path]],
) -> None:
    """Every set's labels usable for `task` (UserError naming the file and line), and a regression
    dev set large enough for its correlations: what needs no model, checked before anything runs."""
    label_values(task, train_examples, train_path)
    for examples, path in dev_sets.values():
        if task.regression and len(examples) < 2:
            raise UserError(
                f"{path}: {len(examples)} example; Pearson and Spearman need two dev examples or more"
            )
        values = label_values(task, examples, path)
        if task.regression and len(set(values)) == 1:
            raise UserError(
                f"{path}: every example's label is {values[0]:g}; Pearson and Spearman against a "
                "constant are undefined, so no dev figure could pick the best checkpoint"
            )


def label_values(task: SentenceTask, examples: Sequence[Example], path: str | Path) -> list[int | float]:
    return [float(e.label) for e in examples] if task.regression else label_ids(examples, task.labels, path)


def classify_objective(
    task: SentenceTask,
    train: tuple[list[list[int]], list],
    dev_sets: dict[str, tuple[list[list[int]], list]],
    batching: Batching,
) -> Objective:
    """The objective over encoded examples: `train` and each dev set as (token ids, label values)."""
    pad_id = batching.pad_id
    dtype = torch.float32 if task.regression else torch.long

    def collate(token_ids: list[list[int]], gold: list, indices: np.ndarray) -> Batch:
        return {
            "tokens": pad([token_ids[i] for i in indices], pad_id),
            "labels": torch.tensor([gold[i] for i in indices], dtype=dtype),
            "index": torch.from_numpy(indices.astype(np.int64)),
        }

    def held_out(token_ids: list[list[int]], gold: list) -> tuple[list[int], Callable[[np.ndarray], Batch]]:
        return [len(x) for x in token_ids], lambda indices: collate(token_ids, gold, indices)

    return batched_objective(
        task.name,
        batching,
        train_lengths=[len(x) for x in train[0]],
        train_batch=lambda indices: collate(*train, indices),
        eval_sets={name: held_out(*dev) for name, dev in dev_sets.items()},
        heads=task.heads,
        loss=functools.partial(_loss, task),
        metrics=functools.partial(_metrics, task),
        best_metric=task.best_metric,
        figures={
            name: tuple(dict.fromkeys(["loss", *([] if task.regression else ["accuracy"]), *task.figures]))
            for name in dev_sets
        },
        row_updates=True,
    )


def sentence_logits(task: SentenceTask, model: RobertaModel, batch: Batch) -> torch.Tensor:
    """The head's outputs for a batch, [B, classes] ([B, 1] for regression), in float32."""
    return model.classify(task.name, model(batch["tokens"], select="first").last_hidden_state).float()


def _loss(task: SentenceTask, model: RobertaModel, batch: Batch) -> dict:
    logits = sentence_logits(task, model, batch)
    gold = batch["labels"]
    if task.regression:
        predictions = logits.squeeze(-1)
        out = {"loss": F.mse_loss(predictions, gold, reduction="sum")}
    else:
        predictions = logits.argmax(-1)
        out = {"loss": F.cross_entropy(logits, gold, reduction="sum"), "correct": (predictions == gold).sum()}
    return {**out, EXAMPLES: {"index": batch["index"], "prediction": predictions, "label": gold}}


def _metrics(task: SentenceTask, sums: dict[str, float], examples: dict[str, np.ndarray]) -> dict[str, float]:
    figures = mean_loss(sums)
    if "correct" in sums:
        figures["accuracy"] = sums["correct"] / max(sums["loss_count"], 1.0)
    if examples:
        predictions, gold = examples["prediction"], examples["label"]
        if not task.regression:  # gathered as floats
            predictions, gold = predictions.astype(np.int64), gold.astype(np.int64)
        figures.update(task.metrics(predictions, gold))
    return figures


@dataclass(frozen=True)
class EncodedSentences:
    """A task's examples checked and encoded for the starting model: each set as (token ids,
    label values)."""

    max_length: int
    train: tuple[list[list[int]], list]
    dev: dict[str, tuple[list[list[int]], list]]


@dataclass(frozen=True)
class LabelledSentences:
    """A sentence task's labelled examples: the training ones (and their file, which messages
    name) and each dev set by name as (examples, file)."""

    task: SentenceTask
    train: Sequence[Example]
    train_path: str | Path
    dev: dict[str, tuple[Sequence[Example], str | Path]]


def encode_sentences(
    sentences: LabelledSentences, job: JobConfig, model: RobertaModel, tokenizer, source: str | Path
) -> EncodedSentences:
    """The examples checked against `model` (fine-tuned from `source`: its head, its positions)
    and encoded."""
    task, train_examples, train_path = sentences.task, sentences.train, sentences.train_path
    pairs = train_examples[0].pair is not None
    max_length = task_length(
        job,
        model,
        source,
        task.heads,
        6 if pairs else 3,
        "<s> text </s></s> pair </s>" if pairs else "<s> text </s>",
    )
    check_labels(task, train_examples, train_path, sentences.dev)
    train = (encode(tokenizer, train_examples, max_length), label_values(task, train_examples, train_path))
    dev = {
        name: (encode(tokenizer, examples, max_length), label_values(task, examples, path))
        for name, (examples, path) in sentences.dev.items()
    }
    return EncodedSentences(max_length, train, dev)


def plan_sentences(
    sentences: LabelledSentences, job: JobConfig, model: RobertaModel, tokenizer, source: str | Path
) -> Task:
    """Sentence(-pair) classification or regression of `model` (fine-tuned from `source`) on
    labelled examples, checked and encoded; RUN/best/ holds the best dev checkpoint, with its head."""
    data = encode_sentences(sentences, job, model, tokenizer, source)
    task = sentences.task
    return Task(
        objective=lambda member, rank, world: classify_objective(
            task, data.train, data.dev, Batching(member, tokenizer.pad_id, rank, world)
        ),
        max_length=data.max_length,
        run_info={"task": task.name, "labels": list(task.labels)},
    )


@dataclass(frozen=True)
class Sentences:
    """A sentence task's data as `finetune` and `distill` take it: `read()` gives its
    `LabelledSentences`, `read_unlabelled(FILE)`
    the examples of a file in the task's format, its labels ignored; and the recipe's LR and batch
    size. Files are read when the run is planned, not when the command is parsed."""

    read: Callable[[], LabelledSentences]
    read_unlabelled: Callable[[str], list]
    lr: float
    batch_size: int


def own_sentences(
    train: str,
    dev: str,
    text_column: str,
    pair_column: str | None,
    label_column: str,
    regression: bool,
    head: str,
    lr: float,
    batch_size: int,
) -> Sentences:
    """Your own labelled files read by their columns, the label set from `train`."""
    columns = dict(text_column=text_column, pair_column=pair_column)

    def read() -> LabelledSentences:
        labelled = dict(columns, label_column=label_column, regression=regression)
        train_examples = read_labelled_file(train, **labelled)
        dev_examples = read_labelled_file(dev, **labelled)
        task = own_data_task(head, () if regression else label_set(train_examples, train))
        return LabelledSentences(task, train_examples, train, {"dev": (dev_examples, dev)})

    return Sentences(read, lambda path: read_labelled_file(path, **columns), lr, batch_size)
