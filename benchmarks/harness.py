"""What every side-by-side benchmark shares: contenders alternated in short slices, median and
spread, a subprocess's peak RSS, this machine's fp32 matrix-product peak (MFU's denominator),
the machine and versions, and the one table between markers at the top of RESULTS.md.

Scripts (pretrain_step.py, finetune_throughput.py) hand their rows to bench.py as JSON: a list
of `Row` dicts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from roberta.config import RobertaConfig

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


@dataclass(frozen=True)
class Spread:
    """The median of repeated measurements and their range."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))

    def __str__(self) -> str:
        return f"{_number(self.median)} ({_number(self.low)}–{_number(self.high)})"


def _number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


@dataclass(frozen=True)
class Row:
    """One line of the table: ours beside a baseline, each a Spread over slices."""

    name: str
    unit: str
    ours: Spread | None
    baseline: Spread | None
    ratios: Spread | None = None  # per-slice ours / baseline
    goal: float | None = None  # the ratio the issue asks for
    rss_mb: tuple[float | None, float | None] = (None, None)  # ours, baseline: each in its own process
    mfu: tuple[float | None, float | None] = (None, None)
    memory_goal: bool = False  # the issue also asks for peak RSS <= the baseline's

    def goals(self) -> str:
        wanted = [f"≥ {self.goal:g}x"] if self.goal else []
        return " and ".join(wanted + (["RSS ≤ baseline"] if self.memory_goal else [])) or "—"

    def verdict(self) -> str:
        if self.ratios is None or (self.goal is None and not self.memory_goal):
            return "—"
        missed = []
        if self.goal is not None and self.ratios.median < self.goal:
            missed.append("speed")
        if self.memory_goal and None not in self.rss_mb and self.rss_mb[0] > self.rss_mb[1]:
            missed.append("memory")
        return "met" if not missed else f"**not met** ({', '.join(missed)})"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Row:
        spreads = {k: Spread(**d[k]) if d.get(k) else None for k in ("ours", "baseline", "ratios")}
        return cls(**{**d, **spreads, "rss_mb": tuple(d["rss_mb"]), "mfu": tuple(d["mfu"])})


def compared(name: str, unit: str, ours: Sequence[float], baseline: Sequence[float], **fields) -> Row:
    """A Row from per-slice rates of the two sides (slice k of each measured back to back)."""
    return Row(
        name,
        unit,
        Spread.of(ours),
        Spread.of(baseline),
        Spread.of([a / b for a, b in zip(ours, baseline)]),
        **fields,
    )


def alternate(sides: dict[str, Callable[[], float]], slices: int) -> dict[str, list[float]]:
    """Each side's result per slice. Every slice runs every side once, the first one rotating, so
    a neighbour's load on a shared host falls on all sides alike."""
    names = list(sides)
    results: dict[str, list[float]] = {name: [] for name in names}
    for k in range(slices):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            results[name].append(sides[name]())
            print(f"  slice {k + 1}/{slices} {name}: {results[name][-1]:,.4g}", flush=True)
    return results


class PeakRss:
    """A running process's peak RSS: its own VmHWM, polled every 50 ms until it exits or `stop()`.

    Not a child's ru_maxrss: Linux carries the parent's high-water mark across fork and exec,
    so a child of a large benchmark process would report the parent's peak.
    """

    def __init__(self, pid: int):
        self._status = Path(f"/proc/{pid}/status")
        self._kb = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._done.is_set():
            try:
                hwm = next(
                    (
                        int(line.split()[1])
                        for line in self._status.read_text().splitlines()
                        if line.startswith("VmHWM:")
                    ),
                    None,
                )
            except OSError:
                return
            if hwm is None:  # a zombie: the memory is gone, the last reading stands
                return
            self._kb = max(self._kb, hwm)
            self._done.wait(0.05)

    def stop(self) -> float:
        """The peak in MB."""
        self._done.set()
        self._thread.join()
        return self._kb / 1024


@dataclass(frozen=True)
class Measured:
    returncode: int
    stdout: str
    stderr: str
    peak_rss_mb: float


def run_measured(argv: Sequence[str], env: dict[str, str] | None = None) -> Measured:
    """Run a command to its end, with its own peak RSS."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = PeakRss(proc.pid)
    stdout, stderr = proc.communicate()
    return Measured(proc.returncode, stdout, stderr, peak.stop())


def require_success(result: Measured, what: str) -> Measured:
    if result.returncode != 0:
        raise SystemExit(
            f"{what} failed (exit {result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result


def add_data_and_work(p: argparse.ArgumentParser, work: Path, work_help: str) -> None:
    """A script's --data (the shared data) and --work (its scratch, default `work`) options."""
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data (default ../shared/data)")
    p.add_argument("--work", type=Path, default=work, help=work_help)


def add_row_options(p: argparse.ArgumentParser, bf16_help: str) -> None:
    """A bench.py script's --peak-gflops, --precision (what `bf16` means for it: `bf16_help`) and
    --json options."""
    p.add_argument(
        "--peak-gflops", type=float, help="the precision's matmul peak for MFU (default: measured now)"
    )
    p.add_argument(
        "--precision", choices=("fp32", "bf16"), default="fp32", help=f"bf16: {bf16_help} (default fp32)"
    )
    p.add_argument("--json", type=Path, help="write the table rows here (for bench.py)")


