"""The CLI's runs: exact resume, and DDP / FSDP2 under torchrun."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import harness
from gpu_parts.common import (
    KILL_AT,
    LAST_STEP,
    PRECISION,
    RESUMED_FROM,
    TIMING,
    Plan,
    shown_value,
    synthetic_data,
)

# --- 5. exact resume through the CLI -------------------------------------------------------------


def pretrain_argv(plan: Plan, data: Path, out: Path, resume: bool = False, nproc: int = 0) -> list[str]:
    """`roberta pretrain` of the plan's CLI job on the synthetic corpus; under torchrun with `nproc`."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    argv = [*(launcher if nproc else [sys.executable]), "-m", "roberta.cli", "pretrain"]
    argv += ["--data", str(data / "corpus"), "--out", str(out), *plan.cli_job]
    argv += [f"--train.device={plan.device}", f"--train.precision={PRECISION}"]
    return argv + (["--resume"] if resume else [])


def launch(argv: list[str], log: Path, fault: str | None = None) -> subprocess.Popen:
    env = {**os.environ, **({"ROBERTA_FAULT": fault} if fault else {})}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        return subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=harness.ROOT)


def finish(procs: dict[str, subprocess.Popen]) -> dict[str, int]:
    return {name: proc.wait() for name, proc in procs.items()}


def logged(run: Path) -> list[dict]:
    """A run's metrics.jsonl records without the timing fields, which differ between equal runs."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines if line.strip()]


def loss_difference(a: list[dict], b: list[dict]) -> float:
    """The largest loss difference between two runs' records, step by step (inf if they differ in kind)."""
    if [(r["step"], r["split"]) for r in a] != [(r["step"], r["split"]) for r in b]:
        return math.inf
    return max((abs(x["loss"] - y["loss"]) for x, y in zip(a, b)), default=0.0)


def final_weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoints" / f"step-{LAST_STEP:08d}" / "model.safetensors"))


def part_resume(plan: Plan, work: Path) -> dict:
    """Three runs of the CLI job at once: two uninterrupted (their difference is what the kernels
    alone make: zero where they are deterministic) and one killed mid-step 7 by SIGKILL
    (ROBERTA_FAULT), then `--resume`d from its step-6 checkpoint."""
    data = synthetic_data(plan, work)
    root = work / "resume"
    runs = {"whole": root / "whole", "again": root / "again", "killed": root / "killed"}
    codes = finish(
        {
            name: launch(
                pretrain_argv(plan, data, run), root / f"{name}.log", KILL_AT if name == "killed" else None
            )
            for name, run in runs.items()
        }
    )
    killed_kept = (runs["killed"] / "checkpoints" / f"step-{RESUMED_FROM:08d}").is_dir()
    codes["resumed"] = finish(
        {"resumed": launch(pretrain_argv(plan, data, runs["killed"], True), root / "killed.log")}
    )["resumed"]
    if codes["whole"] or codes["again"] or codes["resumed"]:
        raise RuntimeError(f"a run failed: exit codes {codes}; logs in {root}")
    whole, again, resumed = (logged(runs[name]) for name in ("whole", "again", "killed"))
    reference = final_weights(runs["whole"])
    weights = final_weights(runs["killed"])
    weights_equal = weights.keys() == reference.keys() and all(
        weights[k].equal(v) for k, v in reference.items()
    )
    difference, control = loss_difference(whole, resumed), loss_difference(whole, again)
    # Where two uninterrupted runs differ (atomics in the attention and embedding backward), a
    # resumed run may differ as much; a broken resume (another batch, another dropout mask) moves
    # the loss by tenths at once, far past either bound.
    tolerance = max(4 * control, 1e-3 * max(r["loss"] for r in whole)) if control else 0.0
    identical = resumed == whole and weights_equal
    return {
        "exit_codes": codes,
        "killed_at": KILL_AT,
        "resumed_from_step": RESUMED_FROM,
        "bit_identical": identical,
        "weights_equal": weights_equal,
        "max_loss_difference": difference,
        "uninterrupted_runs_difference": control,
        "tolerance": tolerance,
        "losses": {"whole": [r["loss"] for r in whole], "resumed": [r["loss"] for r in resumed]},
        "summary": (
            "bit-identical"
            if identical
            else f"differs by {difference:.2e} (two uninterrupted "
            f"runs: {control:.2e}; tolerance {tolerance:.2e})"
        ),
        "checks": {
            "the killed run died at the fault": codes["killed"] == -signal.SIGKILL,
            f"its step-{RESUMED_FROM} checkpoint was kept": killed_kept,
            "resumed losses equal the uninterrupted run's (bit for bit, or within the kernels' own "
            "run-to-run difference)": identical or difference <= tolerance,
        },
    }


