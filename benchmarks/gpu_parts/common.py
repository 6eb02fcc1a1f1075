"""What the GPU check's parts share: the plan and its sizes, the synthetic data, the devices' helpers."""

from __future__ import annotations

import gc
import importlib.util
import json
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from roberta.io import write_json

HERE = Path(__file__).resolve().parents[1]  # benchmarks/
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


class Skipped(Exception):
    """A part that cannot run here (a package missing): recorded as skipped, with the reason."""


def require(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise Skipped(f"{', '.join(missing)} not installed")


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
