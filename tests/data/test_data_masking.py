"""Masking: the paper's proportions over a million tokens, specials untouched, whole words, spans."""

import numpy as np
import pytest

from roberta.data.masking import IGNORE_INDEX, MaskingConfig, MaskVocab, mask_tokens, masking_rng

VOCAB = MaskVocab(mask_id=999, special_ids=(0, 1, 2, 3, 999), vocab_size=1000)


def sequences(count: int, length: int = 512, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        tokens = rng.integers(4, 999, length)
        tokens[0], tokens[-1] = 0, 2
        tokens[rng.integers(1, length - 1, 3)] = 2  # sentence separators inside
        yield tokens


def test_fifteen_percent_chosen_and_80_10_10_over_a_million_tokens():
    cfg = MaskingConfig()
    candidates = chosen = to_mask = changed = kept = 0
    for i, tokens in enumerate(sequences(2000)):
        inputs, labels = mask_tokens(tokens, masking_rng(0, 0, i), cfg, VOCAB)
        picked = labels != IGNORE_INDEX
        assert np.array_equal(labels[picked], tokens[picked])
        assert np.array_equal(inputs[~picked], tokens[~picked])
        candidates += int(np.sum(~np.isin(tokens, VOCAB.special_ids)))
        chosen += int(picked.sum())
        to_mask += int(np.sum(inputs[picked] == VOCAB.mask_id))
        changed += int(np.sum((inputs[picked] != VOCAB.mask_id) & (inputs[picked] != tokens[picked])))
        kept += int(np.sum(inputs[picked] == tokens[picked]))
    assert candidates >= 1_000_000
    assert abs(chosen / candidates - 0.15) < 0.003
    assert abs(to_mask / chosen - 0.8) < 0.01
    assert abs(changed / chosen - 0.1) < 0.01
    assert abs(kept / chosen - 0.1) < 0.01


def test_special_tokens_and_padding_are_never_chosen_nor_drawn():
    tokens = np.array([0] + list(range(4, 200)) + [2, 2] + list(range(200, 300)) + [2] + [1] * 50)
    for i in range(200):
        inputs, labels = mask_tokens(tokens, masking_rng(1, 0, i), MaskingConfig(mask_prob=0.5), VOCAB)
        special = np.isin(tokens, VOCAB.special_ids)
        assert np.all(labels[special] == IGNORE_INDEX)
        assert np.array_equal(inputs[special], tokens[special])
        replaced = (labels != IGNORE_INDEX) & (inputs != VOCAB.mask_id)
        assert not np.isin(inputs[replaced], (0, 1, 2, 3)).any()


def test_same_generator_seed_gives_same_mask_and_epochs_differ():
    (tokens,) = sequences(1)
    cfg = MaskingConfig()
    first = mask_tokens(tokens, masking_rng(7, 3, 11), cfg, VOCAB)
    again = mask_tokens(tokens, masking_rng(7, 3, 11), cfg, VOCAB)
    other_epoch = mask_tokens(tokens, masking_rng(7, 4, 11), cfg, VOCAB)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not np.array_equal(first[1], other_epoch[1])


def test_static_masking_repeats_every_k_epochs():
    (tokens,) = sequences(1)
    cfg = MaskingConfig(static_copies=10)
    masks = [mask_tokens(tokens, masking_rng(0, e, 5, cfg.static_copies), cfg, VOCAB)[1] for e in range(21)]
    assert (
        np.array_equal(masks[0], masks[10])
        and np.array_equal(masks[3], masks[13])
        and np.array_equal(masks[0], masks[20])
    )
    assert len({m.tobytes() for m in masks[:10]}) == 10


def word_vocab():
    # Ids 4..499 begin a word (like "Ġthe"), ids 500..998 continue one (like "ing").
    starts = np.zeros(1000, dtype=bool)
    starts[4:500] = True
    return MaskVocab(mask_id=999, special_ids=(0, 1, 2, 3, 999), vocab_size=1000, word_starts=starts)


def words_of(tokens, vocab):
    """Word number per token (-1 for specials): a word starts at a word-start id or after a special."""
    special = np.isin(tokens, vocab.special_ids)
    word, current, previous_special = np.full(len(tokens), -1), -1, True
    for i, t in enumerate(tokens):
        if special[i]:
            previous_special = True
            continue
        if vocab.word_starts[t] or previous_special:
            current += 1
        word[i], previous_special = current, False
    return word


def test_whole_word_masking_masks_whole_words_including_a_continuation_after_a_special():
    vocab = word_vocab()
    rng = np.random.default_rng(0)
    cfg = MaskingConfig(whole_word=True)
    masked_words = total_words = 0
    for i in range(300):
        tokens = np.where(rng.random(256) < 0.4, rng.integers(4, 500, 256), rng.integers(500, 999, 256))
        tokens[0], tokens[100], tokens[-1] = 0, 2, 2
        tokens[101] = 600  # a continuation id right after </s> still begins a word
        inputs, labels = mask_tokens(tokens, masking_rng(0, 0, i), cfg, vocab)
        word = words_of(tokens, vocab)
        chosen = labels != IGNORE_INDEX
        for w in range(word.max() + 1):
            in_word = chosen[word == w]
            assert in_word.all() or not in_word.any(), f"word {w} partly masked"
            masked_words += int(in_word.all())
        total_words += word.max() + 1
    assert abs(masked_words / total_words - 0.15) < 0.01


def test_span_masking_masks_runs_of_span_length():
    (tokens,) = sequences(1, length=4096)
    tokens = tokens.copy()
    tokens[np.isin(tokens, (2,))] = 5
    tokens[0], tokens[-1] = 0, 2
    _, labels = mask_tokens(tokens, np.random.default_rng(3), MaskingConfig(span_length=4), VOCAB)
    chosen = (labels != IGNORE_INDEX).astype(int)
    edges = np.diff(np.concatenate([[0], chosen, [0]]))
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    assert runs.min() >= 4  # overlapping spans merge into longer runs, none is shorter
    assert abs(chosen.sum() / (len(tokens) - 2) - 0.15) < 0.03


def test_whole_word_masking_without_word_starts_is_an_error():
    with pytest.raises(ValueError, match="word_starts"):
        mask_tokens(np.arange(4, 20), np.random.default_rng(0), MaskingConfig(whole_word=True), VOCAB)
