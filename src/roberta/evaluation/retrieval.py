"""`roberta evaluate retrieval`: how well a model's sentence vectors find the passages that answer a
query, as BEIR measures a dense retriever (Thakur et al. 2021): every passage of the corpus and every
query embedded once, exact cosine search (`similarity.ranking.top_k`, blocked so a large corpus fits
in memory), recall@1, recall@10, MRR@10 and nDCG@10 x 100. One function measures a checkpoint of
ours (its own sentence vector, else `--pool`) and a sentence-transformers directory (through its own
library), as `evaluate sts` does, so both are measured alike.

    evaluate_retrieval("runs/student/best", "corpus.jsonl", "queries.jsonl", "qrels/dev.tsv")
    # {"recall@1": 61.2, "recall@10": 90.3, "mrr@10": 71.0, "ndcg@10": 75.7, "queries": 10570, ...}
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from roberta.checkpoint import is_checkpoint
from roberta.convert.sentence_transformers import SentenceEncoder, is_sentence_transformer
from roberta.errors import UserError
from roberta.evaluation.sts import hub_vectors
from roberta.similarity.beir import read_benchmark
from roberta.similarity.ranking import figures, tie_order, top_k

TOP_K = 10  # every figure reported reads the first 10 passages
EMBED_CHUNK = 1024  # texts per call of our hub, so that the bar moves


class Encoder:
    """Texts -> vectors [N, D] for our checkpoint or a sentence-transformers directory, and what
    made them (a line for the figures)."""

    def __init__(self, model: str | Path, pool: str | None = None):
        self.pool = pool
        if is_sentence_transformer(model) and not is_checkpoint(model):
            if pool is not None:
                raise UserError(
                    f"{model}: a sentence-transformers model pools as its modules say; drop --pool"
                )
            self.st, self.hub = SentenceEncoder.load(model), None
            self.name = "sentence-transformers"
        else:
            from roberta.hub import load

            self.st, self.hub = None, load(model)
            own = self.hub.embedding_pool()
            self.name = (
                f"roberta, its embedding head ({own})"
                if own and pool in (None, own)
                else f"roberta, {pool or 'cls'}"
            )

    def encode(self, texts: Sequence[str], what: str, progress: bool) -> np.ndarray:
        if self.st is not None:
            return self.st.encode(list(texts), progress, what=what)
        from tqdm import tqdm

        parts = []
        with tqdm(total=len(texts), desc=f"embedding {what}", unit=" texts", disable=not progress) as bar:
            for start in range(0, len(texts), EMBED_CHUNK):
                parts.append(hub_vectors(self.hub, texts[start : start + EMBED_CHUNK], self.pool))
                bar.update(len(parts[-1]))
        return np.concatenate(parts)


def evaluate_retrieval(
    model: str | Path,
    corpus: str | Path,
    queries: str | Path,
    qrels: str | Path,
    pool: str | None = None,
    drop_unjudged: bool = False,
    progress: bool = True,
) -> dict:
    """recall@1, recall@10, MRR@10 and nDCG@10 (x 100) of `model`'s exact cosine search of `corpus`
    for `queries`, judged by `qrels` (BEIR's layout: `similarity.beir`), all three files checked
    before the model is read."""
    bench = read_benchmark(corpus, queries, qrels, drop_unjudged)
    if bench.dropped:
        shown = ", ".join(repr(q) for q in bench.dropped[:3])
        more = f" and {len(bench.dropped) - 3} more" if len(bench.dropped) > 3 else ""
        warnings.warn(
            f"{queries}: {len(bench.dropped)} queries without a relevant judgement left out "
            f"(--drop-unjudged): {shown}{more}",
            stacklevel=2,
        )
    encoder = Encoder(model, pool)
    passages = encoder.encode(bench.passages, "the corpus", progress)
    vectors = encoder.encode(bench.queries, "the queries", progress)
    from tqdm import tqdm

    with tqdm(total=len(vectors), desc="searching", unit=" queries", disable=not progress) as bar:
        found, _ = top_k(vectors, passages, tie_order(bench.corpus_ids), TOP_K, bar.update)
    ranked = {q: [bench.corpus_ids[i] for i in row] for q, row in zip(bench.query_ids, found)}
    return {
        **figures(ranked, bench.qrels),
        "queries": len(bench.query_ids),
        "passages": len(bench.corpus_ids),
        "dropped": len(bench.dropped),
        "model": str(model),
        "vectors": encoder.name,
    }
