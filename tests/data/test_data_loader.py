"""The training loader: exact epochs, identical batches and masks after a resume, rank sharding, formats."""

from pathlib import Path

import numpy as np
import pytest
import torch

from data_fixtures import make_documents, write_byte_tokenizer, write_text
from roberta.data import Corpus, packing
from roberta.data.loader import DataConfig, build_loader
from roberta.data.masking import IGNORE_INDEX, MaskingConfig
from roberta.data.prepare import prepare

BLOCK = 64


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("loader")
    text = write_text(root / "a.txt", make_documents(seed=1, count=120, long_every=40))
    return prepare(
        [text],
        write_byte_tokenizer(root / "tok"),
        root / "corpus",
        workers=1,
        valid_fraction=0.1,
        progress=False,
        chunk_bytes=4096,
        shard_bytes=20_000,
    )


def originals(batch):
    """The unmasked sequences of a batch (labels hold the original where a token was masked)."""
    ids, labels = batch["tokens"], batch["labels"]
    return torch.where(labels != IGNORE_INDEX, labels, ids)


def steps(loader, count):
    it = iter(loader)
    return [next(it) for _ in range(count)]


def test_one_epoch_of_full_sentences_serves_every_token_exactly_once(corpus_dir):
    corpus = Corpus(corpus_dir)
    assert corpus.meta["num_shards"] > 1  # blocks cross shard boundaries too
    loader = build_loader(corpus_dir, config=DataConfig(seq_len=BLOCK), micro_batch_size=1, seed=0, epochs=1)
    dataset, specials = loader.dataset, corpus.specials
    served = {}
    for step, batch in enumerate(loader):
        (index,) = dataset.sequence_indices(step)[1]
        row = originals(batch)[0].numpy()
        assert len(row) <= BLOCK and row[0] == specials.bos_id
        served[int(index)] = row[~np.isin(row, specials.ids)]
    assert sorted(served) == list(range(len(served)))
    train = corpus.train
    assert np.array_equal(
        np.concatenate([served[i] for i in range(len(served))]), train.tokens(0, train.num_tokens)
    )


def test_resumed_loader_serves_identical_batches_and_masks(corpus_dir):
    config = DataConfig(seq_len=BLOCK)
    full = build_loader(corpus_dir, config=config, micro_batch_size=4, seed=3)
    per_epoch = full.dataset.batches_in_epoch(0)
    reference = steps(full, per_epoch + 5)  # runs into the second epoch
    start = per_epoch - 3
    resumed = build_loader(
        corpus_dir, config=config, micro_batch_size=4, seed=3, start_step=start, num_workers=2
    )
    for a, b in zip(reference[start:], steps(resumed, 8)):
        assert torch.equal(a["tokens"], b["tokens"]) and torch.equal(a["labels"], b["labels"])
    assert (
        resumed.state_dict() == {"step": start + 8, "epoch": 1, "epoch_start": per_epoch}
        and resumed.epoch == 1
    )
    again = build_loader(corpus_dir, config=config, micro_batch_size=4, seed=3)
    again.load_state_dict(full.state_dict())
    assert again.step == per_epoch + 5
    # Masks are fresh each epoch: the same block masked differently in epoch 1.
    assert not all(
        torch.equal(a["labels"], b["labels"]) for a, b in zip(reference[:5], reference[per_epoch:])
    )


def test_ranks_take_disjoint_batches_of_the_same_epoch(corpus_dir):
    config = DataConfig(seq_len=BLOCK)
    ranks = [
        build_loader(corpus_dir, config=config, micro_batch_size=3, seed=0, rank=r, world_size=2)
        for r in range(2)
    ]
    counts = [r.dataset.batches_in_epoch(0) for r in ranks]
    assert counts[0] == counts[1] > 0
    seen = [np.concatenate([r.dataset.sequence_indices(s)[1] for s in range(counts[0])]) for r in ranks]
    blocks = len(ranks[0].dataset.plan(0).starts)
    assert not set(seen[0]) & set(seen[1])
    assert len(set(seen[0]) | set(seen[1])) == 2 * 3 * counts[0] > blocks - 6


def test_doc_sentences_batches_hold_a_token_budget_and_stay_in_one_document(corpus_dir):
    config = DataConfig(format="doc-sentences", seq_len=BLOCK)
    loader = build_loader(corpus_dir, config=config, micro_batch_size=4, seed=0, epochs=1)
    dataset = loader.dataset
    doc_tokens = dataset.split.document_token_offsets
    plan = dataset.plan(0)
    first_doc = np.searchsorted(doc_tokens, plan.starts, side="right")
    assert np.array_equal(first_doc, np.searchsorted(doc_tokens, plan.ends - 1, side="right"))
    sizes = [batch["tokens"].numel() for batch in loader]
    assert (
        max(sizes) <= 4 * BLOCK
        and len(set(len(dataset.sequence_indices(s)[1]) for s in range(len(sizes)))) > 1
    )


