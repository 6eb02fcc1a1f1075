"""`roberta probe` on a micro pretraining run with two checkpoints: the three files with the
random init first, nothing trained again on a rerun, a killed probe continued, and the average
the mean of the task medians."""

import json
import shutil
import statistics
from pathlib import Path

import pytest

import refusals
from data_fixtures import glue_slice
from roberta.cli import main
from roberta.evaluation import probe as probe_module
from roberta.evaluation.probe import task_score

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

MICRO = (
    "--model.preset=tiny --model.hidden_size=32 --model.num_layers=2 --model.num_heads=2 --model.ffn_size=64 "
    "--model.max_positions=130 --data.seq_len=32 --train.batch_size=8 --train.micro_batch_size=8 "
    "--train.max_steps=4 --train.eval_every=2 --train.eval_batches=2 --train.checkpoint_every=2 "
    "--train.keep_last=0 --train.device=cpu --train.progress=false"
).split()
REAL_FINE_TUNE = probe_module._fine_tune
PROBE = ["--tasks", "SST-2,STS-B", "--seeds", "2", "--limit", "16", "--no-progress"]


@pytest.fixture(scope="module")
def run(micro_corpus, shared_data, tmp_path_factory) -> tuple[Path, Path]:
    """A pretraining run with checkpoints at steps 2 and 4, and a GLUE folder of 16-row slices."""
    root = tmp_path_factory.mktemp("probe")
    data = ["--data", str(micro_corpus / "corpus"), "--tokenizer", str(micro_corpus / "tokenizer")]
    assert main(["pretrain", *data, "--out", str(root / "run"), *MICRO]) == 0
    for task in ("SST-2", "STS-B"):
        glue_slice(root / "glue", shared_data, task, 16)
    return root / "run", root / "glue"


class Killed(Exception):
    pass


def count_fine_tunes(monkeypatch, fail_after: int | None = None) -> list:
    calls = []

    def fine_tune(*args, **kwargs):
        if fail_after is not None and len(calls) == fail_after:
            raise Killed  # the probe dies in its next cell
        calls.append(args[:3])
        return REAL_FINE_TUNE(*args, **kwargs)

    monkeypatch.setattr(probe_module, "_fine_tune", fine_tune)
    return calls


def test_probe_writes_the_curve_and_a_rerun_trains_nothing(run, monkeypatch, capsys):
    directory, glue = run
    calls = count_fine_tunes(monkeypatch)
    assert main(["probe", str(directory), "--glue", str(glue), *PROBE]) == 0
    assert len(calls) == 3 * 2 * 2  # (random init, step 2, step 4) x 2 tasks x 2 seeds
    out = directory / "probe"
    assert (out / "probe.png").stat().st_size > 1000
    table = (out / "probe.md").read_text().splitlines()
    assert [line.split("|")[1].strip() for line in table[2:]] == [
        "random-init",
        "step-00000002",
        "step-00000004",
    ]
    record = json.loads((out / "probe.json").read_text())
    for entry in record["rows"].values():
        for task in ("SST-2", "STS-B"):
            scores = [task_score(figures) for figures in entry["tasks"][task].values()]
            assert len(scores) == 2 and entry["median"][task] == statistics.median(scores)
        assert entry["average"] == pytest.approx(statistics.fmean(entry["median"].values()))
        assert set(entry["tasks"]["STS-B"]["1"]) == {"pearson", "spearman"}
    step4 = record["rows"]["step-00000004"]
    assert step4["step"] == 4 and step4["tokens"] == 4 * 8 * 32
    assert step4["zero_shot"]["masked_accuracy"] is not None  # logged by the run at step 4
    assert record["rows"]["random-init"]["zero_shot"]["masked_accuracy"] is None  # nothing logged at step 0

    calls.clear()
    assert main(["probe", str(directory), "--glue", str(glue), *PROBE]) == 0
    assert calls == [] and json.loads((out / "probe.json").read_text()) == record


