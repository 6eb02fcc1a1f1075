"""Pairs of texts, scored or not, as the STS benchmarks and sentence-embedding training read them:
a table's columns named once (`Columns`), every row read and checked (`read_pairs`).

    read_pairs("STS-B/dev.tsv", Columns("sentence1", "sentence2", "score"))  # [Pair(...), ...]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from roberta.errors import UserError
from roberta.inputs.rows import parse_number, read_records


@dataclass(frozen=True)
class Columns:
    """The columns of a table of pairs: the two texts, and optionally a score and a hard negative."""

    text: str = "sentence1"
    pair: str = "sentence2"
    score: str | None = None
    negative: str | None = None

    def names(self) -> list[str]:
        return [c for c in (self.text, self.pair, self.score, self.negative) if c is not None]

    @classmethod
    def parse(cls, value: str, option: str) -> Columns:
        """Scored pairs' columns from "A,B,SCORE" (an option's value, named in its error)."""
        names = [c.strip() for c in value.split(",")]
        if len(names) != 3 or not all(names):
            raise UserError(f"{option} {value!r}: give three column names, A,B,SCORE")
        return cls(*names)


@dataclass(frozen=True)
class Pair:
    text: str
    pair: str
    score: float | None
    negative: str | None


def read_pairs(path: str | Path, columns: Columns) -> list[Pair]:
    """Every row of a .csv, .tsv, .jsonl, .parquet or .arrow table of pairs, checked: texts must be
    strings, a score a finite number; a file without rows is refused."""
    path = Path(path)
    texts = [c for c in (columns.text, columns.pair, columns.negative) if c is not None]
    pairs = []
    for line, record in read_records(path, columns.names(), strings=texts):
        for column in texts:
            if not isinstance(record[column], str):
                raise UserError(
                    f"{path}:{line}: field {column!r} is {json.dumps(record[column])}, not a string"
                )
        score = None
        if columns.score is not None:
            score = parse_number(record[columns.score], path, line, columns.score)
        negative = record[columns.negative] if columns.negative is not None else None
        pairs.append(Pair(record[columns.text], record[columns.pair], score, negative))
    if not pairs:
        raise UserError(f"{path}: no pairs")
    return pairs