@pytest.mark.parametrize("fmt", ["segment-pair", "sentence-pair"])
def test_pair_formats_carry_next_sentence_labels(corpus_dir, fmt):
    config = DataConfig(format=fmt, seq_len=BLOCK)
    loader = build_loader(corpus_dir, config=config, micro_batch_size=8, seed=0, epochs=1)
    specials = Corpus(corpus_dir).specials
    labels = []
    for batch in loader:
        rows = originals(batch)
        assert rows.shape[1] <= BLOCK and rows.shape[0] == len(batch["nsp_labels"])
        for row in rows.numpy():
            eos = np.flatnonzero(row == specials.eos_id)
            assert row[0] == specials.bos_id and eos[1] == eos[0] + 1  # <s> A </s></s> B </s>
        labels.append(batch["nsp_labels"])
    labels = torch.cat(labels).float()
    assert 0.35 < labels.mean() < 0.65


def test_overlap_pairs_label_each_pair_and_token_with_what_the_segments_share(corpus_dir):
    config = DataConfig(format="overlap-pair", seq_len=BLOCK)
    loader = build_loader(corpus_dir, config=config, micro_batch_size=8, seed=0, epochs=1)
    specials = Corpus(corpus_dir).specials
    labels = []
    for batch in loader:
        assert "nsp_labels" not in batch and batch["overlap"].dtype == torch.float32
        rows, inputs = originals(batch).numpy(), batch["tokens"].numpy()
        for row, seen, label, flags in zip(rows, inputs, batch["overlap"].tolist(), batch["shared"].numpy()):
            length = int((row != specials.pad_id).sum())
            eos = np.flatnonzero(row == specials.eos_id)
            assert row[0] == specials.bos_id and eos[1] == eos[0] + 1 and eos[-1] == length - 1
            a, b = row[1 : eos[0]], row[eos[1] + 1 : length - 1]
            assert label == pytest.approx(packing.token_overlap(a, b))
            # per token: read from what the model sees, masks unlabelled
            expected = packing.shared_tokens(seen[:length], len(a), (specials.mask_id,))
            assert np.array_equal(flags[:length], expected) and (flags[length:] == -1).all()
        labels += batch["overlap"].tolist()
    # Half the Bs are A rewritten, with a kept share drawn uniformly: the labels spread over [0, 1].
    assert min(labels) < 0.1 and max(labels) > 0.9
    resumed = next(iter(build_loader(corpus_dir, config=config, micro_batch_size=8, seed=0, start_step=3)))
    reference = steps(build_loader(corpus_dir, config=config, micro_batch_size=8, seed=0), 4)[3]
    assert all(torch.equal(resumed[k], reference[k]) for k in ("tokens", "labels", "overlap", "shared"))


def test_static_masking_repeats_masks_every_k_epochs(corpus_dir):
    config = DataConfig(seq_len=BLOCK, masking=MaskingConfig(static_copies=2))
    loader = build_loader(corpus_dir, config=config, micro_batch_size=1, seed=0)
    dataset = loader.dataset
    per_epoch = dataset.batches_in_epoch(0)

    def mask_of_block(epoch, block):
        step = next(
            s
            for s in range(epoch * per_epoch, (epoch + 1) * per_epoch)
            if dataset.sequence_indices(s)[1][0] == block
        )
        return dataset[step]["labels"]

    assert torch.equal(mask_of_block(0, 5), mask_of_block(2, 5))
    assert not torch.equal(mask_of_block(0, 5), mask_of_block(1, 5))


def test_whole_word_masking_through_the_loader_never_splits_a_word(corpus_dir):
    config = DataConfig(seq_len=BLOCK, masking=MaskingConfig(whole_word=True))
    corpus = Corpus(corpus_dir)
    word_starts = corpus.word_starts()
    for batch in steps(build_loader(corpus_dir, config=config, micro_batch_size=4, seed=0), 5):
        for row, labels in zip(originals(batch).numpy(), batch["labels"].numpy()):
            chosen = labels != IGNORE_INDEX
            special = np.isin(row, corpus.specials.ids)
            # A token that continues a word is chosen exactly when the token before it is.
            continues = ~word_starts[row] & ~np.concatenate([[True], special[:-1]]) & ~special
            assert np.array_equal(chosen[1:][continues[1:]], chosen[:-1][continues[1:]])


def test_doc_sentences_resume_from_an_epoch_anchor_matches_counting_every_epoch(corpus_dir):
    config = DataConfig(format="doc-sentences", seq_len=BLOCK)
    counted = build_loader(corpus_dir, config=config, micro_batch_size=2, seed=4, start_step=0)
    step = sum(counted.dataset.batches_in_epoch(e) for e in range(3)) + 2  # epoch 3, batch 2
    counted.step = step
    state = counted.state_dict()
    assert state["epoch"] == 3 and state["epoch_start"] == step - 2
    resumed = build_loader(corpus_dir, config=config, micro_batch_size=2, seed=4)
    resumed.load_state_dict(state)
    assert resumed.dataset.locate(step) == (3, 2)
    assert 1 not in resumed.dataset._epoch_sizes  # no earlier epoch was planned to find the position
    a, b = next(iter(counted)), next(iter(resumed))
    assert torch.equal(a["tokens"], b["tokens"]) and torch.equal(a["labels"], b["labels"])


def test_most_frequent_token_is_the_commonest_id_across_shards(corpus_dir):
    split = Corpus(corpus_dir).train
    tokens = np.asarray(split.tokens(0, split.num_tokens), dtype=np.int64)
    counts = np.bincount(tokens)
    assert split.most_frequent_token() == int(counts.argmax())
    # a sample that stops early counts only what it read
    head = np.bincount(tokens[:100])
    assert split.most_frequent_token(limit=100) == int(head.argmax())
