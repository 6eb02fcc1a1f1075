"""Bad input to token tagging, table-driven: `roberta finetune tag`, `evaluate tag`, `predict` with a
tagging head and the hub's `tag()`. Each row is refused with exit status 2 and one stderr line
naming the file, the line and the field (or a one-line `UserError`), and leaves nothing new or
changed (`refusals.check`): nothing is read half and nothing written."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

import refusals
from data_fixtures import save_micro_checkpoint
from refusals import Case
from roberta import checkpoint
from roberta.cli import main
from tag_fixtures import conll_files, tagger_hub

pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass
class Assets:
    root: Path
    checkpoint: Path  # a micro model, no tagging head
    tagger: Path  # a micro model with the tagging head "ner"
    conll: dict[str, Path]  # train.txt, valid.txt, test.txt: CoNLL-2003's first sentences


@pytest.fixture(scope="module")
def assets(shared_data, tmp_path_factory) -> Assets:
    root = tmp_path_factory.mktemp("tag-assets")
    hub = tagger_hub(shared_data)
    tagger = checkpoint.save(root / "tagger", hub.model, hub.tokenizer)
    ckpt = save_micro_checkpoint(root / "ckpt", shared_data)
    return Assets(root, ckpt, tagger, conll_files(shared_data, root / "conll", 16, 8))


class Env(refusals.Env):
    assets: Assets

    def finetune(self, *extra: str, train: str | None = None, dev: str | None = None) -> list[str]:
        a = self.assets
        data = ["--train", train or str(a.conll["train"]), "--dev", dev or str(a.conll["valid"])]
        run = ["--init", str(a.checkpoint), "--out", str(self.work / "run"), "--train.max_steps=1"]
        return ["finetune", "tag", *data, *run, *extra]

    def conll(self, name: str, change) -> str:
        """The assets' training file with its lines changed by `change(lines)`, as work/NAME."""
        lines = self.assets.conll["train"].read_text().splitlines()
        return self.file(name, "\n".join(change(lines)) + "\n")


def jsonl(*rows: dict) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


GOOD = {"tokens": ["Peter", "went", "home"], "tags": ["B-PER", "O", "O"]}


def replace_tag(lines: list[str], number: int, tag: str) -> list[str]:
    """`lines` with line `number` (1-based) given the tag `tag` in its last column."""
    fields = lines[number - 1].split()
    return [*lines[: number - 1], " ".join([*fields[:-1], tag]), *lines[number:]]


