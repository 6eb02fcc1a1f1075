"""Load on `roberta serve` beside what users run instead, and a soak test. Loopback only, bounded.

Systems, each a server process on 127.0.0.1 serving the same weights (a random init of --config
with a 2-class head, GPT-2's vocabulary):
  ours          `roberta serve CKPT --precision fp32` (dynamic batching through the hub's list calls);
  ours-bf16     `roberta serve CKPT --precision bf16` (bf16 autocast: a CPU with AMX or AVX512-BF16);
  ours-onnx     `roberta serve EXPORT --runtime onnx` (the same batcher over onnxruntime);
  ours-int8     `roberta serve CKPT --int8` (torch's dynamic int8 Linear layers);
  ours-onnx-int8  `roberta serve EXPORT --runtime onnx --int8` (the export's int8 graphs);
  hf-pipeline   HF `pipeline` inside a plain FastAPI endpoint, one call per request: what a user writes;
  infinity      Infinity (`infinity_emb v2`) on the model exported to HF, when --infinity names its
                executable (it is installed in a venv of its own, so that its torch is not ours);
  hub-call      no server: one in-process `Roberta.embed` / `predict` call per sentence (1 client only),
                the floor an idle server's latency is compared with.
N clients (--clients, default 1,8,32) each send one sentence per request, back to back, for
--slice-s seconds; every (endpoint, clients) cell runs every system in turn, rotating who goes
first, --rounds times, and the latencies of a cell are pooled over rounds. The table gives
requests/s, p50 and p99 latency and each system's ratio to the peers (hf-pipeline, infinity).

--soak: --soak-s seconds (default 600) of 32 clients at saturation on `ours`, a quarter of the
requests invalid (malformed JSON, no <mask>, unknown head, a text past the positions, an
oversized body, wrong types): it fails if any valid request gets anything but 200, any invalid one
anything but a 4xx, or the server's RSS at the end is over 110% of its RSS after the warm-up.

Both write benchmarks/results/<date>-serve-load.md (or -serve-soak.md) with the command, machine,
versions and date. Run them on a quiet machine:

    .venv/bin/python benchmarks/experiments/serve_load.py --infinity /work/venv-infinity/bin/infinity_emb
    .venv/bin/python benchmarks/experiments/serve_load.py --soak
    .venv/bin/python benchmarks/experiments/serve_load.py --config tiny --clients 1,8 --slice-s 2 \\
        --rounds 1  # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import copy
import datetime
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# harness.py, shared with the `make bench` scripts, lives one level up in benchmarks/.
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness import DEFAULT_DATA, machine, versions  # noqa: E402

HEAD, LABELS = "sst2", ("negative", "positive")
HOST = "127.0.0.1"
MAX_CLIENTS = 64  # bounded: a mistyped --clients cannot open thousands of sockets
GOALS = (
    "at 32 clients on /embed and /predict, ours (in the runtime and precision that give it) >= 3x "
    "hf-pipeline's requests/s and >= 2x infinity's; at 1 client ours' p50 within 10% of hub-call's"
)
PEERS = ("hf-pipeline", "infinity")


def sentences(data: Path, count: int = 2000, seed: int = 0) -> list[str]:
    """Single sentences of real text (the corpus' lines of 5 to 40 words)."""
    lines = [
        line.strip()
        for path in sorted((data / "corpus").glob("*/*.txt"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if 5 <= len(line.split()) <= 40
    ]
    return random.Random(seed).sample(lines, min(count, len(lines)))


def build_model(work: Path, preset: str, data: Path) -> dict[str, Path]:
    """Our checkpoint, its HF export and its ONNX export, of one random init with the head HEAD."""
    import torch

    from roberta import RobertaConfig, RobertaModel
    from roberta.checkpoint import save
    from roberta.convert import export_hf
    from roberta.convert.onnx import export_onnx
    from roberta.tokenizer import load_tokenizer

    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig.preset(preset)).eval()
    model.add_classification_head(HEAD, len(LABELS), labels=LABELS)
    tokenizer = load_tokenizer(data / "gpt2_bpe")
    paths = {"ckpt": save(work / "ckpt", model, tokenizer), "hf": work / "hf", "onnx": work / "onnx"}
    export_hf(paths["hf"], model, tokenizer)
    # Infinity embeds with a model that has no classifier (it takes one with a head for /classify).
    body = copy.deepcopy(model)
    body.remove_head(HEAD)
    paths["hf-body"] = work / "hf-body"
    export_hf(paths["hf-body"], body, tokenizer)
    export_onnx(paths["ckpt"], paths["onnx"], int8=True)
    return paths


def hf_app(hf_dir: str):
    """HF's pipelines behind FastAPI, one pipeline call per request (sync endpoints: a thread pool)."""
    from fastapi import Body, FastAPI
    from transformers import pipeline

    features = pipeline("feature-extraction", model=hf_dir, device="cpu")
    classify = pipeline("text-classification", model=hf_dir, device="cpu")
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    @app.post("/embed")
    def embed(text: str = Body(embed=True)) -> dict:
        return {"embeddings": [features(text, return_tensors=True)[0, 0].tolist()]}

    @app.post("/predict")
    def predict(text: str = Body(embed=True)) -> dict:
        return {"predictions": [classify(text, top_k=None)]}

    return app


@dataclass
class System:
    name: str
    argv: list[str]
    port: int
    # endpoint -> (path, body of one sentence)
    requests: dict
    process: subprocess.Popen | None = None

    def start(self) -> None:
        print(f"starting {self.name}: {' '.join(self.argv)}", flush=True)
        # Into a file, not a pipe nobody reads: a server's access log (a line per request) would
        # fill a pipe and stall the server mid-run.
        log = tempfile.NamedTemporaryFile("w+", prefix=f"serve-load-{self.name}-", suffix=".log")
        self.process = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=log, text=True)
        atexit.register(self.stop)
        atexit.register(log.close)
        deadline = time.monotonic() + 300
        while asyncio.run(probe(self.port, "/health")) != 200:
            if self.process.poll() is not None:
                log.seek(0)
                raise SystemExit(f"{self.name} exited: {log.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.name} did not start in 300 s")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)


