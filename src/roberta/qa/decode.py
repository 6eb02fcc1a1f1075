"""Answers from a model's start/end logits over SQuAD windows: the n best spans of each question
and, for v2.0, the null odds and the threshold above which a question is answered "no answer"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from roberta.qa.examples import SquadExample, check_version
from roberta.qa.metric import exact_match, f1_v2, find_best_threshold, gold_v2
from roberta.qa.windows import SquadWindow


@dataclass(frozen=True)
class Span:
    text: str
    score: float  # start logit + end logit
    char_start: int


@dataclass
class Decoded:
    predictions: dict[str, str]  # the official predictions file: "" where v2.0's null wins
    best_spans: dict[str, str]  # the best non-null span of every question
    null_odds: dict[str, float]  # v2.0: null score - best span score (empty for v1.1)
    nbest: dict[str, list[Span]]  # up to n_best distinct spans per question, best first


def decode(
    examples: Sequence[SquadExample],
    windows: Sequence[SquadWindow],
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    n_best: int = 20,
    max_answer_length: int = 30,
    null_threshold: float = 0.0,
    *,
    version: str,
) -> Decoded:
    """Answers from per-window start/end logits (one row per window, padded rows allowed).

    In each window the `n_best` highest start and end logits among the context tokens are
    paired (end >= start, at most `max_answer_length` tokens) and scored start + end; the best
    span over all windows of a question wins. For v2.0, as in Google's and HF's reference
    decoding, the null score is the smallest `<s>` start + end over the question's windows, and
    the question is predicted unanswerable ("") when null score - best span score exceeds
    `null_threshold`."""
    check_version(version)
    by_example: dict[int, list[int]] = {}
    for w, window in enumerate(windows):
        by_example.setdefault(window.example_index, []).append(w)
    best_spans, null_odds, nbest = {}, {}, {}
    for index, ws in by_example.items():
        example = examples[index]
        spans: dict[tuple[int, int], float] = {}
        for w in ws:
            start, end = (np.asarray(logits[w], dtype=np.float64) for logits in (start_logits, end_logits))
            for score, char_start, char_end in _window_spans(
                windows[w], start, end, n_best, max_answer_length
            ):
                spans[char_start, char_end] = max(score, spans.get((char_start, char_end), -np.inf))
        ranked = sorted(spans.items(), key=lambda item: -item[1])[:n_best]
        nbest[example.id] = [Span(example.context[s:e], score, s) for (s, e), score in ranked]
        # A context of only spaces has no span: no answer, with infinite odds.
        best = nbest[example.id][0] if ranked else Span("", -np.inf, 0)
        best_spans[example.id] = best.text
        if version == "2.0":
            null_score = min(float(start_logits[w][0]) + float(end_logits[w][0]) for w in ws)
            null_odds[example.id] = null_score - best.score
    predictions = (
        apply_null_threshold(best_spans, null_odds, null_threshold) if version == "2.0" else dict(best_spans)
    )
    return Decoded(predictions, best_spans, null_odds, nbest)


def _window_spans(
    window: SquadWindow, start: np.ndarray, end: np.ndarray, n_best: int, max_answer_length: int
) -> list[tuple[float, int, int]]:
    """(score, char_start, char_end) of the valid pairs among the window's top start/end tokens."""
    c0, c1 = window.context_start, window.context_end
    # Top-k among context tokens only: a high logit on the question or a separator can never
    # be an answer, and would only crowd valid candidates out of the k.
    starts = np.argsort(-start[c0:c1], kind="stable")[:n_best]
    ends = np.argsort(-end[c0:c1], kind="stable")[:n_best]
    i, j = np.meshgrid(starts, ends, indexing="ij")
    char_start, char_end = window.offsets[i, 0], window.offsets[j, 1]
    # A lone space token has an empty span: a span of only such tokens has no text.
    valid = (j >= i) & (j - i + 1 <= max_answer_length) & (char_end > char_start)
    i, j = i[valid], j[valid]
    scores = start[c0 + i] + end[c0 + j]
    return list(zip(scores.tolist(), char_start[valid].tolist(), char_end[valid].tolist()))


def apply_null_threshold(
    best_spans: dict[str, str], null_odds: dict[str, float], threshold: float
) -> dict[str, str]:
    """v2.0 predictions: "" where a question's null odds exceed `threshold`, its best span elsewhere."""
    return {qid: "" if null_odds[qid] > threshold else text for qid, text in best_spans.items()}


def choose_null_threshold(
    examples: Sequence[SquadExample],
    best_spans: dict[str, str],
    null_odds: dict[str, float],
    metric: str = "f1",
) -> tuple[float, float]:
    """The null-odds threshold that maximizes dev `metric` ('f1' or 'exact_match') when applied
    to `best_spans`, and that score (percent): the official v2.0 script's best_* search."""
    if metric not in ("f1", "exact_match"):
        raise ValueError(f"metric must be 'f1' or 'exact_match', not {metric!r}")
    golds = {e.id: gold_v2(e) for e in examples if e.id in best_spans}
    score = f1_v2 if metric == "f1" else exact_match
    scores = {qid: max(score(best_spans[qid], g) for g in gold) for qid, gold in golds.items()}
    has_answer = {qid: gold != [""] for qid, gold in golds.items()}
    best, threshold = find_best_threshold(best_spans, scores, null_odds, has_answer)
    return threshold, best