def test_a_killed_probe_continues_with_the_cells_it_lacks(run, monkeypatch, tmp_path):
    directory, glue = run
    copy = tmp_path / "run"
    shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("probe"))
    count_fine_tunes(monkeypatch, fail_after=5)
    with pytest.raises(Killed):
        main(["probe", str(copy), "--glue", str(glue), *PROBE])
    done = json.loads((copy / "probe" / "probe.json").read_text())
    assert sum(len(seeds) for e in done["rows"].values() for seeds in e["tasks"].values()) == 5
    calls = count_fine_tunes(monkeypatch)
    assert main(["probe", str(copy), "--glue", str(glue), *PROBE]) == 0
    assert len(calls) == 12 - 5


def test_a_probed_run_resumes_and_its_new_checkpoint_adds_one_row(run, micro_corpus, monkeypatch, tmp_path):
    """RUN/probe/ belongs to the run: `pretrain --resume` goes on beside it, and the next probe
    fine-tunes the new checkpoint only."""
    directory, glue = run
    copy = tmp_path / "run"
    shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("probe"))
    assert main(["probe", str(copy), "--glue", str(glue), *PROBE]) == 0
    data = ["--data", str(micro_corpus / "corpus"), "--tokenizer", str(micro_corpus / "tokenizer")]
    longer = [a.replace("max_steps=4", "max_steps=6") for a in MICRO]
    assert main(["pretrain", *data, "--out", str(copy), *longer, "--resume"]) == 0
    calls = count_fine_tunes(monkeypatch)
    assert main(["probe", str(copy), "--glue", str(glue), *PROBE]) == 0
    assert {row.name for row, _, _ in calls} == {"step-00000006"} and len(calls) == 2 * 2
    assert "step-00000006" in json.loads((copy / "probe" / "probe.json").read_text())["rows"]


def test_probe_refuses_what_it_cannot_do_before_training(run, capsys, tmp_path):
    directory, glue = run
    copy, bad_glue = tmp_path / "run", tmp_path / "glue"
    shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("probe"))
    shutil.copytree(glue, bad_glue)
    # A label SST-2 does not know, on the first example's line; STS-B without its training file.
    lines = (bad_glue / "SST-2" / "train.tsv").read_text().splitlines(keepends=True)
    lines[1] = lines[1].rsplit("\t", 1)[0] + "\t7\n"
    (bad_glue / "SST-2" / "train.tsv").write_text("".join(lines))
    (bad_glue / "STS-B" / "train.tsv").unlink()
    finetuned = tmp_path / "finetuned"
    shutil.copytree(directory, finetuned, ignore=shutil.ignore_patterns("probe"))
    job = json.loads((finetuned / "job.json").read_text())
    (finetuned / "job.json").write_text(json.dumps({"job": job["job"], "task": "RTE", "labels": ["0", "1"]}))
    cases = [
        (copy, glue, ["--checkpoints", "step-00000099"], "has no step-00000099"),
        (copy, glue, ["--seeds", "0"], "probe: field 'seeds' must be at least 1, not 0"),
        (copy, glue, ["--limit", "1"], "probe: field 'limit' must be at least 2, not 1"),
        (copy, glue, ["--tasks", "SST-2,QQP"], "QQP"),
        (copy, glue, ["--tasks", ","], "--tasks names no task"),
        (copy, glue, ["--tasks", "STS-B,SST-2,STS-B"], "--tasks names STS-B twice"),
        (copy, bad_glue, ["--tasks", "SST-2"], "train.tsv:2: label '7'"),
        (finetuned, glue, [], "a fine-tuning run (RTE), not a pretraining run"),
        (tmp_path / "empty", glue, [], "no job.json"),
    ]
    (tmp_path / "empty").mkdir()
    for run_dir, glue_dir, extra, cause in cases:
        before = refusals.snapshot(tmp_path)
        assert main(["probe", str(run_dir), "--glue", str(glue_dir), *PROBE, *extra]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and cause in err[0], (extra, err)
        assert refusals.snapshot(tmp_path) == before, extra  # no random init, no probe/ folder
    for record in (
        {"rows": []},
        {"rows": {"random-init": {"step": 0, "tokens": 0, "tasks": {"SST-2": [1]}}}},
    ):
        (copy / "probe").mkdir(exist_ok=True)
        (copy / "probe" / "probe.json").write_text(json.dumps(record))
        before = refusals.snapshot(tmp_path)
        assert main(["probe", str(copy), "--glue", str(glue), *PROBE]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and "probe.json: field 'rows" in err[0], err
        assert refusals.snapshot(tmp_path) == before
