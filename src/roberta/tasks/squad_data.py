"""SQuAD v1.1 / v2.0 extractive QA without training: the official JSON, windows over long
contexts, decoding of start/end logits back to context text, and the official metrics (written
here, same numbers). `roberta evaluate squad` and `hub.answer()` read it; it imports no torch
(only `predict_windows`, which runs a model, does when called), and the objective that trains on
these windows is in `tasks/squad.py`.

    examples = read_squad("dev-v2.0.json", "2.0")
    features = make_windows(tokenizer, examples, train=False)
    ... the model gives start/end logits per window ...
    decoded = decode(examples, features.windows, start_logits, end_logits, version="2.0")
    threshold, _ = choose_null_threshold(examples, decoded.best_spans, decoded.null_odds)
    answers = apply_null_threshold(decoded.best_spans, decoded.null_odds, threshold)
    write_predictions("predictions.json", answers)
    evaluate_squad("dev-v2.0.json", "predictions.json", "2.0")  # {"exact_match": .., "f1": .., ...}

A window is `<s> question </s></s> context-window </s>`. Answers are located through the
tokenizer's character offsets, so a token span maps back to the original context characters
(byte-level BPE spaces, newlines and non-ASCII included). An answer that starts or ends inside a
token (about 1% of SQuAD dev: "1990" in "1990s") maps to the smallest token span covering it.
"""

from __future__ import annotations

import math
import re
import string
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from roberta.errors import UserError
from roberta.io import read_json, write_json
from roberta.tokenizer import Tokenizer

VERSIONS = ("1.1", "2.0")
# Tokens per window, as in BERT's run_squad.py and HF's run_qa.py (max_seq_length 384).
SQUAD_MAX_LENGTH = 384
# The official v2.0 script's default --na-prob-thresh: with a null-odds file, a question whose
# odds exceed it counts as answered "no answer" in exact/f1 (not in best_*).
OFFICIAL_NA_PROB_THRESH = 1.0


@dataclass(frozen=True)
class SquadExample:
    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]  # (text, char_start) per gold answer; () when impossible
    impossible: bool = False


# ---------------------------------------------------------------- reading


def check_version(version: str) -> None:
    if version not in VERSIONS:
        raise UserError(f"SQuAD version must be one of {', '.join(VERSIONS)}, got {version!r}")


def _field(obj, name: str, kind: type, path: Path, where: str):
    if not isinstance(obj, dict):
        raise UserError(f"{path}: {where}: expected a JSON object")
    if name not in obj:
        raise UserError(f"{path}: {where}: missing field '{name}'")
    value = obj[name]
    # bool is an int in Python; an answer_start of `true` is still bad input.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UserError(f"{path}: {where}.{name}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def read_squad(path: str | Path, version: str) -> list[SquadExample]:
    """Every question of an official SQuAD JSON file (data / paragraphs / qas), in file order.

    v2.0 questions marked `is_impossible` have no gold answers; in a v1.1 file every question
    must have one (a v2.0 file read as v1.1 is refused rather than scored wrongly)."""
    check_version(version)
    path = Path(path)
    examples: list[SquadExample] = []
    seen: set[str] = set()
    for i, article in enumerate(_field(read_json(path), "data", list, path, "top level")):
        for j, paragraph in enumerate(_field(article, "paragraphs", list, path, f"data[{i}]")):
            where = f"data[{i}].paragraphs[{j}]"
            context = _field(paragraph, "context", str, path, where)
            if not context:
                raise UserError(f"{path}: {where}.context: empty")
            for k, qa in enumerate(_field(paragraph, "qas", list, path, where)):
                examples.append(_read_question(qa, context, version, seen, path, f"{where}.qas[{k}]"))
    if not examples:
        # Nothing to train on or score: a metric over no questions would read as a score of 0.
        raise UserError(f"{path}: no questions (data / paragraphs / qas are empty)")
    return examples


def _read_question(qa, context: str, version: str, seen: set[str], path: Path, where: str) -> SquadExample:
    qid = _field(qa, "id", str, path, where)
    if qid in seen:
        raise UserError(f"{path}: {where}.id: duplicate question id {qid!r}")
    seen.add(qid)
    question = _field(qa, "question", str, path, where)
    impossible = version == "2.0" and bool(qa.get("is_impossible", False))
    answers = []
    for a, answer in enumerate(_field(qa, "answers", list, path, where)):
        at = f"{where}.answers[{a}]"
        answers.append((_field(answer, "text", str, path, at), _field(answer, "answer_start", int, path, at)))
    if not answers and not impossible:
        hint = (
            " (a SQuAD v2.0 file? use version 2.0)"
            if version == "1.1"
            else " and is not marked is_impossible"
        )
        raise UserError(f"{path}: {where}.answers: question {qid!r} has no answer{hint}")
    return SquadExample(qid, question, context, tuple(answers), impossible)


