"""The roberta command in a subprocess on one thread, optionally killed by a fault at a named point
(ROBERTA_FAULT, e.g. 'step-9:micro-batch-0') or resumed: how the exact-resume tests run a job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path


def roberta_process(args: list[str], fault: str | None = None, resume: bool = False) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ROBERTA_FAULT", None)
    if fault:
        env["ROBERTA_FAULT"] = fault
    command = [sys.executable, "-m", "roberta.cli", *args, *(["--resume"] if resume else [])]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run_killed_and_resumed(argv: Callable[[Path], list[str]], whole: Path, killed: Path, fault: str) -> None:
    """`roberta ARGV(whole)` to its end and, beside it, `roberta ARGV(killed)` SIGKILLed at `fault`,
    then resumed to its end: each must end as said (the caller compares the two runs)."""
    procs = [roberta_process(argv(whole)), roberta_process(argv(killed), fault=fault)]
    (rc_whole, log_whole), (rc_killed, log_killed) = [
        (p.returncode, o + e) for p in procs for o, e in [p.communicate(timeout=300)]
    ]
    assert rc_whole == 0, log_whole
    assert rc_killed == -signal.SIGKILL, log_killed
    resumed = roberta_process(argv(killed), resume=True)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out + err


def run_figures(run: Path) -> list[dict]:
    """A run's metrics.jsonl rows without the timing fields: what two runs of the same job share."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "mfu", "data_wait")} for r in rows]
