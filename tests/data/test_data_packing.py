"""Input formats: exact coverage and limits on a synthetic corpus with long and short sentences."""

import numpy as np
import pytest

from roberta.data import packing
from roberta.errors import UserError

BOS, EOS = 0, 2


def synthetic_corpus(seed: int = 0, documents: int = 300):
    """Offsets of a corpus whose sentences are 1..80 tokens, with some far longer than a block."""
    rng = np.random.default_rng(seed)
    per_doc = rng.integers(1, 12, documents)
    lengths = rng.integers(1, 80, per_doc.sum())
    lengths[rng.choice(len(lengths), 10, replace=False)] = rng.integers(300, 1500, 10)
    sentence_offsets = np.concatenate([[0], np.cumsum(lengths)])
    document_offsets = np.concatenate([[0], np.cumsum(per_doc)])
    # Token values that say where they came from: token t has value t + 10 (above the specials).
    tokens = np.arange(sentence_offsets[-1]) + 10
    return tokens, sentence_offsets, document_offsets


def materialize(tokens, sentence_offsets, document_offsets, starts, ends, separators):
    doc_tokens = sentence_offsets[document_offsets] if separators else None
    return [
        packing.block_tokens(tokens[s:e], s, sentence_offsets, doc_tokens, BOS, EOS)
        for s, e in zip(starts, ends)
    ]


@pytest.mark.parametrize("seq_len", [16, 64, 512])
def test_full_sentences_cover_every_token_exactly_once_within_the_limit(seq_len):
    tokens, sent, docs = synthetic_corpus()
    starts, ends = packing.pack_blocks(sent, docs, seq_len, cross_documents=True)
    blocks = materialize(tokens, sent, docs, starts, ends, separators=True)
    content = np.concatenate([b[(b != BOS) & (b != EOS)] for b in blocks])
    assert np.array_equal(content, tokens)  # every token once, in corpus order
    assert max(len(b) for b in blocks) <= seq_len
    assert all(b[0] == BOS for b in blocks)


def test_full_sentences_separate_sentences_and_documents_like_fairseq():
    # Two documents: [3 tokens, 2 tokens] and [4 tokens]: one block holds all.
    sent = np.array([0, 3, 5, 9])
    docs = np.array([0, 2, 3])
    tokens = np.arange(9) + 10
    starts, ends = packing.pack_blocks(sent, docs, 64, cross_documents=True)
    (block,) = materialize(tokens, sent, docs, starts, ends, separators=True)
    assert block.tolist() == [BOS, 10, 11, 12, EOS, 13, 14, EOS, EOS, 15, 16, 17, 18, EOS]


def test_blocks_are_full_sentences_unless_a_sentence_is_longer_than_a_block():
    tokens, sent, docs = synthetic_corpus(seed=1)
    starts, ends = packing.pack_blocks(sent, docs, 128, cross_documents=True)
    long_sentences = np.flatnonzero(np.diff(sent) > 125)
    inside_long = np.zeros(len(tokens) + 1, dtype=bool)
    for s in long_sentences:
        inside_long[sent[s] + 1 : sent[s + 1]] = True
    # A block boundary lies on a sentence boundary, or inside a sentence too long for a block.
    on_sentence = np.isin(starts, sent) | inside_long[starts]
    assert on_sentence.all()
    assert len(long_sentences) > 0


def test_doc_sentences_never_cross_a_document():
    tokens, sent, docs = synthetic_corpus(seed=2)
    starts, ends = packing.pack_blocks(sent, docs, 64, cross_documents=False)
    doc_tokens = sent[docs]
    doc_of_start = np.searchsorted(doc_tokens, starts, side="right") - 1
    doc_of_last = np.searchsorted(doc_tokens, ends - 1, side="right") - 1
    assert np.array_equal(doc_of_start, doc_of_last)
    blocks = materialize(tokens, sent, docs, starts, ends, separators=False)
    assert max(len(b) for b in blocks) <= 64
    assert np.array_equal(np.concatenate([b[(b != BOS) & (b != EOS)] for b in blocks]), tokens)


def test_budget_batches_hold_the_token_budget_and_every_sequence_once():
    lengths = np.random.default_rng(0).integers(5, 512, 5000)
    batches = packing.budget_batches(lengths, 4096, np.random.default_rng(1))
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(5000))
    padded = np.array([len(b) * lengths[b].max() for b in batches])
    real = np.array([lengths[b].sum() for b in batches])
    assert padded.max() <= 4096
    # Sorting within windows keeps padding small: real tokens per batch stay near the budget.
    assert np.median(real) > 0.85 * 4096