def thread_env(threads: int) -> dict[str, str]:
    """The environment for a measured subprocess: both sides get the same thread count, and large
    tensors on huge pages as the `roberta` command sets for itself (HF gains from it too: the ratio
    measures the code, not the allocator), and `auto` precision meaning fp32; THP_MEM_ALLOC_ENABLE
    and ROBERTA_PRECISION in our environment override them."""
    return {
        "THP_MEM_ALLOC_ENABLE": "1",
        # `auto` is bf16 on a CPU with AMX: a benchmark's fp32 rows stay fp32 on every machine, and its
        # bf16 rows ask for bf16 by name (roberta.runtime.precision).
        "ROBERTA_PRECISION": "fp32",
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "TRANSFORMERS_VERBOSITY": "error",
    }


def peak_matmul_flops(threads: int, precision: str = "fp32") -> float:
    """This CPU's rate in `precision` (fp32, bf16) on a 2048 x 2048 matrix product at `threads`
    threads, best of 3: a larger product than the trainer's quick 1024 one, so the peak is not set
    by call overhead."""
    import torch

    from roberta.runtime.precision import compute_dtype
    from roberta.train.metrics import measured_matmul_flops

    torch.set_num_threads(threads)
    return measured_matmul_flops(compute_dtype(precision), size=2048, trials=3)


def training_flops(
    config: RobertaConfig, seq_len: int, tokens: int, lm_scored: int = 0, last_layer: int | None = None
) -> float:
    """Training FLOPs (forward + backward) for `tokens` tokens in sequences of `seq_len`, counted
    the same way for every side: 6 x non-embedding parameters x tokens, attention scores, and the
    LM head over the `lm_scored` positions that side computes vocabulary logits for (ours: the
    masked ones; HF's RobertaForMaskedLM: all), the last layer's query side over the `last_layer`
    positions it computes (default: all). The project's MFU formula, scaled to tokens."""
    from roberta.train.metrics import training_flops_per_token

    last = 1.0 if last_layer is None else last_layer / tokens
    return (
        training_flops_per_token(config, seq_len, head_tokens=lm_scored / tokens, last_layer_tokens=last)
        * tokens
    )


def hf_trainer_recipe(lr: float, batch: int, seed: int) -> dict:
    """HF `TrainingArguments` for the recipe `roberta finetune` runs by default (AdamW 0.9/0.98,
    eps 1e-6, weight decay 0.1, no clipping, 6% warmup then linear decay), on CPU, saving and
    logging nothing: what every HF Trainer baseline here shares."""
    return dict(
        learning_rate=lr,
        per_device_train_batch_size=batch,
        weight_decay=0.1,
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-6,
        max_grad_norm=0.0,
        lr_scheduler_type="linear",
        warmup_steps=0.06,
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        seed=seed,
    )


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    with open("/proc/meminfo") as f:
        mem_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    from roberta.runtime.precision import cpu_units

    units = ", ".join(cpu_units().names())
    return f"{cpu}, {len(os.sched_getaffinity(0))} cores, {mem_kb / 2**20:.0f} GiB, bf16/int8 units: {units}"


def versions() -> str:
    found = []
    for package in ("torch", "transformers"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} (not installed)")
    return ", ".join(found)


def format_table(rows: Sequence[Row]) -> str:
    lines = [
        "| measurement | unit | ours: median (range) | baseline: median (range) "
        "| ours / baseline (per-slice range) | goal | peak RSS MB ours / baseline "
        "| MFU ours / baseline | goal met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = (
            f"**{row.ratios.median:.2f}x** ({row.ratios.low:.2f}–{row.ratios.high:.2f})"
            if row.ratios
            else "—"
        )
        lines.append(
            f"| {row.name} | {row.unit} | {row.ours or '—'} | {row.baseline or '—'} | {ratio} "
            f"| {row.goals()} "
            f"| {_pair(row.rss_mb, '{:,.0f}')} | {_pair(row.mfu, '{:.1%}')} | {row.verdict()} |"
        )
    return "\n".join(lines)


def _pair(values: tuple[float | None, float | None], fmt: str) -> str:
    if values == (None, None):
        return "—"
    return " / ".join("—" if v is None else fmt.format(v) for v in values)


def rewrite_marked(path: Path, block: str) -> None:
    """Replace what lies between the markers with `block`, the rest of the file as it was; without
    markers the block goes before the first second-level section."""
    text = path.read_text(encoding="utf-8")
    marked = f"{BEGIN}\n{block.strip()}\n{END}"
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        text = before + marked + rest.split(END, 1)[1]
    else:
        at = text.find("\n## ")
        at = len(text) if at < 0 else at + 1
        text = text[:at] + marked + "\n\n" + text[at:]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_rows(path: Path | None, rows: Sequence[Row]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([r.to_dict() for r in rows], indent=2) + "\n")


def read_rows(path: Path) -> list[Row]:
    return [Row.from_dict(d) for d in json.loads(path.read_text())]


def elapsed(started: float) -> str:
    return f"{(time.perf_counter() - started) / 60:.1f} min"


def measure_parts(
    parts: dict[str, Callable[[argparse.Namespace, Path], dict]],
    args: argparse.Namespace,
    scratch: str,
    **fields,
) -> dict:
    """The parts named in `args.parts` (comma-separated) run in turn, each given `args` and one
    scratch directory, into one record with the command, date (and `now`, a datetime), machine
    and versions; each part's figures printed as JSON as it ends."""
    import datetime
    import sys
    import tempfile

    import torch

    torch.set_num_threads(args.threads)
    now = datetime.datetime.now(datetime.UTC)
    record = {
        "command": " ".join(["python3", *sys.argv]),
        "date": now.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "versions": versions(),
        **fields,
        "parts": {},
    }
    with tempfile.TemporaryDirectory(prefix=scratch) as work:
        for name in args.parts.split(","):
            print(f"=== {name}", flush=True)
            record["parts"][name] = parts[name](args, Path(work))
            print(json.dumps(record["parts"][name]), flush=True)
    return {**record, "now": now}
