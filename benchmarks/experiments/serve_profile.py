"""Where `roberta serve`'s time goes under load: the base shape (random init, a 2-class head, GPT-2's
vocabulary, as serve_load.py builds it) served in each precision given, N clients sending one
sentence a request to /embed (serve_load.py's client), and for each: requests/s, the batches the
worker ran (/metrics: items per batch), the server's CPU (all its threads) and the machine's idle
cores, the load generator's own CPU, and the worker's hub calls, timed inside the server (a
wrapper around `endpoints.run`): its busy share, ms an item and us a token, to compare with the
same calls in-process (bf16_infer_profile.py). With --perf, `perf record` of the server (CPU by
library and function); with --py-spy, its Python stacks (--gil: the GIL holder's). --threads sets
the server's OMP_NUM_THREADS, --switch-interval its sys.setswitchinterval.

    .venv/bin/python benchmarks/experiments/serve_profile.py --precision fp32,bf16,int8 --clients 32 \
        --seconds 12 [--perf] [--py-spy /path/to/py-spy [--gil]] [--serve-args "--max-wait-ms 15"]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import DEFAULT_DATA, HEAD, LABELS, System, exchange, load, picker, sentences  # noqa: E402

HOST = "127.0.0.1"


WRAPPER = """
import runpy, sys, time
import roberta.serve.endpoints as endpoints
import roberta.runtime.int8 as int8
if {engine!r}:
    int8.quantize_engine = lambda: {engine!r}
if {one_team}:  # the trial: OpenMP teams opened by the batcher's worker only
    import torch
    from roberta.serve.batcher import Batcher
    threads, work = torch.get_num_threads(), Batcher._work
    torch.set_num_threads(1)
    def _work(self):
        torch.set_num_threads(threads)
        work(self)
    Batcher._work = _work
if {old_load}:  # the server before it loaded on one thread: the main thread's OpenMP team too
    import torch
    import roberta.serve.server as server
    threads, load_torch = torch.get_num_threads(), server._load_torch
    def _load_torch(options, device):
        torch.set_num_threads(threads)
        return load_torch(options, device)
    server._load_torch = _load_torch
if {interval}:
    sys.setswitchinterval({interval})
if {nice}:  # the trial: the event loop's threads below the worker's OpenMP team in the scheduler
    import os, threading
    from roberta.serve.batcher import Batcher
    init = Batcher.__init__
    def __init__(self, *a, **k):
        init(self, *a, **k)
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), {nice})
    Batcher.__init__ = __init__
hub_call, trace = endpoints.run, open({trace!r}, "a", buffering=1)
def timed(hub, key, items):
    started = time.monotonic()
    out = hub_call(hub, key, items)
    tokens = sum(len(i) for i in items) if key[0] in ("embed", "predict") else 0
    trace.write(f"{{started}} {{time.monotonic()}} {{len(items)}} {{tokens}}\\n")
    return out
endpoints.run = timed
sys.argv[0] = "roberta"
runpy.run_module("roberta.cli", run_name="__main__")
"""


def worker(trace: Path, start: float, end: float) -> str:
    """The worker's hub calls between `start` and `end` (monotonic): its busy share, calls' times."""
    calls = [tuple(map(float, line.split())) for line in trace.read_text().splitlines()]
    calls = [(a, b, n, t) for a, b, n, t in calls if a >= start and b <= end]
    if not calls:
        return "  worker: no calls traced"
    busy = sum(b - a for a, b, *_ in calls)
    per_item = busy / sum(n for _, _, n, _ in calls)
    per_token = busy / max(1, sum(t for *_, t in calls))
    gaps = sorted(c[0] - p[1] for p, c in zip(calls, calls[1:]))
    return (
        f"  worker busy {busy / (end - start):.0%} of the slice: {len(calls)} hub calls, "
        f"{statistics.mean(c[2] for c in calls):.1f} items and {busy / len(calls) * 1e3:.0f} ms each "
        f"({per_item * 1e3:.1f} ms an item, {per_token * 1e6:.0f} us a token); gaps between calls median "
        f"{statistics.median(gaps) * 1e3:.1f} ms"
    )


def checkpoint(work: Path, data: Path, preset: str) -> Path:
    """serve_load.py's checkpoint (`preset`, seed 0, head sst2), saved once into `work`/preset."""
    import torch

    from roberta import RobertaConfig, RobertaModel
    from roberta.checkpoint import save
    from roberta.tokenizer import load_tokenizer

    if (work / preset / "config.json").is_file():
        return work / preset
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig.preset(preset)).eval()
    model.add_classification_head(HEAD, len(LABELS), labels=LABELS)
    return save(work / preset, model, load_tokenizer(data / "gpt2_bpe"))


