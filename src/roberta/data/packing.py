"""The paper's input formats (Table 2): which corpus tokens make up each training sequence.

Pure functions from a split's offsets (`sentence_offsets`: token offset of each sentence start,
`document_offsets`: sentence offset of each document start, both with the total at the end) to
arrays of token ranges, and `block_tokens` / `pair_tokens` to build a sequence from a range.

- FULL-SENTENCES (default): `<s>`, then whole sentences, each followed by `</s>` as fairseq's
  binarized lines are, crossing document boundaries with an extra `</s>` between documents; at
  most `seq_len` tokens in all. Every corpus token lies in exactly one block.
- DOC-SENTENCES: the same, but a block never crosses a document; blocks at the end of a
  document are short, so batches are grouped by a token budget (`budget_batches`).
- SEGMENT-PAIR+NSP: `<s> A </s></s> B </s>` where A and B are segments of whole sentences of at
  most (seq_len - 4) // 2 tokens; B follows A in its document (nsp label 0) or, with
  probability 0.5, is a segment of another document (label 1). Every segment that has a successor
  in its document is an A once per epoch.
- SENTENCE-PAIR+NSP: the same with single sentences as segments (batched by token budget).
- OVERLAP-PAIR (ours, not the paper's): SEGMENT-PAIR's pairs, but half the time B is A rewritten
  (`rewrite`: a random share of A's tokens kept in order, the rest of B's places filled from the
  drawn segment). The pair's label is the share of its tokens that occur in the other segment
  (`token_overlap`), which a head on `<s>` learns to predict beside the masked LM, and the same
  head, on every other token, whether that token occurs in the other segment (`shared_tokens`).
  The pair tasks (STS-B, MRPC, RTE) are fine-tuned from `<s>`; this trains it to compare segments.

A sentence too long for a block (or a segment) is split into pieces, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from roberta.errors import UserError

FULL_SENTENCES = "full-sentences"
DOC_SENTENCES = "doc-sentences"
SEGMENT_PAIR = "segment-pair"
SENTENCE_PAIR = "sentence-pair"
OVERLAP_PAIR = "overlap-pair"
FORMATS = (FULL_SENTENCES, DOC_SENTENCES, SEGMENT_PAIR, SENTENCE_PAIR, OVERLAP_PAIR)
PAIR_FORMATS = (SEGMENT_PAIR, SENTENCE_PAIR, OVERLAP_PAIR)
NSP_FORMATS = (SEGMENT_PAIR, SENTENCE_PAIR)  # the paper's pair formats, with next-sentence prediction
# Formats whose sequences vary in length, so batches hold a token budget rather than a count.
BUDGET_FORMATS = (DOC_SENTENCES, SENTENCE_PAIR)


@dataclass(frozen=True)
class Pieces:
    """Sentences cut to at most `max_length` tokens: token ranges and what each piece ends."""

    start: np.ndarray  # int64 token offset
    end: np.ndarray
    ends_sentence: np.ndarray  # bool: last piece of its sentence
    ends_document: np.ndarray  # bool: last piece of its document
    document: np.ndarray  # int64 document number


def split_sentences(sentence_offsets: np.ndarray, document_offsets: np.ndarray, max_length: int) -> Pieces:
    sentence_offsets = np.asarray(sentence_offsets, dtype=np.int64)
    lengths = np.diff(sentence_offsets)
    count = np.maximum(1, -(-lengths // max_length))  # pieces per sentence
    sentence = np.repeat(np.arange(len(lengths)), count)
    first_piece = np.concatenate([[0], np.cumsum(count)[:-1]])
    within = np.arange(len(sentence)) - np.repeat(first_piece, count)
    start = sentence_offsets[sentence] + within * max_length
    end = np.minimum(start + max_length, sentence_offsets[sentence + 1])
    ends_sentence = end == sentence_offsets[sentence + 1]
    document = np.searchsorted(np.asarray(document_offsets), sentence, side="right") - 1
    last_sentence = np.asarray(document_offsets)[document + 1] - 1
    return Pieces(start, end, ends_sentence, ends_sentence & (sentence == last_sentence), document)


def _greedy(cost: np.ndarray, capacity: int, stop_after: np.ndarray | None) -> np.ndarray:
    """Indices where groups of consecutive items start, each group's cost within capacity.

    stop_after: bool per item, a group must end after it (a document end). Every item's cost is
    at most capacity. One searchsorted per group keeps this fast for millions of items.
    """
    total = np.concatenate([[0], np.cumsum(cost)])
    barriers = np.flatnonzero(stop_after) + 1 if stop_after is not None else None
    starts, i, n = [], 0, len(cost)
    while i < n:
        starts.append(i)
        j = int(np.searchsorted(total, total[i] + capacity, side="right")) - 1
        if barriers is not None:
            j = min(j, int(barriers[np.searchsorted(barriers, i, side="right")]))
        i = j
    starts.append(n)
    return np.asarray(starts, dtype=np.int64)


def pack_blocks(
    sentence_offsets: np.ndarray, document_offsets: np.ndarray, seq_len: int, cross_documents: bool
) -> tuple[np.ndarray, np.ndarray]:
    """FULL-SENTENCES (cross_documents=True) or DOC-SENTENCES blocks: (start, end) token ranges.

    The cost of a piece is its tokens, its `</s>` if it ends a sentence and, across documents,
    the extra `</s>` if it ends one; the block's `<s>` takes one place.
    """
    if seq_len < 4:
        raise UserError(f"seq_len {seq_len} is too small (at least 4)")
    pieces = split_sentences(sentence_offsets, document_offsets, seq_len - 3)
    cost = (pieces.end - pieces.start) + pieces.ends_sentence + (pieces.ends_document & cross_documents)
    bounds = _greedy(cost, seq_len - 1, None if cross_documents else pieces.ends_document)
    return pieces.start[bounds[:-1]], pieces.end[bounds[1:] - 1]


def segments(
    sentence_offsets: np.ndarray, document_offsets: np.ndarray, max_length: int, whole_sentences: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Segments for the pair formats: (start, end, document). One sentence each, or as many
    whole consecutive sentences of one document as fit in max_length."""
    pieces = split_sentences(sentence_offsets, document_offsets, max_length)
    if not whole_sentences:
        return pieces.start, pieces.end, pieces.document
    bounds = _greedy(pieces.end - pieces.start, max_length, pieces.ends_document)
    return pieces.start[bounds[:-1]], pieces.end[bounds[1:] - 1], pieces.document[bounds[:-1]]


