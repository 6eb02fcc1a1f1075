"""AdamW's three torch implementations on one model's parameters: time per `step()`.

Each implementation gets its own copy of the same model with the same random gradients; slices
of `--steps` calls rotate through the three, so all see the same host. Prints the median and
every slice in ms, and how far the fused path's parameters drift from foreach's.

    .venv/bin/python benchmarks/experiments/adamw_step.py --preset tiny --slices 8
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from roberta import RobertaConfig, RobertaModel

IMPLEMENTATIONS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}


def make(preset: str, options: dict) -> tuple[RobertaModel, torch.optim.AdamW]:
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig.preset(preset))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, **options)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="tiny", choices=["tiny", "medium", "base", "large"])
    parser.add_argument("--slices", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="step() calls per slice")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sides = {name: make(args.preset, options) for name, options in IMPLEMENTATIONS.items()}
    for _, optimizer in sides.values():
        optimizer.step()  # first step allocates the moments
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.slices):
        for name, (_, optimizer) in sides.items():
            started = time.perf_counter()
            for _ in range(args.steps):
                optimizer.step()
            times[name].append((time.perf_counter() - started) / args.steps * 1000)
    for name, values in times.items():
        print(
            f"{name:9} median {statistics.median(values):7.1f} ms/step  slices {[round(v) for v in values]}"
        )
    fused, foreach = sides["fused"][0], sides["foreach"][0]
    drift = max(
        ((p - q).abs().max() / p.abs().max()).item() for p, q in zip(fused.parameters(), foreach.parameters())
    )
    print(
        f"largest parameter difference fused vs foreach, relative to the tensor's largest value: {drift:.2g}"
    )


if __name__ == "__main__":
    main()
