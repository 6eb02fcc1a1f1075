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
import gc
import importlib.util
import json
import math
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import harness
from bench import write_run_file
from roberta.io import atomic_write, write_json

HERE = Path(__file__).resolve().parent
PRECISION = "bf16"
KILL_AT = "step-7:micro-batch-0"  # mid-step, after the checkpoint of step 6 (checkpoint_every=3)
RESUMED_FROM, LAST_STEP = 6, 12
MOTIF_IDS = 64  # distinct ids of the synthetic pretraining batches (motif_batch)
TIMING = {"tokens_per_s", "mfu", "data_wait"}  # metrics.jsonl fields that differ between equal runs
# Dense bf16 tensor-core peaks from the datasheets (the issue's table; roberta.train.metrics'
# GPU_PEAK_TFLOPS gives every H100 the SXM part's 989), matched in this order against the device name.
DATASHEET_TFLOPS = {"H100 PCIe": 756.0, "H100": 989.0, "H200": 989.0, "A100": 312.0}


@dataclass(frozen=True)
class Plan:
    """The sizes and budgets of a run: the GPU check, or its dry run (the same functions, tiny)."""

    name: str
    device: str
    total_s: float  # the whole run; each part gets min(its budget, what is left)
    budgets: dict[str, float]
    threads: int  # CPU threads of every process (tokenization, data, the dry run's compute)
    lanes: int  # parts run at once: 1 where timings are reported, so that no part slows another
    vocab: int  # the synthetic data's vocabulary, the models' and the tokenizer's
    test_paths: tuple[str, ...]
    precision_shape: str  # pretrain_step.Shape specs: PRESET[:LAYERSxWIDTH]@SEQ
    precision_batch: int
    precision_steps: int
    precision_lr: float
    attention_shape: str
    attention_batch: int
    throughput_shapes: tuple[str, ...]
    max_micro_batch: int  # where the doubling search stops if memory has not
    max_probe_step_s: float  # ... or a step has grown this slow
    slices: int
    slice_steps: int
    cli_job: tuple[str, ...]  # `roberta pretrain` overrides of the resume and distributed parts
    nprocs: tuple[int, ...] | None  # None: 1, and 2 where two GPUs are visible
    corpus_documents: int
    vocab_words: int
    finetune_shape: str
    finetune_examples: str  # finetune_throughput's TASK=N[:B],...
    finetune_repeats: int
    embed_texts: int
    embed_batch_tokens: int
    hf_batch: int
    serve_clients: tuple[int, ...]
    serve_seconds: float


CLI_JOB = (
    "--model.dropout=0.1",
    "--model.attention_dropout=0.1",
    "--train.batch_size=8",
    "--train.micro_batch_size=4",
    f"--train.max_steps={LAST_STEP}",
    "--train.log_every=1",
    f"--train.eval_every={LAST_STEP}",  # one evaluation: each redraws curves.png, ~1.5 s of a CPU
    "--train.eval_batches=2",
    "--train.checkpoint_every=3",
    "--train.report_to=none",
    "--train.progress=false",
    "--schedule.warmup_steps=2",
    "--optim.lr=1e-3",
)
GPU = Plan(
    name="gpu",
    device="cuda",
    total_s=480,
    budgets={
        "environment": 60,
        "data": 60,
        "tests": 75,
        "precision": 60,
        "attention": 40,
        "throughput": 150,
        "resume": 60,
        "distributed": 60,
        "finetune": 90,
        "embed": 40,
        "serve": 40,
    },
    threads=8,
    lanes=1,
    vocab=50265,  # GPT-2's BPE with RoBERTa's dict.txt
    test_paths=("tests",),
    precision_shape="base@128",
    precision_batch=32,
    precision_steps=200,
    precision_lr=2e-4,
    attention_shape="base@512",
    attention_batch=8,
    throughput_shapes=("base@512", "large@512"),
    max_micro_batch=256,
    max_probe_step_s=3.0,
    slices=3,
    slice_steps=8,
    cli_job=("--model.preset=tiny", "--data.seq_len=128", *CLI_JOB),
    nprocs=None,
    corpus_documents=6000,
    vocab_words=40000,
    finetune_shape="base",
    finetune_examples="RTE=512,SST-2=2048",
    finetune_repeats=1,
    embed_texts=512,
    embed_batch_tokens=16384,
    hf_batch=64,
    serve_clients=(1, 32),
    serve_seconds=5.0,
)
DRY_RUN = Plan(
    name="dry-run",
    device="cpu",
    # Generous: the dry run proves the parts still run, not that they are quick, and a CI machine
    # busier than this one must not turn a slow part into a skipped one (the test gives it 600 s).
    total_s=540,
    budgets=dict.fromkeys(GPU.budgets, 300),
    threads=1,
    lanes=2,
    vocab=1024,  # GPT-2's would make CPU steps (bf16 ones above all) the dry run's largest cost
    test_paths=("tests/train/test_gpu.py",),
    precision_shape="tiny:2x64@32",
    precision_batch=8,
    precision_steps=12,
    precision_lr=1e-2,
    attention_shape="tiny:2x64@32",
    attention_batch=2,
    throughput_shapes=("tiny:2x64@32",),
    max_micro_batch=4,
    max_probe_step_s=3.0,
    slices=2,
    slice_steps=1,
    cli_job=(
        "--model.preset=tiny",
        "--model.hidden_size=64",
        "--model.num_layers=2",
        "--model.num_heads=4",
        "--model.ffn_size=128",
        "--data.seq_len=32",
        "--train.peak_tflops=0.1",  # no CPU matmul timing at start-up
        *CLI_JOB,
    ),
    nprocs=(2,),
    corpus_documents=150,
    vocab_words=600,
    finetune_shape="tiny:2x64",
    finetune_examples="RTE=8:4",
    finetune_repeats=1,
    embed_texts=8,
    embed_batch_tokens=512,
    hf_batch=4,
    serve_clients=(1, 4),
    serve_seconds=0.5,
)
PLANS = {plan.name: plan for plan in (GPU, DRY_RUN)}
SETUP = ("environment", "data")  # run first, one after the other: every later part needs them


