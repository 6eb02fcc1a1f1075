"""Reading raw text, as `prepare` and `train-tokenizer` both do: files cut into chunks of whole
documents, and chunks into sentences.

Input files are plain UTF-8 text, optionally gzip-compressed (`.gz`), JSON lines (`.jsonl`,
`.jsonl.gz`) with one document per record in a text field, or records of a text column in Parquet
and Arrow files and `datasets.save_to_disk` folders (`roberta.inputs.arrow`). In text files a line is
a sentence and a blank (or whitespace-only) line ends a document; the end of a file ends a document
too; with `line_is_document` every non-blank line is a document of one sentence. In a JSON or
Arrow record, the lines of the text field are the document's sentences, read by one function
whatever the container, so a corpus gives the same sentences as JSONL or as Parquet.

Chunks are cut at document boundaries so that workers can encode them independently and the
output does not depend on how many workers there are. Where a chunk starts is fully described by
a `Position`, so a rerun can start reading at a recorded position and cut the same chunks.
A document longer than `MAX_CHUNK_FACTOR` chunks is cut at a line boundary; the next chunk
then carries `continues=True` so its first sentences stay in that document. A chunk of records
holds their texts, whole records of about `chunk_bytes` of text; its position counts rows.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from roberta.errors import UserError
from roberta.inputs.arrow import (
    RECORD_SUFFIXES,
    check_schema,
    dataset_files,
    is_records,
    record_batches,
    text_bytes,
)

# A chunk grows past chunk_bytes only to reach a document boundary, up to this many chunk sizes.
MAX_CHUNK_FACTOR = 4
TEXT_SUFFIXES = (".txt", ".text", ".jsonl", ".gz", *RECORD_SUFFIXES)


@dataclass(frozen=True)
class Position:
    """Where reading starts: file index, byte offset (uncompressed), 0-based line number; in a
    file of records, offset and line are both the 0-based row number."""

    file: int = 0
    offset: int = 0
    line: int = 0
    continues: bool = False  # the first line continues the previous chunk's document


@dataclass(frozen=True)
class Chunk:
    index: int
    path: str
    start: Position
    end: Position  # the position of the next chunk
    data: bytes  # b"" for records
    texts: list[str] | None = None  # records: one document each
    text_bytes: int = 0  # records: UTF-8 bytes of `texts`

    @property
    def nbytes(self) -> int:
        """Input bytes the chunk stands for (the progress bar's and the shards' measure)."""
        return len(self.data) if self.texts is None else self.text_bytes


@dataclass(frozen=True)
class InputOptions:
    line_is_document: bool = False
    text_field: str = "text"
    errors: str = "strict"  # "strict": invalid UTF-8 is an error; "replace": U+FFFD


def is_jsonl(path: str | Path) -> bool:
    name = str(path)
    return name.endswith(".jsonl") or name.endswith(".jsonl.gz")


def input_size(path: Path) -> int | None:
    """The bytes a file's chunks add up to, where known without reading it (not compressed text,
    not records)."""
    return None if path.name.endswith(".gz") or is_records(path) else path.stat().st_size


def expand_inputs(inputs: list[str | Path]) -> list[Path]:
    """Files as given, a `datasets.save_to_disk` folder as its data files, and other directories
    expanded to their text files (recursively, sorted)."""
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        dataset = dataset_files(path) if path.is_dir() else None
        if dataset is not None:
            files.extend(dataset)
        elif path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and p.name.endswith(TEXT_SUFFIXES) and not p.name.startswith(".")
            )
            if not found:
                raise UserError(f"{path}: directory holds no text files (*{', *'.join(TEXT_SUFFIXES)})")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise UserError(f"{path}: input file not found")
    if not files:
        raise UserError("no input files given")
    return files


def _open(path: Path) -> io.BufferedIOBase:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb", buffering=1 << 20)


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Read errors, a broken .gz above all, as one UserError naming the file.

    Wraps a generator's body: an error in the consumer is not thrown in here, it closes the
    generator, so only reading errors arrive.
    """
    try:
        yield
    except EOFError:
        raise UserError(f"{path}: truncated gzip file (the compressed data ends early)") from None
    except gzip.BadGzipFile as e:
        raise UserError(f"{path}: not valid gzip ({e})") from None
    except zlib.error as e:
        raise UserError(f"{path}: corrupt gzip data ({e})") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None


def _is_blank(line: bytes) -> bool:
    return not line.strip()


def iter_chunks(
    files: list[Path],
    chunk_bytes: int,
    options: InputOptions,
    start: Position = Position(),
    first_index: int = 0,
) -> Iterator[Chunk]:
    """Chunks of about chunk_bytes of whole documents, from `start` to the end of the last file."""
    index = first_index
    position = start
    for file_index in range(start.file, len(files)):
        path = files[file_index]
        if file_index != position.file:
            position = Position(file=file_index)
        if is_records(path):
            for chunk in _record_chunks(path, position, chunk_bytes, options.text_field, index):
                yield chunk
                index, position = chunk.index + 1, chunk.end
            continue
        one_line_documents = options.line_is_document or is_jsonl(path)
        with _reading(path), _open(path) as f:
            if position.offset:
                f.seek(position.offset)
            while True:
                data, continues = _read_chunk(f, chunk_bytes, one_line_documents)
                if not data:
                    break
                end = Position(
                    file=file_index,
                    offset=position.offset + len(data),
                    line=position.line + data.count(b"\n"),
                    continues=continues,
                )
                yield Chunk(index=index, path=str(path), start=position, end=end, data=data)
                index += 1
                position = end