# ---------------------------------------------------------------- windows


@dataclass
class SquadWindow:
    """One model input: `<s> question </s></s> context[window] </s>`.

    Context tokens are `tokens[context_start:context_end]`; `offsets[k]` is the (start, end)
    character span in the example's context of context token k (a view shared by the windows
    of one context). `start_position`/`end_position` index `tokens`: the answer's tokens,
    or 0 (`<s>`) when the answer is not inside this window, the question is impossible, or the
    windows were made for evaluation."""

    tokens: np.ndarray  # int32 [T]
    example_index: int
    context_start: int
    offsets: np.ndarray  # int32 [context_end - context_start, 2]
    start_position: int = 0
    end_position: int = 0

    @property
    def context_end(self) -> int:
        return self.context_start + len(self.offsets)


@dataclass
class SquadFeatures:
    windows: list[SquadWindow]
    # Training questions whose answer_start does not point at their answer text, or whose
    # answer covers no token (all whitespace): skipped, never trained on.
    mismatched_ids: list[str]

    @property
    def mismatched(self) -> int:
        return len(self.mismatched_ids)


def make_windows(
    tokenizer: Tokenizer,
    examples: Sequence[SquadExample],
    max_length: int = 384,
    stride: int = 128,
    max_query: int = 64,
    *,
    train: bool,
) -> SquadFeatures:
    """Windows over each example's context, every window holding the (truncated) question.

    `stride` is the number of context tokens two consecutive windows share, as HF's `doc_stride`
    is used by its question-answering recipe (`run_qa.py` passes it as the tokenizer's overflow
    `stride`); Google's BERT `run_squad.py` instead moves each window `doc_stride` tokens on.
    Each window holds up to `max_length - len(question) - 4` context tokens.

    With `train`, each window gets the first gold answer's token positions (or `<s>` where the
    answer lies outside the window, and for impossible questions); a question whose answer
    cannot be located is skipped, counted in `mismatched_ids`, and named in a warning.
    """
    if max_query < 1 or stride < 0:
        raise UserError(f"max_query must be positive and stride non-negative (got {max_query}, {stride})")
    # HF's recipe strips leading whitespace: some SQuAD questions start with many spaces.
    questions = tokenizer.tokenize_ids_batch([e.question.lstrip() for e in examples])
    # A context is tokenized once for all its questions.
    encoded: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    windows: list[SquadWindow] = []
    mismatched: list[str] = []
    for index, (example, question) in enumerate(zip(examples, questions)):
        if example.context not in encoded:
            ids, offsets = tokenizer.tokenize_with_offsets(example.context)
            encoded[example.context] = (
                np.asarray(ids, dtype=np.int32),
                np.asarray(offsets, dtype=np.int32).reshape(-1, 2),
            )
        context_ids, offsets = encoded[example.context]
        answer = None
        if train and not example.impossible:
            answer = _answer_tokens(example, offsets)
            if answer is None:
                mismatched.append(example.id)
                continue
        prefix = [tokenizer.bos_id, *question[:max_query], tokenizer.eos_id, tokenizer.eos_id]
        windows.extend(
            _example_windows(
                index, prefix, context_ids, offsets, answer, max_length, stride, tokenizer.eos_id
            )
        )
    if mismatched:
        warnings.warn(
            f"{len(mismatched)} SQuAD question(s) skipped in training: answer_start does not match "
            f"the answer text (first: {mismatched[0]})",
            stacklevel=2,
        )
    return SquadFeatures(windows, mismatched)


def _example_windows(
    index: int,
    prefix: list[int],
    context_ids: np.ndarray,
    offsets: np.ndarray,
    answer: tuple[int, int] | None,
    max_length: int,
    stride: int,
    eos_id: int,
) -> list[SquadWindow]:
    """The windows of one question: `prefix` (`<s> question </s></s>`) and a stretch of its
    context each, the answer's token positions in those that hold it whole."""
    budget = max_length - len(prefix) - 1
    if budget <= stride:
        raise UserError(
            f"max_length={max_length} leaves {budget} context tokens per window, "
            f"not more than stride={stride}"
        )
    windows = []
    for begin, end in _window_bounds(len(context_ids), budget, stride):
        start = end_ = 0
        if answer is not None and begin <= answer[0] and answer[1] < end:
            start, end_ = answer[0] - begin + len(prefix), answer[1] - begin + len(prefix)
        tokens = np.concatenate([prefix, context_ids[begin:end], [eos_id]]).astype(np.int32)
        windows.append(SquadWindow(tokens, index, len(prefix), offsets[begin:end], start, end_))
    return windows


