"""Inference over files, for the `embed` and `predict` verbs: inputs streamed in chunks of lines.

Text files and TSV are read a chunk of lines at a time; .parquet and .arrow files a chunk of rows of
the named columns (`roberta.inputs.arrow`). Both go through the same loop, so the same texts give
the same output whichever file held them. Each chunk is encoded, sorted by length inside the hub,
run, and written in input order, so a file larger than memory goes through in bounded space.
Outputs are written under a temporary name and renamed into place only when complete. With `int8`,
the hub is quantized once the first chunk is encoded, after its first batch has run in fp32, so the
agreement line printed to stderr is measured on the input itself (`roberta.runtime.int8`'s
`quantize_for_*`, which every verb's `--int8` uses). `predict_test_file` writes a GLUE
leaderboard file from a test TSV.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Self

import numpy as np
from numpy.lib.format import open_memmap
from tqdm import tqdm

from roberta.errors import UserError
from roberta.hub import Roberta, TooLongError
from roberta.inputs.arrow import count_rows, is_records, record_batches
from roberta.io import atomic_write, make_parent, open_input, publish, temporary_path
from roberta.runtime.int8 import (  # noqa: F401  (roberta.infer's names)
    quantize_compared,
    quantize_for_embed,
    quantize_for_fill_mask,
    quantize_for_predict,
)

if TYPE_CHECKING:
    from roberta.tasks.glue import GlueTask

CHUNK_LINES = 8192

# A chunk as the verbs run it: (1-based number of its first line or row, texts, pair texts or None).
TextChunk = tuple[int, list[str], list[str] | None]


def count_lines(path: Path) -> int:
    with open_input(path) as f:
        return sum(1 for _ in f)


def read_chunks(path: Path, chunk_lines: int = CHUNK_LINES) -> Iterator[tuple[int, list[str]]]:
    """(1-based number of the chunk's first line, its lines without line endings)."""
    chunk: list[str] = []
    first = 1
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                chunk.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError:
                raise UserError(f"{path}:{number}: not valid UTF-8") from None
            if len(chunk) == chunk_lines:
                yield first, chunk
                first, chunk = number + 1, []
    if chunk:
        yield first, chunk


class _Progress:
    """A tqdm bar drawn only from `start()`, which the verbs call once the first chunk has been read
    and encoded: a refusal found there (a bad line, a column missing) prints alone. One found in a
    later chunk erases the bar (on a terminal) before the error line."""

    def __init__(self, total: int, unit: str, desc: str, enabled: bool):
        self.options = {"total": total, "unit": unit, "desc": desc, "disable": not enabled}
        self.bar: tqdm | None = None

    def start(self) -> None:
        if self.bar is None:
            self.bar = tqdm(**self.options)

    def update(self, done: int) -> None:
        self.bar.update(done)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind, *_) -> None:
        if self.bar is not None:
            self.bar.leave = kind is None
            self.bar.close()


