"""Variants of one training step, alternated in one process: what a change inside the step buys.

  finetune  the `roberta finetune glue --task RTE` step: tiny (4 x 512, random init, the GPT-2
            BPE's 50,265 ids), batch 16 of real RTE training pairs, batched by length as our
            loader makes them (--batches of them, spread over the first epoch). Sides:
            `full last layer`, the classification loss with every position through the last
            layer (as before), and `first_only`, the loss as `tasks/classify.py` computes it (the
            last layer computes `<s>` only).
  pretrain  the `roberta pretrain` step at tiny@128 (--preset): batch 16 x 128, vocabulary 50,265,
            the batches `pretrain_step.py` times (books + wiki, GPT-2 BPE, FULL-SENTENCES: ~80%
            real tokens at 128, the rest padding; 15% dynamic masking). Sides: `mlm_loss`
            (`tasks.pretrain.mlm_loss`: the layers on the real tokens only, the last layer and the
            LM head at the masked positions, then cross-entropy), `padded` (the same with
            `unpad=False`: every position of the padded batch, as before), `last layer
            everywhere` (`last_layer_masked_only=False`, as before), `chunked LM
            loss`, the LM projection and the loss in one pass over row chunks (`ChunkedLMLoss`
            below: logits, loss, argmax and the gradient of the logits formed chunk by chunk, the
            two products of the backward left to it; not adopted: see
            benchmarks/experiments/chunked-lm-head.md). (A side with
            torch's dropout masks against 15-bit "fast" ones decided experiments/dropout-masks.md;
            the fast masks were removed since.)
            `--preset recipe`: the step of configs/pretrain-cpu-20min.toml instead (2 x 128, the
            8K BPE of time_to_quality.py, batch 8 x 128, 40% masked, no dropout).

A step is what the trainer runs (trainer.py): the objective's summed loss over the batch's counts,
backward, fused AdamW through `trainer.apply_update`, and the per-step bookkeeping (counts and
totals all-reduced, the finiteness check, the token count). The sides share one model and
optimizer and take the same batches; slices of one pass over the batches rotate the first side.
Reported per side: CPU seconds of this process per slice (with one thread, the step's own work,
which a shared host's load disturbs less than wall time) and wall seconds, and the per-slice
ratios; then the host-side bookkeeping per step. --check N first runs N steps of each side from
the same weights and seed (dropout on) and reports the largest relative difference of the losses.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/experiments/step_variants.py finetune --threads 1 --check 20
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/experiments/step_variants.py pretrain --threads 1 --check 20
    .venv/bin/python benchmarks/experiments/step_variants.py pretrain --preset base --threads 2 --batches 1 \
        --slices 6 --sides "mlm_loss,padded"
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

# harness.py and time_to_quality.py, shared with the `make bench` scripts, live one level up in benchmarks/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import harness  # noqa: E402
from roberta.data.masking import IGNORE_INDEX
from roberta.model import RobertaModel
from roberta.tasks.pretrain import MaskedLM, mlm_loss, mlm_objective
from roberta.train.config import OptimSection
from roberta.train.evaluation import all_reduce_dict, global_counts
from roberta.train.optim import build_optimizer
from roberta.train.precision import LossScaler
from roberta.train.trainer import EXAMPLES, Objective, apply_update

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")
CPU = torch.device("cpu")


class ChunkedLMLoss(torch.autograd.Function):
    """Summed cross-entropy of `h @ weight.T + bias` against `targets`, and the correct argmaxes,
    over chunks of rows: each chunk's logits become its loss, its argmax and the gradient of the
    logits (softmax - one-hot) in one pass; backward is the two matrix products."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, chunk: int):
        grad = h.new_empty(h.size(0), weight.size(0))
        loss, correct = h.new_zeros(()), torch.zeros((), dtype=torch.long)
        for start in range(0, h.size(0), chunk):
            rows, gold = slice(start, start + chunk), targets[start : start + chunk]
            logits = torch.addmm(bias, h[rows], weight.t(), out=grad[rows])
            correct += (logits.argmax(-1) == gold).sum()
            log_probs = logits.log_softmax(-1)
            loss -= log_probs.gather(1, gold[:, None]).sum()
            torch.exp(log_probs, out=grad[rows])[torch.arange(len(gold)), gold] -= 1
        ctx.save_for_backward(h, weight, grad)
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _):
        h, weight, grad = ctx.saved_tensors
        return (grad @ weight) * grad_loss, grad.t() @ (h * grad_loss), grad.sum(0) * grad_loss, None, None


