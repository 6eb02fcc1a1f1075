"""Why `serve --runtime onnx` lost its single-sentence lead under load (issue #36): the batches a
loaded server runs, timed in-process for torch and onnxruntime, with and without a second thread
busy the way a server's request threads are (JSON, tokenizing) while the model runs.

The model is serve_load.py's (a random init of --config with a 2-class head, GPT-2's vocabulary).
For each batch size, batches of real sentences (the batcher's: sorted by length) are embedded by:
  torch          the checkpoint's hub, `embed` (unpadded; the last layer at `<s>` only)
  onnx           the export's hub: every padded position is computed, so a batch runs in groups of
                 rows of like length (onnx_model.length_groups); onnxruntime's threads spin-wait
                 between operators (its default)
  onnx-one-batch the same, the batch run whole (PADDING_SLACK infinite): what 2026-11-25 measured
  onnx-nospin    grouped, the intra-op threads told not to spin (session.intra_op.allow_spinning=0)
alternating, --rounds times. "busy" repeats each with a thread tokenizing and JSON-encoding
sentences meanwhile, and reports that thread's throughput too: a server's request threads.

Writes benchmarks/results/<date>-onnx-under-load.md.

    .venv/bin/python benchmarks/experiments/onnx_under_load.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))

from serve_load import build_model, sentences  # noqa: E402

from harness import DEFAULT_DATA, machine, versions  # noqa: E402


def hubs(paths: dict[str, Path]) -> dict:
    """{system: (hub, padding slack)}: the slack is onnx_model.PADDING_SLACK's value for its calls."""
    import torch

    from roberta import Roberta, load
    from roberta.runtime.onnx_model import PADDING_SLACK, load_onnx

    threads = torch.get_num_threads()
    onnx = Roberta(*load_onnx(paths["onnx"], threads=threads)).eval()
    return {
        "torch": (load(paths["ckpt"]).eval(), PADDING_SLACK),
        "onnx": (onnx, PADDING_SLACK),
        "onnx-one-batch": (onnx, math.inf),
        "onnx-nospin": (
            Roberta(*load_onnx(paths["onnx"], threads=threads, spin=False)).eval(),
            PADDING_SLACK,
        ),
    }


class Busy:
    """A thread doing a request thread's work (tokenize a sentence, JSON round trip) until stopped."""

    def __init__(self, hub, texts: list[str]):
        self.hub, self.texts, self.done, self.stop = hub, texts, 0, threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            text = self.texts[k % len(self.texts)]
            ids = self.hub.encode(json.loads(json.dumps({"text": text}))["text"]).tolist()
            json.dumps({"ids": ids})
            self.done, k = self.done + 1, k + 1

    def __enter__(self):
        self.started = time.perf_counter()
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()
        self.rate = self.done / (time.perf_counter() - self.started)


def batches(hub, texts: list[str], size: int, count: int) -> list[list[list[int]]]:
    ids = [hub.encode(t, truncate=True) for t in texts]
    groups = [ids[k * size : (k + 1) * size] for k in range(count)]
    return [sorted(g, key=len) for g in groups]


def time_batches(system: tuple, groups) -> float:
    from roberta.runtime import onnx_model

    hub, onnx_model.PADDING_SLACK = system
    started = time.perf_counter()
    for group in groups:
        hub.embed(group)
    return (time.perf_counter() - started) / len(groups)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="base")
    p.add_argument("--sizes", default="1,8,32")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--data", type=Path, default=Path(os.environ.get("ROBERTA_DATA", DEFAULT_DATA)))
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="onnx-under-load-"))
    paths, texts = build_model(work, args.config, args.data), sentences(args.data, 4000)
    found = hubs(paths)
    any_hub = found["torch"][0]
    times: dict[tuple, list[float]] = {}
    busy_rates: dict[tuple, list[float]] = {}
    for r in range(args.rounds):
        for size in (int(s) for s in args.sizes.split(",")):
            groups = batches(any_hub, texts[r * 1000 :], size, max(4, 64 // size))
            for busy in (False, True):
                names = list(found)
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    time_batches(found[name], groups[:1])  # warm
                    if busy:
                        with Busy(any_hub, texts) as b:
                            seconds = time_batches(found[name], groups)
                        busy_rates.setdefault((size, name), []).append(b.rate)
                    else:
                        seconds = time_batches(found[name], groups)
                    times.setdefault((size, busy, name), []).append(seconds)
                    print(
                        f"round {r + 1} batch {size} busy={busy} {name}: {seconds * 1e3:.1f} ms", flush=True
                    )
    rows = [
        "| batch | busy thread | system | ms per batch (median) | sentences/s | ÷ torch | busy thread's "
        "sentences/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for (size, busy, name), values in sorted(times.items(), key=lambda kv: kv[0][:2]):
        ms = statistics.median(values) * 1e3
        torch_ms = statistics.median(times[(size, busy, "torch")]) * 1e3
        side = f"{statistics.median(busy_rates[(size, name)]):.0f}" if busy else "–"
        rows.append(
            f"| {size} | {'yes' if busy else 'no'} | {name} | {ms:.1f} | {size / ms * 1e3:.1f} | "
            f"{torch_ms / ms:.2f}x | {side} |"
        )
    today = datetime.date.today().isoformat()
    out = ROOT / "benchmarks" / "results" / f"{today}-onnx-under-load.md"
    command = " ".join([".venv/bin/python", "benchmarks/experiments/onnx_under_load.py", *sys.argv[1:]])
    out.write_text(
        f"# ONNX under load ({today})\n\n`{command}`\n\nMachine: {machine()}; {versions()}.\n\n"
        + "\n".join(rows)
        + "\n"
    )
    print("\n".join(rows))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