def _window_bounds(n: int, budget: int, stride: int) -> list[tuple[int, int]]:
    bounds = [(0, min(n, budget))]
    while bounds[-1][1] < n:
        begin = bounds[-1][1] - stride
        bounds.append((begin, min(n, begin + budget)))
    return bounds


def _answer_tokens(example: SquadExample, offsets: np.ndarray) -> tuple[int, int] | None:
    """First and last context token of the first gold answer: the smallest token span covering
    its characters; None when answer_start does not point at the text, or no token covers it."""
    text, start = example.answers[0]
    end = start + len(text)
    if example.context[start:end] != text:
        return None
    covering = np.flatnonzero(
        (offsets[:, 1] > start) & (offsets[:, 0] < end) & (offsets[:, 1] > offsets[:, 0])
    )
    if len(covering) == 0:
        return None
    return int(covering[0]), int(covering[-1])


def answer_windows(max_seq_len: int) -> tuple[int, int, int]:
    """(max_length, stride, max_query) for reading contexts with a model of `max_seq_len`
    positions: the paper's 384-token windows with HF's doc_stride 128 and 64 question tokens on
    a model that holds them; on a shorter one the window is the model's and stride and question
    shrink in proportion (a 128-token window shares 42 tokens, keeps 32 of the question), so
    that a window always brings more new context than it shares."""
    max_length = min(SQUAD_MAX_LENGTH, max_seq_len)
    stride, max_query = min(128, max_length // 3), min(64, max_length // 4)
    # The longest question leaves max_length - max_query - 4 context tokens (<s> q </s></s> ... </s>).
    if max_length - max_query - 4 <= stride:
        raise UserError(
            f"the model's {max_seq_len} positions are too few to hold a question and a context window "
            f"(at least 10 are needed)"
        )
    return max_length, stride, max_query


# ---------------------------------------------------------------- decoding


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
    golds = {e.id: _gold_v2(e) for e in examples if e.id in best_spans}
    score = f1_v2 if metric == "f1" else exact_match
    scores = {qid: max(score(best_spans[qid], g) for g in gold) for qid, gold in golds.items()}
    has_answer = {qid: gold != [""] for qid, gold in golds.items()}
    best, threshold = _find_best_threshold(best_spans, scores, null_odds, has_answer)
    return threshold, best


# ---------------------------------------------------------------- official metrics


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


def _gold_v2(example: SquadExample) -> list[str]:
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
    golds = {e.id: _gold_v2(e) for e in examples}
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
        result["best_exact"], result["best_exact_thresh"] = _find_best_threshold(
            predictions, exact, odds, has_answer
        )
        result["best_f1"], result["best_f1_thresh"] = _find_best_threshold(predictions, f1, odds, has_answer)
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


def _find_best_threshold(
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


# ---------------------------------------------------------------- a model's answers


def window_logits(model, name: str, hidden, tokens, pad_id: int):
    """Start and end logits [B, T] of the span head `name` in float32, padding pushed to the
    lowest value so that it is never a training target's rival nor a decoded span."""
    import torch

    start, end = (x.float() for x in model.classify(name, hidden))
    padding = tokens.eq(pad_id)
    low = torch.finfo(torch.float32).min
    return start.masked_fill(padding, low), end.masked_fill(padding, low)


def predict_windows(
    model,
    head: str,
    version: str,
    examples: Sequence[SquadExample],
    windows: Sequence[SquadWindow],
    pad_id: int,
    batch_size: int = 32,
    n_best: int = 20,
) -> Decoded:
    """Decoded answers of the span head `head` of a fine-tuned model (on its own device) for
    windows made with train=False, up to `n_best` spans per question."""
    import torch

    from roberta.batching import cut, pad

    device = model.device
    width = max(len(w.tokens) for w in windows)
    starts, ends = [], []
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for rows in cut(np.arange(len(windows)), batch_size):
            tokens = pad([windows[w].tokens for w in rows], pad_id, width).to(device)
            hidden = model(tokens, unpad=True).last_hidden_state
            start, end = window_logits(model, head, hidden, tokens, pad_id)
            starts.append(start.cpu().numpy())
            ends.append(end.cpu().numpy())
    model.train(was_training)
    return decode(examples, windows, np.concatenate(starts), np.concatenate(ends), n_best, version=version)
