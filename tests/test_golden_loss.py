"""A golden loss curve: the micro pretraining job's first 20 training losses, recorded once.

A change to numerics that crashes nothing (an initialisation, the masking stream, the schedule,
the loss normaliser, the optimizer's defaults) moves these numbers; this test says so. When a
change is meant to move them, regenerate the file and say why in the commit:

    ROBERTA_WRITE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden_loss.py
"""

import json
import os
from pathlib import Path

import pytest

import train_fixtures

GOLDEN = Path(__file__).parent / "assets" / "golden_loss_micro.json"
STEPS = 20
# Relative: kernels pick other instruction sets on other CPUs, which moves the last digits only.
TOLERANCE = 1e-4


def test_first_20_losses_match_the_recorded_curve(tmp_path, one_thread):
    train_fixtures.run(tmp_path, [f"--train.max_steps={STEPS}", f"--train.checkpoint_every={STEPS}",
                                  f"--train.eval_every={STEPS}"])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r["split"] == "train"]
    assert len(losses) == STEPS
    if os.environ.get("ROBERTA_WRITE_GOLDEN"):
        GOLDEN.write_text(json.dumps({"job": "tests/train_fixtures.py MICRO_JOB", "losses": losses}, indent=1) + "\n")
    golden = json.loads(GOLDEN.read_text())["losses"]
    assert losses == pytest.approx(golden, rel=TOLERANCE)
    assert losses[-1] < losses[0]  # and the curve is a learning one
