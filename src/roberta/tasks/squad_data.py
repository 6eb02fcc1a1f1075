"""SQuAD without training, as `roberta.qa` holds it: reading (`qa.examples`), windows
(`qa.windows`), decoding (`qa.decode`), the official metrics (`qa.metric`) and a model's answers
(`qa.predict`). Their names stay importable from here; the two that run a model load on first use,
so that importing this module, as `roberta evaluate squad` does, imports no torch.
"""

from roberta.qa.decode import Decoded, Span, apply_null_threshold, choose_null_threshold, decode
from roberta.qa.examples import VERSIONS, SquadExample, check_version, read_squad
from roberta.qa.metric import (
    OFFICIAL_NA_PROB_THRESH,
    evaluate_squad,
    exact_match,
    f1_v1,
    f1_v2,
    normalize_answer,
    squad_scores,
    write_predictions,
)
from roberta.qa.windows import SQUAD_MAX_LENGTH, SquadFeatures, SquadWindow, answer_windows, make_windows

_WITH_TORCH = ("predict_windows", "window_logits")

__all__ = [
    "OFFICIAL_NA_PROB_THRESH",
    "SQUAD_MAX_LENGTH",
    "VERSIONS",
    "Decoded",
    "Span",
    "SquadExample",
    "SquadFeatures",
    "SquadWindow",
    "answer_windows",
    "apply_null_threshold",
    "check_version",
    "choose_null_threshold",
    "decode",
    "evaluate_squad",
    "exact_match",
    "f1_v1",
    "f1_v2",
    "make_windows",
    "normalize_answer",
    "read_squad",
    "squad_scores",
    "write_predictions",
    *_WITH_TORCH,
]


def __getattr__(name: str):
    if name not in _WITH_TORCH:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from roberta.qa import predict

    return getattr(predict, name)
