"""SQuAD's official metrics, v1.1 and v2.0 (written here, same numbers as the official scripts),
and the predictions and null-odds files they read."""

from __future__ import annotations

import math
import re
import string
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from roberta.errors import UserError
from roberta.io import read_json, write_json
from roberta.qa.examples import SquadExample, check_version, read_squad

# The official v2.0 script's default --na-prob-thresh: with a null-odds file, a question whose
# odds exceed it counts as answered "no answer" in exact/f1 (not in best_*).
OFFICIAL_NA_PROB_THRESH = 1.0


def normalize_answer(text: str) -> str:
    """Lower case, punctuation removed, articles (a, an, the) removed, whitespace collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def exact_match(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def f1_v1(prediction: str, gold: str) -> float:
    """v1.1's token F1: 0 when no normalized token is shared (both empty included)."""
    return _token_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def f1_v2(prediction: str, gold: str) -> float:
    """v2.0's token F1: as v1.1, except that an empty side scores 1 if both are empty."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    return _token_f1(pred, ref)


def _token_f1(pred: list[str], ref: list[str]) -> float:
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def gold_v2(example: SquadExample) -> list[str]:
    # v2.0 drops gold answers that normalize to nothing; with none left the gold is "no answer".
    return [text for text, _ in example.answers if normalize_answer(text)] or [""]


def squad_scores(
    examples: Sequence[SquadExample],
    predictions: dict[str, str],
    version: str,
    null_odds: dict[str, float] | None = None,
) -> dict:
    """The official metrics in percent. v1.1: exact_match, f1. v2.0 adds HasAns_*/NoAns_* and,
    with null odds, best_exact/best_f1 and their thresholds. Both report `total` and `missing`.

    A question without a prediction scores 0 and is counted in `missing` (the official v1.1
    script does the same; the v2.0 script would drop it from the totals or fail)."""
    check_version(version)
    if version == "1.1":
        return _scores_v1(examples, predictions)
    golds = {e.id: gold_v2(e) for e in examples}
    has_answer = {qid: gold != [""] for qid, gold in golds.items()}
    answered = {qid for qid in golds if qid in predictions}
    exact = {
        qid: max(exact_match(predictions[qid], g) for g in golds[qid]) if qid in answered else 0
        for qid in golds
    }
    f1 = {
        qid: max(f1_v2(predictions[qid], g) for g in golds[qid]) if qid in answered else 0.0 for qid in golds
    }
    # In the odds file's order: the best-threshold search breaks ties in odds by it, as the
    # official script does.
    odds = {qid: v for qid, v in (null_odds or {}).items() if qid in answered}
    # The official script applies its default threshold to exact/f1 whenever odds are given.
    thresholded = [
        {
            qid: float(not has_answer[qid]) if odds.get(qid, 0.0) > OFFICIAL_NA_PROB_THRESH else s
            for qid, s in scores.items()
        }
        for scores in (exact, f1)
    ]
    result = {"exact_match": _percent(thresholded[0]), "f1": _percent(thresholded[1]), "total": len(golds)}
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid in golds if has_answer[qid] == wanted]
        if qids:
            result[f"{prefix}_exact"] = _percent({q: thresholded[0][q] for q in qids})
            result[f"{prefix}_f1"] = _percent({q: thresholded[1][q] for q in qids})
            result[f"{prefix}_total"] = len(qids)
    if null_odds is not None:
        result["best_exact"], result["best_exact_thresh"] = find_best_threshold(
            predictions, exact, odds, has_answer
        )
        result["best_f1"], result["best_f1_thresh"] = find_best_threshold(predictions, f1, odds, has_answer)
    result["missing"] = len(golds) - len(answered)
    return result


def _scores_v1(examples: Sequence[SquadExample], predictions: dict[str, str]) -> dict:
    exact = {
        e.id: max(exact_match(predictions[e.id], t) for t, _ in e.answers) if e.id in predictions else 0
        for e in examples
    }
    f1 = {
        e.id: max(f1_v1(predictions[e.id], t) for t, _ in e.answers) if e.id in predictions else 0.0
        for e in examples
    }
    return {
        "exact_match": _percent(exact),
        "f1": _percent(f1),
        "total": len(exact),
        "missing": sum(e.id not in predictions for e in examples),
    }


def _percent(scores: dict[str, float]) -> float:
    return 100.0 * sum(scores.values()) / len(scores) if scores else 0.0


def find_best_threshold(
    predictions: dict[str, str],
    scores: dict[str, float],
    null_odds: dict[str, float],
    has_answer: dict[str, bool],
) -> tuple[float, float]:
    """The official v2.0 `find_best_thresh`: start from every question predicted "no answer",
    then answer questions in increasing null odds, keeping the best running score. Questions
    without odds (no prediction) keep their score of 0 throughout."""
    qids = sorted((qid for qid in null_odds if qid in scores), key=null_odds.__getitem__)
    current = best = sum(1 for qid in qids if not has_answer[qid])
    threshold = 0.0
    for qid in qids:
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, threshold = current, null_odds[qid]
    return 100.0 * best / len(scores), threshold


def evaluate_squad(
    dataset_path: str | Path,
    predictions_path: str | Path,
    version: str,
    null_odds_path: str | Path | None = None,
) -> dict:
    """`squad_scores` for an official dataset file and predictions file ({id: text}), with an
    optional v2.0 null-odds file ({id: number}). Missing predictions are also named in a warning."""
    check_version(version)
    if null_odds_path is not None and version != "2.0":
        raise UserError("null odds are only used by SQuAD v2.0")
    examples = read_squad(dataset_path, version)
    predictions = _read_mapping(predictions_path, str)
    null_odds = None
    if null_odds_path is not None:
        # null: odds JSON cannot hold, +infinity (a context with no span, such as only spaces), as
        # we write them.
        null_odds = _read_mapping(null_odds_path, (int, float), null=math.inf)
        lacking = [e.id for e in examples if e.id in predictions and e.id not in null_odds]
        if lacking:
            raise UserError(
                f"{null_odds_path}: no null odds for {len(lacking)} predicted question(s) (first: "
                f"{lacking[0]})"
            )
    result = squad_scores(examples, predictions, version, null_odds)
    if result["missing"]:
        warnings.warn(
            f"{predictions_path}: {result['missing']} question(s) have no prediction and score 0",
            stacklevel=2,
        )
    return result


def _read_mapping(path: str | Path, kind, null: object = None) -> dict:
    """{question id: value of `kind`}; a JSON null reads as `null` where one is given."""
    values = read_json(path)
    for qid, value in values.items():
        if value is None and null is not None:
            values[qid] = value = null
        if not isinstance(value, kind) or isinstance(value, bool):
            wanted = "a string" if kind is str else "a number"
            raise UserError(f"{path}: {qid!r}: expected {wanted}, got {type(value).__name__}")
        # Python's JSON reader takes NaN; odds that do not compare would order the threshold search at random.
        if isinstance(value, float) and np.isnan(value):
            raise UserError(f"{path}: {qid!r}: expected a number, got NaN")
    return values


def write_predictions(path: str | Path, predictions: dict) -> None:
    """A predictions ({id: text}) or null-odds ({id: float}) file in the official format, written
    atomically."""
    write_json(path, predictions)
