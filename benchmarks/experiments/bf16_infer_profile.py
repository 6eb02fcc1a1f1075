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
import copy
import os
import random
import statistics
import time
from pathlib import Path
from unittest import mock

import torch
from torch.profiler import ProfilerActivity, profile

from roberta import RobertaConfig, RobertaModel
from roberta.hub import Roberta
from roberta.runtime import int8
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


def hubs(model: RobertaModel, tokenizer, modes: list[str]) -> dict[str, Roberta]:
    """A hub per mode: fp32; bf16 (autocast, the weights cast at each call, as before the hub held
    them); held (`use_precision("bf16")`: the weights held in bf16); int8 (`quantize` on torch's
    default x86 engine); int8-onednn (quantized on the oneDNN engine, AMX's int8 products)."""
    found = {}
    for mode in modes:
        hub = Roberta(copy.deepcopy(model), tokenizer).eval()
        if mode in ("bf16", "held"):
            hub.use_precision("bf16")
            if mode == "bf16":
                hub._held.release()
        elif mode.startswith("int8"):
            # `quantize` packs for `int8.quantize_engine()` (oneDNN on AMX): named here instead.
            engine = "onednn" if mode == "int8-onednn" else "x86"
            with mock.patch.object(int8, "quantize_engine", lambda engine=engine: engine):
                hub.quantize()
        found[mode] = hub
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--rows", type=int, default=10, help="rows of each profile table (default 10)")
    p.add_argument("--modes", default="fp32,bf16,held,int8,int8-onednn")
    p.add_argument("--sizes", default="1,16", help="sentences per call, comma-separated (default 1,16)")
    p.add_argument("--draws", type=int, default=8, help="calls (draws of sentences) per size per round")
    args = p.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    tokenizer = load_tokenizer(DATA / "gpt2_bpe")
    model = RobertaModel(RobertaConfig.preset("base", vocab_size=tokenizer.vocab_size)).eval()
    modes, sizes = args.modes.split(","), [int(n) for n in args.sizes.split(",")]
    found = hubs(model, tokenizer, modes)
    sample = texts(2000)
    rng = random.Random(1)
    # Each call a new draw of sentences, as a server's batches are: per-shape kernels are paid too.
    draws = {
        n: [found[modes[0]].encode_batch(rng.sample(sample, n)) for _ in range(args.draws)] for n in sizes
    }
    for batches in draws.values():
        for hub in found.values():  # warm: each shape once
            for ids in batches:
                hub.embed(ids)
    times: dict = {}
    for r in range(args.rounds):
        for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
            for n, batches in draws.items():
                started = time.perf_counter()
                for ids in batches:
                    found[mode].embed(ids)
                tokens = sum(len(seq) for ids in batches for seq in ids)
                times.setdefault((mode, n), []).append((time.perf_counter() - started) / tokens * 1e6)
    for (mode, n), values in sorted(times.items(), key=lambda kv: (kv[0][1], modes.index(kv[0][0]))):
        print(
            f"{mode:11s} {n:2d} sentences a call: median {statistics.median(values):5.0f} us a token "
            f"(rounds {', '.join(f'{v:.0f}' for v in values)})"
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
            for n, batches in draws.items():
                with profile(activities=[ProfilerActivity.CPU]) as seen:
                    for ids in batches:
                        found[mode].embed(ids)
                print(f"--- {mode}, {n} sentences a call, {len(batches)} calls")
                print(seen.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
