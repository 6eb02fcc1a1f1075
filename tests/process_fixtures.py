"""The roberta command in a subprocess on one thread, optionally killed by a fault at a named point
(ROBERTA_FAULT, e.g. 'step-9:micro-batch-0') or resumed: how the exact-resume tests run a job."""

from __future__ import annotations

import os
import subprocess
import sys


def roberta_process(args: list[str], fault: str | None = None, resume: bool = False) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ROBERTA_FAULT", None)
    if fault:
        env["ROBERTA_FAULT"] = fault
    command = [sys.executable, "-m", "roberta.cli", *args, *(["--resume"] if resume else [])]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
