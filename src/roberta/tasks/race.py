"""RACE multiple-choice reading comprehension: the reader, the 4 encoded choices per question, and
accuracy overall and per level (middle / high school).

    examples = read_race("race/dev")
    choices = encode_choices(tokenizer, examples[0])  # 4 id lists: <s> passage </s></s> question option </s>
    accuracy_by_level(examples, predicted_labels)    # {"accuracy": .., "middle": .., "high": ..}
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from roberta.errors import UserError
from roberta.tokenizer import Tokenizer

LEVELS = ("middle", "high")
LETTERS = "ABCD"


@dataclass(frozen=True)
class RaceExample:
    id: str  # the file's id and the question's index: "high10024.txt-0"
    article: str
    question: str
    options: tuple[str, str, str, str]
    label: int  # index of the right option
    level: str  # 'middle' | 'high'


def read_race(directory: str | Path) -> list[RaceExample]:
    """One example per question of `DIR/{middle,high}/*.txt` (each file a JSON object with
    `article`, `questions`, `options`, `answers` letters A-D and `id`), files in name order."""
    directory = Path(directory)
    levels = [level for level in LEVELS if (directory / level).is_dir()]
    if not levels:
        raise UserError(f"{directory}: no middle/ or high/ directory of RACE files")
    examples: list[RaceExample] = []
    for level in levels:
        for path in sorted((directory / level).glob("*.txt")):
            examples.extend(_read_file(path, level))
    return examples


def _read_file(path: Path, level: str) -> list[RaceExample]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(record, dict):
        raise UserError(f"{path}: expected a JSON object")
    for name, kind in (("id", str), ("article", str), ("questions", list), ("options", list), ("answers", list)):
        if name not in record:
            raise UserError(f"{path}: missing field '{name}'")
        if not isinstance(record[name], kind):
            raise UserError(f"{path}: field '{name}' must be a {'string' if kind is str else 'list'}")
    questions, options, answers = record["questions"], record["options"], record["answers"]
    if not len(questions) == len(options) == len(answers):
        raise UserError(f"{path}: {len(questions)} questions, {len(options)} option lists and {len(answers)} answers")
    examples = []
    for i, (question, choices, answer) in enumerate(zip(questions, options, answers)):
        if not isinstance(choices, list) or len(choices) != 4 or not all(isinstance(c, str) for c in choices):
            raise UserError(f"{path}: options[{i}]: expected 4 strings")
        if not isinstance(answer, str) or len(answer) != 1 or answer not in LETTERS:
            raise UserError(f"{path}: answers[{i}]: expected a letter A-D, got {answer!r}")
        if not isinstance(question, str):
            raise UserError(f"{path}: questions[{i}]: expected a string")
        examples.append(RaceExample(f"{record['id']}-{i}", record["article"], question, tuple(choices),
                                    LETTERS.index(answer), level))
    return examples


def _spaces(text: str) -> str:
    # fairseq's RACE preprocessing collapses whitespace runs (the articles' newlines included).
    return re.sub(r"\s+", " ", text)


def encode_choices(tokenizer: Tokenizer, example: RaceExample, max_length: int = 512, max_qa: int = 128) -> list[list[int]]:
    """For each option, `<s> passage </s></s> question option </s>`: question + option cut to
    `max_qa` tokens, then the passage cut so that the whole fits in `max_length`. As in
    fairseq, an option fills the question's blank (`_`) instead of following it."""
    qas = [_spaces(example.question.replace("_", option) if "_" in example.question else f"{example.question} {option}")
           for option in example.options]
    passage, *qa_ids = tokenizer.tokenize_ids_batch([_spaces(example.article), *qas])
    choices = []
    for qa in qa_ids:
        qa = qa[:max_qa]
        room = max_length - len(qa) - 4
        if room < 0:
            raise UserError(f"max_length={max_length} leaves no room for {len(qa)} question+option tokens")
        bos, eos = tokenizer.bos_id, tokenizer.eos_id
        choices.append([bos, *passage[:room], eos, eos, *qa, eos])
    return choices


def accuracy_by_level(examples: Sequence[RaceExample], predictions: Sequence[int]) -> dict[str, float]:
    """Accuracy in percent over all examples and per level; a level without examples is left out."""
    if len(examples) != len(predictions):
        raise ValueError(f"{len(examples)} examples but {len(predictions)} predictions")
    result = {}
    for name, wanted in (("accuracy", set(LEVELS)), *((level, {level}) for level in LEVELS)):
        hits = [int(p) == e.label for e, p in zip(examples, predictions) if e.level in wanted]
        if hits:
            result[name] = 100.0 * sum(hits) / len(hits)
    return result
