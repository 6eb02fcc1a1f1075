"""Rows of the tables tasks read (TSV, CSV, JSONL, Parquet, Arrow), with errors that name file and line.

TSV is split at every tab with no quote processing, as GLUE's own readers do
(`csv.reader(f, delimiter="\\t", quotechar=None)`): MRPC's strings open quotes they never
close, and a quote-aware reader would swallow the lines after them. CSV is the quoted dialect
spreadsheets write. Blank lines are not rows. A UTF-8 byte-order mark (MRPC has one) is dropped.
Parquet and Arrow columns are read by name (`roberta.inputs.arrow`), rows numbered from 1 as lines
are; their values keep their types, as JSONL's do.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from pathlib import Path

from roberta.errors import UserError
from roberta.inputs.arrow import RECORD_SUFFIXES, record_batches
from roberta.io import open_input

FORMATS = (".csv", ".tsv", ".jsonl", *RECORD_SUFFIXES)
# Formats whose values are typed (numbers, booleans), not strings as written.
TYPED = (".jsonl", *RECORD_SUFFIXES)


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without its line ending) for each line of a UTF-8 file."""
    with open_input(path) as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{path}:{number}: not valid UTF-8 (byte {e.start} of the line)") from None
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield number, line.removesuffix("\n").removesuffix("\r")


def read_tsv(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) for each non-blank line, split at every tab."""
    for number, line in read_lines(path):
        if line:
            yield number, line.split("\t")


def read_csv(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(number of the row's first line, fields) for each non-blank CSV row; quoted fields may
    span lines."""
    reader = csv.reader(line + "\n" for _, line in read_lines(path))
    first = 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise UserError(f"{path}:{reader.line_num}: invalid CSV ({e})") from None
        if fields:
            yield first, fields
        first = reader.line_num + 1


def read_records(
    path: str | Path, columns: list[str], strings: list[str] = ()
) -> Iterator[tuple[int, dict[str, object]]]:
    """(line number, {column: value}) for each row of a .csv, .tsv, .jsonl, .parquet or .arrow file,
    keeping only `columns`. A CSV/TSV file's first row names its columns; every row must have as
    many fields as it. JSONL and Arrow values keep their types; an Arrow column in `strings` must
    hold text."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise UserError(f"{path}: unknown format {path.suffix!r} (expected one of {', '.join(FORMATS)})")
    if suffix == ".jsonl":
        yield from _jsonl_records(path, columns)
    elif suffix in RECORD_SUFFIXES:
        for row, batch in record_batches(path, columns, strings):
            yield from enumerate(batch.to_pylist(), start=row + 1)
    else:
        yield from table_records(path, read_tsv(path) if suffix == ".tsv" else read_csv(path), columns)


def table_records(
    path: Path, rows: Iterator[tuple[int, list[str]]], columns: list[str]
) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, {column: field}) for the rows after the header that `rows` starts with (a
    line number of 0: a header the file does not have, supplied by the caller)."""
    header_line, header = next(rows, (0, None))
    if header is None:
        raise UserError(f"{path}: empty file")
    for name in columns:
        if name not in header:
            raise UserError(
                f"{path}:{header_line}: no column {name!r} in the header (columns: {', '.join(header)})"
            )
    indices = [header.index(name) for name in columns]
    for number, fields in rows:
        if len(fields) != len(header):
            raise UserError(f"{path}:{number}: {len(fields)} fields, expected {len(header)} as in the header")
        yield number, {name: fields[i] for name, i in zip(columns, indices)}


def json_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSONL file; any other line refused."""
    for number, line in read_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{number}: invalid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}:{number}: expected a JSON object")
        yield number, record


def _jsonl_records(path: Path, columns: list[str]) -> Iterator[tuple[int, dict[str, object]]]:
    for number, record in json_objects(path):
        for name in columns:
            if name not in record:
                raise UserError(f"{path}:{number}: no field {name!r}")
        yield number, {name: record[name] for name in columns}


def parse_number(value: object, path: Path, line: int, column: str) -> float:
    """A finite number as read from a file's field (a string, or a JSON value; not a boolean)."""
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{path}:{line}: {column} {json.dumps(value)} is not a number") from None
    if not math.isfinite(number):
        raise UserError(f"{path}:{line}: {column} {json.dumps(value)} is not a finite number")
    return number
