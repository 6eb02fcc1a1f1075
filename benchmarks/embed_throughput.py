"""`embed` throughput (sentences/s) for the base shape: ours beside HF transformers, same weights.

Real paragraphs of ../shared/data/corpus (varied length, cut to 512 tokens) are embedded
(`<s>` vector of the last layer, tokenization included) by
  ours      `Roberta.embed(Roberta.encode_batch(texts))`: sorted by length, batches of at most
            --batch-tokens padded tokens, input order restored;
  pipeline  HF `pipeline("feature-extraction")`, one text per call (its default batch_size=1);
  hf-bN     a hand-batched HF loop: N texts at a time in input order, padded to the longest.
The host is shared and noisy, so the paragraphs are cut into slices and every slice is run by
every system in turn (rotating who goes first); the totals are summed over slices.

    .venv/bin/python benchmarks/embed_throughput.py --paragraphs 1000
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

import torch
import transformers

from roberta import Roberta, RobertaConfig, RobertaModel
from roberta.convert import export_hf
from roberta.tokenizer import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ROBERTA_DATA", ROOT.parent / "shared" / "data"))


def paragraphs(count: int, seed: int) -> list[str]:
    lines = [line for path in sorted((DATA / "corpus").glob("*/*.txt"))
             for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return random.Random(seed).sample(lines, count)


def ours(hub: Roberta, texts: list[str]) -> torch.Tensor:
    return hub.embed(hub.encode_batch(texts, truncate=True))


def pipeline_cls(pipe, texts: list[str]) -> torch.Tensor:
    outputs = pipe(texts, truncation=True, max_length=512, return_tensors=True)
    return torch.stack([out[0, 0] for out in outputs])


def hf_batched(model, tokenizer, texts: list[str], batch_size: int) -> torch.Tensor:
    vectors = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            enc = tokenizer(texts[start:start + batch_size], padding=True, truncation=True, max_length=512, return_tensors="pt")
            vectors.append(model(**enc).last_hidden_state[:, 0])
    return torch.cat(vectors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paragraphs", type=int, default=1000)
    parser.add_argument("--slices", type=int, default=5, help="alternation units (default 5)")
    parser.add_argument("--batch-tokens", type=int, default=2048, help="ours: padded tokens per batch")
    parser.add_argument("--hf-batch-sizes", default="8,32", help="hand-batched HF loop batch sizes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()

    torch.manual_seed(args.seed)
    hub = Roberta(RobertaModel(RobertaConfig.preset("base")), load_tokenizer(DATA / "gpt2_bpe"), args.batch_tokens).eval()
    workdir = Path(tempfile.mkdtemp(prefix="embed-bench-"))
    export_hf(workdir / "hf", hub.model, hub.tokenizer)  # the same weights, in HF's layout
    hf_model = transformers.RobertaModel.from_pretrained(workdir / "hf", add_pooling_layer=False).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(workdir / "hf")
    pipe = transformers.pipeline("feature-extraction", model=hf_model, tokenizer=hf_tokenizer, device="cpu")

    texts = paragraphs(args.paragraphs, args.seed)
    lengths = [len(s) for s in hub.encode_batch(texts, truncate=True)]
    sizes = [int(b) for b in args.hf_batch_sizes.split(",")]
    systems = {"ours": lambda t: ours(hub, t), "pipeline": lambda t: pipeline_cls(pipe, t)}
    systems.update({f"hf-b{b}": (lambda t, b=b: hf_batched(hf_model, hf_tokenizer, t, b)) for b in sizes})

    warm = texts[:4]
    reference = ours(hub, warm)
    for name, run in systems.items():
        print(f"{name}: max |difference| from ours on the warm-up texts {(run(warm) - reference).abs().max():.2e}", flush=True)

    n = len(texts)
    cuts = [n * k // args.slices for k in range(args.slices + 1)]
    seconds = {name: 0.0 for name in systems}
    per_slice: list[dict[str, float]] = []
    for k in range(args.slices):
        part = texts[cuts[k]:cuts[k + 1]]
        names = list(systems)
        names = names[k % len(names):] + names[:k % len(names)]
        rates = {}
        for name in names:
            start = time.perf_counter()
            systems[name](part)
            elapsed = time.perf_counter() - start
            seconds[name] += elapsed
            rates[name] = len(part) / elapsed
        per_slice.append(rates)
        print(f"slice {k + 1}/{args.slices}: " + ", ".join(f"{m} {r:.2f}/s" for m, r in rates.items()), flush=True)

    padded = sum(max(lengths[i:i + b]) * len(lengths[i:i + b]) for b in sizes[:1] for i in range(0, n, b))
    print(f"\n{n} paragraphs, {sum(lengths)} tokens (mean {sum(lengths) / n:.1f}, max {max(lengths)}), "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, transformers {transformers.__version__}")
    print(f"hf-b{sizes[0]} computes {padded / sum(lengths):.2f}x the real tokens (padding)")
    best_hf = max((name for name in systems if name != "ours"), key=lambda m: n / seconds[m])
    for name in systems:
        print(f"{name:10s} {n / seconds[name]:7.2f} sentences/s  {sum(lengths) / seconds[name]:7.0f} tokens/s  ({seconds[name]:.1f} s)")
    ratios = [r["ours"] / r[best_hf] for r in per_slice]
    print(f"ours / best HF ({best_hf}): {seconds[best_hf] / seconds['ours']:.2f}x "
          f"(per slice {min(ratios):.2f}-{max(ratios):.2f}x)")


if __name__ == "__main__":
    main()
