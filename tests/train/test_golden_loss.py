"""A golden loss curve: the micro pretraining job's first 20 training losses, recorded once.

A change to numerics that crashes nothing (an initialisation, the masking stream, the schedule,
the loss normaliser, the optimizer's defaults) moves these numbers; this test says so. When a
change is meant to move them, regenerate the file and say why in the commit:

    ROBERTA_WRITE_GOLDEN=1 .venv/bin/python -m pytest tests/train/test_golden_loss.py
"""

import json
import os
from pathlib import Path

import pytest

import train_fixtures
from roberta.padding import Selected, Unpadded
from roberta.train.config import OptimSection
from roberta.train.optim import build_optimizer

GOLDEN = Path(__file__).parents[1] / "assets" / "golden_loss_micro.json"
STEPS = 20
# Relative: kernels pick other instruction sets on other CPUs, which moves the last digits only.
TOLERANCE = 1e-4


def train_losses(run_dir: Path, *overrides: str) -> list[float]:
    train_fixtures.run(
        run_dir,
        [
            f"--train.max_steps={STEPS}",
            f"--train.checkpoint_every={STEPS}",
            f"--train.eval_every={STEPS}",
            *overrides,
        ],
    )
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in records if r["split"] == "train"]


def test_first_20_losses_match_the_recorded_curve(tmp_path, one_thread):
    losses = train_losses(tmp_path)
    assert len(losses) == STEPS
    recorded = json.loads(GOLDEN.read_text())
    if os.environ.get("ROBERTA_WRITE_GOLDEN"):
        recorded["losses"] = losses
        GOLDEN.write_text(json.dumps(recorded, indent=1) + "\n")
    assert losses == pytest.approx(recorded["losses"], rel=TOLERANCE)
    assert losses[-1] < losses[0]  # and the curve is a learning one


@pytest.mark.parametrize("implementation", ["foreach", "for-loop"])
def test_adamw_implementations_follow_the_same_curve(implementation, tmp_path, one_thread):
    """A speed switch must not change the run: 20 losses equal to 1e-5 relative in fp32."""
    fused = train_losses(tmp_path / "fused", "--optim.implementation=fused")
    other = train_losses(tmp_path / implementation, f"--optim.implementation={implementation}")
    assert other == pytest.approx(fused, rel=1e-5)


@pytest.mark.parametrize(
    "switch, step",
    [("--model.last_layer_masked_only", Selected), ("--model.unpad", Unpadded)],
    ids=["last_layer_masked_only", "unpad"],
)
def test_the_models_speed_switches_follow_the_same_curve(switch, step, tmp_path, one_thread, monkeypatch):
    """By default the last layer computes the masked positions only, and the layers the real tokens
    only (the micro batches are ~22% padding); each switch off (every position, the padded batch)
    must give the same run, dropout on (the same random stream on the CPU)."""
    calls = []
    of = step.of
    monkeypatch.setattr(step, "of", lambda *args, **kwargs: calls.append(1) or of(*args, **kwargs))
    on = train_losses(tmp_path / "on", f"{switch}=true")
    assert len(calls) >= STEPS  # the switch reached the model: every step took the path
    calls.clear()
    off = train_losses(tmp_path / "off", f"{switch}=false")
    assert not calls
    assert off == pytest.approx(on, rel=1e-5)


@pytest.mark.parametrize("implementation, flag", [("fused", "fused"), ("foreach", "foreach")])
def test_the_implementation_switch_reaches_torch(implementation, flag):
    model = train_fixtures.initial_model()
    optimizer = build_optimizer(model, OptimSection(implementation=implementation))
    assert optimizer.defaults[flag] is True