def systems(paths: dict[str, Path], infinity: str | None, first_port: int) -> list[System]:
    ours = {
        "embed": ("/embed", lambda t: {"text": t}),
        "predict": ("/predict", lambda t: {"text": t, "head": HEAD}),
    }
    serve = [sys.executable, "-m", "roberta.cli", "serve"]
    onnx = [str(paths["onnx"]), "--runtime", "onnx"]
    variants = {
        "ours": [str(paths["ckpt"]), "--precision", "fp32"],
        "ours-bf16": [str(paths["ckpt"]), "--precision", "bf16"],
        "ours-onnx": onnx,
        "ours-int8": [str(paths["ckpt"]), "--int8"],
        "ours-onnx-int8": [*onnx, "--int8"],
    }
    found = [
        System(name, [*serve, *argv, "--port", str(first_port + 2 + k)], first_port + 2 + k, ours)
        for k, (name, argv) in enumerate(variants.items())
    ]
    found += [
        System(
            "hf-pipeline",
            [sys.executable, __file__, "--hf-server", str(paths["hf"]), "--port", str(first_port)],
            first_port,
            {"embed": ("/embed", lambda t: {"text": t}), "predict": ("/predict", lambda t: {"text": t})},
        )
    ]
    if infinity:
        # One server, two models: the encoder for /embeddings, the classifier for /classify.
        classifier, encoder = str(paths["hf"]), str(paths["hf-body"])
        argv = [infinity, "v2", "--model-id", encoder, "--model-id", classifier, "--engine", "torch"]
        argv += ["--served-model-name", "encoder", "--served-model-name", "classifier"]
        argv += ["--device", "cpu", "--port", str(first_port + 1), "--host", HOST]
        requests = {
            "embed": ("/embeddings", lambda t: {"input": [t], "model": "encoder"}),
            "predict": ("/classify", lambda t: {"input": [t], "model": "classifier"}),
        }
        found.append(System("infinity", argv, first_port + 1, requests))
    return found