CASES = [
    Case(
        "finetune/wrong-number-of-columns",
        "bad.txt:4: 3 columns, expected 4 as on line 3",
        argv=lambda e: e.finetune(train=e.conll("bad.txt", lambda ls: [*ls[:3], "rejects VBZ O", *ls[4:]])),
    ),
    Case(
        "finetune/tag-column-outside-the-line",
        "train.txt:3: field 'tag' is column 7, but the line has 4 columns",
        argv=lambda e: e.finetune("--tag-column", "7"),
    ),
    Case(
        "finetune/dev-tag-training-never-saw",
        "dev.txt:4: field 'tag' is 'B-FOOD', a tag the training data never has",
        argv=lambda e: e.finetune(dev=e.conll("dev.txt", lambda ls: replace_tag(ls, 4, "B-FOOD"))),
    ),
    Case(
        "finetune/unseen-tags-as-no-label",
        "--unseen-tags-as 'FOOD': not a label",
        argv=lambda e: e.finetune("--unseen-tags-as", "FOOD"),
    ),
    Case(
        "finetune/labels-missing-a-training-tag",
        "train.txt:3: field 'tag' is 'B-ORG', a tag the training data never has",
        argv=lambda e: e.finetune("--labels", "O,B-PER,I-PER"),
    ),
    Case(
        "finetune/unknown-scheme",
        "argument --scheme: invalid choice: 'iob3' (choose from 'iob2', 'iob1', 'iobes', 'none')",
        argv=lambda e: e.finetune("--scheme", "iob3"),
    ),
    Case(
        "finetune/tag-outside-the-scheme",
        "bad.txt:5: field 'tag' is 'E-MISC', not a tag of the IOB2 scheme",
        argv=lambda e: e.finetune(train=e.conll("bad.txt", lambda ls: replace_tag(ls, 5, "E-MISC"))),
    ),
    Case(
        "finetune/jsonl-sentence-with-no-tokens",
        "train.jsonl:2: field 'tokens' is empty: a sentence with no tokens",
        argv=lambda e: e.finetune(train=e.file("train.jsonl", jsonl(GOOD, {"tokens": [], "tags": []}))),
    ),
    Case(
        "finetune/jsonl-tokens-and-tags-of-different-lengths",
        "train.jsonl:2: field 'tags' has 2 tags for 3 tokens",
        argv=lambda e: e.finetune(train=e.file("train.jsonl", jsonl(GOOD, {**GOOD, "tags": ["O", "O"]}))),
    ),
    Case(
        "finetune/jsonl-blank-word",
        "train.jsonl:1: field 'tokens'[1] must be a non-blank word",
        argv=lambda e: e.finetune(train=e.file("train.jsonl", jsonl({**GOOD, "tokens": ["a", " ", "b"]}))),
    ),
    Case(
        "finetune/jsonl-numeric-tags-without-labels",
        "train.jsonl:1: field 'tags'[0] is the number 1: give the label names",
        argv=lambda e: e.finetune(train=e.file("train.jsonl", jsonl({**GOOD, "tags": [1, 0, 0]}))),
    ),
    Case(
        "finetune/jsonl-missing-field",
        "train.jsonl:1: no field 'tags'",
        argv=lambda e: e.finetune(train=e.file("train.jsonl", jsonl({"tokens": ["a"]}))),
    ),
    Case(
        "finetune/no-sentences",
        "empty.txt: holds no sentences",
        argv=lambda e: e.finetune(train=e.file("empty.txt", "-DOCSTART- -X- -X- O\n\n")),
    ),
    Case(
        "evaluate/different-words",
        "pred.txt:4: field 'word' differs from",
        argv=lambda e: [
            "evaluate",
            "tag",
            "--gold",
            str(e.assets.conll["train"]),
            "--predictions",
            e.conll("pred.txt", lambda ls: [*ls[:3], "refuses VBZ B-VP O", *ls[4:]]),
        ],
    ),
    Case(
        "predict/tagging-head-with-named-columns",
        "--columns 'text': a tagging head reads the words' column, a number",
        argv=lambda e: [
            "predict",
            str(e.assets.tagger),
            "--head",
            "ner",
            "--input",
            str(e.assets.conll["test"]),
            "--out",
            str(e.work / "out.txt"),
            "--columns",
            "text",
        ],
    ),
    Case(
        "tag/no-tagging-head",
        "tag: name the tagging head (the model's tagging heads: none)",
        call=lambda e: lambda: __import__("roberta").load(e.assets.checkpoint).tag("Peter went home"),
    ),
    Case(
        "tag/not-a-string",
        "text[1]: expected a string, got int",
        call=lambda e: lambda: __import__("roberta").load(e.assets.tagger).tag(["Peter", 3]),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_tagging_input_is_refused_in_one_line_and_leaves_nothing(
    case, assets, tmp_path, monkeypatch, capsys
):
    refusals.check(case, Env(tmp_path, assets, monkeypatch), capsys, tmp_path, assets.root)


def test_cases_cover_tagging():
    refusals.check_table(CASES, {"finetune", "evaluate", "predict", "tag"}, 15)


def test_an_unseen_dev_tag_is_read_as_the_label_an_option_names(assets, tmp_path):
    env = Env(tmp_path, assets, None)
    dev = env.conll("dev.txt", lambda ls: replace_tag(ls, 4, "B-FOOD"))
    assert main(env.finetune("--unseen-tags-as", "O", dev=dev)) == 0
    assert json.loads((tmp_path / "run" / "results.json").read_text())["best"]["metric"] == "f1"
