"""Every verb's options come from one declaration (`roberta.options`): the parser, its defaults, its
help and its checks; the model is named `--model` everywhere, the older spellings still accepted;
a task's recipe is the same from Python and from the command line."""

import argparse
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from roberta.cli import build_parser, main
from roberta.errors import UserError

SRC = Path(__file__).resolve().parents[2] / "src" / "roberta"


def verbs(parser: argparse.ArgumentParser, path: tuple = ()):
    """(command words, parser) of every verb and sub-verb."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield path, parser
        return
    for name, sub in groups[0].choices.items():
        yield from verbs(sub, (*path, name))


ALL = dict(verbs(build_parser()))


def declared_fields(parser: argparse.ArgumentParser) -> dict[str, dataclasses.Field]:
    classes = {a.declared_by for a in parser._actions if hasattr(a, "declared_by")}
    return {f.name: f for cls in classes for f in dataclasses.fields(cls)}


def test_every_option_of_every_verb_comes_from_a_declaration():
    """The rule holds for the verbs that come next: an option added by hand (`add_argument` outside
    `add_options`) has no `declared_by` and fails here."""
    assert len(ALL) >= 29
    for path, parser in ALL.items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            cls = getattr(action, "declared_by", None)
            assert cls is not None, (path, action.option_strings or action.dest)
            assert cls.__module__.startswith("roberta.options."), (path, cls)
            assert action.dest in {f.name for f in dataclasses.fields(cls)}, (path, action.dest)
    by_hand = {p.name: p.read_text().count("add_argument(") for p in (SRC / "cli").glob("*.py")}
    assert {name for name, count in by_hand.items() if count} == {"common.py"}  # add_options itself


def test_the_parser_takes_defaults_and_help_from_the_declaration():
    for path, parser in ALL.items():
        fields = declared_fields(parser)
        for action in parser._actions:
            field = fields.get(action.dest)
            if field is None or field.default is dataclasses.MISSING or field.metadata.get("model"):
                continue
            if action.default is not argparse.SUPPRESS:  # pretrain's --teacher weights: given only
                want = list(field.default) if isinstance(field.default, tuple) else field.default
                assert action.default == want, (path, action.dest)
            if "{default" in field.metadata["help"]:
                assert field.metadata["help"].format(default=field.default) == action.help
    from roberta.options.finetune import SIMCSE_TEMPERATURE

    text = " ".join(ALL[("finetune", "embed")].format_help().split())
    assert f"InfoNCE's temperature (SimCSE's {SIMCSE_TEMPERATURE}, the default)" in text
    distill = " ".join(ALL[("distill", "glue")].format_help().split())
    assert "softmax temperature T (default 2)" in distill and "(default 0.5)" in distill


def test_the_tasks_use_the_declarations_defaults_and_rules():
    """One source: the tasks' dataclasses are the options' declarations, checked when made, with the
    message the command line gives."""
    from roberta.options.finetune import SIMCSE_TEMPERATURE, DistillLoss
    from roberta.options.pretrain import PretrainTeacher
    from roberta.tasks import embed_distill
    from roberta.tasks.distill import Distillation
    from roberta.tasks.pretrain_distill import PretrainDistillation

    assert issubclass(Distillation, DistillLoss) and issubclass(PretrainDistillation, PretrainTeacher)
    assert Distillation("t") == Distillation("t", DistillLoss.temperature, DistillLoss.alpha)
    assert embed_distill.SIMCSE_TEMPERATURE is SIMCSE_TEMPERATURE == 0.05  # the task's is the option's
    with pytest.raises(UserError, match=r"^distill: field 'alpha' must be in \[0, 1\], not 1.5$"):
        Distillation("t", alpha=1.5)
    with pytest.raises(UserError, match=r"^pretrain: field 'soft_weight' must be at least 0, not -1.0$"):
        PretrainDistillation("t", soft_weight=-1.0)


def test_a_python_caller_meets_the_same_rules():
    """The tasks check what they are given against the options' declarations: the message the
    command line gives (which refuses first), for a caller that bypasses it."""
    from roberta.data.prepare import prepare
    from roberta.qa.examples import check_version
    from roberta.qa.windows import make_windows
    from roberta.tasks.candidate_scoring import Loss
    from roberta.tasks.embed import EmbedData
    from roberta.tasks.embed_distill import Similarity
    from roberta.tasks.finetune import load_finetune_job, runs
    from roberta.tasks.race import plan_race
    from roberta.tasks.tag_data import TagColumns, evaluate_tagged

    rule = r"field '{}' must be (at least {}|a finite number), not {}$"
    job = load_finetune_job(None, [], 1e-5, 16, eval_every=5)
    assert job.train.eval_every == 5 and len(runs(job, Path("run"), 2, False)) == 2
    cases = [
        (
            lambda: load_finetune_job(None, [], 1e-5, 16, eval_every=0),
            "^finetune: " + rule.format("eval_every", 1, 0),
        ),
        (lambda: runs(job, Path("run"), 0, False), "^finetune: " + rule.format("seeds", 1, 0)),
        (lambda: EmbedData(Path("dev.tsv"), ("a.txt",), max_sentences=0), rule.format("max_sentences", 1, 0)),
        (lambda: plan_race("RACE", 0, job, None, None, "M"), rule.format("max_qa", 1, 0)),
        (lambda: make_windows(None, [], 384, -1, 64, train=True), rule.format("stride", 0, -1)),
        (lambda: make_windows(None, [], 384, 128, 0, train=True), rule.format("max_query", 1, 0)),
        (lambda: Similarity(float("inf")), rule.format("similarity_weight", 0, "inf")),
        (lambda: Loss("margin", -1.0), rule.format("margin_alpha", 0, r"-1\.0")),
        (lambda: prepare(["a.txt"], "tok", "out", workers=0), "^prepare: " + rule.format("workers", 1, 0)),
        (
            lambda: prepare(["a.txt"], "tok", "out", valid_fraction=1),
            r"field 'valid_fraction' must be in \[0, 1\)",
        ),
        (lambda: check_version("3.0"), r"^squad: field 'version' must be one of 1\.1, 2\.0, not '3\.0'$"),
        (
            lambda: evaluate_tagged("gold.txt", "predicted.txt", TagColumns(), "iob3"),
            r"^tagging: field 'scheme' must be one of iob2, iob1, iobes, none, not 'iob3'$",
        ),
    ]
    for call, message in cases:
        with pytest.raises(UserError, match=message):
            call()
    assert EmbedData(Path("dev.tsv"), ("a.txt",), max_sentences=1).max_sentences == 1


def refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            "distill glue --task RTE --data D --teacher T --model S --alpha 1.5",
            "roberta: error: distill: field 'alpha' must be in [0, 1], not 1.5",
        ),
        (
            "distill classify --train a --dev b --text-column t --label-column l --teacher T --model S "
            "--temperature 0",
            "roberta: error: distill: field 'temperature' must be positive, not 0.0",
        ),
        (
            "finetune embed --text a --dev b --model M --temperature -1",
            "roberta: error: finetune embed: field 'temperature' must be positive, not -1.0",
        ),
        (
            "serve --model M --port 70000",
            "roberta: error: serve: field 'port' must be in [0, 65535], not 70000",
        ),
        ("probe RUN --glue G --seeds 0", "roberta: error: probe: field 'seeds' must be at least 1, not 0"),
        (
            "finetune glue --task RTE --data D --model M --eval-every 0",
            "roberta: error: finetune glue: field 'eval_every' must be at least 1, not 0",
        ),
        (
            "distill glue --task RTE --data D --teacher T --model S --seeds 0",
            "roberta: error: distill glue: field 'seeds' must be at least 1, not 0",
        ),
        (
            "finetune embed --text a --dev b --model M --max-sentences 0",
            "roberta: error: finetune embed: field 'max_sentences' must be at least 1, not 0",
        ),
        (
            "distill embed --text a --dev b --teacher T --new-student 2x128 --similarity-weight nan",
            "roberta: error: distill embed: field 'similarity_weight' must be a finite number, not nan",
        ),
        (
            "finetune race --data D --model M --max-qa 0",
            "roberta: error: finetune race: field 'max_qa' must be at least 1, not 0",
        ),
        (
            "finetune squad --version 1.1 --train a --dev b --model M --stride -1",
            "roberta: error: finetune squad: field 'stride' must be at least 0, not -1",
        ),
        (
            "finetune wsc --data D --model M --margin-alpha -1",
            "roberta: error: finetune wsc: field 'margin_alpha' must be at least 0, not -1.0",
        ),
        (
            "finetune winogrande --data D --model M --method lm --margin-alpha -2",
            "roberta: error: finetune winogrande: field 'margin_alpha' must be at least 0, not -2.0",
        ),
    ],
)
def test_a_value_outside_its_rule_is_one_line_and_exit_2_before_anything_is_written(
    capsys, tmp_path, argv, message
):
    out, argv = tmp_path / "run", argv.split()
    needs_out = argv[0] in ("distill", "finetune")
    assert refused(capsys, [*argv, *(["--out", str(out)] if needs_out else [])]) == message
    assert not out.exists()


# Each verb's older spelling of the model beside the new one: the same parsed options.
SPELLINGS = [
    ("embed C --input i --out o", "embed --model C --input i --out o"),
    ("predict C --head h --input i --out o", "predict --input i --out o --head h --model=C"),
    ("fill-mask C --topk 3 <mask>", "fill-mask <mask> --topk 3 --model C"),
    ("convert S --to hf D", "convert --model S D --to hf"),
    ("export C --to onnx O", "export --model C O"),
    ("serve C --port 0", "serve --port 0 --model C"),
    ("finetune race --data d --init C --out o", "finetune race --data d --model C --out o"),
    ("finetune tag --train a --dev b --init C --out o", "finetune tag --train a --dev b --model C --out o"),
    ("distill glue --task RTE --data d --teacher T --student S --out o",
     "distill glue --task RTE --data d --teacher T --model S --out o"),
    ("distill embed --dev d --teacher T --student S --out o",
     "distill embed --dev d --teacher T --out o --model S"),
    ("pretrain --data d --out o --init-from C", "pretrain --data d --out o --model C"),
]  # fmt: skip


def parsed(argv: str) -> dict:
    args = vars(build_parser().parse_args(argv.split()))
    return {k: v for k, v in args.items() if k != "handler" and not k.startswith("_spelling")}


@pytest.mark.parametrize(("old", "new"), SPELLINGS, ids=lambda argv: " ".join(argv.split()[:2]))
def test_the_old_and_the_new_spelling_of_the_model_give_the_same_options(old, new):
    assert parsed(old) == parsed(new)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ("embed C --model D --input i --out o", "CKPT and --model"),
        ("fill-mask --model C D <mask>", "--model and CKPT"),
        ("convert --model S S2 D", "--model and SRC"),
        ("finetune glue --task RTE --data d --init C --model D --out o", "--init and --model"),
        ("distill embed --dev d --teacher T --model S --student S --out o", "--model and --student"),
        ("pretrain --data d --out o --model C --init-from C", "--model and --init-from"),
    ],
)
def test_both_spellings_at_once_are_refused_in_one_line(capsys, argv, named):
    line = refused(capsys, argv.split())
    assert f"error: {named} both name the model: give it once, as --model" in line, line


def test_a_missing_model_is_asked_for_as_model(capsys):
    embed = refused(capsys, "embed --input i --out o".split())
    assert "required: --model CKPT (see 'roberta embed --help')" in embed
    assert "required: --model/--init" in refused(capsys, "finetune race --data d --out o".split())


@pytest.fixture(scope="module")
def micro(shared_data, tmp_path_factory) -> Path:
    from data_fixtures import save_micro_checkpoint

    return save_micro_checkpoint(tmp_path_factory.mktemp("micro") / "ckpt", shared_data)


@pytest.mark.usefixtures("one_thread")
def test_embed_and_fill_mask_give_the_same_result_under_either_spelling(micro, tmp_path, capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text("Hello world!\nA second, longer line of text.\n")
    common = ["--input", str(lines), "--precision", "fp32", "--no-progress"]
    assert main(["embed", str(micro), *common, "--out", str(tmp_path / "old.npy")]) == 0
    assert main(["embed", "--model", str(micro), *common, "--out", str(tmp_path / "new.npy")]) == 0
    old, new = np.load(tmp_path / "old.npy"), np.load(tmp_path / "new.npy")
    assert old.shape == (2, 64) and np.array_equal(old, new)
    capsys.readouterr()
    text = "The capital of France is <mask>."
    assert main(["fill-mask", str(micro), text, "--precision", "fp32"]) == 0
    before = capsys.readouterr().out
    assert main(["fill-mask", text, "--model", str(micro), "--precision", "fp32"]) == 0
    assert capsys.readouterr().out == before and len(before.splitlines()) == 5


# --- recipes: the same job from Python and from the command line


@pytest.fixture
def planned(monkeypatch):
    """What `finetune` was handed by the command line (the run itself is not started)."""
    import roberta.tasks.finetune as finetune

    seen = {}

    def record(job, out, start, plan_task, **members):
        seen.update(job=job, out=out, start=start, plan=plan_task, members=members)
        return {}

    monkeypatch.setattr(finetune, "finetune", record)
    return seen


def test_a_python_caller_gets_the_command_lines_embedding_recipe(planned, tmp_path):
    from roberta.tasks.embed import EMBED_RECIPE, plan_embedding
    from roberta.tasks.finetune import Start, recipe_job

    out = tmp_path / "run"
    argv = ["finetune", "embed", "--text", "s.txt", "--dev", "dev.tsv", "--model", "M", "--out", str(out)]
    assert main([*argv, "--optim.lr=1e-4"]) == 0
    python = recipe_job(EMBED_RECIPE, overrides=["--optim.lr=1e-4"])
    assert planned["job"] == python
    # The recipe below the CLI: SimCSE's dropout, short sentences in random order, its batch.
    assert (python.model.dropout, python.model.attention_dropout) == (0.1, 0.1)
    assert (python.data.max_length, python.data.group_by_length) == (128, False)
    assert (python.optim.lr, python.train.batch_size, python.train.epochs) == (1e-4, 64, 1)
    assert planned["start"] == Start("M", None) and planned["plan"].func is plan_embedding
    assert planned["plan"].args[2] == 0.05  # SimCSE's temperature, the declaration's default


def test_a_python_caller_gets_the_command_lines_squad_recipe(planned, tmp_path):
    from roberta.tasks.finetune import recipe_job
    from roberta.tasks.squad import SQUAD_RECIPE

    argv = ["finetune", "squad", "--version", "1.1", "--train", "t.json", "--dev", "d.json", "--init", "M"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    job = recipe_job(SQUAD_RECIPE)
    assert planned["job"] == job
    assert (job.data.max_length, job.optim.lr, job.train.batch_size, job.train.epochs) == (384, 1.5e-5, 48, 2)


def test_the_recipes_live_below_the_command_line():
    """No recipe value is written in cli/: the learning rates, batches and job overrides are the
    tasks' (or the options' declarations, for the flags that change them)."""
    source = "".join(p.read_text() for p in (SRC / "cli").glob("*.py"))
    source = re.sub(r'"""[\s\S]*?"""', "", source)  # the docstrings' examples (--optim.lr=1e-3) are help
    # (`--scale` is spelled `--train.scale=` by an f-string: a flag's other name, not a recipe.)
    assert not re.search(r'(?<!f)"--(data|model|optim|train|schedule)\.\w+=', source)
    assert not re.search(r"\b\d+e-\d\b", source)
