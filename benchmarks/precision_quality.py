"""What bf16 autocast keeps of fp32's numbers on trained weights (issue #48's quality goals).

    .venv/bin/python benchmarks/precision_quality.py --checkpoint CKPT --corpus CORPUS

  vectors    `Roberta.embed` of STS-B dev's sentences in bf16 and in fp32 from CKPT: their cosine
             (goal: at least 0.999)
  finetune   `roberta finetune glue --task SST-2 --seeds 3` from CKPT in fp32 and in bf16: dev
             accuracy per seed (goal: bf16's median within fp32's seed spread)
  pretrain   `roberta pretrain --config configs/pretrain-cpu-20min.toml` on CORPUS for --steps steps in
             fp32 and in bf16, from the same seed: the held-out loss at the last step (goal: within 1%);
             `--pretrain-set model.dropout=0.1` (repeatable) changes that job (`--finetune-set` the other's)
Results: benchmarks/results/<date>-precision-quality.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import harness

PRECISIONS = ("fp32", "bf16")


def roberta(argv: list[str], threads: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "roberta.cli", *argv],
        env=harness.thread_env(threads),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"roberta {' '.join(argv)} failed:\n{proc.stderr[-3000:]}")


def part_vectors(args, work: Path) -> dict:
    import torch.nn.functional as F

    from roberta import load

    with open(args.data / "glue" / "STS-B" / "dev.tsv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    texts = [r["sentence1"] for r in rows] + [r["sentence2"] for r in rows]
    fp32, bf16 = load(args.checkpoint), load(args.checkpoint).use_precision("bf16")
    ids = fp32.encode_batch(texts, truncate=True)
    figures = {"sentences": len(texts)}
    for pool in ("cls", "mean"):
        cosine = F.cosine_similarity(bf16.embed(ids, pool=pool), fp32.embed(ids, pool=pool))
        figures[f"cosine ({pool})"] = {"min": float(cosine.min()), "mean": float(cosine.mean())}
    return figures


def part_finetune(args, work: Path) -> dict:
    figures = {}
    for precision in PRECISIONS:
        out = work / f"sst2-{precision}"
        argv = ["finetune", "glue", "--task", "SST-2", "--data", str(args.data / "glue" / "SST-2"), "--init"]
        argv += [
            str(args.checkpoint),
            "--out",
            str(out),
            "--seeds",
            "3",
            f"--train.max_steps={args.ft_steps}",
        ]
        argv += ["--train.batch_size=32", "--optim.lr=1e-3", f"--train.eval_every={args.ft_steps // 2}"]
        argv += [f"--train.precision={precision}", "--train.progress=false"]
        roberta([*argv, *(f"--{setting}" for setting in args.finetune_set)], args.threads)
        scores = [
            json.loads(p.read_text())["best"]["value"]
            for p in sorted(out.glob("*/results.json"))
            if p.parent != out
        ]
        figures[precision] = {"dev accuracy per seed": scores, "median": statistics.median(scores)}
    low, high = min(figures["fp32"]["dev accuracy per seed"]), max(figures["fp32"]["dev accuracy per seed"])
    figures["bf16 median within fp32's seed spread"] = low <= figures["bf16"]["median"] <= high
    return figures


def part_pretrain(args, work: Path) -> dict:
    figures = {}
    for precision in PRECISIONS:
        out = work / f"pretrain-{precision}"
        argv = ["pretrain", "--config", str(harness.ROOT / "configs" / "pretrain-cpu-20min.toml")]
        argv += ["--data", str(args.corpus), "--out", str(out), f"--train.max_steps={args.steps}"]
        argv += [f"--train.eval_every={args.steps // 4}", f"--train.checkpoint_every={args.steps}"]
        argv += ["--train.eval_batches=50", f"--train.precision={precision}", "--train.progress=false"]
        argv += ["--train.report_to=none", *(f"--{setting}" for setting in args.pretrain_set)]
        roberta(argv, args.threads)
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        valid = [(r["step"], r["loss"]) for r in rows if r["split"] == "valid"]
        figures[precision] = {"held-out loss by step": valid}
    fp32, bf16 = (
        figures["fp32"]["held-out loss by step"][-1][1],
        figures["bf16"]["held-out loss by step"][-1][1],
    )
    figures["last step: bf16 / fp32 - 1"] = bf16 / fp32 - 1
    return figures


PARTS = {"vectors": part_vectors, "finetune": part_finetune, "pretrain": part_pretrain}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, required=True, help="a pretrained checkpoint (ours)")
    p.add_argument("--corpus", type=Path, required=True, help="a prepared corpus for the pretrain part")
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--steps", type=int, default=2000, help="pretraining steps of each run (default 2000)")
    for part in ("pretrain", "finetune"):
        p.add_argument(
            f"--{part}-set",
            action="append",
            default=[],
            metavar="SECTION.KEY=VALUE",
            help=f"an override of the {part} part's job, repeatable (e.g. model.dropout=0.1)",
        )
    p.add_argument("--ft-steps", type=int, default=600, help="fine-tuning updates per seed (default 600)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=harness.ROOT / "benchmarks" / "results")
    p.add_argument("--data", type=Path, default=Path(os.environ.get("ROBERTA_DATA", harness.DEFAULT_DATA)))
    args = p.parse_args()
    record = harness.measure_parts(PARTS, args, "precision-quality-")
    now = record.pop("now")
    from bench import write_run_file

    body = json.dumps(record, indent=1)
    text = f"# bf16 against fp32 on trained weights ({record['date']})\n\n```json\n{body}\n```\n"
    print(f"written: {write_run_file(args.out, now, 'precision-quality', text)}")


if __name__ == "__main__":
    main()
