"""Sentence(-pair) classification and regression on the user's own files.

Examples are read from CSV, TSV or JSONL with columns named by header or key; string labels are
kept as strings, and the label set is the sorted distinct labels of the training file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from roberta.errors import UserError
from roberta.tasks.rows import read_records


@dataclass(frozen=True)
class Example:
    text: str
    pair: str | None
    label: str | float | None  # None for unlabelled (test) rows
    index: str  # the row's id in prediction files
    line: int = 0  # 1-based line in the file it was read from, for errors naming it


def read_labelled_file(path: str | Path, text_column: str, pair_column: str | None = None,
                       label_column: str | None = None, regression: bool = False) -> list[Example]:
    """Examples from a .csv, .tsv or .jsonl file; indices are the 0-based row numbers."""
    path = Path(path)
    columns = [c for c in (text_column, pair_column, label_column) if c is not None]
    examples = []
    for number, record in read_records(path, columns):
        text = _text(record, text_column, path, number)
        pair = None if pair_column is None else _text(record, pair_column, path, number)
        label = None if label_column is None else parse_label(record[label_column], regression, path, number, label_column)
        examples.append(Example(text, pair, label, str(len(examples)), number))
    if not examples:
        raise UserError(f"{path}: no examples")
    return examples


def _text(record: dict, column: str, path: Path, line: int) -> str:
    value = record[column]
    if not isinstance(value, str):
        raise UserError(f"{path}:{line}: field {column!r} is {json.dumps(value)}, not a string")
    return value


def parse_label(value: object, regression: bool, path: Path, line: int, column: str) -> str | float:
    """A label as read from a file (a string, or a JSON value): a string for classification,
    a finite float for regression."""
    if regression:
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
        except (TypeError, ValueError):
            raise UserError(f"{path}:{line}: {column} {json.dumps(value)} is not a number") from None
        if not math.isfinite(number):
            raise UserError(f"{path}:{line}: {column} {json.dumps(value)} is not a finite number")
        return number
    label = value if isinstance(value, str) else json.dumps(value)
    if not label.strip():
        raise UserError(f"{path}:{line}: empty {column}")
    return label


def label_set(examples: Sequence[Example], path: str | Path) -> tuple[str, ...]:
    """The distinct labels of a training file, sorted: numerically when they all read as
    numbers (so "2" comes before "10"), else as strings."""
    labels = {e.label for e in examples}
    if not examples or None in labels:
        raise UserError(f"{path}: no labels to learn from")
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
        raise UserError(f"{path}:{bad.line}: label {bad.label!r} is not one of the training labels ({known})") from None
