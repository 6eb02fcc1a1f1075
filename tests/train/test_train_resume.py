"""A pretraining run killed with SIGKILL (mid-training, and mid-checkpoint) resumes exactly."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parents[1] / "train_fixtures.py"
JOB = ["--train.max_steps=10", "--train.checkpoint_every=3", "--train.eval_every=5", "--train.eval_batches=1"]


def launch(run_dir: Path, fault: str | None = None, resume: bool = False) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ROBERTA_FAULT", None)
    if fault:
        env["ROBERTA_FAULT"] = fault
    args = [sys.executable, str(FIXTURE), str(run_dir), *JOB, *(["--resume"] if resume else [])]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    out, err = proc.communicate(timeout=240)
    return proc.returncode, out + err


def losses(run_dir: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["split"], r["loss"], r["accuracy"]) for r in rows]


def final_weights(run_dir: Path) -> dict:
    return load_file(str(run_dir / "checkpoints" / "step-00000010" / "model.safetensors"))


def test_sigkill_mid_training_and_mid_checkpoint_resume_bit_identically(tmp_path):
    whole, killed, torn = tmp_path / "whole", tmp_path / "killed", tmp_path / "torn"
    # The uninterrupted run and the two crashing ones run side by side to save wall time.
    procs = [launch(whole), launch(killed, fault="step-5"), launch(torn, fault="checkpoint-6:before-rename")]
    (rc_whole, log_whole), (rc_killed, _), (rc_torn, _) = [finish(p) for p in procs]
    assert rc_whole == 0, log_whole
    assert rc_killed == rc_torn == -signal.SIGKILL
    # Killed after step 5: the step-3 checkpoint is the last; killed while saving step 6: the
    # half-written step-6 directory is only a hidden temporary, never a checkpoint.
    assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == ["step-00000003"]
    assert [p.name for p in (torn / "checkpoints").iterdir() if not p.name.startswith(".")] == [
        "step-00000003"
    ]
    assert any(p.name.startswith(".") for p in (torn / "checkpoints").iterdir())

    resumed = [launch(killed, resume=True), launch(torn, resume=True)]
    for rc, log in [finish(p) for p in resumed]:
        assert rc == 0, log
    assert not any(p.name.startswith(".") for p in (torn / "checkpoints").iterdir())

    reference = final_weights(whole)
    for run in (killed, torn):
        weights = final_weights(run)
        assert weights.keys() == reference.keys()
        for key, value in reference.items():
            assert weights[key].equal(value), (run.name, key)
        assert losses(run) == losses(whole)
    assert len(losses(whole)) == 10 + 2  # every step, plus evaluations at steps 5 and 10
