"""Pre-split words as a model reads them, labels aligned to the sub-tokens, and the overlapping
windows a sentence longer than the model's positions is read in.

Words are encoded the way each vocabulary needs. Byte-level BPE: every word but the first with a
space before it, so a sentence's ids are those of its words joined by spaces, as `tag(text)` and
fairseq read running text (HF's `is_split_into_words`, with `add_prefix_space=True`, puts a space
before the first word too; the tests hold every other word to HF's ids). WordPiece: each word's
word pieces ("##" continuing), as HF's `is_split_into_words` gives them. A word that comes out as no
token at all (only characters the normalizer drops) is read as `<unk>`, so every word is tagged.

A word's label goes on its first sub-token, the others ignored (-100, HF's convention) unless
`label_all`, where each sub-token carries it (a B- tag continuing as its I- tag, as HF's run_ner
`label_all_tokens` does). Predictions are read at each word's first sub-token either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from roberta.errors import UserError

IGNORE = -100  # a position with no label: cross-entropy's ignore_index


@dataclass(frozen=True)
class EncodedSentence:
    """A sentence's sub-tokens (no special tokens): `ids`, the word each belongs to (`word`), and
    each word's first sub-token (`first`)."""

    ids: np.ndarray  # int32 [N]
    word: np.ndarray  # int32 [N]
    first: np.ndarray  # int64 [words]


def word_ids(
    tokenizer, sentences: Sequence[Sequence[str]], prefix_space: bool = False
) -> list[list[list[int]]]:
    """Each word's token ids, per sentence (one tokenizer call for all words); `prefix_space` puts
    a space before a byte-level BPE sentence's first word too (HF's `add_prefix_space=True`)."""
    byte_level = tokenizer.kind in ("gpt2", "hf")
    flat = [
        (" " + w if byte_level and (k > 0 or prefix_space) else w)
        for words in sentences
        for k, w in enumerate(words)
    ]
    pieces = tokenizer.tokenize_ids_batch(flat) if flat else []
    out, at = [], 0
    for words in sentences:
        out.append([p or [tokenizer.unk_id] for p in pieces[at : at + len(words)]])
        at += len(words)
    return out


def encode_words(
    tokenizer, sentences: Sequence[Sequence[str]], prefix_space: bool = False
) -> list[EncodedSentence]:
    """`EncodedSentence` of each sentence of words (`prefix_space`: see `word_ids`)."""
    encoded = []
    for pieces in word_ids(tokenizer, sentences, prefix_space):
        counts = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        ids = np.fromiter((i for p in pieces for i in p), dtype=np.int32, count=int(counts.sum()))
        word = np.repeat(np.arange(len(pieces), dtype=np.int32), counts)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        encoded.append(EncodedSentence(ids, word, first))
    return encoded


def token_labels(
    sentence: EncodedSentence, labels: Sequence[int], label_all: bool = False, continuing=None
) -> np.ndarray:
    """int64 [N]: each word's label id at its first sub-token and IGNORE elsewhere; with
    `label_all`, every sub-token's word's label, `continuing[label]` (B-X's I-X) after the first."""
    labels = np.asarray(labels, dtype=np.int64)
    out = np.full(len(sentence.ids), IGNORE, dtype=np.int64)
    if label_all:
        out[:] = labels[sentence.word]
        inner = np.ones(len(out), dtype=bool)
        inner[sentence.first] = False
        if continuing is not None:
            out[inner] = np.asarray(continuing, dtype=np.int64)[out[inner]]
    else:
        out[sentence.first] = labels
    return out


@dataclass(frozen=True)
class TagWindow:
    """One model input: `<s> pieces[begin:end] </s>` of sentence `sentence`; `owned` is the part
    of the window whose predictions are read from it ([lo, hi) in sentence positions): where
    windows overlap, a position is read from the window that gives it the most context on its
    shorter side (BERT's "max context" rule for SQuAD's windows)."""

    tokens: np.ndarray  # int32 [end - begin + 2]
    sentence: int
    begin: int
    owned: tuple[int, int]
    labels: np.ndarray | None = None  # int64 [len(tokens)], IGNORE at <s>, </s> and unlabelled pieces


def window_bounds(n: int, budget: int, stride: int) -> list[tuple[int, int]]:
    """[begin, end) of each window over `n` pieces: `budget` pieces each, consecutive windows
    sharing `stride` of them (HF's tokenizer overflow `stride`, as SQuAD's windows use it)."""
    if stride < 0 or 2 * stride >= budget:
        raise UserError(
            f"windows of {budget} tokens cannot share {stride} (the stride must be under half a window)"
        )
    bounds = [(0, min(n, budget))]
    while bounds[-1][1] < n:
        begin = bounds[-1][1] - stride
        bounds.append((begin, min(n, begin + budget)))
    return bounds


def owned_parts(bounds: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Which positions each window is read for: the overlap of two windows split at its middle,
    so each position is read where its smaller side of context is larger."""
    owned = []
    for k, (begin, end) in enumerate(bounds):
        lo = begin if k == 0 else (begin + bounds[k - 1][1]) // 2
        hi = end if k == len(bounds) - 1 else (bounds[k + 1][0] + end) // 2
        owned.append((lo, hi))
    return owned


def make_windows(
    sentences: Sequence[EncodedSentence],
    bos: int,
    eos: int,
    max_length: int,
    stride: int,
    labels: Sequence[np.ndarray] | None = None,
) -> list[TagWindow]:
    """The windows of every sentence, in order: one for a sentence that fits in `max_length`
    (special tokens included), else overlapping ones sharing `stride` sub-tokens. `labels` (per
    sentence, `token_labels`) gives each window its labels."""
    windows = []
    for s, sentence in enumerate(sentences):
        bounds = window_bounds(len(sentence.ids), max_length - 2, stride)
        for (begin, end), owned in zip(bounds, owned_parts(bounds)):
            tokens = np.concatenate([[bos], sentence.ids[begin:end], [eos]]).astype(np.int32)
            window_labels = None
            if labels is not None:
                window_labels = np.concatenate([[IGNORE], labels[s][begin:end], [IGNORE]]).astype(np.int64)
            windows.append(TagWindow(tokens, s, begin, owned, window_labels))
    return windows


def sentence_rows(
    sentences: Sequence[EncodedSentence], windows: Sequence[TagWindow], window_rows: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """Each sentence's per-piece rows ([N, ...]: logits, say) put together from its windows'
    (`window_rows[k]`: window k's rows at its tokens, `<s>` first), each piece from the window
    that owns it."""
    out: list[np.ndarray | None] = [None] * len(sentences)
    for window, rows in zip(windows, window_rows):
        s = window.sentence
        if out[s] is None:
            out[s] = np.zeros((len(sentences[s].ids), *rows.shape[1:]), dtype=rows.dtype)
        lo, hi = window.owned
        out[s][lo:hi] = rows[1 + lo - window.begin : 1 + hi - window.begin]
    return out