@pytest.mark.parametrize("whole_sentences", [True, False])
def test_pairs_have_half_random_partners_from_other_documents(whole_sentences):
    tokens, sent, docs = synthetic_corpus(seed=3, documents=2000)
    max_length = (128 - 4) // 2
    seg_start, seg_end, seg_doc = packing.segments(sent, docs, max_length, whole_sentences)
    assert (seg_end - seg_start).max() <= max_length
    pairs = packing.make_pairs(seg_start, seg_end, seg_doc, np.random.default_rng(0))
    assert abs(pairs.nsp.mean() - 0.5) < 0.02
    doc_tokens = sent[docs]
    doc_a = np.searchsorted(doc_tokens, pairs.a_start, side="right") - 1
    doc_b = np.searchsorted(doc_tokens, pairs.b_start, side="right") - 1
    assert np.all(doc_a[pairs.nsp == 1] != doc_b[pairs.nsp == 1])
    nxt = pairs.nsp == 0
    assert np.all(doc_a[nxt] == doc_b[nxt]) and np.array_equal(pairs.b_start[nxt], pairs.a_end[nxt])
    sequence = packing.pair_tokens(
        tokens[pairs.a_start[0] : pairs.a_end[0]], tokens[pairs.b_start[0] : pairs.b_end[0]], BOS, EOS
    )
    assert len(sequence) <= 128 and sequence[0] == BOS and sequence[-1] == EOS


def test_pairs_need_documents_with_two_segments():
    sent = np.arange(6) * 3  # five one-sentence documents
    with pytest.raises(UserError, match="at least two segments"):
        packing.make_pairs(*packing.segments(sent, np.arange(6), 10, False), np.random.default_rng(0))


def test_token_overlap_is_the_share_of_tokens_found_in_the_other_segment():
    a = np.array([5, 6, 6, 7])
    assert packing.token_overlap(a, a) == 1.0
    assert packing.token_overlap(a, np.array([8, 9])) == 0.0
    # A's 5, 6, 6 occur in B, its 7 does not; all three of B's tokens occur in A: 6 of 7 tokens.
    assert packing.token_overlap(a, np.array([6, 5, 5])) == pytest.approx(6 / 7)
    assert packing.token_overlap(np.array([6, 5, 5]), a) == pytest.approx(6 / 7)
    assert packing.token_overlap(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0.0


def test_shared_tokens_label_the_visible_tokens_of_each_segment_by_the_other():
    mask = 9
    #                   <s>  A: 5  6  mask 7   </s></s> B: 6  mask 8  </s>
    inputs = np.array([0, 5, 6, mask, 7, 2, 2, 6, mask, 8, 2])
    flags = packing.shared_tokens(inputs, 4, (mask,))
    assert flags.tolist() == [-1, 0, 1, -1, 0, -1, -1, 1, -1, 0, -1]
    # the mean of the labels of the unmasked pair is its overlap
    a, b = np.array([5, 6, 7]), np.array([6, 5])
    unmasked = packing.shared_tokens(packing.pair_tokens(a, b, 0, 2), 3, (mask,))
    assert unmasked[unmasked >= 0].mean() == pytest.approx(packing.token_overlap(a, b))


def test_rewrite_keeps_a_share_of_a_in_order_and_fills_the_rest_from_the_filler():
    a, filler = np.arange(100, 140), np.arange(1000, 1100)
    rng = np.random.default_rng(0)
    shares = []
    for _ in range(200):
        b = packing.rewrite(a, filler, rng)
        from_a = b[b < 1000]
        assert len(b) == len(a)  # the filler is long enough to replace every lost token
        assert np.all(np.diff(from_a) > 0) and np.all(np.diff(b[b >= 1000]) == 1)  # both in order
        assert np.array_equal(b[b >= 1000], filler[: len(a) - len(from_a)])
        shares.append(len(from_a) / len(a))
    assert min(shares) < 0.15 and max(shares) > 0.85  # the kept share is drawn per pair
    positions = [np.flatnonzero(packing.rewrite(a, filler, rng) < 1000) for _ in range(20)]
    assert any(len(p) and not np.array_equal(p, np.arange(len(p))) for p in positions)  # kept tokens move
    short = packing.rewrite(a, filler[:3], np.random.default_rng(1))
    assert len(short) <= len(a) and np.isin(short, np.concatenate([a, filler[:3]])).all()
