"""How well cosines rank pairs of texts: the Pearson and Spearman correlations with gold scores, as
GLUE's STS-B metric computes them (scipy's, NaN where undefined), for the STS-B task, the
embedding task's dev set and `roberta evaluate sts` alike."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

MIN_PAIRS = 2  # a correlation needs two points


def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
    from scipy.stats import pearsonr  # on use: scipy takes a second to load

    return pearsonr(predictions, labels)[0] if len(predictions) >= MIN_PAIRS else math.nan


def spearman(predictions: Sequence[float], labels: Sequence[float]) -> float:
    from scipy.stats import spearmanr

    return spearmanr(predictions, labels)[0] if len(predictions) >= MIN_PAIRS else math.nan


def sts_figures(cosines: Sequence[float], scores: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman of cosines against gold scores (NaN where undefined: fewer than two
    pairs, or constant values), as GLUE's STS-B metric computes them."""
    cosines, scores = list(map(float, cosines)), list(map(float, scores))
    if len(cosines) != len(scores) or not scores:
        raise ValueError(f"{len(cosines)} predictions for {len(scores)} labels")
    with warnings.catch_warnings():
        # scipy's ConstantInputWarning announces the NaN; the callers say it once, where it matters.
        warnings.simplefilter("ignore")
        return {"pearson": float(pearson(cosines, scores)), "spearman": float(spearman(cosines, scores))}
