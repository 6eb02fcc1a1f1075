"""Where a run's numbers go: metrics.jsonl and curves.png, and the trackers `train.report_to`
names, TensorBoard (the default) and Weights & Biases (rank 0 only).

Also the arithmetic behind the progress bar's MFU: the model's training FLOPs per step over
the hardware's peak.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.io import atomic_write
from roberta.runtime.precision import compute_dtype

METRICS_FILE = "metrics.jsonl"
CURVES_FILE = "curves.png"

# Dense bf16/fp16 tensor-core peaks (datasheets), matched against torch.cuda.get_device_name().
GPU_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0, "V100": 125.0}


class MetricsLog:
    def __init__(
        self,
        run_dir: Path,
        resume_step: int | None = None,
        report_to: str = "tensorboard",
        job: dict | None = None,
    ):
        self.run_dir = run_dir
        self.path = run_dir / METRICS_FILE
        run_dir.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            self._truncate_after(resume_step)
        reporters = set(report_to.split(","))
        self.writer = None
        if "tensorboard" in reporters:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step drops events a killed run logged past its last checkpoint.
            self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step)
        self.wandb = open_wandb(run_dir, job or {}, resume_step) if "wandb" in reporters else None

    def log(self, step: int, split: str, values: dict[str, float]) -> None:
        record = {"step": step, "split": split, **{k: _plain(v) for k, v in values.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        scalars = {
            f"{split}/{key}": value
            for key, value in record.items()
            if key not in ("step", "split") and isinstance(value, (int, float)) and math.isfinite(value)
        }
        if self.writer:
            for key, value in scalars.items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()
        if self.wandb:
            self.wandb.log(scalars, step=step)

    def plot(self) -> Path:
        return plot_curves(read_metrics(self.path), self.run_dir / CURVES_FILE)

    def close(self) -> None:
        if self.writer:
            self.writer.close()
        if self.wandb:
            self.wandb.finish()

    def _truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        kept = [r for r in read_metrics(self.path) if r["step"] <= step]
        with atomic_write(self.path) as f:
            f.write("".join(json.dumps(r) + "\n" for r in kept))


def open_wandb(run_dir: Path, job: dict, resume_step: int | None):
    """A W&B run named after the run directory, the job as its config. Offline (run files under
    $WANDB_DIR, else RUN/wandb/, for `wandb sync` later) unless WANDB_API_KEY is set or WANDB_MODE
    says otherwise, so no server is contacted by default."""
    try:
        import wandb
    except ImportError:
        raise UserError(
            "train.report_to includes wandb, but the wandb package is not installed (pip install wandb)"
        ) from None
    mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
    return wandb.init(
        project=os.environ.get("WANDB_PROJECT", "roberta"),
        name=run_dir.name,
        dir=os.environ.get("WANDB_DIR") or str(run_dir),
        mode=mode,
        config={**job, "resumed_from_step": resume_step},
        settings=wandb.Settings(silent=True, console="off"),
    )


def read_metrics(path: Path) -> list[dict]:
    """The records of a metrics.jsonl. A torn last line (the process was killed while appending
    it) is dropped: its step lies past the last checkpoint, so a resumed run writes it again."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise UserError(
                f"{path}:{number}: invalid JSON record (not a torn last line; the file was edited?)"
            ) from None
    return records


def plot_curves(records: list[dict], out: Path) -> Path:
    """Loss, perplexity, learning rate and throughput against step; written to a temporary, then renamed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in records if r["split"] == "train"]
    valid = [r for r in records if r["split"] == "valid"]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    panels = [
        (axes[0, 0], "loss", "loss"),
        (axes[0, 1], "perplexity", "perplexity"),
        (axes[1, 0], "lr", "learning rate"),
        (axes[1, 1], "tokens_per_s", "tokens/s"),
    ]
    for ax, key, title in panels:
        for rows, label in ((train, "train"), (valid, "valid")):
            points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
            if points:
                ax.plot(*zip(*points), label=label, marker="o" if label == "valid" else None, markersize=3)
        ax.set_title(title)
        ax.set_xlabel("step")
        if key == "perplexity":
            ax.set_yscale("log")
        ax.legend() if ax.lines else None
    fig.subplots_adjust(hspace=0.35, wspace=0.25)  # tight_layout costs seconds of text measuring
    tmp = out.with_name(out.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=80)
    plt.close(fig)
    os.replace(tmp, out)
    return out


def training_flops_per_token(
    config: RobertaConfig, seq_len: int, head_tokens: float = 0.0, last_layer_tokens: float = 1.0
) -> float:
    """6 FLOPs per parameter per token (forward + backward) in the layers, attention scores,
    and the LM head counted only on the fraction of tokens it actually runs on (`head_tokens`:
    the masking rate in pretraining, 0 for a task that reads only `<s>` or span logits). The
    last layer's attention, output projection and FFN are counted on `last_layer_tokens` of the
    tokens (pretraining: the masking rate, when it computes the masked positions only)."""
    h, layers = config.hidden_size, config.num_layers
    qkv = 3 * h * h  # every position's queries, keys and values, in every layer
    rest = h * h + 2 * h * config.ffn_size  # the output projection and the FFN
    layer_params = layers * qkv + (layers - 1 + last_layer_tokens) * rest
    attention = (layers - 1 + last_layer_tokens) * 2 * 2 * seq_len * h  # QK^T and AV, forward
    lm_head = head_tokens * (h * h + h * config.vocab_size)
    return 6 * layer_params + 3 * attention + 6 * lm_head


def peak_flops(device: torch.device, precision: str, configured_tflops: float) -> float:
    if configured_tflops > 0:
        return configured_tflops * 1e12
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, tflops in GPU_PEAK_TFLOPS.items():
            if key in name:
                return tflops * 1e12 / (2 if precision == "fp32" else 1)  # TF32 runs at half rate
        return 0.0
    return measured_matmul_flops(compute_dtype(precision))


def peak_is_measured(device: torch.device, configured_tflops: float) -> bool:
    """Whether `peak_flops` times this machine (a CPU without a configured peak) rather than
    reading a datasheet figure or the job's."""
    return configured_tflops <= 0 and device.type != "cuda"


