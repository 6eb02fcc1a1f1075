"""Exact nearest passages by cosine, and the figures BEIR reports for them.

Search: the query vectors against the corpus vectors in blocks of queries x passages, each block
merged into the queries' running top k, so memory holds the corpus vectors and one block of scores,
never the whole query x corpus matrix (a 100,000-passage corpus at 384 dimensions is 154 MB).

Ties: passages of equal score rank by corpus id in descending byte order, as trec_eval sorts a run
(its `comp_sim_docno`; pytrec_eval, behind BEIR's figures, is trec_eval), so the top k kept and every
figure below are what pytrec_eval gives for the same scores.

Figures (BEIR's, x 100, averaged over the queries): recall@k, the share of a query's relevant passages
(score > 0) in its top k (pytrec_eval's recall_k); MRR@10, 1 / the rank of the first relevant passage in
the top 10, 0 if none (BEIR's `mrr`); nDCG@10, trec_eval's ndcg_cut_10: gains are the judged scores,
discounted by log2(rank + 1), over the ideal ordering of the query's judgements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

QUERY_BLOCK = 256
PASSAGE_BLOCK = 16384


def tie_order(ids: Sequence[str]) -> np.ndarray:
    """Each id's place when the ids are sorted in descending byte order (0 first): trec_eval's tie rule."""
    order = sorted(range(len(ids)), key=lambda i: ids[i].encode("utf-8"), reverse=True)
    place = np.empty(len(ids), dtype=np.int64)
    place[order] = np.arange(len(ids))
    return place


def rank_rows(scores: np.ndarray, places: np.ndarray, k: int) -> np.ndarray:
    """Per row of `scores` [Q, N], the column indices of its top min(k, N), best first: higher score,
    then lower place (`places` [Q, N] or [N]: the tie rule), exactly, ties at the k-th score included."""
    n = scores.shape[1]
    k = min(k, n)
    places = np.broadcast_to(places, scores.shape)
    if k < n:
        kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1]  # each row's k-th best score
    else:
        kth = np.full(len(scores), -np.inf, dtype=scores.dtype)
    rows = np.zeros((len(scores), k), dtype=np.int64)
    for r, (row, place, threshold) in enumerate(zip(scores, places, kth)):
        candidates = np.flatnonzero(row >= threshold)  # every column that can be in the top k
        order = np.lexsort((place[candidates], -row[candidates].astype(np.float64)))
        rows[r] = candidates[order[:k]]
    return rows


def top_k(
    queries: np.ndarray,
    passages: np.ndarray,
    places: np.ndarray,
    k: int,
    progress: Callable[[int], None] | None = None,
    query_block: int = QUERY_BLOCK,
    passage_block: int = PASSAGE_BLOCK,
) -> tuple[np.ndarray, np.ndarray]:
    """The top k passages of each query by cosine ([Q, k] indices and scores, best first; `places`
    from `tie_order`), the vectors normalised here; `progress(n)` after each block of n queries."""
    queries, passages = _unit(queries), _unit(passages)
    k = min(k, len(passages))
    found_i = np.zeros((len(queries), k), dtype=np.int64)
    found_s = np.zeros((len(queries), k), dtype=np.float32)
    for q0 in range(0, len(queries), query_block):
        block = queries[q0 : q0 + query_block]
        best_i = np.zeros((len(block), 0), dtype=np.int64)
        best_s = np.zeros((len(block), 0), dtype=np.float32)
        for p0 in range(0, len(passages), passage_block):
            scores = block @ passages[p0 : p0 + passage_block].T
            columns = np.broadcast_to(np.arange(p0, p0 + scores.shape[1]), scores.shape)
            # The running top k and this block's passages, ranked together by the one rule.
            cand_i, cand_s = np.concatenate([best_i, columns], 1), np.concatenate([best_s, scores], 1)
            chosen = rank_rows(cand_s, places[cand_i], k)
            best_i = np.take_along_axis(cand_i, chosen, 1)
            best_s = np.take_along_axis(cand_s, chosen, 1)
        found_i[q0 : q0 + len(block)], found_s[q0 : q0 + len(block)] = best_i, best_s
        if progress is not None:
            progress(len(block))
    return found_i, found_s


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def query_figures(ranked: Sequence[str], judged: dict[str, int]) -> dict[str, float]:
    """recall@1, recall@10, MRR@10 and nDCG@10 (fractions) of one query's ranked passage ids."""
    relevant = {p for p, score in judged.items() if score > 0}
    hits = [p in relevant for p in ranked[:10]]
    first = next((i for i, hit in enumerate(hits) if hit), None)
    dcg = sum(max(judged.get(p, 0), 0) / math.log2(i + 2) for i, p in enumerate(ranked[:10]))
    ideal = sorted((s for s in judged.values() if s > 0), reverse=True)[:10]
    idcg = sum(s / math.log2(i + 2) for i, s in enumerate(ideal))
    return {
        "recall@1": sum(hits[:1]) / len(relevant),
        "recall@10": sum(hits) / len(relevant),
        "mrr@10": 0.0 if first is None else 1 / (first + 1),
        "ndcg@10": dcg / idcg,
    }


def figures(rankings: dict[str, Sequence[str]], qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """The figures x 100, averaged over the queries of `qrels` (each ranked in `rankings`)."""
    per_query = [query_figures(rankings[q], judged) for q, judged in qrels.items()]
    return {name: 100 * float(np.mean([f[name] for f in per_query])) for name in per_query[0]}
