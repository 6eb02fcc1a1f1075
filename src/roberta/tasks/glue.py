"""GLUE: the nine tasks' file layouts, label names, official metrics, paper defaults, and the
leaderboard's prediction files.

Files are the standard GLUE TSVs, read by column name from their header. CoLA's train and dev
files have no header: their columns are source, label, original label, sentence. Files without
an index column (SST-2, CoLA, MRPC train/dev) index their rows 0, 1, ... in file order.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from roberta.errors import UserError
from roberta.inputs.rows import read_tsv, table_records
from roberta.io import atomic_write
from roberta.similarity.metric import MIN_PAIRS, pearson, spearman
from roberta.tasks.classify import Example, LabelledSentences, Sentences, label_ids, parse_label

PREDICTION_HEADER = ["index", "prediction"]
# A correlation of fewer pairs is not a number (scipy refuses one pair).
MIN_EXAMPLES = {"pearson": MIN_PAIRS, "spearman": MIN_PAIRS}


@dataclass(frozen=True)
class GlueTask:
    name: str
    text_column: str
    pair_column: str | None
    label_column: str
    labels: tuple[str, ...]  # as written in the files, in head-output order; () for regression
    metrics: tuple[str, ...]  # the official ones; the first picks the best checkpoint
    lr: float
    batch_size: int
    dev_sets: tuple[tuple[str, str], ...] = (("dev", "dev.tsv"),)  # (name, file in the task directory)
    index_column: str = "index"
    headerless_columns: tuple[str, ...] = ()  # the columns of train/dev files that have no header
    epochs: int = 10
    warmup: float = 0.06  # of all updates, then linear decay to 0
    weight_decay: float = 0.1

    @property
    def regression(self) -> bool:
        return not self.labels

    @property
    def num_classes(self) -> int:
        return len(self.labels) or 1

    @property
    def metric(self) -> str:
        return self.metrics[0]


BINARY = ("0", "1")
ENTAILMENT = ("entailment", "not_entailment")

# LR and batch size per task as fairseq's examples/roberta/README.glue.md gives them (within the
# paper's grid, Liu et al. 2019 appendix Table 10); the paper reported no WNLI recipe (it ranked
# WSC-style candidates), so WNLI takes RTE's.
TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in [
        GlueTask(
            "CoLA",
            "sentence",
            None,
            "label",
            BINARY,
            ("mcc",),
            1e-5,
            16,
            headerless_columns=("source", "label", "original_label", "sentence"),
        ),
        GlueTask("SST-2", "sentence", None, "label", BINARY, ("accuracy",), 1e-5, 32),
        GlueTask("MRPC", "#1 String", "#2 String", "Quality", BINARY, ("f1", "accuracy"), 1e-5, 16),
        GlueTask("STS-B", "sentence1", "sentence2", "score", (), ("pearson", "spearman"), 2e-5, 16),
        GlueTask(
            "QQP",
            "question1",
            "question2",
            "is_duplicate",
            BINARY,
            ("accuracy", "f1"),
            1e-5,
            32,
            index_column="id",
        ),
        GlueTask(
            "MNLI",
            "sentence1",
            "sentence2",
            "gold_label",
            ("contradiction", "entailment", "neutral"),
            ("accuracy",),
            1e-5,
            32,
            dev_sets=(("matched", "dev_matched.tsv"), ("mismatched", "dev_mismatched.tsv")),
        ),
        GlueTask("QNLI", "question", "sentence", "label", ENTAILMENT, ("accuracy",), 1e-5, 32),
        GlueTask("RTE", "sentence1", "sentence2", "label", ENTAILMENT, ("accuracy",), 2e-5, 16),
        GlueTask("WNLI", "sentence1", "sentence2", "label", BINARY, ("accuracy",), 2e-5, 16),
    ]
}


def get_task(name: str) -> GlueTask:
    if name not in TASKS:
        raise UserError(f"unknown GLUE task {name!r} (tasks: {', '.join(TASKS)})")
    return TASKS[name]


def read_split(task: GlueTask, path: str | Path, labelled: bool | None = None) -> list[Example]:
    """The examples of one GLUE file. `labelled`: True requires the label column (train, dev),
    False ignores it, None reads it when the header has it (test files have none)."""
    path = Path(path)
    rows = read_tsv(path)
    first = next(rows, None)
    if first is None:
        raise UserError(f"{path}: empty file")
    header = first[1]
    if task.text_column not in header and task.headerless_columns:
        header = list(task.headerless_columns)
        rows = itertools.chain([(0, header), first], rows)
    else:
        rows = itertools.chain([first], rows)
    label = task.label_column if (task.label_column in header if labelled is None else labelled) else None
    index = task.index_column if task.index_column in header else None
    columns = [c for c in (task.text_column, task.pair_column, label, index) if c is not None]
    examples = []
    for number, record in table_records(path, rows, columns):
        examples.append(
            Example(
                text=record[task.text_column],
                pair=record[task.pair_column] if task.pair_column else None,
                label=parse_label(record[label], task.regression, path, number, label) if label else None,
                index=record[index] if index else str(len(examples)),
                line=number,
            )
        )
    if not examples:
        raise UserError(f"{path}: no examples")
    return examples


def read_task_dir(task: GlueTask, directory: str | Path) -> tuple[list[Example], Path, dict]:
    """A GLUE task directory read for fine-tuning: the labelled training examples, the training
    file, and each dev set by name as (examples, file)."""
    directory = Path(directory)
    train = read_split(task, directory / "train.tsv", labelled=True)
    dev = {
        name: (read_split(task, directory / file, labelled=True), directory / file)
        for name, file in task.dev_sets
    }
    return train, directory / "train.tsv", dev


def _metric_functions() -> dict[str, Callable[[list, list], float]]:
    """Each metric as f(predictions, labels)."""
    # Imported on use: scikit-learn and scipy take a second to load, and most verbs need neither.
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    return {
        "accuracy": lambda p, y: accuracy_score(y, p),
        "f1": lambda p, y: f1_score(y, p, zero_division=0.0),
        "mcc": lambda p, y: matthews_corrcoef(y, p),
        "pearson": pearson,
        "spearman": spearman,
    }


def metrics(
    task: GlueTask, predictions: Sequence[int | float], labels: Sequence[int | float]
) -> dict[str, float]:
    """The task's official dev metrics: label ids for classification (F1 counts id 1, "1", as
    positive), floats for STS-B.

    Where a metric is undefined, MCC and F1 are 0 as scikit-learn (GLUE's scorer) makes them
    (constant predictions; no positive predicted nor labelled), and a correlation is NaN
    (constant predictions or labels, fewer than two pairs)."""
    if len(predictions) != len(labels) or not labels:
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
    functions = _metric_functions()
    with warnings.catch_warnings():
        # scipy's ConstantInputWarning and scikit-learn's notes announce the undefined values above,
        # in several lines per evaluation: the callers say it once, where it matters.
        warnings.simplefilter("ignore")
        return {name: float(functions[name](list(predictions), list(labels))) for name in task.metrics}


def write_predictions(
    task: GlueTask, path: str | Path, indices: Sequence[str], predictions: Sequence[int | float]
) -> None:
    """The GLUE leaderboard's TSV: `index<TAB>prediction`, the label name (a float for STS-B)."""
    with atomic_write(path) as f:
        f.write("\t".join(PREDICTION_HEADER) + "\n")
        for index, prediction in zip(indices, predictions, strict=True):
            value = repr(float(prediction)) if task.regression else task.labels[prediction]
            f.write(f"{index}\t{value}\n")


def read_predictions(task: GlueTask, path: str | Path) -> dict[str, tuple[int, str | float]]:
    """{index: (line, label name or float)} from a leaderboard TSV."""
    path = Path(path)
    predictions: dict[str, tuple[int, str | float]] = {}
    for number, record in table_records(path, read_tsv(path), PREDICTION_HEADER):
        index = record["index"]
        if index in predictions:
            raise UserError(f"{path}:{number}: index {index} repeats line {predictions[index][0]}")
        value = parse_label(record["prediction"], task.regression, path, number, "prediction")
        if not task.regression and value not in task.labels:
            raise UserError(
                f"{path}:{number}: prediction {value!r} is not a {task.name} label ({', '.join(task.labels)})"
            )
        predictions[index] = (number, value)
    return predictions


def evaluate_predictions(
    task: GlueTask, dev_file: str | Path, predictions_file: str | Path
) -> dict[str, float]:
    """The task's metrics for a leaderboard TSV scored against a labelled dev file, matched by index.

    A dev file too small for a metric (one pair for a correlation) is refused; a correlation that
    is undefined (constant predictions or labels) is NaN, with a warning naming the constant side."""
    examples = read_split(task, dev_file, labelled=True)
    for name in task.metrics:
        if len(examples) < MIN_EXAMPLES.get(name, 1):
            raise UserError(
                f"{dev_file}: {len(examples)} example(s), but {task.name}'s {name} needs at least "
                f"{MIN_EXAMPLES[name]}"
            )
    predicted = read_predictions(task, predictions_file)
    dev_indices = {e.index for e in examples}
    for index, (number, _) in predicted.items():
        if index not in dev_indices:
            raise UserError(f"{predictions_file}:{number}: index {index} is not in {dev_file}")
    missing = next((e for e in examples if e.index not in predicted), None)
    if missing is not None:
        raise UserError(
            f"{predictions_file}: no prediction for index {missing.index} ({dev_file}:{missing.line})"
        )
    values = [predicted[e.index][1] for e in examples]
    if task.regression:
        figures = metrics(task, values, [e.label for e in examples])
    else:
        figures = metrics(
            task, [task.labels.index(v) for v in values], label_ids(examples, task.labels, dev_file)
        )
    undefined = [name for name, value in figures.items() if math.isnan(value)]
    if undefined:
        # A correlation is undefined only where one side is constant.
        constant = len(set(values)) == 1
        why = (
            f"{predictions_file} predicts the same value everywhere"
            if constant
            else f"{dev_file} has the same label everywhere"
        )
        warnings.warn(f"{', '.join(undefined)} undefined: {why}", stacklevel=2)
    return figures


def sentence_task(task: GlueTask):
    """The task as the classification objective sees it: head name, labels, metrics, best metric."""
    from roberta.tasks.classify import SentenceTask

    return SentenceTask(
        task.name, task.labels, lambda p, y: metrics(task, list(p), list(y)), task.metric, task.metrics
    )


def glue_sentences(name: str, directory: str | Path) -> Sentences:
    """Task `name`'s data in its GLUE `directory`, and the paper's recipe for it."""
    task = get_task(name)

    def read() -> LabelledSentences:
        return LabelledSentences(sentence_task(task), *read_task_dir(task, Path(directory)))

    return Sentences(read, functools.partial(read_split, task, labelled=False), task.lr, task.batch_size)
