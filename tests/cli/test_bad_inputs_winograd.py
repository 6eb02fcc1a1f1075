"""Bad input to `roberta finetune wsc|winogrande|commonsenseqa|choice`, `evaluate winograd` and
`predict --task WSC|WinoGrande|CommonsenseQA`, table-driven: each is refused with exit status 2 and
one stderr line naming the file, the line and the field, and nothing is written (`refusals.check`)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import refusals
from data_fixtures import save_micro_checkpoint
from refusals import Case
from roberta import checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@dataclass
class Assets:
    root: Path
    checkpoint: Path  # micro, GPT-2 BPE, with its masked-LM head
    headless: Path  # the same shape saved without a masked-LM head
    data: Path  # the shared data directory


@pytest.fixture(scope="module")
def assets(shared_data, tmp_path_factory) -> Assets:
    root = tmp_path_factory.mktemp("winograd-assets")
    ckpt = save_micro_checkpoint(root / "ckpt", shared_data)
    model, tokenizer = checkpoint.load(ckpt)
    torch.manual_seed(0)
    checkpoint.save(root / "headless", checkpoint.mark_without_lm_head(model, "test"), tokenizer)
    return Assets(root, ckpt, root / "headless", shared_data)


def lines(path: Path, count: int) -> list[str]:
    return path.read_text().splitlines()[:count]


def jsonl(env: refusals.Env, name: str, rows: list[dict | str]) -> str:
    return env.file(name, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def wsc_dir(env: refusals.Env, change=None, line: int = 2, split: str = "train") -> str:
    """WORK/wsc with 4 training and 4 val rows; `change(record)` edits row `line` of `split`."""
    source = env.assets.data / "wsc" / "superglue"
    for name in ("train", "val"):
        rows = [json.loads(x) for x in lines(source / f"{name}.jsonl", 4)]
        if name == split and change:
            change(rows[line - 1])
        jsonl(env, f"wsc/{name}.jsonl", rows)
    return str(env.work / "wsc")


def finetune_wsc(env, data: str, init: Path | None = None) -> list[str]:
    init = init or env.assets.checkpoint
    return ["finetune", "wsc", "--data", data, "--init", str(init), "--out", str(env.work / "run")]


def csqa(env, change=None, line: int = 1, split: str = "train") -> list[str]:
    source = env.assets.data / "commonsenseqa" / "train_rand_split.jsonl"
    files = {}
    for name in ("train", "dev"):
        rows = [json.loads(x) for x in lines(source, 3)]
        if name == split and change:
            change(rows[line - 1])
        files[name] = jsonl(env, f"{name}.jsonl", rows)
    run = ["--init", str(env.assets.checkpoint), "--out", str(env.work / "run")]
    return ["finetune", "commonsenseqa", "--train", files["train"], "--dev", files["dev"], *run]


def winogrande(env, change, line: int = 2) -> list[str]:
    source = env.assets.data / "winogrande" / "train_xs.jsonl"
    rows = [json.loads(x) for x in lines(source, 3)]
    change(rows[line - 1])
    jsonl(env, "wg/train_xs.jsonl", rows)
    jsonl(env, "wg/dev.jsonl", [json.loads(x) for x in lines(source, 3)])
    run = ["--init", str(env.assets.checkpoint), "--out", str(env.work / "run")]
    return ["finetune", "winogrande", "--data", str(env.work / "wg"), *run]


def choice(env, rows: list[dict]) -> list[str]:
    good = [{"question": "Which?", "options": ["a", "b", "c"], "answer": "a"}] * 2
    train = jsonl(env, "train.jsonl", [*good, *rows])
    dev = jsonl(env, "dev.jsonl", good)
    run = ["--init", str(env.assets.checkpoint), "--out", str(env.work / "run")]
    return ["finetune", "choice", "--train", train, "--dev", dev, *run]


def target(key: str, value):
    return lambda r: r["target"].__setitem__(key, value)


CASES = [
    Case(
        "wsc/span-index-outside-the-sentence",
        "train.jsonl:2: target.span2_index 99 is outside the text's",
        argv=lambda e: finetune_wsc(e, wsc_dir(e, target("span2_index", 99))),
    ),
    Case(
        "wsc/span-text-nowhere-near-its-index",
        "val.jsonl:3: target.span2_text 'zebra' is nowhere near target.span2_index",
        argv=lambda e: finetune_wsc(e, wsc_dir(e, target("span2_text", "zebra"), 3, "val")),
    ),
    Case(
        "wsc/negative-span1-index",
        "train.jsonl:1: target.span1_index -1 is outside",
        argv=lambda e: finetune_wsc(e, wsc_dir(e, target("span1_index", -1), 1)),
    ),
    Case(
        "wsc/missing-label-in-training-file",
        "train.jsonl:4: no field 'label'",
        argv=lambda e: finetune_wsc(e, wsc_dir(e, lambda r: r.pop("label"), 4)),
    ),
    Case(
        "wsc/label-not-a-boolean",
        "train.jsonl:2: field 'label' must be true or false, not 'maybe'",
        argv=lambda e: finetune_wsc(e, wsc_dir(e, lambda r: r.__setitem__("label", "maybe"))),
    ),
    Case(
        "wsc/checkpoint-without-lm-head",
        "holds no masked-LM head",
        argv=lambda e: finetune_wsc(e, wsc_dir(e), e.assets.headless),
    ),
    Case(
        "wsc/unknown-loss",
        "argument --loss: invalid choice: 'hinge' (choose from 'cross-entropy', 'margin')",
        argv=lambda e: [*finetune_wsc(e, wsc_dir(e)), "--loss", "hinge"],
    ),
    Case(
        "evaluate/checkpoint-without-lm-head",
        "evaluate winograd (candidates are scored by the masked LM) needs a checkpoint with one",
        argv=lambda e: [
            "evaluate",
            "winograd",
            "--model",
            str(e.assets.headless),
            "--wsc273",
            str(e.assets.data / "wsc" / "wsc273" / "WSCollection.xml"),
        ],
    ),
    Case(
        "predict/wsc-without-lm-head",
        "holds no masked-LM head",
        argv=lambda e: [
            "predict",
            str(e.assets.headless),
            "--task",
            "WSC",
            "--input",
            str(e.assets.data / "wsc" / "superglue" / "test.jsonl"),
            "--out",
            str(e.work / "WSC.jsonl"),
        ],
    ),
    Case(
        "predict/int8-with-wsc",
        "predict: --int8 is not available (fp32 only) with --task WSC",
        argv=lambda e: [
            "predict",
            str(e.assets.checkpoint),
            "--task",
            "WSC",
            "--int8",
            "--input",
            str(e.assets.data / "wsc" / "superglue" / "test.jsonl"),
            "--out",
            str(e.work / "WSC.jsonl"),
        ],
    ),
    Case(
        "predict/bf16-with-wsc",
        "predict: --precision bf16 is not available (fp32 only) with --task WSC",
        argv=lambda e: [
            "predict",
            str(e.assets.checkpoint),
            "--task",
            "WSC",
            "--precision",
            "bf16",
            "--input",
            str(e.assets.data / "wsc" / "superglue" / "test.jsonl"),
            "--out",
            str(e.work / "WSC.jsonl"),
        ],
    ),
    Case(
        "commonsenseqa/choice-list-of-wrong-length",
        "dev.jsonl:2: field 'question.choices' has 4 choices, expected 5",
        argv=lambda e: csqa(e, lambda r: r["question"]["choices"].pop(), 2, "dev"),
    ),
    Case(
        "commonsenseqa/answer-key-not-among-the-choices",
        "train.jsonl:3: field 'answerKey' \"F\" is not among the choices' labels (A, B, C, D, E)",
        argv=lambda e: csqa(e, lambda r: r.__setitem__("answerKey", "F"), 3),
    ),
    Case(
        "commonsenseqa/missing-label-in-training-file",
        "train.jsonl:1: no field 'answerKey'",
        argv=lambda e: csqa(e, lambda r: r.pop("answerKey")),
    ),
    Case(
        "winogrande/answer-not-among-the-choices",
        "train_xs.jsonl:2: field 'answer' \"3\" is not among the choices (1 or 2)",
        argv=lambda e: winogrande(e, lambda r: r.__setitem__("answer", "3")),
    ),
    Case(
        "winogrande/missing-label-in-training-file",
        "train_xs.jsonl:3: no field 'answer'",
        argv=lambda e: winogrande(e, lambda r: r.pop("answer"), 3),
    ),
    Case(
        "winogrande/no-blank",
        "train_xs.jsonl:1: field 'sentence' must hold one '_'",
        argv=lambda e: winogrande(e, lambda r: r.__setitem__("sentence", "No blank here."), 1),
    ),
    Case(
        "choice/choice-list-of-wrong-length",
        "train.jsonl:3: field 'options' has 2 options, expected 3",
        argv=lambda e: choice(e, [{"question": "Which?", "options": ["a", "b"], "answer": "a"}]),
    ),
    Case(
        "choice/answer-not-among-the-choices",
        "train.jsonl:3: field 'answer' \"d\" is not among the choices",
        argv=lambda e: choice(e, [{"question": "Which?", "options": ["a", "b", "c"], "answer": "d"}]),
    ),
    Case(
        "choice/missing-answer",
        "train.jsonl:3: no field 'answer'",
        argv=lambda e: choice(e, [{"question": "Which?", "options": ["a", "b", "c"]}]),
    ),
]


def test_table_covers_the_issue():
    refusals.check_table(CASES, {"wsc", "commonsenseqa", "winogrande", "choice", "evaluate", "predict"}, 19)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_refused_in_one_line_with_nothing_written(case, assets, tmp_path, monkeypatch, capsys):
    env = refusals.Env(tmp_path / "work", assets, monkeypatch)
    env.work.mkdir()
    refusals.check(case, env, capsys, env.work, assets.root)
    assert not (env.work / "run").exists()


def test_the_good_slices_are_accepted(assets, tmp_path, capsys):
    """The cases' unchanged inputs run: each refusal above is caused by its one change."""
    env = refusals.Env(tmp_path / "work", assets, None)
    env.work.mkdir()
    from roberta.cli import main

    job = ["--train.max_steps=1", "--train.epochs=0", "--train.eval_every=1"]
    assert main([*finetune_wsc(env, wsc_dir(env)), *job]) == 0
    shutil.rmtree(env.work / "run")
    margin = ["--loss", "margin", "--margin-alpha", "5", "--margin-beta", "0.4"]
    assert main([*finetune_wsc(env, wsc_dir(env)), *margin, *job]) == 0
    recorded = json.loads((env.work / "run" / "job.json").read_text())
    assert (recorded["loss"], recorded["alpha"], recorded["beta"]) == ("margin", 5.0, 0.4)
    shutil.rmtree(env.work / "run")
    assert main([*csqa(env), "--train.epochs=1"]) == 0
    shutil.rmtree(env.work / "run")
    assert main([*winogrande(env, lambda r: None), "--train.epochs=1"]) == 0
    shutil.rmtree(env.work / "run")
    assert main([*choice(env, []), "--train.epochs=1"]) == 0
    capsys.readouterr()
