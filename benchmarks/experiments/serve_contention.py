"""What a server's other threads cost the model's OpenMP team on a 2-core CPU: `Roberta.embed` of
16 corpus sentences a call (serve_load.py's sentences, the base shape of serve_profile.py's
checkpoint), timed per call in each precision

- `--where main|thread`: loaded on one thread (as `roberta serve` loads), then run on the main thread
  or on a second one (the batcher's worker), nothing else running;
- `--busy`: run on the main thread, then on a second thread while the main thread is idle, then
  while it is busy 15% and 30% of each 10 ms (`json.dumps` of a 768-float list, holding the GIL,
  as an event loop answering requests does; with `--no-gil`, hashing that releases it).

    .venv/bin/python benchmarks/experiments/serve_contention.py --precision int8 --where thread
    .venv/bin/python benchmarks/experiments/serve_contention.py --precision bf16 --busy [--no-gil]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import DEFAULT_DATA, sentences  # noqa: E402

from roberta.hub import load  # noqa: E402


def busy_loop(share: float, hold_gil: bool, stop: threading.Event) -> None:
    vector, buffer = [random.random() for _ in range(768)], bytes(200_000)
    while not stop.is_set():
        started = time.perf_counter()
        while time.perf_counter() - started < 0.01 * share:
            json.dumps(vector) if hold_gil else hashlib.sha256(buffer).digest()
        time.sleep(0.01 * (1 - share))


def timed_calls(hub, draws: list, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        for ids in draws:
            started = time.perf_counter()
            hub.embed(ids).tolist()
            times.append((time.perf_counter() - started) * 1e3)
    return times


def on_thread(work) -> list[float]:
    out: list[float] = []
    thread = threading.Thread(target=lambda: out.extend(work()))
    thread.start()
    thread.join()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "int8"])
    p.add_argument("--where", default="thread", choices=["main", "thread"])
    p.add_argument("--busy", action="store_true")
    p.add_argument("--no-gil", action="store_true")
    p.add_argument("--checkpoint", default="/tmp/serve-profile/base", help="serve_profile.py's checkpoint")
    args = p.parse_args()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    hub = load(args.checkpoint)
    if args.precision == "int8":
        hub.quantize()
    elif args.precision == "bf16":
        hub.use_precision("bf16")
    torch.set_num_threads(threads)
    rng, texts = random.Random(1), sentences(DEFAULT_DATA)
    draws = [hub.encode_batch(rng.sample(texts, 16)) for _ in range(12)]
    if not args.busy:
        work = lambda: timed_calls(hub, draws, 3)  # noqa: E731
        times = work() if args.where == "main" else on_thread(work)
        print(
            f"{args.precision} {args.where}: median {statistics.median(times[len(draws) :]):.1f} ms a call; "
            f"threads {len(os.listdir('/proc/self/task'))}"
        )
        return
    timed_calls(hub, draws, 1)  # warm, on the main thread
    gil = "nogil" if args.no_gil else "gil"
    slices = [("main", 0), ("thread", 0), ("thread+loop15%", 0.15), ("main", 0), ("thread+loop30%", 0.3)]
    for label, share in slices:
        stop = threading.Event()
        loop = threading.Thread(target=busy_loop, args=(share, not args.no_gil, stop)) if share else None
        if loop:
            loop.start()
        work = lambda: timed_calls(hub, draws, 1)  # noqa: E731
        times = work() if label == "main" else on_thread(work)
        stop.set()
        if loop:
            loop.join()
        print(f"{args.precision} {gil} {label:16s} median {statistics.median(times):6.1f} ms a call of 16")


if __name__ == "__main__":
    main()
