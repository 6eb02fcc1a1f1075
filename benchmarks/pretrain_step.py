"""Pretraining step throughput (tokens/s): our RobertaModel beside HF RobertaForMaskedLM.

A step is forward + backward + AdamW update on one batch of --batch sequences of SEQ tokens
(books + wiki text, GPT-2 BPE: 50,265 ids, FULL-SENTENCES, 15% dynamic masking by our loader).
Ours computes the loss as `roberta pretrain` does (`tasks.pretrain.mlm_loss`: vocabulary logits
at the masked positions only); HF's `RobertaForMaskedLM` (SDPA attention) computes them at every
position, labels -100 elsewhere. Same weights (ours exported with `convert.export_hf`), same
batches in the same order, the same AdamW (`train.optim.build_optimizer`: betas 0.9/0.98, eps
1e-6, weight decay 0.01 on matrices), same threads.

One process holds both models and alternates them: every slice runs --steps steps of each,
the first side rotating; each side's first step is a warm-up and is not timed. What is timed:
the steps, batches already in memory. Peak RSS is each side alone in a fresh process (this
script with --memory): model built from the config, --memory-steps steps on the same batches.
FLOPs for MFU: `harness.training_flops`, one formula for both sides (the LM head counted on the
positions each side scores).

    .venv/bin/python benchmarks/pretrain_step.py --shapes tiny@128,base@128
    .venv/bin/python benchmarks/pretrain_step.py --shapes base@512 --slices 3 --steps 1
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import harness
from time_to_quality import hf_model, model_config

from roberta.config import RobertaConfig
from roberta.data.masking import IGNORE_INDEX
from roberta.model import RobertaModel
from roberta.tasks.pretrain import mlm_loss
from roberta.train.config import OptimSection
from roberta.train.optim import build_optimizer

GOALS = {"tiny@128": 2.5, "base@128": 1.5, "base@512": 1.3}  # from the issue: ours / HF tokens/s
CORPUS_FILES = 2  # wiki files prepared for the batches (~2 MB, ~450K tokens: enough for any run here)
PAD = 1


@dataclass(frozen=True)
class Shape:
    """`PRESET[:LAYERSxWIDTH]@SEQ`, e.g. tiny@128, base@512, tiny:2x128@64."""

    spec: str

    @property
    def model(self) -> str:
        return self.spec.partition("@")[0]

    @property
    def seq_len(self) -> int:
        return int(self.spec.partition("@")[2] or 128)

    def config(self, vocab_size: int) -> RobertaConfig:
        return model_config(self.model, None, vocab_size, max(self.seq_len, 512))


def prepared_corpus(data: Path, work: Path) -> Path:
    """A few wiki files prepared with the GPT-2 BPE, once (cached under --work)."""
    from roberta.data.prepare import prepare

    out = work / "corpus-gpt2"
    if not out.exists():
        files = sorted((data / "corpus" / "wiki").glob("*.txt"))[:CORPUS_FILES]
        prepare(files, data / "gpt2_bpe", out, workers=2, valid_fraction=0.0, progress=False)
    return out


def batches(corpus: Path, seq_len: int, batch: int, count: int) -> list[dict]:
    from roberta.data.loader import DataConfig, PretrainDataset, PretrainLoader

    dataset = PretrainDataset(corpus, config=DataConfig(seq_len=seq_len), micro_batch_size=batch, seed=0)
    return list(itertools.islice(iter(PretrainLoader(dataset)), count))


def ours_step(model: RobertaModel, batch: dict) -> torch.Tensor:
    masked = max(int(batch["labels"].ne(IGNORE_INDEX).sum()), 1)
    return mlm_loss(model, batch, nsp=False)["mlm"] / masked  # the trainer divides the summed loss so


def hf_step(model, batch: dict) -> torch.Tensor:
    tokens = batch["tokens"]
    return model(input_ids=tokens, attention_mask=tokens.ne(PAD).long(), labels=batch["labels"]).loss


class Side:
    """One contender: its model, its optimizer, and where it is in the shared list of batches."""

    def __init__(self, model: torch.nn.Module, loss, batches: list[dict]):
        self.model, self.loss, self.batches = model.train(), loss, batches
        self.optimizer = build_optimizer(self.model, OptimSection())
        self.position = 0

    def steps(self, count: int) -> float:
        """Run `count` steps; tokens per second."""
        tokens, started = 0, time.perf_counter()
        for _ in range(count):
            batch = self.batches[self.position]
            self.position += 1
            self.loss(self.model, batch).backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            tokens += int(batch["tokens"].ne(PAD).sum())
        return tokens / (time.perf_counter() - started)


def same_weights_check(ours: RobertaModel, hf, batch: dict) -> float:
    """Largest difference of the masked positions' logits (eval mode, two sequences)."""
    few = {k: v[:2] for k, v in batch.items()}
    selected = few["labels"].ne(IGNORE_INDEX)
    ours.eval(), hf.eval()
    with torch.no_grad():
        mine = ours.lm_logits(ours(few["tokens"]).last_hidden_state, selected)
        theirs = hf(input_ids=few["tokens"], attention_mask=few["tokens"].ne(PAD).long()).logits[selected]
    ours.train(), hf.train()
    return float((mine - theirs).abs().max())


