"""Entity-level precision, recall and F1 as CoNLL's conlleval scores them (per entity type and
micro-averaged over all entities), and token accuracy.

A chunk (entity) is read from a sequence of tags the way conlleval reads it, which accepts IOB1,
IOB2 and IOBES alike: a chunk starts at a B- or S- tag, at an I- or E- tag that follows O (IOB1's
start, and a prediction's "I- after O"), or wherever the type changes; it ends before a B-, S- or
O tag, after an E- or S- tag, or where the type changes. A predicted chunk counts as correct only
when a gold chunk has the same type, start and end. Sentences are scored as one sequence with an
O between them, so no chunk crosses a sentence's end. The figures are those of the `seqeval`
library's default mode (a Python port of conlleval), which the tests hold them to.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

OUTSIDE = "O"


def split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type): "B-PER" -> ("B", "PER"), "O" -> ("O", "_"), a tag without a prefix such as
    "PER" -> ("P", "ER") as conlleval splits it (its first character is read as the prefix)."""
    if not tag:
        return OUTSIDE, "_"
    return tag[0], tag[1:].split("-", 1)[-1] or "_"


def _ends(previous: str, prev_type: str, prefix: str, type_: str) -> bool:
    if previous in ("E", "S"):
        return True
    if previous in ("B", "I") and prefix in ("B", "S", OUTSIDE):
        return True
    return previous not in (OUTSIDE, ".") and prev_type != type_


def _starts(previous: str, prev_type: str, prefix: str, type_: str) -> bool:
    if prefix in ("B", "S"):
        return True
    if previous in ("E", "S", OUTSIDE) and prefix in ("E", "I"):
        return True
    return prefix not in (OUTSIDE, ".") and prev_type != type_


def entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The chunks of one sentence's tags: (type, first index, last index), in order."""
    found = []
    previous, prev_type, begin = OUTSIDE, "_", 0
    for i, tag in enumerate([*tags, OUTSIDE]):
        prefix, type_ = split_tag(tag)
        if _ends(previous, prev_type, prefix, type_):
            found.append((prev_type, begin, i - 1))
        if _starts(previous, prev_type, prefix, type_):
            begin = i
        previous, prev_type = prefix, type_
    return found


def _ratio(a: float, b: float) -> float:
    return 100.0 * a / b if b else 0.0


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """Percentages over sentences of tags: micro `precision`, `recall`, `f1` over every entity,
    `accuracy` over tokens, and per entity type T `precision_T`, `recall_T`, `f1_T` (gold types and
    predicted ones alike), with `entities` (gold chunks) and `predicted_entities` counted. A figure
    whose denominator is zero is 0, as seqeval has it."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    truth, guess = Counter(), Counter()
    correct, hits, tokens = Counter(), 0, 0
    for i, (g, p) in enumerate(zip(gold, predicted)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
        hits += sum(a == b for a, b in zip(g, p))
        tokens += len(g)
        gold_chunks, predicted_chunks = set(entities(g)), set(entities(p))
        truth.update(t for t, _, _ in gold_chunks)
        guess.update(t for t, _, _ in predicted_chunks)
        correct.update(t for t, _, _ in gold_chunks & predicted_chunks)
    figures = _prf(sum(correct.values()), sum(guess.values()), sum(truth.values()))
    figures["accuracy"] = _ratio(hits, tokens)
    figures["entities"], figures["predicted_entities"] = sum(truth.values()), sum(guess.values())
    for type_ in sorted(set(truth) | set(guess)):
        for name, value in _prf(correct[type_], guess[type_], truth[type_]).items():
            figures[f"{name}_{type_}"] = value
    return figures


def _prf(correct: int, predicted: int, gold: int) -> dict[str, float]:
    precision, recall = _ratio(correct, predicted), _ratio(correct, gold)
    return {"precision": precision, "recall": recall, "f1": _f1(precision, recall)}


def type_figures(types: Sequence[str]) -> tuple[str, ...]:
    """The names `entity_scores` reports for data whose entities have `types`."""
    per_type = tuple(f"{name}_{t}" for t in sorted(types) for name in ("precision", "recall", "f1"))
    return ("precision", "recall", "f1", "accuracy", "entities", "predicted_entities", *per_type)
