"""The GPU path checked and timed in one short run (issue #38): at most 8 minutes of one GPU.

    make gpu-check                                         # the venv, with the bench extra
    PYTHONPATH=src python3 benchmarks/gpu_check.py         # a bare machine: torch + CUDA
    .venv/bin/python benchmarks/gpu_check.py --dry-run --out /tmp/gpu-check   # CPU, tiny: ~2 minutes

A session lent a GPU runs it through the device tool in one call (timeout_s=600), the repository
copied without .venv and without ../shared; the results come back from $OUT:

    PYTHONPATH=src PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --out $OUT

Parts, in this order, each in a process of its own with its own time budget, so that one failing
(an exception, an out-of-memory error, a hang past its budget) leaves the others' results:
  environment  torch, CUDA, the GPUs, the datasheet bf16 peak MFU divides by
  data         the synthetic data and base checkpoint the later parts read, made once
  tests        `pytest -m gpu` over the suite (tests/train/test_gpu.py and any other CUDA test)
  precision    bf16 autocast against fp32: 200 pretraining steps of the base shape from one init
               on the same batches, the losses within bf16's expected drift (`precision_checks`)
  attention    the SDPA kernel a training step takes (flash, memory-efficient, ...), without
               padding, and with padding with and without unpadding: torch profiler op names,
               and which backends accept the inputs when forced one at a time
  throughput   pretraining steps at base@512 and large@512 beside HF `RobertaForMaskedLM` (same
               init, batches, bf16 autocast, fused AdamW), alternated in slices: tokens/s, the
               largest micro-batch each side fits (a doubling search), peak memory, MFU
  resume       `roberta pretrain` killed mid-step after a checkpoint and `--resume`d, beside two
               uninterrupted runs: the logged losses and final weights against the uninterrupted run's
  distributed  DDP and FSDP2 under `torchrun --nproc-per-node 1` (and 2 where two GPUs are
               visible): started, trained, killed after a checkpoint, resumed to the end
  finetune     `roberta finetune glue` on RTE and SST-2 at the base shape beside HF `Trainer`
               (benchmarks/finetune_throughput.py's runs): examples/s
  embed        `Roberta.embed` beside HF on length-sorted batches (benchmarks/embed_throughput.py):
               sentences/s
  serve        `roberta serve` under 1 and 32 clients on loopback (benchmarks/experiments/
               serve_load.py's load): requests/s, latency

The parts live in benchmarks/gpu_parts/ (common: the plan and what the parts share; setup,
training, runs, tasks: the parts by family); this file runs them and writes the record.

Data is synthetic, so that nothing of ../shared is needed: pretraining batches are random motifs
repeated to the sequence's length (a masked token is a copy of one a motif away, so losses fall),
in GPT-2's 50,265-id vocabulary; the CLI parts and fine-tuning read random words, tokenized by a
byte-level BPE trained on them at the same vocabulary size. A part whose package is missing
(transformers, starlette) is recorded as skipped, with the reason.

`--dry-run` runs every part through the same functions on the CPU at a tiny shape, a few steps,
torchrun on gloo with two ranks, bf16 by CPU autocast: the kernels are all it leaves out
(tests/test_gpu_check.py). The results file, rewritten after every part, is
`OUT/<date>-gpu-check.json` (`-gpu-check-dry-run` for a dry run) with the same record rendered as
Markdown beside it; its keys are listed in docs/training.md#on-a-gpu. The exit status is 1 when a
part failed or ran out of time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import harness
from bench import write_run_file
from gpu_parts.common import DRY_RUN, GPU, HERE, Plan, Skipped, one_line, shown_value
from gpu_parts.runs import part_distributed, part_resume
from gpu_parts.setup import part_data, part_environment, part_tests
from gpu_parts.tasks import hf_finetune, part_embed, part_finetune, part_serve
from gpu_parts.training import part_attention, part_precision, part_throughput
from roberta.io import atomic_write, write_json

SETUP = ("environment", "data")  # run first, one after the other: every later part needs them


# --- the parent: each part in a child process, the results file rewritten after each ----------


@dataclass
class Results:
    """The run's record: `path` (.md) and the JSON beside it, both rewritten whole after each part."""

    path: Path
    record: dict

    @property
    def json_path(self) -> Path:
        return self.path.with_suffix(".json")

    def write(self) -> None:
        write_json(self.json_path, self.record)
        with atomic_write(self.path) as f:
            f.write(render(self.record))


