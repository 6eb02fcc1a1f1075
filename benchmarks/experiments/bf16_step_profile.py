"""Where a bf16 training step's time goes on a CPU: one base-shape classification step (16 x 128,
dropout 0.1, fused AdamW) timed three times, then profiled (torch.profiler, the top ops by self
time), in the precision given (docs/precision.md cites its figures of 2026-11-27); with `mlm`, a
masked-LM step instead (15% of positions, the last layer at those only, an 8K vocabulary).

    .venv/bin/python benchmarks/experiments/bf16_step_profile.py bf16 [pad] [mlm]
    .venv/bin/python benchmarks/experiments/bf16_step_profile.py fp32 [pad] [mlm]

pad: rows of 40-115 tokens.
"""

import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from roberta import RobertaConfig, RobertaModel
from roberta.runtime.precision import autocast
from roberta.tasks.pretrain import mlm_loss
from roberta.train.config import OptimSection
from roberta.train.optim import build_optimizer


def main() -> None:
    precision, padded, masked_lm = sys.argv[1], "pad" in sys.argv[2:], "mlm" in sys.argv[2:]
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig.preset("base", vocab_size=8192 if masked_lm else 50265)).train()
    model.add_classification_head("c", 2)
    optimizer = build_optimizer(model, OptimSection())
    tokens = torch.randint(4, 8000, (16, 128))
    tokens[:, 0] = 0
    if padded:
        for i in range(16):
            tokens[i, 40 + 5 * i :] = 1
    labels = torch.randint(0, 2, (16,))
    masked = torch.rand(tokens.shape).lt(0.15) & tokens.ne(1)
    mlm_batch = {"tokens": tokens.masked_fill(masked, 3), "labels": tokens.masked_fill(~masked, -100)}

    def step() -> tuple[float, float]:
        with autocast(precision, torch.device("cpu")):
            if masked_lm:
                loss = mlm_loss(model, mlm_batch)["mlm"] / masked.sum()
            else:
                logits = model.classify("c", model(tokens, select="first").last_hidden_state)
                loss = torch.nn.functional.cross_entropy(logits.float(), labels)
        started = time.perf_counter()
        loss.backward()
        backward = time.perf_counter() - started
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return backward, time.perf_counter() - started - backward

    step()
    for _ in range(3):
        started = time.perf_counter()
        backward, update = step()
        total = time.perf_counter() - started
        print(f"{precision}: step {total:.2f} s (backward {backward:.2f}, AdamW {update:.2f})")
    with profile(activities=[ProfilerActivity.CPU]) as found:
        step()
    print(found.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))


if __name__ == "__main__":
    main()