def measured_matmul_flops(dtype: torch.dtype = torch.float32, size: int = 1024, trials: int = 4) -> float:
    """This CPU's matrix-product rate in `dtype` (the precision the run computes in: bf16 on a CPU
    with AMX is several times fp32's) with the current thread count: MFU's denominator.

    The best of several trials of a product as large as a layer's, because on a shared host a
    single timing measures the neighbours' load as much as the hardware, and a small product
    understates what the model's own products reach (MFU then passes 100%).
    """
    a = torch.randn(size, size, generator=torch.Generator().manual_seed(0)).to(dtype)
    a @ a
    best = 0.0
    for _ in range(trials):
        start = time.perf_counter()
        a @ a
        a @ a
        best = max(best, 2 * 2 * size**3 / (time.perf_counter() - start))
    return best


def _plain(value):
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf
    return value


@dataclass
class Window:
    """Sums since the last logged step; `sums` is kept in checkpoints so that a resumed run logs
    the same figures."""

    sums: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    seconds: float = 0.0
    waited: float = 0.0  # seconds the steps stalled on the loader

    def add(self, sums: dict[str, float]) -> None:
        for k, v in sums.items():
            self.sums[k] = self.sums.get(k, 0.0) + v


@dataclass
class TrainingMetrics:
    """What a run reports while it trains, owned by one object as torchtitan's metrics processor
    owns it: the window of sums since the last logged step, throughput and MFU against the peak,
    and where they go (metrics.jsonl and the trackers, rank 0 only; the progress bar)."""

    flops_per_token: float
    peak_flops: float | None  # all ranks' together; 0: unknown; None: not to be trusted
    peak_measured: bool  # a CPU's peak timed at start, remeasured when MFU would pass 100%
    dtype: torch.dtype  # what the peak is remeasured in
    world_size: int
    log: MetricsLog | None = None  # rank 0 only
    bar: tqdm | None = None
    window: Window = field(default_factory=Window)

    def report(
        self,
        step: int,
        figures: dict[str, float],
        lr: float,
        skipped: int,
        scaling: bool,
        epoch: float | None,
    ) -> None:
        """The window's `figures`, throughput and MFU to metrics.jsonl and the bar; then a new
        window. `skipped`: fp16's skipped updates, shown on the bar with loss `scaling`."""
        window = self.window
        rate = window.tokens / max(window.seconds, 1e-9)
        figures.update(
            lr=lr,
            tokens_per_s=rate,
            mfu=self.mfu(rate),
            data_wait=window.waited / max(window.seconds, 1e-9),
            skipped_steps=skipped,
        )
        if epoch is not None:
            figures["epoch"] = epoch
        if self.log:
            self.log.log(step, "train", figures)
        self.bar.set_postfix(
            loss=f"{figures.get('loss', float('nan')):.3f}",
            tok_s=f"{rate:,.0f}",
            mfu="—" if figures["mfu"] is None else f"{figures['mfu']:.1%}",
            **({"skipped": skipped} if scaling else {}),
        )
        self.window = Window()

    def close(self) -> None:
        """The bar and metrics.jsonl (and the trackers) closed, as the run ends or fails."""
        self.bar.close()
        if self.log:
            self.log.close()

    def mfu(self, rate: float) -> float | None:
        """Achieved FLOP/s over the peak (0.0: no peak known). A CPU peak timed while a neighbour held
        the cores is too low, so MFU past 100% remeasures it; if it is still past 100%, the peak
        cannot be trusted on this host and MFU is None (not reported) from then on."""
        if self.peak_flops is None:
            return None
        if not self.peak_flops:
            return 0.0
        achieved = rate * self.flops_per_token
        if achieved > self.peak_flops and self.peak_measured:
            self.peak_flops = max(self.peak_flops, measured_matmul_flops(self.dtype) * self.world_size)
            if achieved > self.peak_flops:
                self.peak_flops = None
                return None
        return achieved / self.peak_flops