def embed_file(
    roberta: Roberta,
    input: str | Path,
    out: str | Path,
    layer: int = -1,
    pool: str | None = None,
    truncate: bool = False,
    chunk_lines: int = CHUNK_LINES,
    progress: bool = True,
    int8: bool = False,
    columns: str | None = None,
) -> int:
    """One float32 vector per line of `input` into the .npy file `out`, row k for line k+1; for a
    .parquet or .arrow file, one per row, of the column named `columns` (default `text`).

    `int8`: quantize the hub (`Roberta.quantize`) and print the cosines of int8 and fp32 vectors
    on the input's first batch."""
    input, out = Path(input), Path(out)
    roberta.check_embed(layer, pool)  # before the input is read and the bar drawn
    total, chunks = _embed_texts(input, columns, chunk_lines)
    if total == 0:
        raise UserError(f"{input}: no {'rows' if is_records(input) else 'lines'} to embed")
    make_parent(out)
    tmp = temporary_path(out)
    try:
        # Sized by the counting pass, so rows are written in place and nothing is held in memory.
        vectors = open_memmap(
            tmp, mode="w+", dtype=np.float32, shape=(total, roberta.embed_width(layer, pool))
        )
        unit = "row" if is_records(input) else "line"
        with _Progress(total, unit, "embed", progress) as bar:
            for first, lines, _ in chunks:
                if first - 1 + len(lines) > total:
                    raise UserError(f"{input}: the file grew while it was read")
                ids = _encode(roberta, lines, None, input, first, truncate)
                if int8 and first == 1:
                    quantize_for_embed(roberta, ids, layer, pool)
                bar.start()
                vectors[first - 1 : first - 1 + len(lines)] = (
                    roberta.embed(ids, layer, pool).float().cpu().numpy()
                )
                bar.update(len(lines))
        vectors.flush()
        del vectors
        publish(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return total


def _embed_texts(path: Path, columns: str | None, chunk_lines: int) -> tuple[int, Iterator[TextChunk]]:
    """How many texts `embed` reads from `path`, and their chunks."""
    if is_records(path):
        names = column_names(columns, most=1)
        return count_rows(path, names, names), _record_chunks(path, names, chunk_lines)
    if columns is not None:
        raise UserError(
            f"--columns {columns!r}: names a column of a .parquet or .arrow file; {path} is read as "
            "one text per line"
        )
    return count_lines(path), ((first, lines, None) for first, lines in read_chunks(path, chunk_lines))


def _record_chunks(path: Path, names: Sequence[str], chunk_rows: int = CHUNK_LINES) -> Iterator[TextChunk]:
    """Chunks of `chunk_rows` rows of a .parquet or .arrow file: the text column `names[0]`, and
    `names[1]` as the pair's second text."""
    buffered: list[list[str]] = [[] for _ in names]
    first = 1
    # Unique names: `record_batches` selects each column once; `text,text` pairs a text with itself.
    for _, batch in record_batches(path, list(dict.fromkeys(names)), strings=names):
        # Sliced first, so an IPC batch of millions of rows is never turned into Python strings whole.
        for start in range(0, batch.num_rows, chunk_rows):
            piece = batch.slice(start, chunk_rows)
            for texts, name in zip(buffered, names):
                texts.extend(piece.column(name).to_pylist())
            if len(buffered[0]) >= chunk_rows:
                yield first, buffered[0][:chunk_rows], _pairs([t[:chunk_rows] for t in buffered])
                first += chunk_rows
                buffered = [texts[chunk_rows:] for texts in buffered]
    if buffered[0]:
        yield first, buffered[0], _pairs(buffered)


def _pairs(columns: list[list[str]]) -> list[str] | None:
    return columns[1] if len(columns) == 2 else None


def column_names(spec: str | None, most: int) -> list[str]:
    """--columns for a .parquet or .arrow file: up to `most` column names, comma-separated; `text`
    when not given. Names only: a column called `0` (pandas names unnamed columns so) is a name."""
    names = ["text"] if spec is None else [c.strip() for c in spec.split(",")]
    if not 1 <= len(names) <= most or "" in names:
        wanted = "one column name" if most == 1 else "one or two column names, comma-separated"
        raise UserError(f"--columns {spec!r}: give {wanted}")
    return names


def _encode(
    roberta: Roberta, texts: list[str], pairs: list[str] | None, path: Path, first: int, truncate: bool
):
    try:
        return roberta.encode_batch(texts, pairs, truncate=truncate)
    except TooLongError as e:
        # Rows are numbered as `roberta.inputs.arrow` numbers them, lines as compilers do.
        where = f"{path}: row {first + e.index}" if is_records(path) else f"{path}:{first + e.index}"
        raise UserError(f"{where}: {e}") from None


def parse_columns(spec: str) -> list[int | str]:
    """'0', '3,4' or 'sentence1,sentence2': one or two text columns, by 0-based index or header name."""
    columns: list[int | str] = [int(c) if c.strip().isdigit() else c.strip() for c in spec.split(",")]
    if not 1 <= len(columns) <= 2 or any(c == "" for c in columns):
        raise UserError(
            f"--columns {spec!r}: give one or two columns (0-based indices or header names), comma-separated"
        )
    return columns


def predict_file(
    roberta: Roberta,
    head: str,
    input: str | Path,
    out: str | Path,
    columns: str | None = None,
    header: bool = False,
    truncate: bool = False,
    chunk_lines: int = CHUNK_LINES,
    progress: bool = True,
    int8: bool = False,
) -> int:
    """Classify each row of the TSV `input` (text in one column, or a pair in two) with `head`.
    `columns` as `parse_columns` reads it, default column 0; for a .parquet or .arrow file, one or
    two column names (`column_names`), default `text`.

    `out` gets a header and one row per input row: the predicted label (its name if the head
    carries label names, else its index) and each class's probability, or for a one-output
    (regression) head its score. `int8`: quantize the hub (`Roberta.quantize`) and print how
    many top-1 labels int8 and fp32 share on the input's first batch.
    """
    input, out = Path(input), Path(out)
    labels = roberta.head(head, "classification").labels
    total, chunks = _predict_texts(input, columns, header, chunk_lines)
    if total <= 0:
        raise UserError(f"{input}: no rows to predict")
    make_parent(out)
    with atomic_write(out) as sink, _Progress(total, "row", "predict", progress) as bar:
        wrote_header = False
        for first, texts, pairs in chunks:
            ids = _encode(roberta, texts, pairs, input, first, truncate)
            if int8 and not wrote_header:
                quantize_for_predict(roberta, head, ids)
            bar.start()
            logits = roberta.predict(head, ids, return_logits=True).float().cpu()
            if not wrote_header:
                classes = logits.size(1)
                sink.write(
                    "score\n"
                    if classes == 1
                    else "\t".join(["label", *(f"p{c}" for c in range(classes))]) + "\n"
                )
                wrote_header = True
            sink.writelines(_prediction_row(row, labels) for row in logits)
            bar.update(len(texts))
    return total


def _predict_texts(
    path: Path, columns: str | None, header: bool, chunk_lines: int
) -> tuple[int, Iterator[TextChunk]]:
    """How many rows `predict` reads from `path`, and their chunks."""
    if is_records(path):
        if header:
            raise UserError(f"--header: {path} names its columns itself; pick them with --columns")
        names = column_names(columns, most=2)
        return count_rows(path, names, names), _record_chunks(path, names, chunk_lines)
    wanted = parse_columns("0" if columns is None else columns)
    named = any(isinstance(c, str) for c in wanted)
    return count_lines(path) - (header or named), _tsv_chunks(path, wanted, named or header, chunk_lines)


def _tsv_chunks(path: Path, wanted: list[int | str], header: bool, chunk_lines: int) -> Iterator[TextChunk]:
    """Chunks of the TSV's text column(s), after its header line if it has one."""
    indices: list[int] | None = None if header else list(wanted)
    for first, lines in read_chunks(path, chunk_lines):
        if indices is None:
            indices = _header_indices(lines[0].split("\t"), wanted, path)
            first, lines = first + 1, lines[1:]
            if not lines:
                continue
        fields = [_fields(line, indices, path, first + k) for k, line in enumerate(lines)]
        yield first, [f[0] for f in fields], [f[1] for f in fields] if len(indices) == 2 else None


def _header_indices(names: list[str], wanted: list[int | str], path: Path) -> list[int]:
    indices = []
    for c in wanted:
        if isinstance(c, int):
            indices.append(c)
        elif c in names:
            indices.append(names.index(c))
        else:
            raise UserError(f"{path}:1: no column named {c!r} in the header ({', '.join(names)})")
    return indices


def _fields(line: str, indices: list[int], path: Path, number: int) -> list[str]:
    cells = line.split("\t")
    if max(indices) >= len(cells):
        raise UserError(f"{path}:{number}: {len(cells)} column(s), but column {max(indices)} holds text")
    return [cells[i] for i in indices]


def _prediction_row(logits, labels: tuple[str, ...] = ()) -> str:
    """The predicted label (its name when the head has label names) and each class's probability."""
    if logits.numel() == 1:
        return f"{logits.item():.6g}\n"
    probs = logits.softmax(dim=-1)
    best = int(probs.argmax())
    return "\t".join([labels[best] if labels else str(best), *(f"{p:.6g}" for p in probs.tolist())]) + "\n"


def predict_test_file(
    roberta: Roberta, task: GlueTask, input: str | Path, out: str | Path, int8: bool = False
) -> int:
    """The GLUE leaderboard file for `input` (a test TSV) from the fine-tuned head named after the
    task (`roberta.load("RUN/best")`); inputs longer than the model are cut, as in training.
    `int8`: quantized first, as `roberta predict --int8` does (`quantize_for_predict`).

    The head must fit the task: its output count, and its label names where it carries them."""
    from roberta.tasks.glue import read_split, write_predictions

    head = roberta.head(task.name, "classification")
    outputs = head.out_proj.out_features
    if outputs != task.num_classes:
        wanted = "1 (a score)" if task.regression else f"{task.num_classes} ({', '.join(task.labels)})"
        raise UserError(f"head {task.name!r} has {outputs} output(s), but {task.name} needs {wanted}")
    if head.labels and tuple(head.labels) != task.labels:
        # A head trained on the task's data with `finetune classify` may order its labels otherwise:
        # its output k would be written as the wrong label name.
        raise UserError(
            f"head {task.name!r} has labels {', '.join(head.labels)}, but {task.name}'s are "
            f"{', '.join(task.labels)} in this order"
        )
    examples = read_split(task, input, labelled=False)
    pairs = [e.pair for e in examples] if task.pair_column else None
    tokens = roberta.tokenizer.encode_batch([e.text for e in examples], pairs, max_length=roberta.max_seq_len)
    if int8:
        quantize_for_predict(roberta, task.name, tokens)
    logits = roberta.predict(task.name, tokens, return_logits=True).float()
    predictions = logits.squeeze(-1).tolist() if task.regression else logits.argmax(-1).tolist()
    write_predictions(task, out, [e.index for e in examples], predictions)
    return len(examples)
