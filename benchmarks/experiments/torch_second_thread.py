"""Does a second thread running the model slow it down? The same 8 batches of 16 corpus sentences
through `Roberta.embed` (a saved base checkpoint, in the precision given), first on the main thread,
then on a long-lived second thread (as `roberta serve`'s batcher runs it), then alternating, in us a
token. docs/precision.md cites it: the calls ran ~16% slower on both threads once the second one
had run the model (libgomp's shorter spinning once it manages more threads than cores is the likely
cause, not established).

    .venv/bin/python benchmarks/experiments/torch_second_thread.py CHECKPOINT bf16
"""

import queue
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bf16_infer_profile import texts  # noqa: E402

from roberta import load  # noqa: E402


def main() -> None:
    checkpoint, precision = sys.argv[1], sys.argv[2]
    torch.set_num_threads(2)
    hub = load(checkpoint).use_precision(precision)
    rng = random.Random(0)
    pool = texts(2000)
    batches = [hub.encode_batch(rng.sample(pool, 16)) for _ in range(8)]
    tokens = sum(len(seq) for batch in batches for seq in batch)
    found: dict[str, list[float]] = {}

    def run(label: str) -> None:
        started = time.perf_counter()
        for batch in batches:
            hub.embed(batch)
        found.setdefault(label, []).append((time.perf_counter() - started) / tokens * 1e6)

    jobs, done = queue.Queue(), queue.Queue()

    def worker() -> None:
        while (label := jobs.get()) is not None:
            run(label)
            done.put(label)

    threading.Thread(target=worker, daemon=True).start()
    run("main thread, before any other thread ran the model")
    jobs.put("second thread, its first run")
    done.get()
    for _ in range(4):
        run("main thread")
        jobs.put("second thread")
        done.get()
    for label, values in found.items():
        rounds = [round(v) for v in values]
        print(f"{precision} {label}: median {statistics.median(values):.0f} us a token {rounds}")


if __name__ == "__main__":
    main()