def start_results(plan: Plan, out: Path) -> Results:
    now = datetime.datetime.now(datetime.UTC)
    suffix = "gpu-check" if plan.name == "gpu" else "gpu-check-dry-run"
    record = {
        "command": shlex.join(["python3", *sys.argv]),
        "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "plan": plan.name,
        "machine": harness.machine(),
        "versions": harness.versions(),
        "budget_s": plan.total_s,
        "elapsed_s": 0.0,
        "parts": {name: {"status": "pending"} for name in PARTS},
    }
    # write_run_file picks the name (a second run the same day gets its time in it) and writes a stub.
    path = write_run_file(out, now, suffix, f"# GPU check, {record['date']}: running\n")
    results = Results(path, record)
    results.write()
    return results


def child_env(plan: Plan) -> dict[str, str]:
    """Every child's environment: the package importable without installing it (the device machine
    holds a bare copy of the repository), the plan's thread count."""
    env = harness.thread_env(plan.threads)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(harness.ROOT / "src"), env.get("PYTHONPATH")]))
    env.pop("ROBERTA_FAULT", None)
    return env


def run_child(name: str, plan: Plan, work: Path, budget: float) -> dict:
    """Part `name` in its own process group (killed whole, torchrun's workers and servers
    included, when it outlasts `budget`): its outcome, its time, and its log's end unless ok."""
    result, log = work / "parts" / f"{name}.json", work / "logs" / f"{name}.log"
    result.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    result.unlink(missing_ok=True)
    argv = [sys.executable, __file__, "--part", name, "--work", str(work)]
    argv += ["--dry-run"] if plan.name == "dry-run" else []
    started, timed_out = time.monotonic(), False
    with log.open("w") as f:
        proc = subprocess.Popen(
            argv, stdout=f, stderr=subprocess.STDOUT, env=child_env(plan), start_new_session=True
        )
        try:
            proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            kill_group(proc)
    if timed_out:
        outcome = {"status": "timeout", "error": f"stopped at its budget of {budget:.0f} s"}
    elif result.exists():
        outcome = json.loads(result.read_text())
    else:
        outcome = {"status": "failed", "error": f"exited {proc.returncode} without a result"}
    if outcome["status"] != "ok":
        outcome["log_tail"] = log.read_text(errors="replace")[-3000:]
    return {**outcome, "seconds": round(time.monotonic() - started, 1), "budget_s": round(budget)}


def kill_group(proc: subprocess.Popen) -> None:
    """The child and whatever it started (its own process group), if anything is left."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_plan(plan: Plan, out: Path, work: Path) -> Results:
    """The environment and the data first, then the other parts, `plan.lanes` at a time, within
    the plan's total time; the results file after each."""
    deadline = time.monotonic() + plan.total_s
    started = time.monotonic()
    results = start_results(plan, out)

    def outcome_of(name: str) -> dict:
        left = deadline - time.monotonic()
        blocked = [
            n for n in SETUP if n != name and results.record["parts"][n]["status"] not in ("ok", "pending")
        ]
        if blocked:
            return {
                "status": "skipped",
                "reason": f"{blocked[0]}: {results.record['parts'][blocked[0]].get('error')}",
            }
        if left < 10:
            return {"status": "skipped", "reason": f"no time left of the run's {plan.total_s:.0f} s"}
        print(f"=== {name} (budget {min(plan.budgets[name], left):.0f} s)", flush=True)
        return run_child(name, plan, work, min(plan.budgets[name], left))

    def record(name: str, outcome: dict) -> None:
        print(f"=== {name}: {outcome['status']} {summary(outcome)}", flush=True)
        results.record["parts"][name] = outcome
        results.record["elapsed_s"] = round(time.monotonic() - started, 1)
        results.write()

    for name in SETUP:
        record(name, outcome_of(name))
    with ThreadPoolExecutor(plan.lanes) as pool:
        running = {pool.submit(outcome_of, name): name for name in PARTS if name not in SETUP}
        for done in as_completed(running):
            record(running[done], done.result())
    return results


def summary(outcome: dict) -> str:
    figures = outcome.get("figures") or {}
    return figures.get("summary") or outcome.get("reason") or outcome.get("error") or ""


# --- the child: one part, its outcome as JSON -------------------------------------------------