def chunked_mlm_loss(model: RobertaModel, batch: dict, chunk: int = 64) -> dict[str, torch.Tensor]:
    labels = batch["labels"]
    selected = labels.ne(IGNORE_INDEX)
    head = model.lm_head
    h = head.layer_norm(F.gelu(head.dense(model(batch["tokens"], select=selected).last_hidden_state)))
    loss, correct = ChunkedLMLoss.apply(h, head.weight, head.bias, labels[selected], chunk)
    return {"mlm": loss, "mlm_correct": correct}


class FullForward:
    """The model with `first_only` ignored: every position through the last layer."""

    def __init__(self, model: RobertaModel):
        self.model = model

    def __call__(self, tokens: torch.Tensor, **_) -> object:
        return self.model(tokens)

    def __getattr__(self, name: str):
        return getattr(self.model, name)


def finetune_setup(data: Path, count: int) -> tuple:
    from roberta.tasks.classify import classify_objective, encode, label_values
    from roberta.tasks.finetune import Batching, load_finetune_job
    from roberta.tasks.glue import get_task, read_split, sentence_task
    from roberta.tokenizer import load_tokenizer
    from time_to_quality import model_config

    tokenizer = load_tokenizer(data / "gpt2_bpe")
    glue, path = get_task("RTE"), data / "glue" / "RTE" / "train.tsv"
    task, examples = sentence_task(glue), read_split(glue, path, labelled=True)
    train = (encode(tokenizer, examples, 512), label_values(task, examples, path))
    job = load_finetune_job(None, ["--train.device=cpu"], glue.lr, glue.batch_size)
    objective = classify_objective(task, train, {}, Batching(job, tokenizer.pad_id))
    every = objective.batches_per_epoch // count
    stream = objective.train_batches(0)
    batches = [b for i, b in zip(range(every * count), stream) if i % every == every // 2]
    config = model_config("tiny", None, tokenizer.vocab_size, 512)

    def model() -> RobertaModel:
        torch.manual_seed(0)
        built = RobertaModel(config)
        objective.add_heads(built)
        return built

    sides = {
        "full last layer": lambda m, batch: objective.loss(FullForward(m), batch),
        "first_only": objective.loss,
    }
    return model, objective, sides, batches, job.optim


def pretrain_setup(count: int, preset: str, data: Path, work: Path) -> tuple:
    if (
        preset == "recipe"
    ):  # configs/pretrain-cpu-20min.toml: 2 x 128, its 8K BPE, 8 x 128, 40% masked, no dropout
        import time_to_quality
        from roberta.data.loader import DataConfig, PretrainDataset, PretrainLoader
        from roberta.data.masking import MaskingConfig

        corpus = time_to_quality.ensure_data(data / "corpus", work, 8192)[1]
        dataset = PretrainDataset(
            corpus,
            config=DataConfig(seq_len=128, masking=MaskingConfig(mask_prob=0.4)),
            micro_batch_size=8,
            seed=1,
        )
        batches = list(itertools.islice(iter(PretrainLoader(dataset)), count))
        config = time_to_quality.model_config("tiny:2x128", 0.0, dataset.specials.vocab_size, 130, 0.05)
    else:
        import pretrain_step
        from roberta.config import RobertaConfig

        batches = pretrain_step.batches(pretrain_step.prepared_corpus(data, work), 128, 16, count)
        config = RobertaConfig.preset(preset)
    objective = mlm_objective(None, None, padding_idx=1, seq_len=128, mask_prob=0.15)

    def model() -> RobertaModel:
        torch.manual_seed(0)
        return RobertaModel(config)

    sides = {
        "mlm_loss": lambda m, batch: mlm_loss(m, batch),
        "padded": lambda m, batch: mlm_loss(m, batch, MaskedLM(unpad=False)),
        "last layer everywhere": lambda m, batch: mlm_loss(m, batch, MaskedLM(last_layer_masked_only=False)),
        "chunked LM loss": chunked_mlm_loss,
    }
    return model, objective, sides, batches, OptimSection()


class Stepper:
    """One side's training step, as trainer.train takes it (one micro-batch per update)."""

    def __init__(self, model: RobertaModel, objective: Objective, loss: Callable, optim: OptimSection):
        self.model, self.objective, self.loss = model.train(), objective, loss
        self.optimizer = build_optimizer(model, optim)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.scaler = LossScaler(enabled=False)

    def __call__(self, batch: dict) -> float:
        counts = global_counts(self.objective, [batch], CPU)
        out = self.loss(self.model, batch)
        out.pop(EXAMPLES, None)
        sum(out[k].float() / counts[k] for k in counts).backward()
        totals = all_reduce_dict({k: v.detach().float() for k, v in out.items()}, CPU)
        assert all(math.isfinite(totals[k]) for k in counts)
        apply_update(self.optimizer, self.params, self.scaler, 0.0)
        self.objective.tokens(batch)
        return next(totals[k] / counts[k] for k in counts)


def check(
    make_model: Callable, objective: Objective, sides: dict, batches: list[dict], optim, steps: int
) -> None:
    losses = {}
    for name, loss in sides.items():
        step = Stepper(make_model(), objective, loss, optim)
        torch.manual_seed(1)
        losses[name] = [step(batches[i % len(batches)]) for i in range(steps)]
    first, *others = losses
    for name in others:
        worst = max(abs(a - b) / abs(a) for a, b in zip(losses[first], losses[name]))
        print(
            f"losses over {steps} steps (dropout {step.model.config.dropout}): {name} vs {first}: "
            f"largest relative difference {worst:.1e}"
        )


def bookkeeping(objective: Objective, batches: list[dict], repeats: int = 200) -> float:
    """Seconds per step of the trainer's host-side bookkeeping (what a sync-free loop could defer)."""
    sums = {"loss": torch.tensor(1.0), "correct": torch.tensor(3.0)}
    started = time.perf_counter()
    for i in range(repeats):
        batch = batches[i % len(batches)]
        counts = global_counts(objective, [batch], CPU)
        totals = all_reduce_dict(sums, CPU)
        assert all(math.isfinite(totals[k]) for k in totals) and counts
        objective.tokens(batch)
    return (time.perf_counter() - started) / repeats


def profile(name: str, step: Stepper, batches: list[dict]) -> None:
    from torch.profiler import profile as torch_profile

    with torch_profile() as prof:
        for batch in batches:
            step(batch)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
    print(f"{name}, one pass over the batches: matrix products {matmul / total:.0%} of self CPU time")
    print(events.table(sort_by="self_cpu_time_total", row_limit=15))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", choices=["finetune", "pretrain"])
    p.add_argument("--batches", type=int, default=4, help="batches per slice (default 4)")
    p.add_argument("--slices", type=int, default=6)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--preset",
        default="tiny",
        choices=["tiny", "base", "recipe"],
        help="pretrain: the model (default tiny); recipe: the CPU recipe's model and batches",
    )
    p.add_argument(
        "--sides", default="", help="pretrain: a comma-separated subset of the sides (default all)"
    )
    p.add_argument(
        "--check", type=int, default=0, metavar="N", help="first compare the sides' losses over N steps"
    )
    p.add_argument("--profile", action="store_true", help="first print each side's steps by operator")
    harness.add_data_and_work(p, harness.ROOT / "runs" / "bench", "pretrain: cache of the prepared corpus")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.task == "finetune":
        make_model, objective, sides, batches, optim = finetune_setup(args.data, args.batches)
    else:
        make_model, objective, sides, batches, optim = pretrain_setup(
            args.batches, args.preset, args.data, args.work
        )
        if args.sides:
            sides = {name: sides[name] for name in args.sides.split(",")}
    shapes = ", ".join("x".join(map(str, b["tokens"].shape)) for b in batches[:8]) + (
        ", ..." if len(batches) > 8 else ""
    )
    real = sum(int(b["tokens"].ne(1).sum()) for b in batches) / sum(len(b["tokens"]) for b in batches)
    print(
        f"{args.task}: batches {shapes} (mean {real:.0f} real tokens per sequence); "
        f"{args.threads} thread(s); {harness.machine()}; {harness.versions()}",
        flush=True,
    )
    if args.check:
        check(make_model, objective, sides, batches, optim, args.check)
    model = make_model()
    steppers = {name: Stepper(model, objective, loss, optim) for name, loss in sides.items()}
    for step in steppers.values():
        step(batches[0])  # warm-up: optimizer state, thread pools
    if args.profile:
        for name, step in steppers.items():
            profile(name, step, batches)
    if not args.slices:
        return

    wall: dict[str, list[float]] = {name: [] for name in steppers}

    def run(name: str) -> float:
        cpu, started = time.process_time(), time.perf_counter()
        for batch in batches:
            steppers[name](batch)
        wall[name].append(time.perf_counter() - started)
        return time.process_time() - cpu

    cpu = harness.alternate({name: lambda n=name: run(n) for name in steppers}, args.slices)
    first, *others = steppers
    for name in steppers:
        print(
            f"{name:>16}: CPU s per slice {harness.Spread.of(cpu[name])}, "
            f"wall s {harness.Spread.of(wall[name])}"
        )
    for name in others:
        for clock, times in (("CPU", cpu), ("wall", wall)):
            ratios = [a / b for a, b in zip(times[first], times[name])]
            print(f"{name} speed / {first} ({clock} time): {harness.Spread.of(ratios)}")
    per_step = statistics.median(cpu[first]) / len(batches)
    host = bookkeeping(objective, batches)
    print(
        f"trainer bookkeeping (counts, totals, finiteness, tokens): {host * 1e3:.2f} ms per step, "
        f"{host / per_step:.3%} of a step"
    )


if __name__ == "__main__":
    main()
