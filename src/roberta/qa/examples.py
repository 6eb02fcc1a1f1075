"""SQuAD's questions: the official v1.1 / v2.0 JSON (data / paragraphs / qas) read into
`SquadExample`s, each with its context and gold answers; a bad file is a `UserError` naming the
field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from roberta.errors import UserError
from roberta.io import read_json
from roberta.options.finetune import SQUAD_VERSIONS, SquadOptions
from roberta.validation import check_value

VERSIONS = SQUAD_VERSIONS


@dataclass(frozen=True)
class SquadExample:
    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]  # (text, char_start) per gold answer; () when impossible
    impossible: bool = False


def check_version(version: str) -> None:
    """The rule of `--version` (`SquadOptions`), for a Python caller too."""
    check_value(SquadOptions, "version", version, "squad")


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