async def get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        return (await exchange(reader, writer, path, b""))[1]
    finally:
        writer.close()


def mean_batch(port: int) -> tuple[float, float]:
    """Batches run and items in them so far (from /metrics' roberta_batch_items histogram)."""
    text = asyncio.run(get(port, "/metrics")).decode()
    count = float(re.search(r"^roberta_batch_items_count (\S+)", text, re.M).group(1))
    total = float(re.search(r"^roberta_batch_items_sum (\S+)", text, re.M).group(1))
    return count, total


def thread_name(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() + f"#{tid}"
    except OSError:
        return f"?#{tid}"


def thread_times(process: psutil.Process) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in process.threads()}


def measure(system: System, texts: list[str], clients: int, seconds: float) -> str:
    server = psutil.Process(system.process.pid)
    me = psutil.Process()
    load(system.port, picker(system, "embed", texts), clients, 3.0)  # warm
    batches0, items0 = mean_batch(system.port)
    threads0, mine0, machine0 = thread_times(server), me.cpu_times(), psutil.cpu_times()
    window = time.monotonic()
    tally = load(system.port, picker(system, "embed", texts), clients, seconds)
    window = (window, time.monotonic())
    threads1, mine1, machine1 = thread_times(server), me.cpu_times(), psutil.cpu_times()
    idle = (machine1.idle - machine0.idle) / tally.seconds
    batches1, items1 = mean_batch(system.port)
    n = len(tally.latencies)
    busy = sum(t - threads0.get(tid, 0.0) for tid, t in threads1.items())
    client = (mine1.user + mine1.system) - (mine0.user + mine0.system)
    lines = [
        f"{system.name}: {n / tally.seconds:.1f} requests/s ({n} in {tally.seconds:.1f} s, "
        f"{tally.errors} errors); {batches1 - batches0:.0f} batches, "
        f"{(items1 - items0) / max(1, batches1 - batches0):.1f} items each",
        f"  server CPU {busy:.1f} s ({busy / tally.seconds:.2f} cores), {busy / n * 1e3:.1f} ms a request; "
        f"load generator {client:.1f} s ({client / n * 1e3:.1f} ms a request); "
        f"the machine idle {idle:.2f} cores",
    ]
    lines.append(worker(Path(f"/tmp/serve-batches-{system.name}.txt"), *window))
    used = sorted(((t - threads0.get(tid, 0.0), tid) for tid, t in threads1.items()), reverse=True)
    busiest = [f"{thread_name(system.process.pid, tid)} {cpu / tally.seconds:.2f}" for cpu, tid in used[:6]]
    lines.append(f"  {len(threads1)} threads; the busiest (cores): " + ", ".join(busiest))
    return "\n".join(lines)


