"""Where a bf16 inference call's time goes on a CPU: `Roberta.embed` of 1 and of 32 single
sentences (the corpus' lines, as `serve_load.py` sends them) on the base shape (random init, GPT-2's
vocabulary), timed in fp32, in bf16 autocast over the fp32 weights (cast at each call: the hub
before it held them), and as `use_precision("bf16")` runs now ("held": the weights held in bf16,
`roberta.runtime.bf16`), the modes alternated in rounds; then the time to cast every Linear weight
to bf16 once, and with --profile a torch.profiler table (top ops by self time) per mode and size.
docs/precision.md cites its figures.

    .venv/bin/python benchmarks/experiments/bf16_infer_profile.py [--rounds 5] [--profile]
"""

import argparse
import os
import random
import statistics
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from roberta import RobertaConfig, RobertaModel
from roberta.hub import Roberta
from roberta.tokenizer import load_tokenizer

DATA = Path(os.environ.get("ROBERTA_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))


def texts(count: int) -> list[str]:
    lines = [
        line.strip()
        for path in sorted((DATA / "corpus").glob("*/*.txt"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if 5 <= len(line.split()) <= 40
    ]
    return random.Random(0).sample(lines, count)


def hub_in(mode: str, hub: Roberta) -> Roberta:
    """The hub switched to `mode`: fp32; bf16 (autocast, the weights cast at each call, as before
    the hub held them); held (`use_precision("bf16")`: the weights held in bf16)."""
    hub.use_precision("fp32" if mode == "fp32" else "bf16")
    if mode == "bf16":
        hub._held.release()
    return hub


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--modes", default="fp32,bf16,held")
    args = p.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    tokenizer = load_tokenizer(DATA / "gpt2_bpe")
    model = RobertaModel(RobertaConfig.preset("base", vocab_size=tokenizer.vocab_size)).eval()
    hub = Roberta(model, tokenizer).eval()
    sample = texts(64)
    ids = {n: hub.encode_batch(sample[:n]) for n in (1, 32)}
    print(f"tokens: 1 sentence {len(ids[1][0])}, 32 sentences {sum(map(len, ids[32]))}")
    modes = args.modes.split(",")
    times: dict = {}
    for r in range(args.rounds):
        for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
            hub_in(mode, hub)
            for n, seqs in ids.items():
                hub.embed(seqs)  # warm
                calls = 20 if n == 1 else 2
                started = time.perf_counter()
                for _ in range(calls):
                    hub.embed(seqs)
                times.setdefault((mode, n), []).append((time.perf_counter() - started) / calls * 1e3)
    for (mode, n), values in sorted(times.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(
            f"{mode:5s} {n:2d} sentences: median {statistics.median(values):7.1f} ms per call "
            f"(rounds {', '.join(f'{v:.1f}' for v in values)})"
        )
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    count = sum(m.weight.numel() for m in linears)
    casts = []
    for _ in range(5):
        started = time.perf_counter()
        for m in linears:
            m.weight.to(torch.bfloat16)
        casts.append((time.perf_counter() - started) * 1e3)
    print(
        f"casting the {len(linears)} Linear weights ({count / 1e6:.1f}M) to bf16 once: "
        f"median {statistics.median(casts):.1f} ms"
    )
    if args.profile:
        for mode in modes:
            hub_in(mode, hub)
            for n, seqs in ids.items():
                hub.embed(seqs)
                with profile(activities=[ProfilerActivity.CPU]) as found:
                    hub.embed(seqs)
                print(f"--- {mode}, {n} sentences")
                print(found.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))


if __name__ == "__main__":
    main()