@dataclass(frozen=True)
class Pairs:
    a_start: np.ndarray
    a_end: np.ndarray
    b_start: np.ndarray
    b_end: np.ndarray
    nsp: np.ndarray  # int64: 0 = B follows A in its document, 1 = B is from another document


def make_pairs(
    seg_start: np.ndarray, seg_end: np.ndarray, seg_document: np.ndarray, rng: np.random.Generator
) -> Pairs:
    """One pair per segment that has a successor in its document; B is that successor or, with
    probability 0.5, a uniformly drawn segment of another document."""
    a = np.flatnonzero(seg_document[:-1] == seg_document[1:])
    if not len(a):
        raise UserError("pair formats need documents of at least two segments; this corpus has none")
    doc_first = np.searchsorted(seg_document, seg_document, side="left")
    doc_count = np.searchsorted(seg_document, seg_document, side="right") - doc_first
    n = len(seg_start)
    if np.all(doc_count[a] == n):
        raise UserError("pair formats need at least two documents; this corpus has one")
    random_b = rng.random(len(a)) < 0.5
    # A draw among the segments outside A's document: skip over that document's range.
    draw = (rng.random(len(a)) * (n - doc_count[a])).astype(np.int64)
    draw = np.where(draw >= doc_first[a], draw + doc_count[a], draw)
    b = np.where(random_b, draw, a + 1)
    return Pairs(seg_start[a], seg_end[a], seg_start[b], seg_end[b], random_b.astype(np.int64))


