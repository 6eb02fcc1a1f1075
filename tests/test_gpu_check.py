"""`benchmarks/gpu_check.py --dry-run`: every part of the GPU check runs on the CPU at a tiny shape,
through the functions the GPU run calls, so that the script a session runs in its few lent GPU
minutes cannot rot unnoticed between loans."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PARTS = [
    "environment",
    "data",
    "tests",
    "precision",
    "attention",
    "throughput",
    "resume",
    "distributed",
    "finetune",
    "embed",
    "serve",
]


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("gpu-check")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--out", str(out)]
    proc = subprocess.run(
        [*argv, "--work", str(out / "work")], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    (path,) = out.glob("*-gpu-check-dry-run.json")
    assert "## serve" in path.with_suffix(".md").read_text()
    return json.loads(path.read_text())


def test_every_part_runs_and_passes_its_checks(record):
    parts = record["parts"]
    assert list(parts) == PARTS
    failing = {name: (p["status"], p.get("error") or p.get("reason")) for name, p in parts.items()}
    assert all(p["status"] == "ok" for p in parts.values()), failing
    assert all(all(p["figures"].get("checks", {}).values()) for p in parts.values())


def test_the_figures_are_plausible(record):
    figures = {name: p["figures"] for name, p in record["parts"].items()}
    losses = figures["precision"]["losses"]
    assert len(losses["fp32"]) == len(losses["bf16"]) > 1
    assert all(math.isfinite(x) for x in losses["fp32"] + losses["bf16"])
    shapes = [v for v in figures["throughput"].values() if isinstance(v, dict) and "tokens_per_s" in v]
    assert shapes and all(v["tokens_per_s"][side]["median"] > 0 for v in shapes for side in ("ours", "HF"))
    assert figures["resume"]["bit_identical"]  # the CPU's kernels are deterministic
    assert figures["resume"]["losses"]["resumed"] == figures["resume"]["losses"]["whole"]
    runs = [v for v in figures["distributed"].values() if isinstance(v, dict) and "world_size" in v]
    assert {r["parallel"] for r in runs} == {"ddp", "fsdp"}
    assert all(r["last_step"] == 12 and all(map(math.isfinite, r["train_losses"])) for r in runs)
    assert figures["finetune"]["RTE"]["examples_per_s"]["ours"]["median"] > 0
    assert figures["embed"]["sentences_per_s"]["ours"]["median"] > 0
    assert all(cell["requests_per_s"] > 0 for k, cell in figures["serve"].items() if k.endswith("clients"))
    # bf16 training on a CPU writes its attention out: no SDPA kernel in any of the three cases.
    assert len(figures["attention"]["checks"]) == 3 and all(figures["attention"]["checks"].values())
    assert figures["attention"]["no padding"]["kernels"] == []
