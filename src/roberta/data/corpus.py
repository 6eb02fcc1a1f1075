"""The binarized corpus directory: its file layout, and reading it back as memmap views.

A prepared corpus is a directory written by `roberta prepare` (see `roberta.data.prepare`):

    meta.json                   format, tokenizer (fingerprint, vocab size, special ids), dtype,
                                options, input files and per-split, per-shard counts
    word_starts.npy             bool[vocab_size]: the token begins a word (for whole-word masking)
    tokenizer/                  the tokenizer's files, as loaded: `roberta pretrain` saves them into
                                every checkpoint, so the corpus alone makes usable checkpoints
    {split}-{k:05d}.bin         the tokens of shard k, raw uint16 (vocab <= 65536) or uint32,
                                sentences back to back, no special tokens
    {split}-{k:05d}.sentences.npy   int64[n_sentences + 1]: token offsets of sentence starts in the shard
    {split}-{k:05d}.documents.npy   int64[n_documents + 1]: sentence offsets of document starts

`split` is `train` or `valid`; validation documents are held out whole. Readers see the shards of a
split as one stream: `Split.sentence_offsets` and `Split.document_offsets` are global, and
`Split.tokens(start, end)` reads across shard boundaries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from roberta.errors import UserError

FORMAT = "roberta-corpus"
FORMAT_VERSION = 1
SPLITS = ("train", "valid")
META = "meta.json"
WORD_STARTS = "word_starts.npy"


def shard_stem(split: str, shard: int) -> str:
    return f"{split}-{shard:05d}"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


@dataclass(frozen=True)
class Specials:
    """Special token ids the packers and the masker need, as recorded at preparation."""

    bos_id: int
    pad_id: int
    eos_id: int
    unk_id: int
    mask_id: int
    vocab_size: int

    @property
    def ids(self) -> tuple[int, ...]:
        return (self.bos_id, self.pad_id, self.eos_id, self.unk_id, self.mask_id)


class Split:
    """One split of a corpus: its shards read as a single stream of sentences and documents."""

    def __init__(self, directory: Path, name: str, shard_counts: list[dict], dtype: np.dtype):
        self.directory = directory
        self.name = name
        self.dtype = dtype
        self._shard_counts = shard_counts
        self._shards = [k for k, c in enumerate(shard_counts) if c["sentences"] > 0]
        tokens = [shard_counts[k]["tokens"] for k in self._shards]
        # Token offset of each non-empty shard in the split's stream (+ the total at the end).
        self._shard_starts = np.concatenate([[0], np.cumsum(tokens, dtype=np.int64)])
        self._token_arrays: list[np.ndarray] | None = None
        self.sentence_offsets, self.document_offsets = self._load_offsets()

    def _load_offsets(self) -> tuple[np.ndarray, np.ndarray]:
        sentence_parts, document_parts = [], []
        sentence_base = 0
        for i, k in enumerate(self._shards):
            sent, docs = self._checked_shard(k, self._shard_counts[k])
            if len(self._shards) == 1:
                return sent, docs  # the common case: views straight onto the files, no copy
            sentence_parts.append(sent[:-1] + self._shard_starts[i])
            document_parts.append(docs[:-1] + sentence_base)
            sentence_base += len(sent) - 1
        sentence_parts.append(np.array([self._shard_starts[-1]], dtype=np.int64))
        document_parts.append(np.array([sentence_base], dtype=np.int64))
        return np.concatenate(sentence_parts), np.concatenate(document_parts)

    def _checked_shard(self, k: int, counts: dict) -> tuple[np.ndarray, np.ndarray]:
        """Shard k's offset arrays, after checking its files hold what meta.json says.

        A `.bin` cut short (a copy interrupted, a full disk) would otherwise read as a shorter
        stream, or fail deep inside training; offsets past its end are refused here, on open.
        """
        stem = self.directory / shard_stem(self.name, k)
        bin_path = Path(f"{stem}.bin")
        expected = counts["tokens"] * self.dtype.itemsize
        size = bin_path.stat().st_size if bin_path.is_file() else None
        if size != expected:
            found = "is missing" if size is None else f"has {size} bytes"
            raise UserError(
                f"{bin_path}: {found}, but {META} says {counts['tokens']} tokens ({expected} bytes): "
                "the corpus is damaged (prepare it again)"
            )
        arrays = []
        for name, length, last in (
            ("sentences", counts["sentences"], counts["tokens"]),
            ("documents", counts["documents"], counts["sentences"]),
        ):
            path = Path(f"{stem}.{name}.npy")
            try:
                array = np.load(path, mmap_mode="r")
            except (OSError, ValueError) as e:
                raise UserError(
                    f"{path}: unreadable offsets ({e}): the corpus is damaged (prepare it again)"
                ) from None
            if array.shape != (length + 1,) or array[-1] != last:
                raise UserError(
                    f"{path}: offsets of shape {list(array.shape)} do not end at {last} as {META}'s "
                    f"counts say ({length + 1} offsets): the corpus is damaged (prepare it again)"
                )
            arrays.append(array)
        return arrays[0], arrays[1]

    @property
    def num_tokens(self) -> int:
        return int(self._shard_starts[-1])

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_offsets) - 1

    @property
    def num_documents(self) -> int:
        return len(self.document_offsets) - 1

    @property
    def document_token_offsets(self) -> np.ndarray:
        """int64[n_documents + 1]: token offset of each document start (and the end)."""
        return np.asarray(self.sentence_offsets[self.document_offsets])

    def _arrays(self) -> list[np.ndarray]:
        # Opened on first use so that a Split pickled into a DataLoader worker carries no arrays.
        if self._token_arrays is None:
            self._token_arrays = [
                np.memmap(self.directory / f"{shard_stem(self.name, k)}.bin", dtype=self.dtype, mode="r")
                for k in self._shards
            ]
        return self._token_arrays

    def tokens(self, start: int, end: int) -> np.ndarray:
        """Tokens [start, end) of the split's stream (a view when inside one shard)."""
        arrays = self._arrays()
        first = int(np.searchsorted(self._shard_starts, start, side="right")) - 1
        parts = []
        while start < end:
            base = int(self._shard_starts[first])
            stop = min(end, int(self._shard_starts[first + 1]))
            parts.append(arrays[first][start - base : stop - base])
            start, first = stop, first + 1
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=self.dtype)

    def most_frequent_token(self, limit: int = 2_000_000) -> int:
        """The commonest id in the first `limit` tokens: what a model that learned nothing predicts."""
        sample = self.tokens(0, min(self.num_tokens, limit))
        return int(np.bincount(np.asarray(sample, dtype=np.int64)).argmax())

    def sentence(self, i: int) -> np.ndarray:
        return self.tokens(int(self.sentence_offsets[i]), int(self.sentence_offsets[i + 1]))

    def document(self, i: int) -> list[np.ndarray]:
        """The sentences of document i."""
        first, last = int(self.document_offsets[i]), int(self.document_offsets[i + 1])
        return [self.sentence(s) for s in range(first, last)]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_token_arrays"] = None
        return state


