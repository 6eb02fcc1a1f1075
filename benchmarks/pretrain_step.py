"""Pretraining step throughput (tokens/s): our RobertaModel beside HF RobertaForMaskedLM.

A step is forward + backward + AdamW update on one batch of --batch sequences of SEQ tokens
(books + wiki text, GPT-2 BPE: 50,265 ids, FULL-SENTENCES, 15% dynamic masking by our loader).
Ours computes the loss as `roberta pretrain` does (`tasks.pretrain.mlm_loss`: the last layer and
the vocabulary logits at the masked positions only); HF's `RobertaForMaskedLM` (SDPA attention)
computes every position, labels -100 elsewhere. Same weights (one random init, saved as our
checkpoint and exported with `convert.export_hf`; each side loads its file), the same batches in the same
order, the same AdamW (`train.optim.build_optimizer`: betas 0.9/0.98, eps 1e-6, weight decay
0.01 on matrices), the same threads.

This process alternates the two sides in slices of --steps steps, the first rotating. Each
side lives in its own worker process (this script with --worker), idle while the other runs,
so that its peak RSS (VmHWM over its whole life: loading, warm-up, every slice) is its
own. What is timed, inside the worker: the steps, batches already in memory; a warm-up update
on two sequences is not. FLOPs for MFU: `harness.training_flops`, one formula for both sides
(the LM head and the last layer counted on the positions each side computes).

    .venv/bin/python benchmarks/pretrain_step.py --shapes tiny@128,base@128
    .venv/bin/python benchmarks/pretrain_step.py --shapes base@512 --slices 3 --steps 1
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import harness
from roberta.config import RobertaConfig
from roberta.data.masking import IGNORE_INDEX
from roberta.runtime.precision import autocast
from roberta.tasks.pretrain import mlm_loss
from roberta.train.config import OptimSection
from roberta.train.optim import build_optimizer
from time_to_quality import model_config

GOALS = {"tiny@128": 2.5, "base@128": 1.5, "base@512": 1.3}  # from the issue: ours / HF tokens/s
VOCAB = 50265  # the GPT-2 BPE with RoBERTa's dict.txt
CORPUS_FILES = 2  # wiki files prepared for the batches (~2 MB, ~450K tokens: enough for any run here)
PAD = 1
PROBE = 2  # sequences of the first batch whose masked logits both sides report, to check the weights


@dataclass(frozen=True)
class Shape:
    """`PRESET[:LAYERSxWIDTH]@SEQ`, e.g. tiny@128, base@512, tiny:2x128@64."""

    spec: str

    @property
    def seq_len(self) -> int:
        return int(self.spec.partition("@")[2] or 128)

    def config(self) -> RobertaConfig:
        return model_config(self.spec.partition("@")[0], None, VOCAB, max(self.seq_len, 512))


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


def ours_loss(model, batch: dict) -> torch.Tensor:
    masked = max(int(batch["labels"].ne(IGNORE_INDEX).sum()), 1)
    return mlm_loss(model, batch)["mlm"] / masked  # the trainer divides the summed loss so


def hf_loss(model, batch: dict) -> torch.Tensor:
    tokens = batch["tokens"]
    return model(input_ids=tokens, attention_mask=tokens.ne(PAD).long(), labels=batch["labels"]).loss


def ours_probe(model, batch: dict) -> torch.Tensor:
    return model.lm_logits(model(batch["tokens"]).last_hidden_state, batch["labels"].ne(IGNORE_INDEX))


def hf_probe(model, batch: dict) -> torch.Tensor:
    tokens = batch["tokens"]
    return model(input_ids=tokens, attention_mask=tokens.ne(PAD).long()).logits[
        batch["labels"].ne(IGNORE_INDEX)
    ]


def worker(side: str, shape: Shape, args: argparse.Namespace, corpus: Path) -> None:
    """The --worker child: load one side's model, save its probe logits, take a warm-up step,
    then answer each line "N" on stdin with the tokens/s of N more steps."""
    if side == "ours":
        from roberta import checkpoint

        model, loss, probe = checkpoint.load(args.models / "ours")[0], ours_loss, ours_probe
    else:
        import transformers

        transformers.utils.logging.disable_progress_bar()
        model, loss, probe = (
            transformers.RobertaForMaskedLM.from_pretrained(args.models / "hf"),
            hf_loss,
            hf_probe,
        )
    data = batches(corpus, shape.seq_len, args.batch, 1 + args.slices * args.steps)
    with torch.no_grad():
        torch.save(
            probe(model.eval(), {k: v[:PROBE] for k, v in data[0].items()}), args.models / f"{side}-probe.pt"
        )
    model.train()
    optimizer = build_optimizer(model, OptimSection())

    def update(batch: dict) -> None:
        with autocast(args.precision, torch.device("cpu")):  # both sides, as the trainer runs ours
            value = loss(model, batch)
        value.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    # Warm-up, not timed: the optimizer state and the thread pools, on PROBE sequences only (a
    # full step costs ~1 minute per side at base@128 on 2 cores). A full-size warm-up would not
    # last: large activation buffers go back to the system after each step. Measured (ours,
    # tiny@128, 2 threads): the first full step after this took 12.8 s with 263K page faults,
    # the next three 12.5-13.0 s with 122K-165K each.
    update({k: v[:PROBE] for k, v in data[0].items()})
    print("ready", flush=True)
    position = 1
    for line in sys.stdin:
        count, started = int(line), time.perf_counter()
        for batch in data[position : position + count]:
            update(batch)
        tokens = sum(int(b["tokens"].ne(PAD).sum()) for b in data[position : position + count])
        position += count
        print(tokens / (time.perf_counter() - started), flush=True)


class Worker:
    """The parent's handle on one --worker process, and its peak RSS."""

    def __init__(self, side: str, shape: Shape, args: argparse.Namespace):
        argv = [sys.executable, __file__, "--worker", side, "--models", str(args.models)]
        argv += ["--shapes", shape.spec, "--batch", str(args.batch), "--slices", str(args.slices)]
        argv += ["--steps", str(args.steps), "--threads", str(args.threads), "--precision", args.precision]
        argv += ["--data", str(args.data), "--work", str(args.work)]
        self.side = side
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=harness.thread_env(args.threads),
        )
        self.peak = harness.PeakRss(self.proc.pid)
        self._answer()  # "ready": loaded and warmed up

    def steps(self, count: int) -> float:
        self.proc.stdin.write(f"{count}\n")
        self.proc.stdin.flush()
        return float(self._answer())

    def close(self) -> float:
        """Peak RSS in MB, once the worker has exited."""
        self.proc.stdin.close()
        if self.proc.wait() != 0:
            raise SystemExit(f"{self.side} worker failed (exit {self.proc.returncode})")
        return self.peak.stop()

    def _answer(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.side} worker stopped (exit {self.proc.wait()}); its error is above")
        return line.strip()


