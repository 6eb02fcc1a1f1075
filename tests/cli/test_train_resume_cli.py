"""The exact-resume promise through the path a user takes: `roberta prepare` → `roberta pretrain`
(the real PretrainLoader, dropout on), killed with SIGKILL mid-step, mid-checkpoint and twice in
one run, then `--resume`d: every logged figure and the final weights equal the uninterrupted run's."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

MICRO = (
    "--model.preset=tiny --model.hidden_size=64 --model.num_layers=2 --model.num_heads=4 "
    "--model.ffn_size=128 --model.dropout=0.1 --model.attention_dropout=0.1 --data.seq_len=32 "
    "--train.batch_size=8 --train.micro_batch_size=4 --train.max_steps=12 --train.log_every=1 "
    "--train.eval_every=6 --train.eval_batches=2 --train.checkpoint_every=3 --train.device=cpu "
    "--train.peak_tflops=0.1 --schedule.warmup_steps=2 --optim.lr=1e-3"
).split()
TIMING = {"tokens_per_s", "mfu", "data_wait"}


def launch(corpus: Path, run: Path, fault: str | None = None, resume: bool = False) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ROBERTA_FAULT", None)
    if fault:
        env["ROBERTA_FAULT"] = fault
    data = ["--data", str(corpus / "corpus"), "--tokenizer", str(corpus / "tokenizer")]
    resuming = ["--resume"] if resume else []
    args = [sys.executable, "-m", "roberta.cli", "pretrain", *data, "--out", str(run), *MICRO, *resuming]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_all(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    return [(p.returncode, out + err) for p in procs for out, err in [p.communicate(timeout=300)]]


def figures(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def test_killed_pretraining_resumes_bit_identically_through_the_cli(micro_corpus, tmp_path):
    whole = tmp_path / "whole"
    # Each run is killed by SIGKILL at its fault point(s), then resumed until it finishes.
    faults = {
        "mid-step": ["step-5:micro-batch-0"],  # between the two micro-batches of step 5
        "mid-checkpoint": ["checkpoint-6:after-model"],
        "twice": ["step-4", "step-10:micro-batch-1"],
    }
    procs = [launch(micro_corpus, whole)] + [
        launch(micro_corpus, tmp_path / n, f[0]) for n, f in faults.items()
    ]
    results = wait_all(procs)
    assert results[0][0] == 0, results[0][1]
    assert [rc for rc, _ in results[1:]] == [-signal.SIGKILL] * 3, results
    later = [launch(micro_corpus, tmp_path / "twice", faults["twice"][1], resume=True)]
    assert wait_all(later)[0][0] == -signal.SIGKILL
    final = wait_all([launch(micro_corpus, tmp_path / n, resume=True) for n in faults])
    assert all(rc == 0 for rc, _ in final), final

    reference = load_file(str(whole / "checkpoints" / "step-00000012" / "model.safetensors"))
    assert len(figures(whole)) == 12 + 2  # every step, plus the evaluations at steps 6 and 12
    for name in faults:
        run = tmp_path / name
        weights = load_file(str(run / "checkpoints" / "step-00000012" / "model.safetensors"))
        assert weights.keys() == reference.keys()
        assert all(weights[k].equal(v) for k, v in reference.items()), name
        assert figures(run) == figures(whole), name