async def exchange(reader, writer, path: str, body: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 POST (or GET without a body) on a kept-alive connection: status and body."""
    method = "POST" if body else "GET"
    writer.write(
        f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
    }
    answer = await reader.readexactly(int(headers.get("content-length", "0")))
    if headers.get("connection", "").lower() == "close":
        raise ConnectionResetError("server closed the connection")
    return int(lines[0].split(" ", 2)[1]), answer


async def probe(port: int, path: str) -> int | None:
    try:
        reader, writer = await asyncio.open_connection(HOST, port)
    except OSError:
        return None
    try:
        return (await exchange(reader, writer, path, b""))[0]
    except (OSError, asyncio.IncompleteReadError):
        return None
    finally:
        writer.close()


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0
    errors: int = 0
    wrong: list[str] = field(default_factory=list)  # soak: what went wrong, the first few

    def add(self, other: Tally) -> None:
        self.latencies += other.latencies
        self.seconds += other.seconds
        self.errors += other.errors
        self.wrong += other.wrong[: 10 - len(self.wrong)]


async def client(port: int, pick, deadline: float, tally: Tally) -> None:
    """Requests back to back until `deadline`; `pick()` gives (path, body bytes, expected status test)."""
    reader = writer = None
    while time.monotonic() < deadline:
        if writer is None:
            reader, writer = await asyncio.open_connection(HOST, port)
        path, body, expected = pick()
        started = time.perf_counter()
        try:
            status, answer = await exchange(reader, writer, path, body)
        except (OSError, asyncio.IncompleteReadError):
            writer.close()
            reader = writer = None
            continue
        tally.latencies.append(time.perf_counter() - started)
        if not expected(status):
            tally.errors += 1
            if len(tally.wrong) < 10:
                tally.wrong.append(f"{path} {body[:60]!r} -> {status} {answer[:200]!r}")
    if writer is not None:
        writer.close()


def load(port: int, pick, clients: int, seconds: float) -> Tally:
    tally = Tally()

    async def main():
        deadline = time.monotonic() + seconds
        started = time.perf_counter()
        await asyncio.gather(*(client(port, pick, deadline, tally) for _ in range(clients)))
        tally.seconds = time.perf_counter() - started

    asyncio.run(main())
    return tally


def picker(system: System, endpoint: str, texts: list[str]):
    path, body = system.requests[endpoint]
    encoded = [json.dumps(body(t)).encode() for t in texts]
    rng = random.Random(0)
    return lambda: (path, rng.choice(encoded), lambda status: status == 200)


def hub_call(ckpt: Path, endpoint: str, texts: list[str], seconds: float) -> Tally:
    """One in-process hub call per sentence, back to back: no HTTP, no batcher.

    Run in a thread of its own, as the server's batcher runs the model: on a busy 2-core host the
    main thread's calls measured 15x slower than a second thread's (356 vs 23 ms, tiny, one
    sentence), which would flatter the server."""
    hub = loaded_hub(ckpt)
    tally, rng = Tally(), random.Random(0)

    def calls() -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            ids = [hub.encode(rng.choice(texts), truncate=True)]
            hub.embed(ids) if endpoint == "embed" else hub.predict(HEAD, ids)
            tally.latencies.append(time.perf_counter() - started)

    worker = threading.Thread(target=calls)
    worker.start()
    worker.join()
    tally.seconds = seconds
    return tally


@functools.cache
def loaded_hub(ckpt: Path):
    from roberta import load

    return load(ckpt)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def measure(args, found: list[System], paths: dict[str, Path], texts: list[str]) -> dict:
    """{(endpoint, clients, system): Tally}, every cell run by every system in turn, --rounds times."""
    cells: dict[tuple, Tally] = {}
    clients = [int(c) for c in args.clients.split(",")]
    for r in range(args.rounds):
        for endpoint in ("embed", "predict"):
            for n in clients:
                order = [*found, None] if n == 1 else list(found)  # None: the bare hub call
                k = r + clients.index(n)
                for system in order[k % len(order) :] + order[: k % len(order)]:
                    if system is None:
                        tally, name = hub_call(paths["ckpt"], endpoint, texts, args.slice_s), "hub-call"
                    elif endpoint in system.requests:
                        tally, name = (
                            load(system.port, picker(system, endpoint, texts), n, args.slice_s),
                            system.name,
                        )
                    else:
                        continue
                    cells.setdefault((endpoint, n, name), Tally()).add(tally)
                    rate = len(tally.latencies) / tally.seconds
                    print(
                        f"round {r + 1} {endpoint} x{n} {name}: {rate:.1f} req/s, {tally.errors} errors "
                        f"{tally.wrong[:1]}",
                        flush=True,
                    )
    return cells


def table(cells: dict) -> str:
    """One row per (endpoint, clients, system): rate, latency, and its ratio to each peer that ran."""
    rows = [
        "| endpoint | clients | system | requests/s | p50 ms | p99 ms | errors | ÷ hf-pipeline (req/s) "
        "| ÷ infinity (req/s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    figures = {
        cell: (
            len(t.latencies) / t.seconds,
            percentile(t.latencies, 50) * 1e3,
            percentile(t.latencies, 99) * 1e3,
        )
        for cell, t in cells.items()
        if t.latencies
    }
    for (endpoint, n, name), tally in sorted(cells.items(), key=lambda item: item[0][:2]):
        if (endpoint, n, name) not in figures:
            rows.append(f"| {endpoint} | {n} | {name} | no answers | | | {tally.errors} | | |")
            continue
        rate, p50, p99 = figures[(endpoint, n, name)]
        peers = [figures.get((endpoint, n, peer)) for peer in PEERS]
        ratios = " | ".join(f"{rate / peer[0]:.2f}x" if peer else "–" for peer in peers)
        rows.append(
            f"| {endpoint} | {n} | {name} | {rate:.1f} | {p50:.1f} | {p99:.1f} | {tally.errors} | {ratios} |"
        )
    return "\n".join(rows)


def write_result(kind: str, body: str) -> Path:
    """benchmarks/results/<date>-serve-<kind>.md; a second run the same day gets its time in the name."""
    from bench import write_run_file

    now = datetime.datetime.now(datetime.UTC)
    command = " ".join([".venv/bin/python", *[Path(a).name if a == __file__ else a for a in sys.argv]])
    header = f"# serve {kind} ({now:%Y-%m-%d})\n\n`{command}`\n\nMachine: {machine()}; {versions()}.\n\n"
    return write_run_file(ROOT / "benchmarks" / "results", now, f"serve-{kind}", header + body + "\n")


INVALID = [
    ("/embed", b"{not json", "malformed"),
    ("/fill-mask", json.dumps({"text": "no mask"}).encode(), "no mask"),
    ("/predict", json.dumps({"text": "x", "head": "nope"}).encode(), "unknown head"),
    ("/embed", json.dumps({"text": "word " * 2000}).encode(), "past the positions"),
    ("/embed", json.dumps({"text": 3}).encode(), "wrong type"),
]
VALID = [
    ("/embed", lambda t: {"text": t}),
    ("/predict", lambda t: {"text": t, "head": HEAD}),
    ("/fill-mask", lambda t: {"text": " ".join(t.split()[:-1] + ["<mask>"])}),
    ("/v1/embeddings", lambda t: {"input": t}),
]


def soak_picker(texts: list[str], seed: int):
    rng = random.Random(seed)
    oversized = json.dumps({"text": "x" * (1 << 20)}).encode()  # over the default 1 MiB limit

    def pick():
        if rng.random() < 0.25:
            path, body, _ = rng.choice(
                [*INVALID, ("/embed", oversized, "oversized")] if rng.random() < 0.02 else INVALID
            )
            return path, body, lambda status: 400 <= status < 500
        path, body = rng.choice(VALID)
        return path, json.dumps(body(rng.choice(texts))).encode(), lambda status: status == 200

    return pick


def soak(args, paths: dict[str, Path], texts: list[str]) -> str:
    import psutil

    (ours,) = [s for s in systems(paths, None, args.port) if s.name == "ours"]
    ours.start()
    server = psutil.Process(ours.process.pid)
    warm = load(ours.port, soak_picker(texts, 0), 32, args.warmup_s)
    rss_warm = server.memory_info().rss
    tally, samples = Tally(), []
    for k in range(max(1, round(args.soak_s / 60))):  # a minute at a time, sampling RSS between
        tally.add(
            load(ours.port, soak_picker(texts, k + 1), 32, args.soak_s / max(1, round(args.soak_s / 60)))
        )
        samples.append(server.memory_info().rss)
    alive = asyncio.run(probe(ours.port, "/health")) == 200
    ours.stop()
    growth = samples[-1] / rss_warm
    ok = tally.errors == 0 and alive and growth <= 1.10
    count, p = len(tally.latencies), lambda q: percentile(tally.latencies, q) * 1e3
    lines = [
        f"{count} requests in {tally.seconds:.0f} s ({count / tally.seconds:.1f}/s, 32 clients, "
        f"~25% invalid) after a {args.warmup_s:g} s warm-up of {len(warm.latencies)} requests",
        f"wrong answers (a valid request not 200, an invalid one not 4xx): {tally.errors} {tally.wrong}",
        f"server up at the end: {alive}",
        f"RSS after warm-up {rss_warm / 2**20:.0f} MiB, at the end {samples[-1] / 2**20:.0f} MiB "
        f"({growth:.1%}); "
        f"per minute: {', '.join(f'{s / 2**20:.0f}' for s in samples)} MiB",
        f"p50 {p(50):.1f} ms, p99 {p(99):.1f} ms",
        f"**{'PASS' if ok else 'FAIL'}**: no wrong answer, server up, end RSS within 10% of after warm-up",
    ]
    return "\n".join(f"- {line}" for line in lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="base", help="model preset (default base; tiny for a smoke run)")
    p.add_argument("--clients", default="1,8,32", help="concurrent clients per cell (default 1,8,32)")
    p.add_argument(
        "--slice-s", type=float, default=10.0, help="seconds per system per cell per round (default 10)"
    )
    p.add_argument("--rounds", type=int, default=3, help="alternation rounds (default 3)")
    p.add_argument("--infinity", help="Infinity's executable (infinity_emb), installed in its own venv")
    p.add_argument("--skip", default="", help="systems to leave out, comma-separated (e.g. ours-onnx)")
    p.add_argument("--soak", action="store_true", help="the soak test instead of the load table")
    p.add_argument("--soak-s", type=float, default=600.0, help="soak length in seconds (default 600)")
    p.add_argument("--warmup-s", type=float, default=30.0, help="soak warm-up in seconds (default 30)")
    p.add_argument("--port", type=int, default=18080, help="first loopback port to use (default 18080)")
    p.add_argument("--data", type=Path, default=Path(os.environ.get("ROBERTA_DATA", DEFAULT_DATA)))
    p.add_argument("--hf-server", help=argparse.SUPPRESS)  # internal: run the FastAPI baseline
    args = p.parse_args()
    if args.hf_server:
        import uvicorn

        uvicorn.run(hf_app(args.hf_server), host=HOST, port=args.port, log_level="warning")
        return
    if max(int(c) for c in args.clients.split(",")) > MAX_CLIENTS:
        raise SystemExit(f"--clients: at most {MAX_CLIENTS}")
    work = Path(tempfile.mkdtemp(prefix="serve-load-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)
    paths, texts = build_model(work, args.config, args.data), sentences(args.data)
    if args.soak:
        print(f"results: {write_result('soak', soak(args, paths, texts))}")
        return
    found = [s for s in systems(paths, args.infinity, args.port) if s.name not in args.skip.split(",")]
    for system in found:
        system.start()
    cells = measure(args, found, paths, texts)
    for system in found:
        system.stop()
    report = f"{table(cells)}\n\nGoals (issue #36): {GOALS}.\n"
    print(report)
    print(f"results: {write_result('load', report)}")


if __name__ == "__main__":
    main()