class Corpus:
    """A prepared corpus directory: `Corpus(path).train`, `.valid`, `.specials`, `.meta`."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.meta = read_meta(self.directory)
        tok = self.meta["tokenizer"]
        self.specials = Specials(
            bos_id=tok["bos_id"],
            pad_id=tok["pad_id"],
            eos_id=tok["eos_id"],
            unk_id=tok["unk_id"],
            mask_id=tok["mask_id"],
            vocab_size=tok["vocab_size"],
        )
        self.dtype = np.dtype(self.meta["dtype"])
        self._splits: dict[str, Split] = {}

    def split(self, name: str) -> Split:
        if name not in SPLITS:
            raise UserError(f"{self.directory}: unknown split {name!r}; choose one of {', '.join(SPLITS)}")
        if name not in self._splits:
            shards = self.meta["splits"][name]["shards"]
            self._splits[name] = Split(self.directory, name, shards, self.dtype)
        return self._splits[name]

    @property
    def train(self) -> Split:
        return self.split("train")

    @property
    def valid(self) -> Split:
        return self.split("valid")

    @property
    def fingerprint(self) -> str:
        return self.meta["tokenizer"]["fingerprint"]

    def word_starts(self) -> np.ndarray:
        """bool[vocab_size]: token id begins a word (byte-level BPE: leading-space marker)."""
        return np.load(self.directory / WORD_STARTS)


def read_meta(directory: Path) -> dict:
    path = directory / META
    if not directory.is_dir():
        raise UserError(f"{directory}: corpus directory not found (create it with `roberta prepare`)")
    if not path.is_file():
        raise UserError(f"{path}: not found; {directory} is not a prepared corpus (run `roberta prepare`)")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    if meta.get("format") != FORMAT:
        raise UserError(f"{path}: field 'format' is {meta.get('format')!r}, expected {FORMAT!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise UserError(
            f"{path}: field 'format_version' is {meta.get('format_version')!r}; this version reads "
            f"{FORMAT_VERSION} (prepare the corpus again)"
        )
    return meta


def check_tokenizer(corpus_dir: str | Path, tokenizer, what: str = "the model") -> None:
    """Raise a UserError unless the corpus was prepared with this tokenizer (same fingerprint);
    `what` names whose tokenizer it is in the message."""
    meta = read_meta(Path(corpus_dir))
    prepared = meta["tokenizer"]["fingerprint"]
    expected = tokenizer.fingerprint()
    if prepared != expected:
        raise UserError(
            f"{Path(corpus_dir) / META}: field 'tokenizer.fingerprint' is {prepared}, but {what}'s "
            f"tokenizer is {expected}: the corpus was prepared with another tokenizer (run `roberta prepare` "
            "again with the model's tokenizer)"
        )
