"""`torch.compile` of the encoder layers on CPU: eager and compiled pretraining steps, alternated.

Two copies of one model (same init, same batches: random ids, 15% masked, the LM head at the
masked positions, fused AdamW); in the second every `EncoderLayer` is compiled by Inductor. The
compile time (its first two steps) is reported, then slices of `--steps` steps rotate between
the two. `--profile` first prints the eager step's time by operator (torch.profiler, two steps),
the share that matrix products take being what compile cannot fuse away.

    .venv/bin/python benchmarks/experiments/compile_layers.py --preset tiny --seq 128 --slices 4 --profile
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from roberta import RobertaConfig, RobertaModel
from roberta.train.config import OptimSection
from roberta.train.optim import build_optimizer

MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


def make(preset: str) -> tuple[RobertaModel, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig.preset(preset))
    return model, build_optimizer(model, OptimSection())


def step(
    model: RobertaModel, optimizer: torch.optim.Optimizer, batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    tokens, masked = batch
    hidden = model(tokens).last_hidden_state
    F.cross_entropy(model.lm_logits(hidden, masked), tokens[masked]).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="tiny", choices=["tiny", "medium", "base", "large"])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--slices", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2, help="steps per slice")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--profile", action="store_true", help="first print the eager step's time by operator"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(4):
        tokens = torch.randint(4, 50000, (args.batch, args.seq), generator=generator)
        tokens[:, 0], tokens[:, -1] = 0, 2
        batches.append((tokens, torch.rand(args.batch, args.seq, generator=generator) < 0.15))

    eager, compiled = make(args.preset), make(args.preset)
    step(*eager, batches[0])
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(2):
                step(*eager, batches[i])
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMULS)
        print(f"eager step profile: matrix products {matmul / total:.0%} of self CPU time")
        print(events.table(sort_by="self_cpu_time_total", row_limit=12))
    started = time.perf_counter()
    for layer in compiled[0].layers:
        layer.compile()
    step(*compiled, batches[0])
    step(*compiled, batches[1])
    print(f"compile + first two steps: {time.perf_counter() - started:.1f} s")

    sides = {"eager": eager, "compiled": compiled}
    rates: dict[str, list[float]] = {name: [] for name in sides}
    tokens_per_slice = args.steps * args.batch * args.seq
    for s in range(args.slices):
        order = list(sides) if s % 2 == 0 else list(reversed(sides))
        for name in order:
            started = time.perf_counter()
            for i in range(args.steps):
                step(*sides[name], batches[i % len(batches)])
            rates[name].append(tokens_per_slice / (time.perf_counter() - started))
    for name, values in rates.items():
        print(
            f"{name:8} median {statistics.median(values):8.1f} tokens/s  slices {[round(v) for v in values]}"
        )
    print(f"compiled / eager: {statistics.median(rates['compiled']) / statistics.median(rates['eager']):.2f}")


if __name__ == "__main__":
    main()
