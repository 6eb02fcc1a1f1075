"""Topics of a set of vectors: spherical k-means, so that a distillation batch can be drawn from one
topic. Texts on one topic are each other's hard negatives; in a batch of them the teacher's
similarity structure says which of several near passages fits a query best, where a batch drawn at
random mostly says which of 64 unrelated ones does (topic-aware sampling, Hofstätter et al. 2021).

The clustering is a function of the vectors, the count and the seed alone (float64, a seeded
start, ties to the lowest index), so every rank of a run and every resumption finds the same topics.
"""

from __future__ import annotations

import numpy as np

from roberta.errors import UserError

ROUNDS = 10  # Lloyd's iterations: the batches need coherent topics, not a converged optimum
CHUNK = 8192  # vectors assigned at a time: [CHUNK, count] scores stay small beside the vectors


def topics(vectors: np.ndarray, count: int, seed: int) -> np.ndarray:
    """[N] the topic (0..count-1) of each row of `vectors` [N, D]: the nearest by cosine of `count`
    centres, started at rows drawn by `seed` and moved `ROUNDS` times to their members' mean
    direction. A topic left empty keeps its centre."""
    check_count(count, len(vectors))
    unit = _unit(np.asarray(vectors, dtype=np.float64))
    centres = unit[np.random.default_rng(seed).choice(len(unit), count, replace=False)]
    for _ in range(ROUNDS):
        members = _nearest(unit, centres)
        sums = np.zeros_like(centres)
        np.add.at(sums, members, unit)
        filled = np.bincount(members, minlength=count) > 0
        centres[filled] = _unit(sums[filled])
    return _nearest(unit, centres)


def check_count(count: int, examples: int) -> None:
    """A topic needs an example: `count` between 1 and `examples`, else a one-line refusal."""
    if not 1 <= count <= examples:
        raise UserError(f"--topic-batches {count}: it must be between 1 and the {examples} training examples")


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _nearest(unit: np.ndarray, centres: np.ndarray) -> np.ndarray:
    return np.concatenate([(unit[i : i + CHUNK] @ centres.T).argmax(-1) for i in range(0, len(unit), CHUNK)])