class Skipped(Exception):
    """A part that cannot run here (a package missing): recorded as skipped, with the reason."""


def require(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise Skipped(f"{', '.join(missing)} not installed")


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


def one_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"


def guarded(run: Callable[..., dict], *args) -> dict:
    """`run`'s figures, or its error: one shape or task failing (an out-of-memory error) leaves
    the part's other figures."""
    try:
        return run(*args)
    except Exception as error:  # noqa: BLE001
        traceback.print_exc()
        return {"error": one_line(error)}


# --- what several parts share -----------------------------------------------------------------


def device_of(plan: Plan):
    import torch

    if plan.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is visible (--dry-run checks the CPU path)")
    return torch.device(plan.device)


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device) -> float | None:
    """Peak device memory allocated since the last reset; None on the CPU (no allocator to ask)."""
    import torch

    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def release(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def datasheet_tflops(device) -> tuple[float | None, str]:
    """The GPU's dense bf16 peak (DATASHEET_TFLOPS), and how it was found."""
    import torch

    if device.type != "cuda":
        return None, f"MFU not reported: no datasheet peak for {device.type}"
    name = torch.cuda.get_device_name(device)
    for key, tflops in DATASHEET_TFLOPS.items():
        if key in name:
            return tflops, f"{name}: datasheet dense bf16 peak {tflops:g} TFLOP/s"
    return None, f"MFU not reported: {name} is not in the datasheet table ({', '.join(DATASHEET_TFLOPS)})"


def motif_batch(seed: int, batch: int, seq_len: int, vocab_size: int, padded: bool = False) -> dict:
    """`batch` sequences of `vocab_size` ids: `<s>`, a random motif of 2-16 ids repeated, `</s>`,
    masked as pretraining masks (15%, 80/10/10). Motifs draw from MOTIF_IDS ids spread over the
    vocabulary, so a model's loss falls from ln(vocab_size) towards ln(64) within tens of steps,
    and below as attention learns that a masked id is a copy of one a motif away. `padded`:
    lengths drawn from [seq_len / 2, seq_len], padding after `</s>` (without it, every sequence
    is full, as the paper's FULL-SENTENCES blocks are)."""
    import numpy as np
    import torch

    from pretrain_step import PAD
    from roberta.data.masking import IGNORE_INDEX, MaskingConfig, MaskVocab, mask_tokens

    rng = np.random.default_rng(seed)
    last = vocab_size - 1  # <mask>, as in GPT-2's vocabulary
    vocab = MaskVocab(mask_id=last, special_ids=(0, PAD, 2, 3, last), vocab_size=vocab_size)
    tokens = np.full((batch, seq_len), PAD, dtype=np.int64)
    labels = np.full((batch, seq_len), IGNORE_INDEX, dtype=np.int64)
    for row in range(batch):
        length = int(rng.integers(seq_len // 2, seq_len + 1)) if padded else seq_len
        motif = 4 + (vocab_size - 5) // MOTIF_IDS * rng.integers(0, MOTIF_IDS, int(rng.integers(2, 17)))
        sequence = np.concatenate([[0], np.resize(motif, length - 2), [2]])
        tokens[row, :length], labels[row, :length] = mask_tokens(sequence, rng, MaskingConfig(), vocab)
    return {"tokens": torch.from_numpy(tokens), "labels": torch.from_numpy(labels)}


def on_device(batch: dict, device) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def shape_config(spec: str, vocab_size: int, **overrides):
    """The RobertaConfig of a pretrain_step shape spec (PRESET[:LAYERSxWIDTH]@SEQ)."""
    from pretrain_step import Shape

    return replace(Shape(spec).config(), vocab_size=vocab_size, **overrides)


def seq_len_of(spec: str) -> int:
    from pretrain_step import Shape

    return Shape(spec).seq_len


@dataclass
class Stepper:
    """One model and its AdamW on the device, taking training steps under a precision."""

    model: object
    optimizer: object
    loss: Callable  # (model, batch) -> the mean masked-LM loss
    precision: str
    device: object

    @classmethod
    def of(cls, model, loss: Callable, precision: str, device, lr: float | None = None) -> Stepper:
        from roberta.train.config import OptimSection
        from roberta.train.optim import build_optimizer

        # The trainer's AdamW (fused, betas 0.9/0.98, eps 1e-6, weight decay 0.01 on matrices).
        optim = OptimSection() if lr is None else OptimSection(lr=lr)
        return cls(model.train(), build_optimizer(model, optim), loss, precision, device)

    def step(self, batch: dict):
        from roberta.train.precision import autocast

        with autocast(self.precision, self.device):
            loss = self.loss(self.model, batch)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def tokens_per_s(self, batches: list[dict], steps: int) -> float:
        synchronize(self.device)
        started = time.perf_counter()
        for i in range(steps):
            self.step(batches[i % len(batches)])
        synchronize(self.device)
        tokens = sum(int(batches[i % len(batches)]["tokens"].ne(1).sum()) for i in range(steps))
        return tokens / (time.perf_counter() - started)


def synthetic_words(count: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(count)]


def sentence(words: list[str], rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(low, high))).capitalize() + "."


def synthetic_data(plan: Plan, work: Path) -> Path:
    """Made once under `work`, for the parts that read text: corpus.txt (documents of sentences of
    random words), gpt2_bpe/ (a byte-level BPE trained on it, at GPT-2's size where the plan says
    so; the name is the one finetune_throughput.py reads), corpus/ (`roberta prepare`d), and
    glue/SST-2 and glue/RTE train.tsv + dev.tsv with GLUE's columns and about its lengths (SST-2:
    2-30 words; RTE: a premise of 10-120 words, a hypothesis of 4-20)."""
    from roberta.data.prepare import prepare
    from roberta.tokenizer import train_tokenizer

    root = work / "data"
    if (root / "done").exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    words = synthetic_words(plan.vocab_words, rng)
    documents = [
        "\n".join(sentence(words, rng, 5, 40) for _ in range(rng.randint(3, 8)))
        for _ in range(plan.corpus_documents)
    ]
    (root / "corpus.txt").write_text("\n\n".join(documents) + "\n")
    train_tokenizer([root / "corpus.txt"], root / "gpt2_bpe", vocab_size=plan.vocab, progress=False)
    prepare(
        [root / "corpus.txt"],
        root / "gpt2_bpe",
        root / "corpus",
        workers=min(plan.threads, 4),
        valid_fraction=0.05,
        progress=False,
    )
    rows = {"SST-2": 4096 if plan.name == "gpu" else 32, "RTE": 2048 if plan.name == "gpu" else 32}
    for task, count in rows.items():
        (root / "glue" / task).mkdir(parents=True, exist_ok=True)
        for split, n in (("train", count), ("dev", 32)):
            lines = [glue_row(task, i, words, rng) for i in range(n)]
            header = "sentence\tlabel" if task == "SST-2" else "index\tsentence1\tsentence2\tlabel"
            (root / "glue" / task / f"{split}.tsv").write_text("\n".join([header, *lines]) + "\n")
    (root / "done").touch()
    return root


def glue_row(task: str, index: int, words: list[str], rng: random.Random) -> str:
    if task == "SST-2":
        return f"{sentence(words, rng, 2, 30)}\t{rng.randint(0, 1)}"
    label = rng.choice(("entailment", "not_entailment"))
    return f"{index}\t{sentence(words, rng, 10, 120)}\t{sentence(words, rng, 4, 20)}\t{label}"


def texts(plan: Plan, count: int, low: int, high: int, seed: int) -> list[str]:
    """`count` texts of random words of the synthetic vocabulary, `low`-`high` words long."""
    rng = random.Random(seed)
    words = synthetic_words(plan.vocab_words, random.Random(0))
    return [sentence(words, rng, low, high) for _ in range(count)]


def base_models(plan: Plan, work: Path):
    """Our checkpoint and its HF export (one random init of the plan's fine-tuning shape, the
    synthetic tokenizer), made once by finetune_throughput.py's `models`; and the config."""
    import finetune_throughput
    from roberta.config import RobertaConfig

    out = work / "models"
    if not (out / "config.json").exists():
        _, _, config = finetune_throughput.models(plan.finetune_shape, synthetic_data(plan, work), out)
        write_json(out / "config.json", asdict(config))
    return (
        out / "model-ours",
        out / "model-hf",
        RobertaConfig(**json.loads((out / "config.json").read_text())),
    )


# --- the environment ---------------------------------------------------------------------------


def part_environment(plan: Plan, work: Path) -> dict:
    """What the run ran on: torch, CUDA, the GPUs, the bf16 peak MFU divides by."""
    import torch

    device = device_of(plan)
    cuda = device.type == "cuda"
    count = torch.cuda.device_count() if cuda else 0
    peak, note = datasheet_tflops(device)
    return {
        "device": plan.device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "gpus": [torch.cuda.get_device_name(i) for i in range(count)],
        "gpu_memory_gib": [
            round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1) for i in range(count)
        ],
        "bf16_supported": torch.cuda.is_bf16_supported() if cuda else None,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "datasheet_bf16_tflops": peak,
        "peak_note": note,
        "summary": ", ".join(torch.cuda.get_device_name(i) for i in range(count)) or plan.device,
    }


def part_data(plan: Plan, work: Path) -> dict:
    """What the later parts read, made once before them: the synthetic data and the base checkpoint."""
    from roberta.tokenizer import load_tokenizer

    data = synthetic_data(plan, work)
    _, _, config = base_models(plan, work)
    tokenizer = load_tokenizer(data / "gpt2_bpe")
    corpus_mb = sum(f.stat().st_size for f in (data / "corpus").glob("*.bin")) / 2**20
    return {
        "tokenizer_vocab": tokenizer.vocab_size,
        "corpus_mb": round(corpus_mb, 2),
        "model": f"{config.num_layers} x {config.hidden_size}, vocab {config.vocab_size}",
        "summary": f"BPE of {tokenizer.vocab_size} ids, {plan.finetune_shape} checkpoint",
        "checks": {"the tokenizer has the plan's vocabulary": tokenizer.vocab_size == plan.vocab},
    }


# --- 1. the suite's GPU tests ----------------------------------------------------------------


def part_tests(plan: Plan, work: Path) -> dict:
    """`pytest -m gpu`: outcomes from its JUnit XML. A module that cannot be imported here for a
    missing package (the device machine has no playwright) is listed, not counted as a failure."""
    junit = work / "tests-junit.xml"
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"]
    argv += ["--continue-on-collection-errors", f"--junitxml={junit}", *plan.test_paths]
    proc = subprocess.run(argv, cwd=harness.ROOT, capture_output=True, text=True)
    print(proc.stdout[-5000:], proc.stderr[-2000:], flush=True)
    if not junit.exists():
        raise RuntimeError(f"pytest exited {proc.returncode} without a report: {proc.stderr[-500:]}")
    figures = junit_outcomes(junit)
    figures["exit_code"] = proc.returncode
    figures["summary"] = (
        f"{figures['passed']} passed, {figures['failed']} failed, {figures['errors']} errors, "
        f"{figures['skipped']} skipped"
        + (f"; {len(figures['not_collected'])} modules not collected" if figures["not_collected"] else "")
    )
    figures["checks"] = {
        "no GPU test failed": figures["failed"] == 0 and figures["errors"] == 0,
        "the GPU tests ran (not skipped) where CUDA is visible": plan.device != "cuda"
        or figures["passed"] > 0,
    }
    return figures


def junit_outcomes(path: Path) -> dict:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failing, not_collected = [], {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        error, failure = case.find("error"), case.find("failure")
        if error is not None and error.get("message") == "collection failure":
            reason = [line for line in (error.text or "").splitlines() if line.startswith("E ")]
            reason = reason[-1][1:].strip() if reason else "collection failure"
            if "ModuleNotFoundError" not in reason:
                counts["errors"] += 1
                failing.append(f"{case.get('name')}: {reason}")
            not_collected[case.get("name")] = reason
        elif failure is not None or error is not None:
            counts["failed" if failure is not None else "errors"] += 1
            failing.append(name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {**counts, "failing": failing, "not_collected": not_collected}


# --- 2. bf16 against fp32 ----------------------------------------------------------------------


def part_precision(plan: Plan, work: Path) -> dict:
    """The same pretraining run in fp32 and under bf16 autocast: one init, the same batches, the
    trainer's AdamW and schedule (linear warmup over 10% of the steps, then decay). Dropout is off
    so that the two differ by precision alone."""
    import torch

    from pretrain_step import ours_loss
    from roberta.model import RobertaModel
    from roberta.train.config import ScheduleSection
    from roberta.train.optim import learning_rate, set_learning_rate

    device = device_of(plan)
    config = shape_config(plan.precision_shape, plan.vocab, dropout=0.0, attention_dropout=0.0)
    seq_len, steps, lr = seq_len_of(plan.precision_shape), plan.precision_steps, plan.precision_lr
    schedule = ScheduleSection(warmup_steps=max(1, steps // 10))
    torch.manual_seed(0)
    initial = RobertaModel(config).state_dict()
    losses = {}
    for precision in ("fp32", PRECISION):
        model = RobertaModel(config)
        model.load_state_dict(initial)
        stepper = Stepper.of(model.to(device), ours_loss, precision, device, lr=lr)
        losses[precision] = []
        for step in range(steps):
            set_learning_rate(stepper.optimizer, learning_rate(step, lr, schedule, steps))
            batch = on_device(motif_batch(1000 + step, plan.precision_batch, seq_len, plan.vocab), device)
            losses[precision].append(float(stepper.step(batch)))
        del model, stepper
        release(device)
    figures = precision_checks(losses["fp32"], losses[PRECISION])
    figures["shape"] = f"{plan.precision_shape}, batch {plan.precision_batch}, {steps} steps, peak LR {lr:g}"
    figures["losses"] = losses
    return figures


def precision_checks(fp32: list[float], bf16: list[float]) -> dict:
    """Bounds on bf16's drift from fp32, and whether they hold.

    Step 1 (the same weights, the same batch) differs by rounding alone: bf16 keeps 8 significant
    bits (a relative step of 2^-8 = 0.4%), the products accumulate in fp32 and the loss is taken in
    fp32, so the loss may move by a few such steps: at most 1% of it. After that the runs follow
    different trajectories (each rounding difference changes the next weights), so only the
    curve, not each step, must agree: the mean of the last 10% of steps within 5% of fp32's plus
    0.05 nats, the spread mixed-precision training reports for final losses against fp32
    (Micikevicius et al. 2018; Kalamkar et al. 2019, bf16) and well under what a wrong cast does
    (a loss that stalls or diverges differs by whole nats). Both runs must learn (the last window
    under 90% of the first loss), else agreeing would show nothing."""
    window = max(1, len(fp32) // 10)
    tail32, tail16 = sum(fp32[-window:]) / window, sum(bf16[-window:]) / window
    first_bound, tail_bound = 0.01 * fp32[0], 0.05 * tail32 + 0.05
    finite = all(math.isfinite(x) for x in fp32 + bf16)
    return {
        "first_loss": {
            "fp32": fp32[0],
            "bf16": bf16[0],
            "difference": abs(bf16[0] - fp32[0]),
            "bound": first_bound,
        },
        "last_window_mean": {
            "steps": window,
            "fp32": tail32,
            "bf16": tail16,
            "difference": abs(tail16 - tail32),
            "bound": tail_bound,
        },
        "summary": f"loss {fp32[0]:.3f} -> fp32 {tail32:.3f} / bf16 {tail16:.3f} (bound ±{tail_bound:.3f})",
        "checks": {
            "every loss finite": finite,
            "step 1 within 1% (rounding only)": finite and abs(bf16[0] - fp32[0]) <= first_bound,
            "last window within 5% + 0.05 nats": finite and abs(tail16 - tail32) <= tail_bound,
            "both runs learn": finite and max(tail32, tail16) < 0.9 * fp32[0],
        },
    }


# --- 3. the attention kernel -------------------------------------------------------------------

SDPA_OPS = {  # the forward op each SDPA backend dispatches to, as the profiler names it
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_attention_math": "math",
}


def part_attention(plan: Plan, work: Path) -> dict:
    """Which SDPA kernel a training step (forward + backward, bf16 autocast, dropout on) takes in
    three batches: full (no mask: flash expected on a GPU), and padded with the layers unpadded
    (pretraining's default) or not (a key-padding mask either way: memory-efficient expected).
    Per case: the kernels the profiler saw, and each backend forced alone (`sdpa_kernel`): ok, or
    why SDPA refused. The last layer in training computes the masked queries only by SDPA's math
    written out (model.attention: dropout drawn for every query), so SDPA runs layers - 1 times."""
    import torch

    from roberta.model import RobertaModel

    device = device_of(plan)
    config = shape_config(plan.attention_shape, plan.vocab)
    seq_len = seq_len_of(plan.attention_shape)
    torch.manual_seed(0)
    model = RobertaModel(config).to(device).train()
    cases = {
        "no padding": (False, True),
        "padding, unpadded": (True, True),
        "padding, not unpadded": (True, False),
    }
    figures = {}
    for case, (padded, unpad) in cases.items():
        batch = on_device(motif_batch(0, plan.attention_batch, seq_len, plan.vocab, padded), device)
        figures[case] = attention_case(model, batch, unpad, device)
    # A CPU's fused kernels take no dropout, so there training runs SDPA's math kernel.
    cuda = device.type == "cuda"
    fused = {"flash", "memory-efficient", "cudnn"} if cuda else set(SDPA_OPS.values())
    expected = "a fused SDPA kernel (not math) ran" if cuda else "an SDPA kernel ran"
    figures["summary"] = "; ".join(f"{case}: {figures[case]['kernel']}" for case in cases)
    figures["checks"] = {f"{case}: {expected}": bool(set(figures[case]["kernels"]) & fused) for case in cases}
    return figures


def attention_case(model, batch: dict, unpad: bool, device) -> dict:
    import torch
    from torch.nn.attention import SDPBackend

    from roberta.tasks.pretrain import mlm_loss
    from roberta.train.precision import autocast

    def step() -> None:
        with autocast(PRECISION, device):
            loss = mlm_loss(model, batch, unpad=unpad)["mlm"]
        loss.backward()
        model.zero_grad(set_to_none=True)

    step()  # warm-up: kernel selection and the allocator, outside the profile
    # The CPU side's op names say which backend SDPA dispatched to, on a GPU too; tracing the
    # device's kernels (CUPTI) would add nothing to that and one more thing that can fail.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        step()
        synchronize(device)
    names: dict[str, int] = {}
    for event in profile.events():
        names[event.name] = names.get(event.name, 0) + 1
    ops = {name: n for name, n in names.items() if name in SDPA_OPS}
    backends = {
        b.name: forced(step, b)
        for b in (
            SDPBackend.FLASH_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION,
            SDPBackend.CUDNN_ATTENTION,
            SDPBackend.MATH,
        )
    }
    used = sorted({SDPA_OPS[name] for name in ops})
    return {
        "kernel": " + ".join(used) or "none seen",
        "kernels": used,
        "sdpa_calls": ops,
        "forced_backends": backends,
        "padding_share": round(float(batch["tokens"].eq(1).float().mean()), 3),
    }


def forced(step: Callable[[], None], backend) -> str:
    """'ok' if a step runs with SDPA restricted to `backend`, else why it would not."""
    import warnings

    from torch.nn.attention import sdpa_kernel

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(backend):
                step()
            return "ok"
        except RuntimeError as error:
            # SDPA warns each backend's reason for refusing, then raises "No available kernel".
            reasons = [re.sub(r"\s*\(Triggered internally.*?\)", "", str(w.message)).strip() for w in caught]
            return " ".join(dict.fromkeys(reasons))[:300] or one_line(error)[:300]


# --- 4. pretraining throughput beside HF --------------------------------------------------------


def part_throughput(plan: Plan, work: Path) -> dict:
    require("transformers")
    figures = {spec: guarded(shape_throughput, spec, plan, work) for spec in plan.throughput_shapes}
    figures["summary"] = "; ".join(
        f"{spec}: {figures[spec]['error']}"
        if "error" in figures[spec]
        else f"{spec}: ours {figures[spec]['tokens_per_s']['ours']['median']:,.0f} tokens/s, "
        f"{figures[spec]['ratio']['median']:.2f}x HF"
        for spec in plan.throughput_shapes
    )
    figures["checks"] = {f"{spec} measured": "error" not in figures[spec] for spec in plan.throughput_shapes}
    return figures


@dataclass(frozen=True)
class Side:
    name: str
    build: Callable[[], object]  # a fresh model on the device, the shared initial weights
    loss: Callable  # (model, batch) -> the mean masked-LM loss
    flops_per_token: Callable[[int, int], float]  # (tokens, masked) of a step -> training FLOPs / token


@dataclass(frozen=True)
class Search:
    """The doubling search's outcome: the largest micro-batch that took two steps, the peak memory
    at each size tried, and what stopped it."""

    fits: int
    peak_mb: dict[int, float | None]
    stopped_by: str


def shape_throughput(spec: str, plan: Plan, work: Path) -> dict:
    """Both sides' largest micro-batch alone on the device, then both resident at the smaller of
    the two (the same shapes), alternated in slices of `slice_steps` steps."""
    import copy

    import torch
    import transformers

    from pretrain_step import hf_loss, ours_loss
    from roberta.convert import export_hf
    from roberta.model import RobertaModel

    device = device_of(plan)
    config, seq_len = shape_config(spec, plan.vocab), seq_len_of(spec)
    torch.manual_seed(0)
    initial = RobertaModel(config)
    hf_dir = export_hf(work / f"hf-{spec}", initial)
    transformers.logging.set_verbosity_error()
    sides = [
        Side(
            "ours",
            lambda: copy.deepcopy(initial).to(device),
            ours_loss,
            lambda tokens, masked: harness.training_flops(config, seq_len, tokens, masked, masked) / tokens,
        ),
        Side(
            "HF",
            lambda: transformers.RobertaForMaskedLM.from_pretrained(hf_dir).to(device),
            hf_loss,
            lambda tokens, masked: harness.training_flops(config, seq_len, tokens, tokens) / tokens,
        ),
    ]
    searches = {side.name: largest_micro_batch(side, seq_len, plan, device) for side in sides}
    micro = min(s.fits for s in searches.values())
    timed = None
    try:
        timed = alternated(sides, micro, seq_len, plan, device)
    except torch.OutOfMemoryError:
        pass  # each side fitted alone; side by side, the other's weights and AdamW state take room too
    if timed is None:  # out here, so that the failed try's models (its traceback's) are gone
        release(device)
        micro //= 2
        timed = alternated(sides, micro, seq_len, plan, device)
    rates, batches = timed
    tokens, masked = micro * seq_len, sum(int(b["labels"].ne(-100).sum()) for b in batches) / len(batches)
    peak, note = datasheet_tflops(device)
    row = harness.compared(spec, "tokens/s", rates["ours"], rates["HF"])
    return {
        "model": f"{config.num_layers} x {config.hidden_size}, vocab {config.vocab_size}",
        "micro_batch": micro,
        "seq_len": seq_len,
        "largest_micro_batch": {name: s.fits for name, s in searches.items()},
        "search_stopped_by": {name: s.stopped_by for name, s in searches.items()},
        "peak_memory_mb": {name: s.peak_mb.get(micro) for name, s in searches.items()},
        "tokens_per_s": {"ours": asdict(row.ours), "HF": asdict(row.baseline)},
        "ratio": asdict(row.ratios),
        "mfu": {
            side.name: None
            if peak is None
            else row_median(row, side.name) * side.flops_per_token(tokens, masked) / (peak * 1e12)
            for side in sides
        },
        "mfu_note": note,
    }


def alternated(sides: list[Side], micro: int, seq_len: int, plan: Plan, device) -> tuple[dict, list[dict]]:
    """Each side's tokens/s per slice, both resident, in slices of `slice_steps` steps on the same
    two batches; and the batches."""
    if micro < 1:
        raise RuntimeError("side by side, not even a micro-batch of 1 fits")
    steppers = {side.name: Stepper.of(side.build(), side.loss, PRECISION, device) for side in sides}
    batches = [on_device(motif_batch(seed, micro, seq_len, plan.vocab), device) for seed in range(2)]
    for stepper in steppers.values():
        stepper.step(batches[0])  # warm-up, not timed
    rates = harness.alternate(
        {name: lambda s=s: s.tokens_per_s(batches, plan.slice_steps) for name, s in steppers.items()},
        plan.slices,
    )
    return rates, batches


def row_median(row: harness.Row, side: str) -> float:
    return (row.ours if side == "ours" else row.baseline).median


def largest_micro_batch(side: Side, seq_len: int, plan: Plan, device) -> Search:
    """Double the micro-batch from 1 while two steps fit (AdamW's state is made in the first),
    alone on the device, up to the plan's cap or step time."""
    import torch

    stepper = Stepper.of(side.build(), side.loss, PRECISION, device)
    fits, peaks, stopped_by, size = 0, {}, "the plan's cap", 1
    while size <= plan.max_micro_batch:
        batch = on_device(motif_batch(size, size, seq_len, plan.vocab), device)
        reset_peak_memory(device)
        started = time.perf_counter()
        try:
            stepper.step(batch)
            stepper.step(batch)
            synchronize(device)
        except torch.OutOfMemoryError:
            stopped_by = "out of memory"
        stepper.optimizer.zero_grad(set_to_none=True)
        if stopped_by == "out of memory":
            break
        fits, peaks[size] = size, peak_memory_mb(device)
        print(f"  {side.name}: micro-batch {size} fits, peak {peaks[size]} MB", flush=True)
        if (time.perf_counter() - started) / 2 > plan.max_probe_step_s:
            stopped_by = f"a step over {plan.max_probe_step_s:g} s"
            break
        size *= 2
    del stepper, batch
    release(device)
    if not fits:
        raise RuntimeError(f"{side.name}: not even a micro-batch of 1 x {seq_len} fits")
    return Search(fits, peaks, stopped_by)


# --- 5. exact resume through the CLI -------------------------------------------------------------


def pretrain_argv(plan: Plan, data: Path, out: Path, resume: bool = False, nproc: int = 0) -> list[str]:
    """`roberta pretrain` of the plan's CLI job on the synthetic corpus; under torchrun with `nproc`."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    argv = [*(launcher if nproc else [sys.executable]), "-m", "roberta.cli", "pretrain"]
    argv += ["--data", str(data / "corpus"), "--out", str(out), *plan.cli_job]
    argv += [f"--train.device={plan.device}", f"--train.precision={PRECISION}"]
    return argv + (["--resume"] if resume else [])


def launch(argv: list[str], log: Path, fault: str | None = None) -> subprocess.Popen:
    env = {**os.environ, **({"ROBERTA_FAULT": fault} if fault else {})}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        return subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=harness.ROOT)


def finish(procs: dict[str, subprocess.Popen]) -> dict[str, int]:
    return {name: proc.wait() for name, proc in procs.items()}


def logged(run: Path) -> list[dict]:
    """A run's metrics.jsonl records without the timing fields, which differ between equal runs."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines if line.strip()]


def loss_difference(a: list[dict], b: list[dict]) -> float:
    """The largest loss difference between two runs' records, step by step (inf if they differ in kind)."""
    if [(r["step"], r["split"]) for r in a] != [(r["step"], r["split"]) for r in b]:
        return math.inf
    return max((abs(x["loss"] - y["loss"]) for x, y in zip(a, b)), default=0.0)


def final_weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoints" / f"step-{LAST_STEP:08d}" / "model.safetensors"))


def part_resume(plan: Plan, work: Path) -> dict:
    """Three runs of the CLI job at once: two uninterrupted (their difference is what the kernels
    alone make: zero where they are deterministic) and one killed mid-step 7 by SIGKILL
    (ROBERTA_FAULT), then `--resume`d from its step-6 checkpoint."""
    data = synthetic_data(plan, work)
    root = work / "resume"
    runs = {"whole": root / "whole", "again": root / "again", "killed": root / "killed"}
    codes = finish(
        {
            name: launch(
                pretrain_argv(plan, data, run), root / f"{name}.log", KILL_AT if name == "killed" else None
            )
            for name, run in runs.items()
        }
    )
    killed_kept = (runs["killed"] / "checkpoints" / f"step-{RESUMED_FROM:08d}").is_dir()
    codes["resumed"] = finish(
        {"resumed": launch(pretrain_argv(plan, data, runs["killed"], True), root / "killed.log")}
    )["resumed"]
    if codes["whole"] or codes["again"] or codes["resumed"]:
        raise RuntimeError(f"a run failed: exit codes {codes}; logs in {root}")
    whole, again, resumed = (logged(runs[name]) for name in ("whole", "again", "killed"))
    reference = final_weights(runs["whole"])
    weights = final_weights(runs["killed"])
    weights_equal = weights.keys() == reference.keys() and all(
        weights[k].equal(v) for k, v in reference.items()
    )
    difference, control = loss_difference(whole, resumed), loss_difference(whole, again)
    # Where two uninterrupted runs differ (atomics in the attention and embedding backward), a
    # resumed run may differ as much; a broken resume (another batch, another dropout mask) moves
    # the loss by tenths at once, far past either bound.
    tolerance = max(4 * control, 1e-3 * max(r["loss"] for r in whole)) if control else 0.0
    identical = resumed == whole and weights_equal
    return {
        "exit_codes": codes,
        "killed_at": KILL_AT,
        "resumed_from_step": RESUMED_FROM,
        "bit_identical": identical,
        "weights_equal": weights_equal,
        "max_loss_difference": difference,
        "uninterrupted_runs_difference": control,
        "tolerance": tolerance,
        "losses": {"whole": [r["loss"] for r in whole], "resumed": [r["loss"] for r in resumed]},
        "summary": (
            "bit-identical"
            if identical
            else f"differs by {difference:.2e} (two uninterrupted "
            f"runs: {control:.2e}; tolerance {tolerance:.2e})"
        ),
        "checks": {
            "the killed run died at the fault": codes["killed"] == -signal.SIGKILL,
            f"its step-{RESUMED_FROM} checkpoint was kept": killed_kept,
            "resumed losses equal the uninterrupted run's (bit for bit, or within the kernels' own "
            "run-to-run difference)": identical or difference <= tolerance,
        },
    }


# --- 6. DDP and FSDP2 under torchrun ---------------------------------------------------------------


def part_distributed(plan: Plan, work: Path) -> dict:
    """DDP and FSDP2 at each world size: started under torchrun, killed on every rank after the
    step-6 checkpoint, resumed to the end. With one process `distributed.wrap` leaves the model
    unwrapped (there is nothing to synchronise), so a world of 1 checks torchrun's start, the
    checkpoint and resume, and two ranks check DDP and FSDP themselves."""
    import torch

    data = synthetic_data(plan, work)
    nprocs = plan.nprocs or ((1, 2) if torch.cuda.device_count() >= 2 else (1,))
    runs = {(n, mode): work / "distributed" / f"{mode}-{n}" for n in nprocs for mode in ("ddp", "fsdp")}

    def started(resume: bool) -> dict[str, int]:
        return finish(
            {
                f"{mode} x{n}": launch(
                    pretrain_argv(plan, data, run, resume, n) + [f"--train.parallel={mode}"],
                    run.with_suffix(".log"),
                    None if resume else KILL_AT,
                )
                for (n, mode), run in runs.items()
            }
        )

    killed = started(resume=False)
    kept = {
        f"{m} x{n}": (run / "checkpoints" / f"step-{RESUMED_FROM:08d}").is_dir()
        for (n, m), run in runs.items()
    }
    resumed = started(resume=True)
    figures = {}
    for (n, mode), run in runs.items():
        name = f"{mode} x{n}"
        records = logged(run) if (run / "metrics.jsonl").exists() else []
        losses = [r["loss"] for r in records if r["split"] == "train"]
        figures[name] = {
            "world_size": n,
            "parallel": mode,
            "wrapped": n > 1,
            "killed_exit": killed[name],
            "resumed_exit": resumed[name],
            "last_step": records[-1]["step"] if records else None,
            "train_losses": losses,
            "valid_loss": next((r["loss"] for r in reversed(records) if r["split"] == "valid"), None),
        }
    for n in nprocs:
        a, b = figures[f"ddp x{n}"]["train_losses"], figures[f"fsdp x{n}"]["train_losses"]
        figures[f"ddp vs fsdp x{n}: largest loss difference"] = max(
            (abs(x - y) for x, y in zip(a, b)), default=None
        )
    names = [f"{m} x{n}" for n, m in runs]
    figures["summary"] = ", ".join(
        f"{name}: step {figures[name]['last_step']}, valid loss {shown_value(figures[name]['valid_loss'])}"
        for name in names
    )
    figures["checks"] = {
        f"{name}: killed, kept its step-{RESUMED_FROM} checkpoint, resumed to step {LAST_STEP}": (
            figures[name]["killed_exit"] != 0 and kept[name] and figures[name]["resumed_exit"] == 0
        )
        and figures[name]["last_step"] == LAST_STEP
        for name in names
    }
    figures["checks"]["every loss finite"] = all(
        math.isfinite(x) for name in names for x in figures[name]["train_losses"]
    )
    return figures


# --- 7. fine-tuning, embed and serve beside HF ---------------------------------------------------


def part_finetune(plan: Plan, work: Path) -> dict:
    """finetune_throughput.py's two sides on the synthetic GLUE files at the plan's shape, on the
    plan's device: ours `roberta finetune glue` (timed by its trainer's clock), HF `Trainer`
    (its train_runtime), each a whole one-epoch run in its own process."""
    require("transformers", "accelerate")
    import finetune_throughput

    data = synthetic_data(plan, work)
    ours_dir, hf_dir, config = base_models(plan, work)
    figures = {
        task.name: guarded(
            task_throughput,
            finetune_throughput.glue_setup(task, data, work / "finetune"),
            ours_dir,
            hf_dir,
            config,
            plan,
            work,
        )
        for task in finetune_throughput.tasks(plan.finetune_examples)
    }
    names = list(figures)
    figures["summary"] = "; ".join(
        f"{name}: {figures[name]['error']}"
        if "error" in figures[name]
        else f"{name}: ours {figures[name]['examples_per_s']['ours']['median']:.1f} examples/s, "
        f"{figures[name]['ratio']['median']:.2f}x HF Trainer"
        for name in names
    )
    figures["checks"] = {f"{name} measured": "error" not in figures[name] for name in names}
    return figures


def task_throughput(setup, ours_dir: Path, hf_dir: Path, config, plan: Plan, work: Path) -> dict:
    import finetune_throughput

    runs = work / "finetune" / "runs"
    env = harness.thread_env(plan.threads)

    def ours() -> float:
        out = runs / f"{setup.task.name}-ours"
        argv = finetune_throughput.ours_argv(setup, ours_dir, out)
        # ours_argv names the venv's `roberta` and the CPU; the device machine has no venv, and a
        # later override wins.
        argv = [
            sys.executable,
            "-m",
            "roberta.cli",
            *argv[1:],
            f"--train.device={plan.device}",
            "--overwrite",
        ]
        harness.require_success(harness.run_measured(argv, env), "roberta finetune")
        return len(setup.lengths) / finetune_throughput.ours_seconds(out, sum(setup.lengths))

    def hf() -> float:
        out = runs / f"{setup.task.name}-hf"
        spec = json.loads(finetune_throughput.hf_argv(setup, hf_dir, out, "random", plan.threads)[-1])
        argv = [sys.executable, __file__, "--hf-finetune", json.dumps({**spec, "device": plan.device})]
        answer = harness.require_success(harness.run_measured(argv, env), "HF Trainer").stdout
        result = json.loads(answer.strip().splitlines()[-1])
        return result["examples"] / result["seconds"]

    rates = harness.alternate({"ours": ours, "HF Trainer": hf}, plan.finetune_repeats)
    row = harness.compared(setup.task.name, "examples/s", rates["ours"], rates["HF Trainer"])
    mean = sum(setup.lengths) / len(setup.lengths)
    peak, note = datasheet_tflops(device_of(plan))
    per_example = harness.training_flops(config, round(mean), sum(setup.lengths)) / len(setup.lengths)
    return {
        "examples": len(setup.lengths),
        "mean_tokens": round(mean, 1),
        "batch": setup.task.batch,
        "examples_per_s": {"ours": asdict(row.ours), "HF Trainer": asdict(row.baseline)},
        "ratio": asdict(row.ratios),
        "mfu": None
        if peak is None
        else {
            name: spread.median * per_example / (peak * 1e12)
            for name, spread in (("ours", row.ours), ("HF Trainer", row.baseline))
        },
        "mfu_note": note,
    }


def hf_finetune(spec: dict) -> None:
    """The --hf-finetune child: finetune_throughput.hf_run on the spec's device. Its recipe
    (harness.hf_trainer_recipe) is the CPU bench's; on a GPU the same recipe runs there, in bf16
    as ours does."""
    import finetune_throughput

    if spec["device"] == "cuda":
        cpu_recipe = harness.hf_trainer_recipe
        harness.hf_trainer_recipe = lambda *a, **k: {**cpu_recipe(*a, **k), "use_cpu": False, "bf16": True}
    finetune_throughput.hf_run(spec)


def part_embed(plan: Plan, work: Path) -> dict:
    """embed_throughput.py's `ours` (`Roberta.embed`: length-sorted batches, real tokens only)
    beside its length-sorted HF loop, fp32 both (the hub runs as loaded), tokenization included,
    the texts cut into slices alternated between the two."""
    require("transformers")
    import torch
    import transformers

    import embed_throughput
    from roberta import load

    device = device_of(plan)
    ours_dir, hf_dir, _ = base_models(plan, work)
    hub = load(ours_dir, map_location=device)
    hub.batch_tokens = plan.embed_batch_tokens
    hf_model = transformers.RobertaModel.from_pretrained(hf_dir, add_pooling_layer=False).to(device).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)

    def hf_cls(batch) -> torch.Tensor:
        return hf_model(**batch.to(device)).last_hidden_state[:, 0]

    systems = {
        "ours": lambda t: embed_throughput.ours(hub, t),
        "HF": lambda t: embed_throughput.run_sorted(hf_tokenizer, t, plan.hf_batch, hf_cls),
    }
    paragraphs = texts(plan, plan.embed_texts, 20, 250, seed=1)
    agreement = float(
        (systems["ours"](paragraphs[:4]).cpu() - systems["HF"](paragraphs[:4]).cpu()).abs().max()
    )
    slices = [paragraphs[k :: plan.slices] for k in range(plan.slices)]

    def rate(system: Callable, chunks) -> float:
        chunk = next(chunks)
        synchronize(device)
        started = time.perf_counter()
        system(chunk)
        synchronize(device)
        return len(chunk) / (time.perf_counter() - started)

    chunks = {name: iter(slices) for name in systems}  # each side embeds every slice once
    rates = harness.alternate(
        {name: lambda n=name: rate(systems[n], chunks[n]) for name in systems}, plan.slices
    )
    row = harness.compared("embed", "sentences/s", rates["ours"], rates["HF"])
    return {
        "texts": len(paragraphs),
        "hf_batch": plan.hf_batch,
        "batch_tokens": plan.embed_batch_tokens,
        "max_abs_difference_from_hf": agreement,
        "sentences_per_s": {"ours": asdict(row.ours), "HF": asdict(row.baseline)},
        "ratio": asdict(row.ratios),
        "summary": f"ours {row.ours.median:.1f} sentences/s, {row.ratios.median:.2f}x HF",
        "checks": {"ours gives HF's vectors (max |difference| < 1e-3)": agreement < 1e-3},
    }


def part_serve(plan: Plan, work: Path) -> dict:
    """`roberta serve` on the plan's device, /embed of single sentences under each client count,
    by serve_load.py's loopback load (requests back to back, for `serve_seconds`)."""
    require("starlette", "uvicorn")
    sys.path.insert(0, str(HERE / "experiments"))
    import serve_load

    ours_dir, _, _ = base_models(plan, work)
    with socket.socket() as s:
        s.bind((serve_load.HOST, 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "roberta.cli", "serve", str(ours_dir), "--port", str(port)]
    argv += ["--device", plan.device, "--max-batch-tokens", str(plan.embed_batch_tokens)]
    system = serve_load.System("ours", argv, port, {"embed": ("/embed", lambda t: {"text": t})})
    sentences = texts(plan, 256, 5, 40, seed=2)
    system.start()
    figures = {}
    try:
        for clients in plan.serve_clients:
            tally = serve_load.load(
                port, serve_load.picker(system, "embed", sentences), clients, plan.serve_seconds
            )
            figures[f"{clients} clients"] = {
                "requests_per_s": len(tally.latencies) / tally.seconds,
                "p50_ms": serve_load.percentile(tally.latencies, 50) * 1e3 if tally.latencies else None,
                "p99_ms": serve_load.percentile(tally.latencies, 99) * 1e3 if tally.latencies else None,
                "errors": tally.errors,
            }
    finally:
        system.stop()
    cells = list(figures)
    figures["summary"] = ", ".join(f"{c}: {figures[c]['requests_per_s']:.1f} requests/s" for c in cells)
    figures["checks"] = {
        f"{c}: answered, no errors": figures[c]["requests_per_s"] > 0 and not figures[c]["errors"]
        for c in cells
    }
    return figures


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


def shown_value(item) -> str:
    if isinstance(item, float):
        return f"{item:.4g}"
    if isinstance(item, list) and len(item) > 8:
        return (
            f"{len(item)} values: {', '.join(shown_value(x) for x in item[:3])}, …, {shown_value(item[-1])}"
        )
    if isinstance(item, list):
        return "[" + ", ".join(shown_value(x) for x in item) + "]"
    return "—" if item is None else str(item)


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