def compare(shape: Shape, args: argparse.Namespace, corpus: Path, peak: float) -> harness.Row:
    from roberta import checkpoint
    from roberta.convert import export_hf
    from roberta.model import RobertaModel

    config = shape.config()
    print(
        f"{shape.spec}: {config.num_layers} x {config.hidden_size}, batch {args.batch} x {shape.seq_len}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="pretrain-step-") as tmp:
        args.models = Path(tmp)
        torch.manual_seed(0)
        model = RobertaModel(config)
        checkpoint.save(args.models / "ours", model)
        export_hf(args.models / "hf", model)
        del model
        workers = {"ours": Worker("ours", shape, args), "HF": Worker("hf", shape, args)}
        difference = (
            (torch.load(args.models / "ours-probe.pt") - torch.load(args.models / "hf-probe.pt")).abs().max()
        )
        print(f"  same weights: largest masked-logit difference {difference:.2e}", flush=True)
        rates = harness.alternate(
            {name: lambda w=w: w.steps(args.steps) for name, w in workers.items()}, args.slices
        )
        rss = (workers["ours"].close(), workers["HF"].close())

    timed = batches(corpus, shape.seq_len, args.batch, 1 + args.slices * args.steps)[1:]
    tokens = sum(int(b["tokens"].ne(PAD).sum()) for b in timed)
    masked = sum(int(b["labels"].ne(IGNORE_INDEX).sum()) for b in timed)
    per_token = {
        "ours": harness.training_flops(config, shape.seq_len, tokens, lm_scored=masked, last_layer=masked)
        / tokens,
        "HF": harness.training_flops(config, shape.seq_len, tokens, lm_scored=tokens) / tokens,
    }
    mfu = tuple(harness.Spread.of(rates[n]).median * per_token[n] / peak for n in ("ours", "HF"))
    autocast_note = ", bf16 autocast (both)" if args.precision == "bf16" else ""
    name = (
        f"pretraining step (fwd + bwd + AdamW), {config.num_layers} x {config.hidden_size}, "
        f"batch {args.batch} x {shape.seq_len}, vocab 50,265{autocast_note}: ours vs HF RobertaForMaskedLM"
    )
    return harness.compared(
        name,
        "tokens/s",
        rates["ours"],
        rates["HF"],
        goal=GOALS.get(shape.spec),
        rss_mb=rss,
        mfu=mfu,
        memory_goal=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--shapes",
        default="tiny@128,base@128",
        help="comma-separated PRESET[:LxW]@SEQ (default tiny@128,base@128)",
    )
    p.add_argument("--batch", type=int, default=16, help="sequences per step (default 16)")
    p.add_argument("--slices", type=int, default=3, help="alternation slices (default 3)")
    p.add_argument("--steps", type=int, default=1, help="steps of each side per slice (default 1)")
    p.add_argument("--threads", type=int, default=2)
    harness.add_data_and_work(p, harness.ROOT / "runs" / "bench", "cache: the prepared corpus")
    harness.add_row_options(p, "both sides under bf16 autocast, as `--train.precision=bf16` runs ours")
    p.add_argument("--worker", choices=["ours", "hf"], help=argparse.SUPPRESS)  # one side's process
    p.add_argument("--models", type=Path, help=argparse.SUPPRESS)  # the worker's model files
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    shapes = [Shape(s) for s in args.shapes.split(",")]
    corpus = prepared_corpus(args.data, args.work)
    if args.worker:
        worker(args.worker, shapes[0], args, corpus)
        return
    peak = (
        args.peak_gflops * 1e9
        if args.peak_gflops
        else harness.peak_matmul_flops(args.threads, args.precision)
    )
    rows = [compare(shape, args, corpus, peak) for shape in shapes]
    print(harness.format_table(rows))
    harness.write_rows(args.json, rows)


if __name__ == "__main__":
    main()
