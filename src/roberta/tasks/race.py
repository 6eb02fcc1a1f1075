"""RACE multiple-choice reading comprehension: the reader, the 4 encoded choices per question, and
accuracy overall and per level (middle / high school).

    examples = read_race("race/dev")
    choices = encode_choices(tokenizer, examples[0])  # 4 id lists: <s> passage </s></s> question option </s>
    accuracy_by_level(examples, predicted_labels)    # {"accuracy": .., "middle": .., "high": ..}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from roberta.errors import UserError
from roberta.io import read_json
from roberta.model import RobertaModel
from roberta.options.finetune import RaceOptions
from roberta.tasks.choice import RACE, ChoiceExample, choice_objective, encode_options
from roberta.tasks.finetune import Batching, Recipe, Task, task_length
from roberta.tokenizer import Tokenizer
from roberta.train.config import JobConfig
from roberta.train.trainer import Objective
from roberta.validation import check_value

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
    if not examples:
        raise UserError(
            f"{directory}: no RACE questions in {' or '.join(f'{level}/*.txt' for level in levels)}"
        )
    return examples


def _read_file(path: Path, level: str) -> list[RaceExample]:
    record = read_json(path)
    for name, kind in (
        ("id", str),
        ("article", str),
        ("questions", list),
        ("options", list),
        ("answers", list),
    ):
        if name not in record:
            raise UserError(f"{path}: missing field '{name}'")
        if not isinstance(record[name], kind):
            raise UserError(f"{path}: field '{name}' must be a {'string' if kind is str else 'list'}")
    questions, options, answers = record["questions"], record["options"], record["answers"]
    if not len(questions) == len(options) == len(answers):
        raise UserError(
            f"{path}: {len(questions)} questions, {len(options)} option lists and {len(answers)} answers"
        )
    examples = []
    for i, (question, choices, answer) in enumerate(zip(questions, options, answers)):
        if not isinstance(choices, list) or len(choices) != 4 or not all(isinstance(c, str) for c in choices):
            raise UserError(f"{path}: options[{i}]: expected 4 strings")
        if not isinstance(answer, str) or len(answer) != 1 or answer not in LETTERS:
            raise UserError(f"{path}: answers[{i}]: expected a letter A-D, got {answer!r}")
        if not isinstance(question, str):
            raise UserError(f"{path}: questions[{i}]: expected a string")
        examples.append(
            RaceExample(
                f"{record['id']}-{i}",
                record["article"],
                question,
                tuple(choices),
                LETTERS.index(answer),
                level,
            )
        )
    return examples


def as_choice(example: RaceExample) -> ChoiceExample:
    """The example on the multiple-choice path (choice.py): its passage, question and options."""
    return ChoiceExample(
        example.id,
        example.question,
        example.options,
        example.label,
        0,
        example.article,
        LEVELS.index(example.level),
    )


def encode_choices(
    tokenizer: Tokenizer, example: RaceExample, max_length: int = 512, max_qa: int = 128
) -> list[list[int]]:
    """For each option, `<s> passage </s></s> question option </s>`: question + option cut to
    `max_qa` tokens, then the passage cut so that the whole fits in `max_length`. As in
    fairseq, an option fills the question's blank (`_`) instead of following it."""
    return encode_options(
        tokenizer, as_choice(example), dataclasses.replace(RACE, max_second=max_qa), max_length
    )


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


# --- fine-tuning: one score per option on <s>, softmax over the 4 -----------------------------

# The paper's RACE recipe (Liu et al. 2019, appendix Table 10).
RACE_LR, RACE_BATCH, RACE_EPOCHS = 1e-5, 16, 4
RACE_RECIPE = Recipe(RACE_LR, RACE_BATCH, RACE_EPOCHS)
RACE_HEAD = "race"
RACE_HEADS = {RACE_HEAD: {"kind": "classification", "num_classes": 1}}  # one score per option


def race_objective(
    train: tuple[list[list[list[int]]], list[RaceExample]],
    eval_sets: dict[str, tuple[list[list[list[int]]], list[RaceExample]]],
    batching: Batching,
) -> Objective:
    """The multiple-choice objective (choice.py) over encoded questions (4 id lists each) and their
    examples, with accuracy per level."""

    def data(encoded: list[list[list[int]]], examples: list[RaceExample]):
        return encoded, [e.label for e in examples], [LEVELS.index(e.level) for e in examples]

    return choice_objective(
        RACE_HEAD, data(*train), {name: data(*pair) for name, pair in eval_sets.items()}, batching, LEVELS
    )


def plan_race(
    data_dir: str | Path,
    max_qa: int,
    job: JobConfig,
    model: RobertaModel,
    tokenizer: Tokenizer,
    source: str | Path,
) -> Task:
    """RACE from DIR/train, evaluated on DIR/dev and DIR/test (when there), read, checked and
    encoded for `model` (fine-tuned from `source`); RUN/best/ holds the best dev accuracy."""
    check_value(RaceOptions, "max_qa", max_qa, "finetune race")
    data_dir = Path(data_dir)
    splits = {
        name: read_race(data_dir / name)
        for name in ("train", "dev", "test")
        if name != "test" or (data_dir / name).is_dir()
    }
    max_length = task_length(job, model, source, RACE_HEADS, 6, "<s> passage </s></s> question option </s>")
    encoded = {
        name: ([encode_choices(tokenizer, e, max_length, max_qa) for e in examples], examples)
        for name, examples in splits.items()
    }
    train = encoded.pop("train")
    return Task(
        objective=lambda member, rank, world: race_objective(
            train, encoded, Batching(member, tokenizer.pad_id, rank, world)
        ),
        max_length=max_length,
        run_info={"task": "race"},
    )