def measure_memory(shape: Shape, args: argparse.Namespace) -> tuple[float, float]:
    """(ours, HF) peak RSS in MB, each side alone in a fresh process."""
    peaks = []
    for side in ("ours", "hf"):
        argv = [sys.executable, __file__, "--memory", side, "--shapes", shape.spec, "--batch", str(args.batch),
                "--memory-steps", str(args.memory_steps), "--threads", str(args.threads), "--work", str(args.work),
                "--data", str(args.data)]
        result = harness.require_success(harness.run_measured(argv, harness.thread_env(args.threads)), f"{side} memory run")
        peaks.append(result.peak_rss_mb)
    return peaks[0], peaks[1]


def memory_run(side: str, shape: Shape, args: argparse.Namespace, corpus: Path) -> None:
    """The --memory child: one side's model from the config, trained a few steps, nothing else."""
    config = shape.config(50265)
    data = batches(corpus, shape.seq_len, args.batch, args.memory_steps)
    torch.manual_seed(0)
    model = RobertaModel(config) if side == "ours" else hf_model(config)
    Side(model, ours_step if side == "ours" else hf_step, data).steps(args.memory_steps)


def compare(shape: Shape, args: argparse.Namespace, corpus: Path, peak: float) -> harness.Row:
    config = shape.config(50265)
    print(f"{shape.spec}: {config.num_layers} x {config.hidden_size}, batch {args.batch} x {shape.seq_len}", flush=True)
    data = batches(corpus, shape.seq_len, args.batch, 1 + args.slices * args.steps)
    torch.manual_seed(0)
    ours = RobertaModel(config)
    import transformers

    with tempfile.TemporaryDirectory(prefix="pretrain-step-") as tmp:
        from roberta.convert import export_hf

        export_hf(Path(tmp) / "hf", ours)
        hf = transformers.RobertaForMaskedLM.from_pretrained(Path(tmp) / "hf")
    print(f"  same weights: largest masked-logit difference {same_weights_check(ours, hf, data[0]):.2e}", flush=True)
    sides = {"ours": Side(ours, ours_step, data), "HF": Side(hf, hf_step, data)}
    for side in sides.values():
        side.steps(1)  # warm-up: allocator, optimizer state, thread pools
    rates = harness.alternate({name: lambda s=s: s.steps(args.steps) for name, s in sides.items()}, args.slices)
    del sides, ours, hf

    timed = data[1:]
    tokens = sum(int(b["tokens"].ne(PAD).sum()) for b in timed)
    masked = sum(int(b["labels"].ne(IGNORE_INDEX).sum()) for b in timed)
    per_token = {
        "ours": harness.training_flops(config, shape.seq_len, tokens, lm_scored=masked) / tokens,
        "HF": harness.training_flops(config, shape.seq_len, tokens, lm_scored=tokens) / tokens,
    }
    mfu = tuple(harness.Spread.of(rates[n]).median * per_token[n] / peak for n in ("ours", "HF"))
    rss = measure_memory(shape, args)
    name = (f"pretraining step (fwd + bwd + AdamW), {config.num_layers} x {config.hidden_size}, "
            f"batch {args.batch} x {shape.seq_len}, vocab 50,265 vs HF RobertaForMaskedLM")
    return harness.compared(name, "tokens/s", rates["ours"], rates["HF"], goal=GOALS.get(shape.spec),
                            rss_mb=rss, mfu=mfu, memory_goal=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="tiny@128,base@128", help="comma-separated PRESET[:LxW]@SEQ (default tiny@128,base@128)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step (default 16)")
    p.add_argument("--slices", type=int, default=3, help="alternation slices (default 3)")
    p.add_argument("--steps", type=int, default=2, help="steps of each side per slice (default 2)")
    p.add_argument("--memory-steps", type=int, default=3, help="steps of the peak-RSS runs (default 3)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", type=Path, default=harness.DEFAULT_DATA, help="shared data (default ../shared/data)")
    p.add_argument("--work", type=Path, default=harness.ROOT / "runs" / "bench", help="cache: the prepared corpus")
    p.add_argument("--peak-gflops", type=float, help="fp32 matmul peak for MFU (default: measured now)")
    p.add_argument("--json", type=Path, help="write the table rows here (for bench.py)")
    p.add_argument("--memory", choices=["ours", "hf"], help=argparse.SUPPRESS)  # the peak-RSS child
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    shapes = [Shape(s) for s in args.shapes.split(",")]
    corpus = prepared_corpus(args.data, args.work)
    if args.memory:
        memory_run(args.memory, shapes[0], args, corpus)
        return
    peak = args.peak_gflops * 1e9 if args.peak_gflops else harness.peak_matmul_flops(args.threads)
    rows = [compare(shape, args, corpus, peak) for shape in shapes]
    print(harness.format_table(rows))
    harness.write_rows(args.json, rows)


if __name__ == "__main__":
    main()
