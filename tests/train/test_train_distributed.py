"""Data parallelism and accumulation change nothing: 2 ranks x b = 1 process x 2b = 2 micro-steps of b."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

import train_fixtures

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

FIXTURE = Path(__file__).parents[1] / "train_fixtures.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
NO_DROPOUT = [
    "--model.dropout=0",
    "--model.attention_dropout=0",
    "--train.max_steps=4",
    "--train.eval_every=4",
]


def weights(run_dir: Path) -> dict:
    return load_file(str(run_dir / "checkpoints" / "step-00000004" / "model.safetensors"))


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def one_process_batch_2b(tmp_path_factory) -> dict:
    run = tmp_path_factory.mktemp("single")
    train_fixtures.run(run, [*NO_DROPOUT, "--train.batch_size=8", "--train.micro_batch_size=8"])
    return weights(run)


def test_gradient_accumulation_equals_one_big_batch(tmp_path, one_process_batch_2b):
    train_fixtures.run(tmp_path, [*NO_DROPOUT, "--train.batch_size=8", "--train.micro_batch_size=4"])
    assert max_difference(weights(tmp_path), one_process_batch_2b) < 1e-6
    # Training moved the weights, so equality above is not two untouched initialisations.
    initial = {
        k: v
        for k, v in train_fixtures.initial_model(NO_DROPOUT).state_dict().items()
        if k != "lm_head.weight"
    }
    assert max_difference(one_process_batch_2b, initial) > 1e-3


@pytest.mark.skipif(shutil.which(str(TORCHRUN)) is None, reason="torchrun not installed beside python")
def test_two_ranks_ddp_and_fsdp_match_one_process(tmp_path, one_process_batch_2b):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = {mode: tmp_path / mode for mode in ("ddp", "fsdp")}
    procs = {
        mode: subprocess.Popen(
            [
                str(TORCHRUN),
                "--nproc-per-node",
                "2",
                "--master-port",
                str(29400 + i * 7),
                str(FIXTURE),
                str(run),
                *NO_DROPOUT,
                "--train.batch_size=8",
                "--train.micro_batch_size=4",
                f"--train.parallel={mode}",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i, (mode, run) in enumerate(runs.items())
    }
    for proc in procs.values():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out[-3000:]
    for mode, run in runs.items():
        difference = max_difference(weights(run), one_process_batch_2b)
        assert difference < 1e-6, (mode, difference)