def _record_chunks(path: Path, start: Position, chunk_bytes: int, field: str, index: int) -> Iterator[Chunk]:
    """Chunks of whole records, about chunk_bytes of text each, from row `start.offset` on."""
    texts: list[str] = []
    size, first = 0, start.offset

    def chunk(end_row: int) -> Chunk:
        at = Position(file=start.file, offset=first, line=first)
        end = Position(file=start.file, offset=end_row, line=end_row)
        return Chunk(index, str(path), at, end, b"", texts, size)

    for row, batch in record_batches(path, [field], strings=[field], first_row=start.offset):
        column = batch.column(0)
        for number, (text, n) in enumerate(zip(column.to_pylist(), text_bytes(column)), start=row + 1):
            texts.append(text)
            size += n
            if size >= chunk_bytes:
                yield chunk(number)
                texts, size, first, index = [], 0, number, index + 1
    if texts:
        yield chunk(first + len(texts))


def _read_chunk(f: io.BufferedIOBase, chunk_bytes: int, one_line_documents: bool) -> tuple[bytes, bool]:
    """Read chunk_bytes, then on to the next document boundary. Returns (data, next continues)."""
    head = f.read(chunk_bytes)
    if not head:
        return b"", False
    parts = [head]
    if not head.endswith(b"\n"):
        parts.append(f.readline())
    data = b"".join(parts)
    if one_line_documents or _is_blank(data[data.rfind(b"\n", 0, len(data) - 1) + 1 :]):
        return data, False
    parts, size = [data], len(data)
    while True:
        line = f.readline()
        if not line:
            return b"".join(parts), False
        parts.append(line)
        size += len(line)
        if _is_blank(line):
            return b"".join(parts), False
        if size >= MAX_CHUNK_FACTOR * chunk_bytes:
            return b"".join(parts), True


def decode_chunk(chunk: Chunk, errors: str) -> str:
    try:
        text = chunk.data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
        offset = chunk.start.offset + e.start
        line = chunk.start.line + chunk.data.count(b"\n", 0, e.start) + 1
        where = "uncompressed byte offset" if chunk.path.endswith(".gz") else "byte offset"
        raise UserError(
            f"{chunk.path}: line {line}: invalid UTF-8 at {where} {offset} ({e.reason}); "
            "pass --errors replace to substitute U+FFFD"
        ) from None
    if chunk.start.offset == 0 and text.startswith("\ufeff"):
        text = text[1:]  # a UTF-8 byte order mark is not text
    return text


def chunk_sentences(chunk: Chunk, options: InputOptions) -> tuple[list[str], list[bool]]:
    """The chunk's sentences, and for each whether it begins a new document."""
    sentences: list[str] = []
    starts: list[bool] = []
    if chunk.texts is not None:
        for document in chunk.texts:
            _add_document(document, sentences, starts)
        return sentences, starts
    text = decode_chunk(chunk, options.errors)
    if is_jsonl(chunk.path):
        for number, line in enumerate(text.split("\n"), start=chunk.start.line + 1):
            if line.strip():
                _add_document(_jsonl_text(line, chunk.path, number, options), sentences, starts)
        return sentences, starts
    new_document = not chunk.start.continues
    for line in text.split("\n"):
        sentence = line.strip()
        if sentence:
            sentences.append(sentence)
            starts.append(new_document or options.line_is_document)
            new_document = False
        else:
            new_document = True
    return sentences, starts


def _add_document(document: str, sentences: list[str], starts: list[bool]) -> None:
    """A record's text: its non-blank lines, stripped, are sentences of one new document."""
    new_document = True
    for raw in document.split("\n"):
        sentence = raw.strip()
        if sentence:
            sentences.append(sentence)
            starts.append(new_document)
            new_document = False


def _jsonl_text(line: str, path: str, number: int, options: InputOptions) -> str:
    field = options.text_field
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: line {number}: not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(record, dict) or field not in record:
        raise UserError(f"{path}: line {number}: record has no field {field!r} (set --text-field)")
    value = record[field]
    if not isinstance(value, str):
        raise UserError(
            f"{path}: line {number}: field {field!r} is {type(value).__name__}, expected a string"
        )
    return value


class TrainingText:
    """The sentences a tokenizer trainer reads, in batches: text files read exactly as `roberta
    prepare` reads them, under a progress bar. A corpus the trainer could not use (a record file
    without its text column, no text at all) is refused before the bar is drawn: the first
    sentence is looked for first, so an empty corpus is read twice and a full one barely."""

    def __init__(self, files: list[str | Path], options: InputOptions, progress: bool):
        from tqdm import tqdm

        self.paths = expand_inputs(list(files))
        self.options = options
        for path in filter(is_records, self.paths):
            check_schema(path, [options.text_field], [options.text_field])
        if not any(chunk_sentences(c, options)[0] for c in iter_chunks(self.paths, 1 << 16, options)):
            shown = ", ".join(map(str, self.paths[:3])) + (" ..." if len(self.paths) > 3 else "")
            raise UserError(f"{shown}: empty corpus (no non-blank lines)")
        sizes = [input_size(p) for p in self.paths]
        self.bar = tqdm(
            total=None if None in sizes else sum(sizes),
            unit="B",
            unit_scale=True,
            desc="reading text",
            disable=not progress,
        )

    def batches(self) -> Iterator[list[str]]:
        """Each chunk's sentences (chunks of about 1 MB of whole documents)."""
        for chunk in iter_chunks(self.paths, 1 << 20, self.options):
            yield chunk_sentences(chunk, self.options)[0]
            self.bar.update(chunk.nbytes)

    def close(self) -> None:
        self.bar.close()
