"""Records of Arrow and Parquet files, read a few columns and a record batch at a time.

`.parquet` files, Arrow IPC files (`.arrow`, the stream format `datasets` writes or the random-access
file format) and folders written by `datasets.save_to_disk` (their data files in the order
`state.json` lists them). Only the columns asked for are decoded, a bounded number of rows at a
time and memory-mapped where the format allows, so memory stays flat whatever the file's size.
Rows are numbered from 1 in messages, as lines are. A missing column, a column of the wrong type, a
null where text is needed and a file pyarrow cannot read (a corrupt Parquet footer, a truncated
stream) are one UserError naming the file and the column.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from roberta.errors import UserError

RECORD_SUFFIXES = (".parquet", ".arrow")
# Parquet rows decoded at once: a bounded batch even where a row group holds millions of rows.
BATCH_ROWS = 256
IPC_FILE_MAGIC = b"ARROW1"  # the random-access format; the stream format starts otherwise


def is_records(path: str | Path) -> bool:
    return Path(path).suffix.lower() in RECORD_SUFFIXES


def dataset_files(directory: Path) -> list[Path] | None:
    """The data files of a `datasets.save_to_disk` folder, in its order; None for another folder."""
    if (directory / "dataset_dict.json").is_file():
        splits = _read_json(directory / "dataset_dict.json").get("splits", [])
        raise UserError(
            f"{directory}: a DatasetDict folder (splits {', '.join(map(str, splits))}): "
            f"give one split's folder, e.g. {directory / str(splits[0] if splits else 'train')}"
        )
    state = directory / "state.json"
    if not (
        state.is_file() and (directory / "dataset_info.json").is_file()
    ):  # the two files it always writes
        return None
    listed = _read_json(state).get("_data_files")
    if not isinstance(listed, list) or not all(isinstance(f, dict) and "filename" in f for f in listed):
        raise UserError(f"{state}: field '_data_files' must be a list of {{\"filename\": ...}} objects")
    if not listed:
        raise UserError(f"{state}: field '_data_files' lists no data files: {directory} holds no records")
    files = [directory / str(f["filename"]) for f in listed]
    for path in files:
        if not path.is_file():
            raise UserError(f"{state}: lists {path.name}, which is not in {directory}")
    return files


def _read_json(path: Path) -> dict:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: cannot read as JSON ({e})") from None
    if not isinstance(found, dict):
        raise UserError(f"{path}: expected a JSON object")
    return found


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """pyarrow's errors (a damaged file, a truncated stream) as one line naming the file."""
    try:
        yield
    except (pa.ArrowException, OSError) as e:
        kind = "Parquet" if path.suffix.lower() == ".parquet" else "Arrow IPC"
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path}: not a readable {kind} file ({reason})") from None


def record_batches(
    path: str | Path, columns: Sequence[str], strings: Sequence[str] = (), first_row: int = 0
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(0-based number of its first row, a batch of `columns`) for the rows from `first_row` on.
    Each of `strings` must be a column of text, without nulls."""
    path = Path(path)
    with _reading(path):
        if path.suffix.lower() == ".parquet":
            parquet = pq.ParquetFile(path, memory_map=True)
            _check_columns(path, parquet.schema_arrow, columns, strings)
            batches = _parquet_batches(parquet, columns, first_row)
        else:
            batches = _ipc_batches(path, columns, strings, first_row)
        for row, batch in batches:
            for name in strings:
                _refuse_nulls(path, batch.column(name), row, name)
            yield row, batch


def count_rows(path: str | Path, columns: Sequence[str], strings: Sequence[str] = ()) -> int:
    """The rows of a .parquet or .arrow file, its `columns` checked as `record_batches` checks them.
    A Parquet file's count is in its footer; an IPC file's batches are memory-mapped, so counting
    them reads their headers, not their text."""
    path = Path(path)
    with _reading(path):
        if path.suffix.lower() == ".parquet":
            parquet = pq.ParquetFile(path, memory_map=True)
            _check_columns(path, parquet.schema_arrow, columns, strings)
            return parquet.metadata.num_rows
        return sum(batch.num_rows for _, batch in _ipc_batches(path, columns, strings, 0))


def _parquet_batches(
    parquet: pq.ParquetFile, columns: Sequence[str], first_row: int
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Batches from the row group holding `first_row`: the groups before it are not decoded."""
    row, group = 0, 0
    while group < parquet.num_row_groups and row + parquet.metadata.row_group(group).num_rows <= first_row:
        row += parquet.metadata.row_group(group).num_rows
        group += 1
    groups = list(range(group, parquet.num_row_groups))
    if not groups:
        return
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, row_groups=groups, columns=list(columns)):
        yield from _from_row(row, batch, first_row)
        row += batch.num_rows


def check_schema(path: str | Path, columns: Sequence[str], strings: Sequence[str] = ()) -> None:
    """`columns` present and `strings` columns of text, from the file's schema alone: a command
    refuses a file of the wrong shape before it starts, rather than after a progress bar."""
    path = Path(path)
    with _reading(path):
        if path.suffix.lower() == ".parquet":
            schema = pq.read_schema(path, memory_map=True)
        else:
            schema = _ipc_reader(path).schema
        _check_columns(path, schema, columns, strings)


def _ipc_reader(path: Path) -> pa.ipc.RecordBatchFileReader | pa.ipc.RecordBatchStreamReader:
    """An Arrow IPC file or stream, memory-mapped."""
    source = pa.memory_map(str(path))
    is_file = source.read(len(IPC_FILE_MAGIC)) == IPC_FILE_MAGIC
    source.seek(0)
    return pa.ipc.open_file(source) if is_file else pa.ipc.open_stream(source)


def _ipc_batches(
    path: Path, columns: Sequence[str], strings: Sequence[str], first_row: int
) -> Iterator[tuple[int, pa.RecordBatch]]:
    reader = _ipc_reader(path)
    is_file = isinstance(reader, pa.ipc.RecordBatchFileReader)
    _check_columns(path, reader.schema, columns, strings)
    batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else iter(reader)
    row = 0
    # Batches before `first_row` are memory-mapped, not copied: skipping them reads their headers.
    for batch in batches:
        yield from _from_row(row, batch.select(list(columns)), first_row)
        row += batch.num_rows


def _from_row(row: int, batch: pa.RecordBatch, first_row: int) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The part of a batch (whose first row is `row`) from `first_row` on, if any."""
    if row + batch.num_rows <= first_row:
        return
    skip = max(0, first_row - row)
    yield row + skip, batch.slice(skip)


def _check_columns(path: Path, schema: pa.Schema, columns: Sequence[str], strings: Sequence[str]) -> None:
    for name in columns:
        if name not in schema.names:
            raise UserError(f"{path}: no column {name!r} (columns: {', '.join(schema.names)})")
    for name in strings:
        kind = schema.field(name).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
            raise UserError(f"{path}: column {name!r} holds {kind}, expected strings")


def _refuse_nulls(path: Path, column: pa.Array, row: int, name: str) -> None:
    if column.null_count:
        first = pc.index(pc.is_null(column), True).as_py()
        raise UserError(f"{path}: row {row + first + 1}: column {name!r} is null, expected a string")


def text_bytes(column: pa.Array) -> list[int]:
    """UTF-8 bytes of each string of a column, without decoding them."""
    return pc.binary_length(column).to_pylist()