def rewrite(a: np.ndarray, filler: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A's tokens, each kept with one probability drawn uniformly for the pair, in their order, with
    filler tokens (in theirs) at random places between them, as many as A lost while filler lasts.
    Kept tokens move away from their positions in A, so telling what the two share takes comparing
    tokens, not aligning positions."""
    kept = a[rng.random(len(a)) < rng.random()]
    fill = filler[: len(a) - len(kept)]
    out = np.empty(len(kept) + len(fill), dtype=np.int64)
    from_a = np.zeros(len(out), dtype=bool)
    from_a[rng.choice(len(out), size=len(kept), replace=False)] = True
    out[from_a], out[~from_a] = kept, fill
    return out


def token_overlap(a: np.ndarray, b: np.ndarray) -> float:
    """The share of the pair's tokens that also occur in the other segment, in [0, 1]."""
    if not len(a) + len(b):
        return 0.0
    return float(np.isin(a, b).sum() + np.isin(b, a).sum()) / (len(a) + len(b))


def shared_tokens(inputs: np.ndarray, a_length: int, unseen: tuple[int, ...]) -> np.ndarray:
    """Per position of a pair `<s> A </s></s> B </s>` as the model sees it (masked): 1.0 where a
    token of A occurs among B's visible tokens or one of B among A's, 0.0 where it does not, -1.0
    (no label) at the specials and at `unseen` tokens (`<mask>`). The per-token form of
    `token_overlap`, read from the inputs so that every label can be computed from them."""
    a, b = inputs[1 : 1 + a_length], inputs[3 + a_length : -1]
    seen_a, seen_b = ~np.isin(a, unseen), ~np.isin(b, unseen)
    out = np.full(len(inputs), -1.0, dtype=np.float32)
    out[1 : 1 + a_length] = np.where(seen_a, np.isin(a, b[seen_b]), -1.0)
    out[3 + a_length : -1] = np.where(seen_b, np.isin(b, a[seen_a]), -1.0)
    return out


def block_tokens(
    tokens: np.ndarray,
    start: int,
    sentence_offsets: np.ndarray,
    document_token_offsets: np.ndarray | None,
    bos_id: int,
    eos_id: int,
) -> np.ndarray:
    """`<s>` + tokens[start:start+len(tokens)] with `</s>` after every sentence end, and a second
    `</s>` at every document end inside the block when document_token_offsets is given."""
    end = start + len(tokens)
    sentence_ends = sentence_offsets[
        np.searchsorted(sentence_offsets, start, side="right") : np.searchsorted(
            sentence_offsets, end, side="right"
        )
    ]
    marks = [sentence_ends]
    if document_token_offsets is not None:
        lo = np.searchsorted(document_token_offsets, start, side="right")
        marks.append(document_token_offsets[lo : np.searchsorted(document_token_offsets, end, side="left")])
    where = np.concatenate(marks) - start
    out = np.insert(tokens.astype(np.int64), where, eos_id)
    return np.concatenate([[bos_id], out])


def pair_tokens(a: np.ndarray, b: np.ndarray, bos_id: int, eos_id: int) -> np.ndarray:
    """RoBERTa's pair encoding `<s> A </s></s> B </s>`."""
    return np.concatenate([[bos_id], a, [eos_id, eos_id], b, [eos_id]]).astype(np.int64)


def budget_batches(
    lengths: np.ndarray, batch_tokens: int, rng: np.random.Generator, window: int = 100
) -> list[np.ndarray]:
    """Batches of sequence indices whose padded size (count x longest) stays within batch_tokens.

    Sequences are shuffled, sorted by length within windows of `window` batches' worth so that
    similar lengths share a batch (little padding, so real tokens per batch stay near
    batch_tokens), and the batches are shuffled again.
    """
    lengths = np.asarray(lengths)
    if len(lengths) and lengths.max() > batch_tokens:
        raise UserError(
            f"token budget {batch_tokens} is smaller than a sequence of {int(lengths.max())} tokens"
        )
    order = rng.permutation(len(lengths))
    per_window = max(1, window * batch_tokens // max(1, int(np.median(lengths)) if len(lengths) else 1))
    batches: list[np.ndarray] = []
    for w in range(0, len(order), per_window):
        part = order[w : w + per_window]
        part = part[np.argsort(lengths[part], kind="stable")]
        first, longest = 0, 0
        for i, index in enumerate(part):
            longest_if_added = max(longest, int(lengths[index]))
            if (i - first + 1) * longest_if_added > batch_tokens:
                batches.append(part[first:i])
                first, longest_if_added = i, int(lengths[index])
            longest = longest_if_added
        batches.append(part[first:])
    return [batches[i] for i in rng.permutation(len(batches))]