# --- 6. DDP and FSDP2 under torchrun ---------------------------------------------------------------


def part_distributed(plan: Plan, work: Path) -> dict:
    """DDP and FSDP2 at each world size: started under torchrun, killed on every rank after the
    step-6 checkpoint, resumed to the end. With one process `distributed.wrap` leaves the model
    unwrapped (there is nothing to synchronise), so a world of 1 checks torchrun's start, the
    checkpoint and resume, and two ranks check DDP and FSDP themselves."""
    import torch

    data = synthetic_data(plan, work)
    nprocs = plan.nprocs or ((1, 2) if torch.cuda.device_count() >= 2 else (1,))
    runs = {(n, mode): work / "distributed" / f"{mode}-{n}" for n in nprocs for mode in ("ddp", "fsdp")}

    def started(resume: bool) -> dict[str, int]:
        return finish(
            {
                f"{mode} x{n}": launch(
                    pretrain_argv(plan, data, run, resume, n) + [f"--train.parallel={mode}"],
                    run.with_suffix(".log"),
                    None if resume else KILL_AT,
                )
                for (n, mode), run in runs.items()
            }
        )

    killed = started(resume=False)
    kept = {
        f"{m} x{n}": (run / "checkpoints" / f"step-{RESUMED_FROM:08d}").is_dir()
        for (n, m), run in runs.items()
    }
    resumed = started(resume=True)
    figures = {}
    for (n, mode), run in runs.items():
        name = f"{mode} x{n}"
        records = logged(run) if (run / "metrics.jsonl").exists() else []
        losses = [r["loss"] for r in records if r["split"] == "train"]
        figures[name] = {
            "world_size": n,
            "parallel": mode,
            "wrapped": n > 1,
            "killed_exit": killed[name],
            "resumed_exit": resumed[name],
            "last_step": records[-1]["step"] if records else None,
            "train_losses": losses,
            "valid_loss": next((r["loss"] for r in reversed(records) if r["split"] == "valid"), None),
        }
    for n in nprocs:
        a, b = figures[f"ddp x{n}"]["train_losses"], figures[f"fsdp x{n}"]["train_losses"]
        figures[f"ddp vs fsdp x{n}: largest loss difference"] = max(
            (abs(x - y) for x, y in zip(a, b)), default=None
        )
    names = [f"{m} x{n}" for n, m in runs]
    figures["summary"] = ", ".join(
        f"{name}: step {figures[name]['last_step']}, valid loss {shown_value(figures[name]['valid_loss'])}"
        for name in names
    )
    figures["checks"] = {
        f"{name}: killed, kept its step-{RESUMED_FROM} checkpoint, resumed to step {LAST_STEP}": (
            figures[name]["killed_exit"] != 0 and kept[name] and figures[name]["resumed_exit"] == 0
        )
        and figures[name]["last_step"] == LAST_STEP
        for name in names
    }
    figures["checks"]["every loss finite"] = all(
        math.isfinite(x) for name in names for x in figures[name]["train_losses"]
    )
    return figures
