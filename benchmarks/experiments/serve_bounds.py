"""What one request can cost `roberta serve`, before and after the request bounds (issue #34).
Loopback only, a handful of requests.

Three cases, each against a server of this checkout and, with --before SRC (the `src/` of an
older checkout, e.g. a `git worktree` of the commit before the bounds), a server of that code, on
the same weights (random inits with GPT-2's vocabulary: a 2 x 64 micro model for the first two,
whose answer sizes the issue reported, the tiny preset for the third, so that a request is slow):
  fill-mask   a 217-byte /fill-mask body: 16 texts, `topk` at the vocabulary size;
  embed       /embed with 50,000 one-word texts (under the 1 MB body limit), while a second
              client polls /health: the largest /health latency seen meanwhile;
  timed out   with --timeout 0.25, /embed of 256 texts of ~60 tokens (many forward passes) gets 504;
              then how long until a one-word /embed is answered (those sent meanwhile get 504).
For each: the status, the answer's bytes and the seconds. Writes
benchmarks/results/<date>-serve-bounds.md with the command, machine and date.

    .venv/bin/python benchmarks/experiments/serve_bounds.py --before /tmp/wt-before/src
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# harness.py, shared with the `make bench` scripts, lives one level up in benchmarks/.
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness import DEFAULT_DATA, machine, versions  # noqa: E402

HOST = "127.0.0.1"


def post(url: str, body: bytes, timeout: float = 600) -> tuple[int, int, float]:
    """(status, answer bytes, seconds) of one POST."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, len(response.read()), time.perf_counter() - start
    except urllib.error.HTTPError as e:
        return e.code, len(e.read()), time.perf_counter() - start


def health_latency(url: str, stop: threading.Event, worst: list[float]) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        urllib.request.urlopen(url + "/health", timeout=60).read()
        worst[0] = max(worst[0], time.perf_counter() - start)
        time.sleep(0.02)


def start_server(ckpt: Path, port: int, src: str | None, extra: list[str]) -> subprocess.Popen:
    env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
    command = [sys.executable, "-m", "roberta.cli", "serve", str(ckpt), "--port", str(port), *extra]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://{HOST}:{port}/health", timeout=1).read()
            return process
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"server did not start: {process.stderr.read().decode()[-2000:]}")


def cases(url: str) -> list[tuple[str, int, int, float, str]]:
    """Each case as (name, status, answer bytes, seconds, note)."""
    rows = []
    body = json.dumps({"text": ["A <mask>."] * 16, "topk": 50265}, separators=(",", ":")).encode()
    rows.append(("fill-mask, 16 texts x topk 50,265", *post(url + "/fill-mask", body), f"body {len(body)} B"))
    stop, worst = threading.Event(), [0.0]
    poller = threading.Thread(target=health_latency, args=(url, stop, worst))
    poller.start()
    body = json.dumps({"text": ["word"] * 50_000}).encode()
    status, size, seconds = post(url + "/embed", body)
    stop.set()
    poller.join()
    rows.append(
        ("embed, 50,000 one-word texts", status, size, seconds, f"/health worst {worst[0] * 1e3:.0f} ms")
    )
    return rows


def timed_out(url: str) -> tuple[str, int, int, float, str]:
    long = " ".join(["word"] * 58)
    status, size, seconds = post(url + "/embed", json.dumps({"text": [long] * 256}).encode())
    # One-word requests until one is answered: how long the abandoned request kept the worker.
    start, refused = time.perf_counter(), 0
    while post(url + "/embed", json.dumps({"text": "word"}).encode())[0] != 200:
        refused += 1
    note = f"a one-word request answered {time.perf_counter() - start:.2f} s later ({refused} got 504 first)"
    return ("embed, 256 x 60 tokens, --timeout 0.25", status, size, seconds, note)


def run_side(micro: Path, tiny: Path, src: str | None, port: int) -> list[tuple]:
    server = start_server(micro, port, src, [])
    try:
        rows = cases(f"http://{HOST}:{port}")
    finally:
        server.terminate()
        server.wait(timeout=60)
    server = start_server(tiny, port + 1, src, ["--timeout", "0.25"])
    try:
        rows.append(timed_out(f"http://{HOST}:{port + 1}"))
    finally:
        server.terminate()
        server.wait(timeout=60)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", help="src/ of the checkout to compare with (e.g. a worktree's)")
    p.add_argument("--port", type=int, default=18431, help="first of four loopback ports (default 18431)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data (GPT-2 BPE)")
    args = p.parse_args()
    import torch

    from roberta import RobertaConfig, RobertaModel
    from roberta.checkpoint import save
    from roberta.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(args.data / "gpt2_bpe")
    shapes = {"micro": RobertaConfig(hidden_size=64, num_layers=2, num_heads=2, ffn_size=256)}
    shapes["tiny"] = RobertaConfig.preset("tiny")
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        micro, tiny = (save(Path(tmp) / name, RobertaModel(c), tokenizer) for name, c in shapes.items())
        sides = [("this checkout", run_side(micro, tiny, None, args.port))]
        if args.before:
            sides.insert(0, ("before", run_side(micro, tiny, args.before, args.port + 2)))
    lines = [
        f"# What one request costs `roberta serve` ({datetime.date.today()})",
        "",
        f"Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`; {machine()}; {versions()}; "
        "models: random inits with GPT-2's vocabulary, 2 x 64 (the first two cases) and the tiny preset "
        "(the third); loopback, one request at a time.",
        "",
        "| server | case | status | answer bytes | seconds | note |",
        "|---|---|---|---|---|---|",
    ]
    for side, rows in sides:
        for name, status, size, seconds, note in rows:
            lines.append(f"| {side} | {name} | {status} | {size:,} | {seconds:.2f} | {note} |")
    text = "\n".join(lines) + "\n"
    print(text)
    out = ROOT / "benchmarks" / "results" / f"{datetime.date.today()}-serve-bounds.md"
    out.write_text(text)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
