"""Multiple choice, one path for every dataset: each option becomes a sequence, a ranking head
(one output on `<s>`) scores it, softmax over the options (fairseq's `sentence_ranking`).

RACE (race.py), CommonsenseQA, WinoGrande and your own files (question, N options, answer) differ
only in how an option's sequence is written (`Layout`) and how their files are read:

    race          <s> passage </s></s> question+option </s>   (the option fills a "_" blank)
    commonsenseqa <s> Q: question </s> A: option </s>           (fairseq's format, one </s>)
    winogrande    <s> sentence with the option in its "_" </s>
    own files     <s> question </s></s> option </s>

    examples = read_commonsenseqa("dev_rand_split.jsonl")
    sequences = encode_options(tokenizer, examples[0], COMMONSENSEQA, max_length=512)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from roberta.errors import UserError
from roberta.inputs.rows import read_lines, read_records
from roberta.model import RobertaModel
from roberta.runtime.batching import pad
from roberta.tasks.finetune import Batching, Recipe, Task, batched_objective, mean_loss, task_length
from roberta.train.config import JobConfig
from roberta.train.trainer import EXAMPLES, Batch, Objective

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class ChoiceExample:
    id: str
    question: str
    options: tuple[str, ...]
    label: int | None  # the right option's index; None unlabelled (a test file)
    line: int = 0  # where it was read, for errors
    context: str | None = None  # RACE's passage
    group: int = 0  # RACE's level (an index into the objective's groups)


@dataclass(frozen=True)
class Layout:
    """How an option's sequence is written: `texts(example, option)` gives its first segment
    (None: a single segment) and its second; `separators` </s> tokens sit between them; the
    second is cut to `max_second` tokens, then the first so that the whole fits."""

    name: str
    texts: Callable[[ChoiceExample, str], tuple[str | None, str]]
    separators: int = 2
    max_second: int = 128
    segments: tuple[str, str] = ("question", "option")  # what the two segments hold, for errors
    hint: str = "raise --data.max_length"


def _spaces(text: str) -> str:
    # fairseq's RACE preprocessing collapses whitespace runs (the articles' newlines included).
    return re.sub(r"\s+", " ", text)


def _race_texts(example: ChoiceExample, option: str) -> tuple[str, str]:
    question = example.question
    qa = question.replace("_", option) if "_" in question else f"{question} {option}"
    return _spaces(example.context or ""), _spaces(qa)


RACE = Layout(
    "race",
    _race_texts,
    segments=("passage", "question+option"),
    hint="raise --data.max_length or lower --max-qa",
)
# fairseq's examples/roberta/commonsense_qa: `<s> Q: Where would I not want a fox? </s> A: hen house </s>`.
COMMONSENSEQA = Layout(
    "commonsenseqa",
    lambda e, o: ("Q: " + e.question, "A: " + o),
    separators=1,
    segments=("question", "answer"),
)
WINOGRANDE = Layout("winogrande", lambda e, o: (None, e.question.replace("_", o, 1)), max_second=10**9)
OWN = Layout("choice", lambda e, o: (e.question, o))

# Recipes, fairseq's (examples/roberta/commonsense_qa/README.md): AdamW (0.9, 0.98), weight decay
# 0.01, polynomial (linear) decay. CommonsenseQA: LR 1e-5, batch 16, 3000 updates (~5 epochs of
# 9,741), 150 warmup (5%); your own data the same. WinoGrande (either method): LR 1e-5, batch 32,
# warmup 10%.
CHOICE_OVERRIDES = ("--optim.weight_decay=0.01", "--schedule.warmup_fraction=0.05")
CHOICE_RECIPE = Recipe(1e-5, 16, 5, CHOICE_OVERRIDES)
COMMONSENSEQA_RECIPE = Recipe(1e-5, 16, 5, (*CHOICE_OVERRIDES, "--data.max_length=128"))
WINOGRANDE_RECIPE = Recipe(
    1e-5, 32, 10, (*CHOICE_OVERRIDES, "--schedule.warmup_fraction=0.1", "--data.max_length=128")
)


def encode_options(
    tokenizer, example: ChoiceExample, layout: Layout, max_length: int = 512
) -> list[list[int]]:
    """One id sequence per option of `example`, written as `layout` says, at most `max_length` long."""
    pieces = [layout.texts(example, option) for option in example.options]
    firsts = list(dict.fromkeys(first for first, _ in pieces if first is not None))
    ids = tokenizer.tokenize_ids_batch([*firsts, *(second for _, second in pieces)])
    first_ids = dict(zip(firsts, ids[: len(firsts)]))
    bos, eos = tokenizer.bos_id, tokenizer.eos_id
    sequences = []
    for (first, _), second in zip(pieces, ids[len(firsts) :]):
        if first is None:
            sequences.append([bos, *second[: max_length - 2], eos])
            continue
        second = second[: layout.max_second]
        room = max_length - len(second) - 2 - layout.separators
        if room < 1:
            first_name, second_name = layout.segments
            raise UserError(
                f"{example.id}: max_length={max_length} leaves no room for the {first_name} after "
                f"{len(second)} {second_name} tokens ({layout.hint})"
            )
        sequences.append([bos, *first_ids[first][:room], *[eos] * layout.separators, *second, eos])
    return sequences


# --- reading --------------------------------------------------------------------------------


def _text(value: object, where: str, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: field '{name}' must be a non-empty string, not {json.dumps(value)}")
    return value


def read_commonsenseqa(path: str | Path, labelled: bool = True, choices: int = 5) -> list[ChoiceExample]:
    """CommonsenseQA's JSONL: id, question{stem, choices[{label, text}] x `choices`}, and answerKey
    (one of the choices' labels) where `labelled`."""
    path = Path(path)
    examples = []
    for line, record in read_records(path, ["id", "question", *(["answerKey"] if labelled else [])]):
        where = f"{path}:{line}"
        question = record["question"]
        if not isinstance(question, dict) or not isinstance(question.get("choices"), list):
            raise UserError(f"{where}: field 'question' must be an object with 'stem' and 'choices'")
        options = question["choices"]
        if len(options) != choices:
            raise UserError(
                f"{where}: field 'question.choices' has {len(options)} choices, expected {choices}"
            )
        if not all(isinstance(c, dict) for c in options):
            raise UserError(f"{where}: field 'question.choices' must hold objects with 'label' and 'text'")
        texts = tuple(_text(c.get("text"), where, "question.choices[].text") for c in options)
        label = None
        if labelled:
            keys = [c.get("label") for c in options]
            if record["answerKey"] not in keys:
                raise UserError(
                    f"{where}: field 'answerKey' {json.dumps(record['answerKey'])} is not among the "
                    f"choices' labels ({', '.join(map(str, keys))})"
                )
            label = keys.index(record["answerKey"])
        stem = _text(question.get("stem"), where, "question.stem")
        examples.append(ChoiceExample(str(record["id"]), stem, texts, label, line))
    return _some(examples, path)


def _some(examples: list[ChoiceExample], path: Path) -> list[ChoiceExample]:
    if not examples:
        raise UserError(f"{path}: no examples")
    return examples


def read_winogrande(
    path: str | Path, labels: str | Path | None = None, labelled: bool = True
) -> list[ChoiceExample]:
    """WinoGrande's JSONL (qID, sentence with one "_", option1, option2, answer "1"/"2"); with
    `labels`, the answers are read from that file instead (WinoGrande's -labels.lst, one a line)."""
    path = Path(path)
    answer_in_file = labelled and labels is None
    columns = ["qID", "sentence", "option1", "option2", *(["answer"] if answer_in_file else [])]
    examples = []
    for line, record in read_records(path, columns):
        where = f"{path}:{line}"
        sentence = _text(record["sentence"], where, "sentence")
        if sentence.count("_") != 1:
            raise UserError(
                f"{where}: field 'sentence' must hold one '_' (the blank), it holds {sentence.count('_')}"
            )
        options = (_text(record["option1"], where, "option1"), _text(record["option2"], where, "option2"))
        label = _winogrande_answer(record["answer"], where, "answer") if answer_in_file else None
        examples.append(ChoiceExample(str(record["qID"]), sentence, options, label, line))
    if labelled and labels is not None:
        answers = [(n, text) for n, text in read_lines(Path(labels)) if text.strip()]
        if len(answers) != len(examples):
            raise UserError(f"{labels}: {len(answers)} labels for the {len(examples)} rows of {path}")
        examples = [
            ChoiceExample(
                e.id, e.question, e.options, _winogrande_answer(a.strip(), f"{labels}:{n}", "label"), e.line
            )
            for e, (n, a) in zip(examples, answers)
        ]
    return _some(examples, path)


def _winogrande_answer(value: object, where: str, name: str) -> int:
    if value not in ("1", "2", 1, 2) or isinstance(value, bool):
        raise UserError(f"{where}: field '{name}' {json.dumps(value)} is not among the choices (1 or 2)")
    return int(value) - 1


def read_choice_file(
    path: str | Path,
    question_column: str,
    option_columns: Sequence[str],
    answer_column: str | None,
    choices: int | None = None,
) -> list[ChoiceExample]:
    """Your own multiple-choice rows (CSV, TSV, JSONL, Parquet): the question, the options (one
    column holding a list of them, or one column each) and the answer: the right option's text,
    its letter (A = the first) or its 0-based index. Every row has the same number of options
    (`choices`, or the first row's)."""
    path = Path(path)
    columns = [question_column, *option_columns, *([answer_column] if answer_column else [])]
    examples = []
    for line, record in read_records(path, columns, strings=[question_column]):
        where = f"{path}:{line}"
        if len(option_columns) == 1:
            options = record[option_columns[0]]
            if isinstance(options, str):
                try:
                    options = json.loads(options)
                except json.JSONDecodeError:
                    options = None
            if not isinstance(options, list):
                raise UserError(f"{where}: field '{option_columns[0]}' must be a list of options")
        else:
            options = [record[c] for c in option_columns]
        options = tuple(
            _text(o, where, option_columns[min(i, len(option_columns) - 1)]) for i, o in enumerate(options)
        )
        if len(options) < 2:
            raise UserError(
                f"{where}: field '{','.join(option_columns)}' has {len(options)} option(s), needs 2 or more"
            )
        choices = choices or len(options)
        if len(options) != choices:
            raise UserError(
                f"{where}: field '{','.join(option_columns)}' has {len(options)} options, expected {choices}"
            )
        label = _answer(record[answer_column], options, where, answer_column) if answer_column else None
        examples.append(
            ChoiceExample(
                str(len(examples)),
                _text(record[question_column], where, question_column),
                options,
                label,
                line,
            )
        )
    return _some(examples, path)


def _answer(value: object, options: tuple[str, ...], where: str, column: str) -> int:
    if isinstance(value, str) and value in options:
        return options.index(value)
    if isinstance(value, str) and len(value) == 1 and value in LETTERS[: len(options)]:
        return LETTERS.index(value)
    if isinstance(value, int) and not isinstance(value, bool) or isinstance(value, str) and value.isdigit():
        if 0 <= int(value) < len(options):
            return int(value)
    raise UserError(
        f"{where}: field '{column}' {json.dumps(value)} is not among the choices (an option's text, "
        f"a letter A-{LETTERS[len(options) - 1]} or an index 0-{len(options) - 1})"
    )


# --- fine-tuning: one score per option on <s>, softmax over the options ------------------------


def ranking_heads(head: str) -> dict[str, dict]:
    return {head: {"kind": "classification", "num_classes": 1}}  # one score per option


# (one id list per option of each example, labels, group indices)
Encoded = tuple[list[list[list[int]]], list[int], list[int]]


def choice_objective(
    head: str, train: Encoded, eval_sets: dict[str, Encoded], batching: Batching, groups: tuple[str, ...] = ()
) -> Objective:
    """The objective over encoded examples: a batch's `tokens` are [B*N, T] (N options each), the
    head's one output per row read as [B, N] option scores; accuracy in percent, and per group
    (RACE's levels) where `groups` names them."""
    pad_id = batching.pad_id

    def collate(data: Encoded, indices: np.ndarray) -> Batch:
        encoded, labels, group = data
        return {
            "tokens": pad([ids for i in indices for ids in encoded[i]], pad_id),
            "labels": torch.tensor([labels[i] for i in indices], dtype=torch.long),
            "group": torch.tensor([group[i] for i in indices], dtype=torch.long),
        }

    def lengths(data: Encoded) -> list[int]:
        return [max(map(len, options)) for options in data[0]]  # an example's options share a width

    def figures(data: Encoded) -> tuple[str, ...]:
        return ("loss", "accuracy", *(name for g, name in enumerate(groups) if g in set(data[2])))

    return batched_objective(
        head,
        batching,
        train_lengths=lengths(train),
        train_batch=lambda indices: collate(train, indices),
        eval_sets={
            name: (lengths(data), lambda indices, data=data: collate(data, indices))
            for name, data in eval_sets.items()
        },
        heads=ranking_heads(head),
        loss=lambda model, batch: _loss(head, model, batch),
        metrics=lambda sums, gathered: _metrics(groups, sums, gathered),
        best_metric="accuracy",
        figures={name: figures(data) for name, data in eval_sets.items()},
    )


def option_scores(head: str, model: RobertaModel, batch: Batch) -> torch.Tensor:
    """[B, N] float32: the head's score of each option."""
    hidden = model(batch["tokens"], select="first").last_hidden_state
    return model.classify(head, hidden).float().view(len(batch["labels"]), -1)


def _loss(head: str, model: RobertaModel, batch: Batch) -> dict:
    scores = option_scores(head, model, batch)
    predictions = scores.argmax(-1)
    return {
        "loss": F.cross_entropy(scores, batch["labels"], reduction="sum"),
        "correct": (predictions == batch["labels"]).sum(),
        EXAMPLES: {"prediction": predictions, "label": batch["labels"], "group": batch["group"]},
    }


def _metrics(groups: tuple[str, ...], sums: dict[str, float], gathered: dict[str, np.ndarray]) -> dict:
    figures = mean_loss(sums)
    if not gathered:  # a training window: its summed statistics only
        figures["accuracy"] = 100.0 * sums["correct"] / max(sums["loss_count"], 1.0)
        return figures
    hits = gathered["prediction"] == gathered["label"]
    figures["accuracy"] = 100.0 * float(hits.mean())
    for g, name in enumerate(groups):
        chosen = gathered["group"] == g
        if chosen.any():
            figures[name] = 100.0 * float(hits[chosen].mean())
    return figures


def encode_all(tokenizer, examples: Sequence[ChoiceExample], layout: Layout, max_length: int) -> Encoded:
    encoded = [encode_options(tokenizer, e, layout, max_length) for e in examples]
    return encoded, [e.label for e in examples], [e.group for e in examples]


def plan_choice(
    head: str,
    layout: Layout,
    splits: dict[str, list[ChoiceExample]],
    job: JobConfig,
    model: RobertaModel,
    tokenizer,
    source: str | Path,
    groups: tuple[str, ...] = (),
) -> Task:
    """Multiple choice from `splits` ("train" and the held-out sets by name, read and labelled),
    encoded for `model` (fine-tuned from `source`) with `layout`; RUN/best/ holds the best
    accuracy on the first held-out set, with the ranking head `head`."""
    least = 3 if layout.name == WINOGRANDE.name else 3 + layout.separators + 1
    shown = "<s> text </s>" if least == 3 else f"<s> first {'</s>' * layout.separators} second </s>"
    max_length = task_length(job, model, source, ranking_heads(head), least, shown)
    for name, examples in splits.items():
        counts = {len(e.options) for e in examples}
        if len(counts) > 1 or counts != {len(splits["train"][0].options)}:
            raise UserError(
                f"{name}: examples with {', '.join(map(str, sorted(counts)))} options; training had "
                f"{len(splits['train'][0].options)}: every example needs as many"
            )
    encoded = {name: encode_all(tokenizer, examples, layout, max_length) for name, examples in splits.items()}
    train = encoded.pop("train")
    return Task(
        objective=lambda member, rank, world: choice_objective(
            head, train, encoded, Batching(member, tokenizer.pad_id, rank, world), groups
        ),
        max_length=max_length,
        run_info={"task": head, "layout": layout.name, "options": len(splits["train"][0].options)},
    )


def predict_options(
    roberta, head: str, examples: Sequence[ChoiceExample], layout: Layout, max_length: int | None = None
) -> list[int]:
    """The index of the best-scored option of each example, by the hub's ranking head `head`."""
    roberta.head(head, "classification")
    length = min(max_length or roberta.max_seq_len, roberta.max_seq_len)
    sequences = [ids for e in examples for ids in encode_options(roberta.tokenizer, e, layout, length)]
    scores = roberta.predict(head, sequences, return_logits=True).float().view(len(examples), -1)
    return scores.argmax(-1).tolist()
