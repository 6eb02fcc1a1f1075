"""Batches by length (`roberta.runtime.batching`): fine-tuning's resumable training batches, held-out and
hub batches sorted longest first, and the one pad."""

import itertools

import numpy as np
import pytest
import torch

from roberta.errors import UserError
from roberta.runtime.batching import MEGA_BATCH, LengthBatches, length_batches, pad, sorted_batches


def test_training_batches_cover_each_epoch_and_resume_from_any_position():
    lengths = np.random.default_rng(0).integers(1, 100, size=403)
    batcher = LengthBatches(lengths, micro_batch_size=4, seed=7, rank=0, world=1, group_by_length=True)
    assert batcher.per_epoch == 101
    epoch = batcher.epoch(0)
    assert sorted(np.concatenate(epoch).tolist()) == list(range(403))
    # Sorted by length inside each mega-batch, longest first.
    mega = np.concatenate(epoch[:MEGA_BATCH])
    assert (np.diff(lengths[mega]) <= 0).all()
    assert not np.array_equal(np.concatenate(batcher.epoch(1)), np.concatenate(epoch))
    # A run resumed at position p gets what the uninterrupted one got there.
    straight = list(itertools.islice(batcher.from_position(0), 250))
    resumed = LengthBatches(lengths, 4, 7, 0, 1, True).from_position(150)
    for a, b in zip(straight[150:], resumed):
        assert np.array_equal(a, b)


def test_ranks_share_an_epoch_and_too_few_examples_are_refused():
    lengths = list(range(1, 41))
    ranks = [LengthBatches(lengths, 4, 1, rank, 2, False).epoch(0) for rank in range(2)]
    assert sorted(np.concatenate([*ranks[0], *ranks[1]]).tolist()) == list(range(40))
    with pytest.raises(
        UserError, match=r"3 training examples are too few for micro-batches of 4 on 2 rank\(s\)"
    ):
        LengthBatches([1, 2, 3], 4, 0, 0, 2, True)


def test_topic_batches_come_from_one_group_longest_first_and_resume():
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(10), 8)[rng.permutation(80)]  # 10 groups of 8: two batches each
    lengths = rng.integers(1, 50, size=80)
    batcher = LengthBatches(lengths, 4, seed=5, rank=0, world=1, group_by_length=False, groups=lambda: groups)
    epoch = batcher.epoch(0)
    assert sorted(np.concatenate(epoch).tolist()) == list(range(80))
    assert all(len(set(groups[b].tolist())) == 1 for b in epoch)
    assert all((np.diff(lengths[b]) <= 0).all() for b in epoch)
    # The batches are shuffled across groups (not one group's two after each other throughout),
    # and an epoch differs from the next.
    assert any(groups[a][0] != groups[b][0] for a, b in zip(epoch[::2], epoch[1::2]))
    assert not np.array_equal(np.concatenate(batcher.epoch(1)), np.concatenate(epoch))
    straight = list(itertools.islice(batcher.from_position(0), 50))
    resumed = LengthBatches(lengths, 4, 5, 0, 1, False, lambda: groups).from_position(30)
    for a, b in zip(straight[30:], resumed):
        assert np.array_equal(a, b)
    # Groups of 6 in batches of 4: only a group's remainder shares a batch with another's.
    sixes = np.repeat(np.arange(10), 6)
    uneven = LengthBatches(lengths[:60], 4, 5, 0, 1, False, lambda: sixes).epoch(0)
    assert sum(len(set(sixes[b].tolist())) > 1 for b in uneven) <= 10


def test_held_out_and_hub_batches_are_longest_first_and_stable():
    lengths = [3, 9, 3, 9, 5]
    assert [b.tolist() for b in sorted_batches(lengths, 2)] == [[1, 3], [4, 0], [2]]
    assert [b.tolist() for b in sorted_batches(lengths, 2, rank=1, world=2)] == [[4, 0]]
    assert length_batches(lengths, batch_tokens=18) == [[1, 3], [4, 0, 2]]


def test_pad_takes_lists_arrays_and_tensors():
    padded = pad([[0, 5, 2], np.array([0, 2], dtype=np.int32), torch.tensor([7])], pad_id=1)
    assert padded.dtype == torch.long and padded.tolist() == [[0, 5, 2], [0, 2, 1], [7, 1, 1]]
    assert pad([[0, 2]], pad_id=1, width=4).tolist() == [[0, 2, 1, 1]]
