"""How long one dropout mask takes to draw on a CPU: torch's `bernoulli_` (fp32 training) against the
15-bit integers bf16 training draws (`roberta.model.dropped_positions` under CPU autocast), for a
base step's attention-probability mask [16, 12, 128, 128] and hidden-state mask [2048, 768]; the
median of 10 draws each, twice (benchmarks/experiments/dropout-masks.md cites its figures).

    .venv/bin/python benchmarks/experiments/dropout_mask_speed.py
"""

import time

import torch

from roberta.model import dropped_positions


def median_ms(shape: tuple[int, ...], integers: bool) -> float:
    like = torch.zeros(1, dtype=torch.bfloat16)

    def draw() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=integers):
            dropped_positions(shape, like, 0.1)

    draw()
    times = []
    for _ in range(10):
        started = time.perf_counter()
        draw()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    torch.set_num_threads(2)
    for shape in ((16, 12, 128, 128), (2048, 768)):
        for _ in range(2):
            torch_ms, ours_ms = median_ms(shape, False), median_ms(shape, True)
            ratio = ours_ms / torch_ms
            print(f"{list(shape)}: bernoulli_ {torch_ms:.2f} ms, integers {ours_ms:.2f} ms ({ratio:.2f})")


if __name__ == "__main__":
    main()