def profile(system: System, texts: list[str], clients: int, seconds: float, py_spy: str, gil: bool) -> str:
    """py-spy's samples of the server's busy threads during a slice of load (with `gil`: of the
    thread holding the GIL only): each thread's share of the slice, and the top functions."""
    out = Path(f"/tmp/serve-profile-{system.name}.txt")
    rate = 100
    spy = subprocess.Popen(
        [py_spy, "record", "-p", str(system.process.pid), "-d", str(int(seconds)), "-r", str(rate),
         "--threads", "-f", "raw", "-o", str(out), *(["--gil"] if gil else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)
    load(system.port, picker(system, "embed", texts), clients, seconds - 2)
    spy.wait()
    own, by_thread, below = collections.Counter(), collections.Counter(), collections.Counter()
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        name = re.sub(r"\(\d+\)", "", frames[0]).strip()
        by_thread[name] += int(count)
        own[re.sub(r" \(.*?\)$", "", frames[-1])[:100]] += int(count)
        for frame in set(frames[1:]):
            below[re.sub(r" \(.*?\)$", "", frame)[:100]] += int(count)
    ticks = rate * int(seconds)
    rows = [
        f"py-spy {system.name}{' (GIL holder)' if gil else ''}: share of the slice's {ticks} ticks by thread:"
    ]
    rows += [f"    {c / ticks:6.1%}  {t}" for t, c in by_thread.most_common(6)]
    rows += ["  top functions (own):"] + [f"    {c / ticks:6.1%}  {f}" for f, c in own.most_common(15)]
    rows += ["  top functions (total):"] + [f"    {c / ticks:6.1%}  {f}" for f, c in below.most_common(30)]
    return "\n".join(rows)


def perf(system: System, texts: list[str], clients: int, seconds: float) -> str:
    """`perf record` of the server during a slice of load: its CPU time by library and function
    (every thread, the model's OpenMP threads included; Python's own frames are the interpreter's)."""
    data = Path(f"/tmp/serve-perf-{system.name}.data")
    record = subprocess.Popen(
        ["perf", "record", "-F", "499", "-p", str(system.process.pid), "-o", str(data),
         "--", "sleep", str(seconds)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(0.5)
    load(system.port, picker(system, "embed", texts), clients, seconds - 1)
    record.wait()

    def report(sort: str, percent_limit: str) -> list[str]:
        argv = [
            "perf",
            "report",
            "-i",
            str(data),
            "--stdio",
            "--sort",
            sort,
            "--percent-limit",
            percent_limit,
        ]
        out = subprocess.run(argv, capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if line.strip() and not line.startswith("#")]

    rows = report("dso,sym", "0.7")
    return "\n".join([f"perf {system.name}: by library", *report("dso", "0.5"), "  by function", *rows[:40]])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--precision", default="fp32,bf16")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--py-spy", help="py-spy's executable: profile each server in a second slice")
    p.add_argument("--threads", type=int, help="the server's OMP_NUM_THREADS (default: torch's, the cores)")
    p.add_argument("--one-team", action="store_true", help="trial: OpenMP in the batcher's thread only")
    p.add_argument("--old-load", action="store_true", help="load on every thread, as before 22:30")
    p.add_argument("--nice", type=int, default=0, help="trial: the event loop's threads at this nice value")
    p.add_argument("--perf", action="store_true", help="perf record the server in a second slice")
    p.add_argument("--gil", action="store_true", help="py-spy: sample the GIL's holder only")
    p.add_argument("--preset", default="base", help="model preset (default base; tiny: the overhead alone)")
    p.add_argument("--switch-interval", type=float, help="the server's sys.setswitchinterval, seconds")
    p.add_argument("--serve-args", default="", help="more `roberta serve` options, one string")
    p.add_argument(
        "--work", type=Path, default=Path("/tmp/serve-profile"), help="where the checkpoint is kept"
    )
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--port", type=int, default=18180)
    args = p.parse_args()
    ckpt, texts = checkpoint(args.work, args.data, args.preset), sentences(args.data)
    requests = {"embed": ("/embed", lambda t: {"text": t})}
    for k, name in enumerate(args.precision.split(",")):
        port = args.port + k
        # int8@x86, int8@onednn: int8 with its weights packed for that quantized engine.
        precision, _, engine = name.partition("@")
        argv = [sys.executable, "-m", "roberta.cli", "serve", str(ckpt), "--precision", precision]
        trace = Path(f"/tmp/serve-batches-{name}.txt")
        trace.unlink(missing_ok=True)
        # The server started through a wrapper that times each of the worker's hub calls (into `trace`)
        # and sets the interpreter's switch interval when asked.
        argv = [
            sys.executable,
            "-c",
            WRAPPER.format(
                trace=str(trace),
                interval=args.switch_interval,
                engine=engine,
                one_team=args.one_team,
                old_load=args.old_load,
                nice=args.nice,
            ),
            *argv[3:],
        ]
        system = System(name, [*argv, *shlex.split(args.serve_args), "--port", str(port)], port, requests)
        if args.threads:
            os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the server inherits it
        system.start()
        try:
            print(measure(system, texts, args.clients, args.seconds), flush=True)
            if args.perf:
                print(perf(system, texts, args.clients, args.seconds), flush=True)
            if args.py_spy:
                print(profile(system, texts, args.clients, args.seconds, args.py_spy, args.gil), flush=True)
        finally:
            system.stop()


if __name__ == "__main__":
    main()
