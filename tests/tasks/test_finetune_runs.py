"""What `roberta finetune` does with run directories and starting models: --overwrite replaces,
--resume continues every member (finished ones untouched) and clears what a killed run left
half-written, [model] dropout applies to the loaded model and job.json records the model built,
JSONL labels are classes by value, an unnamed head in --init takes the data's labels."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from data_fixtures import glue_slice, save_micro_checkpoint
from roberta import checkpoint
from roberta.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

STEPS = ["--train.max_steps=4", "--train.eval_every=2", "--train.checkpoint_every=2", "--train.keep_last=0"]


@pytest.fixture(scope="module")
def micro(shared_data, tmp_path_factory) -> Path:
    """A micro model (2 x 64, 130 positions) with the GPT-2 tokenizer and an unnamed 2-class head
    "classifier"."""
    return save_micro_checkpoint(tmp_path_factory.mktemp("micro") / "ckpt", shared_data, {"classifier": 2})


@pytest.fixture(scope="module")
def sst(shared_data, tmp_path_factory) -> Path:
    return glue_slice(tmp_path_factory.mktemp("sst"), shared_data, "SST-2", 32)


def glue(sst: Path, micro: Path, out: Path, *extra: str) -> list[str]:
    command = ["finetune", "glue", "--task", "SST-2", "--data", str(sst), "--init", str(micro)]
    return [*command, "--out", str(out), "--train.batch_size=8", *STEPS, *extra]


def files(run: Path) -> dict[str, int]:
    """Every file under `run` with its modification time."""
    return {str(p.relative_to(run)): p.stat().st_mtime_ns for p in sorted(run.rglob("*")) if p.is_file()}


def weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / "checkpoints" / f"step-{step:08d}" / "model.safetensors"))


def test_overwrite_replaces_and_resume_of_a_finished_run_changes_nothing(sst, micro, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(glue(sst, micro, out)) == 0
    before, best = files(out), json.loads((out / "results.json").read_text())["best"]
    capsys.readouterr()
    assert main(glue(sst, micro, out, "--resume")) == 0  # finished: reported, not retrained
    assert files(out) == before
    assert json.loads(capsys.readouterr().out) == {"best": best}
    (out / "notes.txt").write_text("an old note")
    assert main(glue(sst, micro, out, "--overwrite", "--train.max_steps=2")) == 0
    assert not (out / "notes.txt").exists()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000002"]
    results = json.loads((out / "results.json").read_text())
    assert [e["step"] for e in results["evaluations"]] == [2]  # the old run's evaluations are gone


def test_resume_clears_a_killed_runs_leftovers_and_continues_bit_identically(sst, micro, tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main(glue(sst, micro, whole)) == 0
    # As a kill during step 4's checkpoint and best/ leaves it: step 2 complete, temporaries beside.
    shutil.copytree(whole, killed)
    (killed / "results.json").unlink()
    shutil.rmtree(killed / "checkpoints" / "step-00000004")
    leftovers = [killed / ".best.tmp-x1y2", killed / "checkpoints" / ".step-00000004.tmp"]
    for path in leftovers:
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"half")
    (killed / ".results.json.tmp-77.json").write_text("{")

    assert main(glue(sst, micro, killed, "--resume")) == 0
    assert not any(p.exists() for p in [*leftovers, killed / ".results.json.tmp-77.json"])
    a, b = weights(whole, 4), weights(killed, 4)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)

    def record(run: Path) -> dict:
        return {k: v for k, v in json.loads((run / "results.json").read_text()).items() if k != "evaluations"}

    assert record(killed) == record(whole)


def test_resume_of_seeds_continues_each_member_and_leaves_finished_ones(sst, micro, tmp_path):
    out = tmp_path / "run"
    assert main(glue(sst, micro, out, "--seeds", "2", "--train.max_steps=2")) == 0
    finished = files(out / "seed1")
    shutil.rmtree(out / "seed2")  # as if the command was killed before its second member began
    assert main(glue(sst, micro, out, "--seeds", "2", "--train.max_steps=2", "--resume")) == 0
    assert files(out / "seed1") == finished
    summary = json.loads((out / "results.json").read_text())
    runs = next(iter(summary["cells"].values()))["runs"]
    assert [r["seed"] for r in runs] == [1, 2] and all(r["best"]["step"] == 2 for r in runs)
    assert (out / "seed2" / "results.json").is_file()


def test_model_dropout_applies_and_job_records_the_model_built(sst, micro, tmp_path):
    out = tmp_path / "run"
    no_dropout = "--model.dropout=0 --model.attention_dropout=0 --model.classifier_dropout=0".split()
    assert main(glue(sst, micro, out, "--train.max_steps=2", *no_dropout)) == 0
    job = json.loads((out / "job.json").read_text())["job"]
    built = checkpoint.load(out / "best")[0].config
    assert job["model"] == built.to_dict()
    assert (built.hidden_size, built.num_layers, built.max_positions) == (64, 2, 130)
    assert (built.dropout, built.attention_dropout, built.classifier_dropout) == (0.0, 0.0, 0.0)
    assert job["data"]["max_length"] == 128  # 512 asked, the model's 128 positions used
    assert json.loads((out / "results.json").read_text())["job"]["model"] == job["model"]
    # The rates reach every dropout module of the model a run starts from, the heads' included.
    from roberta.tasks.finetune import Start, load_finetune_job

    overrides = ["--model.dropout=0.2", "--model.attention_dropout=0.3", "--model.classifier_dropout=0.4"]
    model, _ = Start(micro).load(load_finetune_job(None, overrides, 1e-5, 8))
    rates = {name: module.p for name, module in model.named_modules() if isinstance(module, torch.nn.Dropout)}
    assert rates["layers.0.attention.dropout"] == 0.3 and rates["heads.classifier.dropout"] == 0.4
    assert rates["dropout"] == rates["layers.1.dropout"] == 0.2


def test_jsonl_labels_are_classes_by_value_and_an_unnamed_head_takes_them(micro, tmp_path):
    rows = [
        ("a fine film", 1),
        ("a good film", 1.0),
        ("a nice film", "1"),
        ("a dull film", 0),
        ("a bad film", 0.0),
    ] * 4
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))
    out = tmp_path / "run"
    columns = "--text-column text --label-column label".split()
    args = ["finetune", "classify", "--train", str(data), "--dev", str(data), *columns, "--init", str(micro)]
    assert main([*args, "--out", str(out), "--batch-size", "4", "--train.max_steps=2"]) == 0
    head = checkpoint.load(out / "best")[0].heads["classifier"]
    assert head.labels == ("0", "1")  # the --init head was unnamed: it takes the data's labels


def test_a_warning_found_while_planning_is_shown_once_the_plan_passes(shared_data, micro, tmp_path, capsys):
    data = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text())
    paragraphs = [p for p in data["data"][0]["paragraphs"] if len(p["context"].split()) < 80][:2]
    paragraphs[0]["qas"][0]["answers"] = [{"text": "not in the context", "answer_start": 0}]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    args = ["finetune", "squad", "--version", "1.1", "--train", str(path), "--dev", str(path)]
    args += ["--stride", "32", "--init", str(micro), "--out", str(tmp_path / "run")]
    args += ["--train.batch_size=4", "--train.max_steps=1"]
    assert main(args) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("roberta: warning:")]
    assert len(warned) == 1 and "1 SQuAD question(s) skipped" in warned[0]


def test_resume_of_a_run_killed_before_its_first_checkpoint_starts_it_afresh(sst, micro, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "job.json").write_text("{}")
    (out / "metrics.jsonl").write_text('{"step": 1, "split": "train", "loss": 99.0}\n')
    assert main(glue(sst, micro, out, "--resume", "--train.max_steps=2")) == 0
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [2, 2]  # the train and dev records of step 2; the killed run's line is gone


def test_a_summary_over_runs_that_found_no_best_is_valid_json(tmp_path):
    """--seeds where no evaluation was ever a number (an undefined correlation throughout) has no
    median to rank; the summary says so in valid JSON instead of failing after the runs."""
    from roberta.tasks.finetune import load_finetune_job, runs, summarize
    from roberta.train.trainer import TrainResult

    job = load_finetune_job(None, [], lr=1e-5, batch_size=16)
    planned = runs(job, tmp_path, seeds=2, sweep=False)
    found = TrainResult(
        step=4,
        checkpoint=None,
        valid={},
        skipped_steps=0,
        best={"metric": "pearson", "value": 0.5, "step": 4},
    )
    none = TrainResult(step=4, checkpoint=None, valid={}, skipped_steps=0, best=None)
    record = summarize(tmp_path, [(j, d, none) for j, d in planned])
    assert (record["metric"], record["best_cell"]) == (None, None)
    assert [cell["median"] for cell in record["cells"].values()] == [None]
    json.loads((tmp_path / "results.json").read_text(), parse_constant=lambda name: pytest.fail(name))
    record = summarize(
        tmp_path, [(planned[0][0], planned[0][1], none), (planned[1][0], planned[1][1], found)]
    )
    assert record["metric"] == "pearson" and next(iter(record["cells"].values()))["median"] == 0.5
