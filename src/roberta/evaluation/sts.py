"""`roberta evaluate sts`: how well a model's sentence vectors rank pairs of texts, as the STS
benchmarks measure it: the Spearman and Pearson correlations (x 100) of each pair's cosine with
its gold score. One function measures a checkpoint of ours (its own sentence vector: a sentence
encoder's stored pooling, else `--pool`) and a sentence-transformers model directory (the
anchor, e.g. all-MiniLM-L6-v2, through its own library), so both are measured alike.

    evaluate_sts("runs/embed/best", "STS-B/dev.tsv")  # {"spearman": 78.1, "pearson": 77.9, ...}
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from roberta.checkpoint import is_checkpoint
from roberta.convert.sentence_transformers import SentenceEncoder, is_sentence_transformer
from roberta.similarity.metric import sts_figures
from roberta.similarity.pairs import Columns, read_pairs

STS_COLUMNS = Columns("sentence1", "sentence2", "score")  # GLUE's STS-B files


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two [N, D] arrays (0 for a zero vector)."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(norms, 1e-12)


def hub_vectors(hub, texts: Sequence[str], pool: str | None = None) -> np.ndarray:
    """Our model's sentence vectors of `texts` (cut to its positions), [N, D] float32."""
    return hub.embed(hub.encode_batch(list(texts), truncate=True), pool=pool).float().numpy()


def evaluate_sts(
    model: str | Path, data: str | Path, columns: Columns = STS_COLUMNS, pool: str | None = None
) -> dict:
    """Spearman and Pearson (x 100) of the cosines of `data`'s pairs against their scores, for our
    checkpoint (any format roberta reads) or a sentence-transformers directory."""
    from roberta.errors import UserError

    pairs = read_pairs(data, columns)
    if len(pairs) < 2:
        raise UserError(f"{data}: {len(pairs)} pair, but a correlation needs at least 2")
    texts = [p.text for p in pairs] + [p.pair for p in pairs]
    if is_sentence_transformer(model) and not is_checkpoint(model):
        if pool is not None:
            raise UserError(f"{model}: a sentence-transformers model pools as its modules say; drop --pool")
        vectors, encoder = SentenceEncoder.load(model).encode(texts, progress=False), "sentence-transformers"
    else:
        from roberta.hub import load

        hub = load(model)
        vectors = hub_vectors(hub, texts, pool)
        own = hub.embedding_pool()
        encoder = (
            f"roberta, its embedding head ({own})"
            if own and pool in (None, own)
            else f"roberta, {pool or 'cls'}"
        )
    n = len(pairs)
    predicted, scores = cosines(vectors[:n], vectors[n:]), [p.score for p in pairs]
    figures = sts_figures(predicted, scores)
    if any(math.isnan(value) for value in figures.values()):
        # A correlation is undefined only where one side is constant.
        why = (
            f"{data} has the same score everywhere"
            if len(set(scores)) == 1
            else f"{model} gives every pair the same cosine"
        )
        warnings.warn(f"spearman, pearson undefined: {why}", stacklevel=2)
    return {
        "spearman": 100 * figures["spearman"],
        "pearson": 100 * figures["pearson"],
        "pairs": n,
        "model": str(model),
        "vectors": encoder,
    }
