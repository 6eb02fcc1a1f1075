"""Large CPU tensors on transparent huge pages (torch's THP_MEM_ALLOC_ENABLE) or not: a training step.

torch reads the setting once, at its first allocation, so each side is its own process; rounds
alternate the two, the first rotating. A process builds the preset (random init), takes one
warm-up step, then `--steps` timed steps of the trainer's step as `step_variants.py` takes it
(`tasks.pretrain.mlm_loss`, backward, fused AdamW) on its first batch (16 x 128 of the corpus, 15%
masked), dropout on, and reports wall
seconds per step, minor page faults per step, user and system CPU seconds per step, and its
losses (the two sides' must be equal: the setting moves memory, not arithmetic).

    .venv/bin/python benchmarks/experiments/huge_pages.py --preset base --steps 3 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

# harness.py and time_to_quality.py, shared with the `make bench` scripts, live one level up in benchmarks/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402

SIDES = {"huge pages": "1", "4 KB pages": "0"}


def child(preset: str, steps: int) -> None:
    from step_variants import Stepper, pretrain_setup

    make_model, objective, sides, batches, optim = pretrain_setup(
        1, preset, harness.DEFAULT_DATA, harness.ROOT / "runs" / "bench"
    )
    step = Stepper(make_model(), objective, sides["mlm_loss"], optim)
    losses = [step(batches[0])]  # warm-up: optimizer state, thread pools
    before, times = resource.getrusage(resource.RUSAGE_SELF), []
    for _ in range(steps):
        started = time.perf_counter()
        losses.append(step(batches[0]))
        times.append(time.perf_counter() - started)
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "seconds": times,
                "faults": (after.ru_minflt - before.ru_minflt) / steps,
                "losses": losses,
                "user": (after.ru_utime - before.ru_utime) / steps,
                "system": (after.ru_stime - before.ru_stime) / steps,
            }
        )
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="base", choices=["tiny", "base"])
    p.add_argument("--steps", type=int, default=3, help="timed steps per process (default 3)")
    p.add_argument("--rounds", type=int, default=2, help="processes per side (default 2)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.preset, args.steps)
    print(f"{args.preset}@128, batch 16, {args.threads} threads; {harness.machine()}; {harness.versions()}")
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    order = list(SIDES)
    for round_ in range(args.rounds):
        for side in order[round_ % 2 :] + order[: round_ % 2]:
            env = {**harness.thread_env(args.threads), "THP_MEM_ALLOC_ENABLE": SIDES[side]}
            argv = [sys.executable, __file__, "--child", "--preset", args.preset, "--steps", str(args.steps)]
            out = subprocess.run(
                argv, env=env, check=True, capture_output=True, text=True, cwd=os.path.dirname(__file__)
            )
            runs[side].append(json.loads(out.stdout.splitlines()[-1]))
            print(
                f"  round {round_ + 1} {side}: {[round(s, 2) for s in runs[side][-1]['seconds']]} s",
                flush=True,
            )
    for side, results in runs.items():
        seconds = [s for r in results for s in r["seconds"]]
        print(
            f"{side:>11}: s per step {harness.Spread.of(seconds)}; page faults per step "
            f"{statistics.median(r['faults'] for r in results):,.0f}; CPU s per step user "
            f"{statistics.median(r['user'] for r in results):.2f}, system "
            f"{statistics.median(r['system'] for r in results):.2f}"
        )
    on, off = ([s for r in runs[side] for s in r["seconds"]] for side in SIDES)
    print(f"4 KB / huge, median step time: {statistics.median(off) / statistics.median(on):.3f}")
    print(
        "losses equal:",
        all(r["losses"] == runs["4 KB pages"][0]["losses"] for rs in runs.values() for r in rs),
    )


if __name__ == "__main__":
    main()