def run_part(name: str, plan: Plan, work: Path) -> None:
    """Run part `name` here and write its outcome: ok (its checks all hold), failed (a check, or
    an exception, with the traceback's end) or skipped (with the reason)."""
    try:
        figures = PARTS[name](plan, work)
        failed = [check for check, holds in figures.get("checks", {}).items() if not holds]
        outcome = {"status": "failed" if failed else "ok", "figures": figures}
        if failed:
            outcome["error"] = "check failed: " + "; ".join(failed)
    except Skipped as skipped:
        outcome = {"status": "skipped", "reason": str(skipped)}
    except Exception as error:  # noqa: BLE001 - any failure is this part's, recorded, not the run's
        outcome = {"status": "failed", "error": one_line(error), "traceback": traceback.format_exc()[-3000:]}
    (work / "parts").mkdir(parents=True, exist_ok=True)
    write_json(work / "parts" / f"{name}.json", outcome)


PARTS: dict[str, Callable[[Plan, Path], dict]] = {
    "environment": part_environment,
    "data": part_data,
    "tests": part_tests,
    "precision": part_precision,
    "attention": part_attention,
    "throughput": part_throughput,
    "resume": part_resume,
    "distributed": part_distributed,
    "finetune": part_finetune,
    "embed": part_embed,
    "serve": part_serve,
}


# --- the Markdown beside the JSON ---------------------------------------------------------------


def render(record: dict) -> str:
    """The record as Markdown: a line per part, then each part's figures (long lists shortened:
    the JSON holds them whole)."""
    environment = record["parts"]["environment"].get("figures", {})
    lines = [
        f"# GPU check, {record['date']} ({record['plan']})",
        "",
        f"`{record['command']}`",
        "",
        f"Machine: {record['machine']}; {record['versions']}; GPU: {environment.get('summary', '—')}, "
        f"CUDA {environment.get('cuda')}; {record['elapsed_s']:.0f} s of the run's "
        f"{record['budget_s']:.0f} s.",
        "",
        "| part | status | seconds (budget) | result |",
        "|---|---|---|---|",
    ]
    for name, outcome in record["parts"].items():
        seconds = f"{outcome['seconds']:.0f} ({outcome['budget_s']})" if "seconds" in outcome else "—"
        cell = summary(outcome).replace("|", "/").replace("\n", " ")[:300]
        lines.append(f"| {name} | {outcome['status']} | {seconds} | {cell} |")
    for name, outcome in record["parts"].items():
        shown = {k: v for k, v in outcome.items() if k not in ("status", "seconds", "budget_s")}
        lines += ["", f"## {name}", "", *bullets(shown.pop("figures", {}) | shown)]
    return "\n".join(lines) + "\n"


def bullets(value: dict, depth: int = 0) -> list[str]:
    lines = []
    for key, item in value.items():
        if key == "summary":
            continue
        prefix = "  " * depth + f"- {key}:"
        if isinstance(item, dict) and item:
            lines += [prefix, *bullets(item, depth + 1)]
        elif isinstance(item, str) and "\n" in item:
            lines += [prefix, "", "```", item.strip(), "```", ""]
        else:
            lines.append(f"{prefix} {shown_value(item)}")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dry-run", action="store_true", help="every part on the CPU at a tiny shape (~2 minutes)"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=HERE / "results",
        help="folder of the results file (default benchmarks/results)",
    )
    p.add_argument(
        "--work", type=Path, help="scratch, empty or absent (default runs/gpu-check/PLAN, emptied first)"
    )
    p.add_argument("--part", choices=list(PARTS), help=argparse.SUPPRESS)  # a child: one part
    p.add_argument("--hf-finetune", help=argparse.SUPPRESS)  # a child: one HF Trainer run (JSON spec)
    args = p.parse_args()
    plan = DRY_RUN if args.dry_run else GPU
    if args.hf_finetune:
        hf_finetune(json.loads(args.hf_finetune))
        return
    if args.part:
        run_part(args.part, plan, args.work)
        return
    work = args.work or harness.ROOT / "runs" / "gpu-check" / plan.name
    if args.work is None and work.exists():
        import shutil

        shutil.rmtree(work)
    elif work.exists() and any(work.iterdir()):
        raise SystemExit(f"--work {work}: not empty (the parts' caches would be read as this run's)")
    results = run_plan(plan, args.out, work)
    print(f"written: {results.path}, {results.json_path}")
    if any(p["status"] in ("failed", "timeout") for p in results.record["parts"].values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
