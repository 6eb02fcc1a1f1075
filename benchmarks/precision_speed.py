"""fp32, bf16 autocast and int8 on this CPU: speed and what each keeps of fp32's numbers (issue #48).

    .venv/bin/python benchmarks/precision_speed.py                      # every part, ~15 minutes
    .venv/bin/python benchmarks/precision_speed.py --parts matmul,embed # some
    .venv/bin/python benchmarks/precision_speed.py --smoke              # tiny sizes, to check it runs

Parts (each side alternated in slices, the first rotating, so a neighbour's load falls on all):
  matmul    a 2048 x 2048 product in fp32 and bf16: GFLOP/s
  forward   the base shape's forward on one 32 x 128 batch (an `embed` / `serve` batch): ms
  embed     `Roberta.embed` on corpus paragraphs cut to 128 tokens, base shape: sentences/s in
            fp32, bf16 and int8, and the cosine of bf16's and int8's vectors to fp32's
  finetune  `roberta finetune glue --task RTE` at the base shape (16 x up to 128 tokens), a few
            updates: the trainer's own tokens/s
  pretrain  `roberta pretrain` at the base shape, 16 x 128: the trainer's own tokens/s
Speed is measured on random-init weights (the weights do not change the work); the quality of
bf16 on trained weights is `precision_quality.py`'s. Results: benchmarks/results/<date>-precision-speed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import harness

PRECISIONS = ("fp32", "bf16")


def gflops(precision: str, size: int) -> float:
    import torch

    from roberta.runtime.precision import compute_dtype

    a = torch.randn(size, size).to(compute_dtype(precision))
    a @ a
    started = time.perf_counter()
    for _ in range(4):
        a @ a
    return 4 * 2 * size**3 / (time.perf_counter() - started) / 1e9


def part_matmul(args) -> dict:
    size = 256 if args.smoke else 2048
    rates = harness.alternate({p: lambda p=p: gflops(p, size) for p in PRECISIONS}, args.slices)
    return summarise(rates, "GFLOP/s", higher=True)


def base_hub(args, work: Path):
    """A random init of the base shape (tiny for --smoke) with GPT-2's vocabulary, as our checkpoint."""
    import torch

    from roberta import RobertaConfig, RobertaModel, checkpoint, load
    from roberta.tokenizer import load_tokenizer

    path = work / "base"
    if not path.exists():
        tokenizer = load_tokenizer(args.data / "gpt2_bpe")
        torch.manual_seed(0)
        config = RobertaConfig.preset("tiny" if args.smoke else "base", vocab_size=tokenizer.vocab_size)
        model = RobertaModel(config)
        model.add_classification_head("sst2", 2)
        checkpoint.save(path, model, tokenizer)
    return path, lambda: load(path)


def part_forward(args, work: Path) -> dict:
    import torch

    _, fresh = base_hub(args, work)
    hub = fresh()
    batch = torch.randint(4, 50000, (32, 128))
    hubs = {"fp32": hub, "bf16": fresh().use_precision("bf16")}

    def time_forward(h) -> float:
        with h._mode():
            h.model(batch)
            started = time.perf_counter()
            h.model(batch)
        return (time.perf_counter() - started) * 1e3

    times = harness.alternate({p: lambda p=p: time_forward(hubs[p]) for p in PRECISIONS}, args.slices)
    return summarise(times, "ms", higher=False)


def paragraphs(data: Path, count: int) -> list[str]:
    texts = []
    for path in sorted((data / "corpus").glob("*/*.txt")):
        for block in path.read_text(encoding="utf-8").split("\n\n"):
            if len(block.split()) >= 20:
                texts.append(" ".join(block.split()[:100]))
            if len(texts) == count:
                return texts
    return texts


def part_embed(args, work: Path) -> dict:
    import torch.nn.functional as F

    _, fresh = base_hub(args, work)
    texts = paragraphs(args.data, 16 if args.smoke else 256)
    hubs = {"fp32": fresh(), "bf16": fresh().use_precision("bf16"), "int8": fresh().quantize()}
    ids = hubs["fp32"].encode_batch(texts, truncate=True)
    ids = [seq[:128] for seq in ids]
    vectors = {}

    def rate(precision: str) -> float:
        started = time.perf_counter()
        vectors[precision] = hubs[precision].embed(ids)
        return len(ids) / (time.perf_counter() - started)

    rates = harness.alternate({p: lambda p=p: rate(p) for p in hubs}, args.slices)
    figures = summarise(rates, "sentences/s", higher=True)
    for precision in ("bf16", "int8"):
        cosine = F.cosine_similarity(vectors[precision], vectors["fp32"])
        figures[f"cosine {precision} vs fp32"] = {"min": float(cosine.min()), "mean": float(cosine.mean())}
    return figures


def trainer_rate(argv: list[str], run: Path, threads: int) -> float:
    """tokens/s of a `roberta` training run by its own clock, its first logged window left out
    (the warm-up's allocations)."""
    proc = subprocess.run(
        [sys.executable, "-m", "roberta.cli", *argv, "--out", str(run), "--overwrite"],
        env=harness.thread_env(threads),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in rows if r["split"] == "train"][1:]
    return statistics.median(rates)


def part_finetune(args, work: Path) -> dict:
    ckpt, _ = base_hub(args, work)
    steps = 3 if args.smoke else 12
    common = ["finetune", "glue", "--task", "RTE", "--data", str(args.data / "glue" / "RTE"), "--init"]
    common += [str(ckpt), "--data.max_length=128", "--train.batch_size=16", f"--train.max_steps={steps}"]
    common += ["--train.log_every=1", f"--train.eval_every={steps * 10}", "--train.progress=false"]
    rates = harness.alternate(
        {
            p: lambda p=p: trainer_rate([*common, f"--train.precision={p}"], work / f"ft-{p}", args.threads)
            for p in PRECISIONS
        },
        args.slices,
    )
    return summarise(rates, "tokens/s", higher=True)


def part_pretrain(args, work: Path) -> dict:
    if args.corpus is None:
        raise SystemExit("--corpus: a prepared corpus directory (roberta prepare) for the pretrain part")
    steps = 3 if args.smoke else 6
    preset = "tiny" if args.smoke else "base"
    common = ["pretrain", "--config", str(harness.ROOT / "configs" / f"pretrain-{preset}.toml")]
    common += ["--data", str(args.corpus), "--data.seq_len=128", "--train.batch_size=16"]
    common += ["--train.micro_batch_size=16", f"--train.max_steps={steps}", "--train.log_every=1"]
    common += [f"--train.eval_every={steps * 10}", f"--train.checkpoint_every={steps * 10}"]
    common += ["--train.progress=false", "--train.device=cpu", "--train.report_to=none"]
    rates = harness.alternate(
        {
            p: lambda p=p: trainer_rate([*common, f"--train.precision={p}"], work / f"pt-{p}", args.threads)
            for p in PRECISIONS
        },
        args.slices,
    )
    return summarise(rates, "tokens/s", higher=True)


def summarise(values: dict[str, list[float]], unit: str, higher: bool) -> dict:
    """Each side's median and range, and each side's speed-up over fp32 per slice (median, range)."""
    figures: dict = {"unit": unit}
    for name, found in values.items():
        figures[name] = {"median": statistics.median(found), "low": min(found), "high": max(found)}
        if name != "fp32":
            ratios = [(v / f if higher else f / v) for v, f in zip(found, values["fp32"])]
            figures[f"{name} speed-up over fp32"] = {
                "median": statistics.median(ratios),
                "low": min(ratios),
                "high": max(ratios),
            }
    return figures


def render(record: dict) -> str:
    lines = [
        f"# fp32, bf16 and int8 on this CPU ({record['date']})",
        "",
        f"`{record['command']}`",
        "",
        f"Machine: {record['machine']}; {record['versions']}; {record['threads']} threads.",
        "",
        "| part | unit | fp32 | bf16 | int8 | bf16 / fp32 (per-slice range) | int8 / fp32 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, figures in record["parts"].items():
        cell = {
            k: f"{v['median']:,.4g} ({v['low']:,.4g}–{v['high']:,.4g})"
            for k, v in figures.items()
            if "median" in v
        }
        lines.append(
            f"| {name} | {figures['unit']} | {cell.get('fp32', '—')} | {cell.get('bf16', '—')} "
            f"| {cell.get('int8', '—')} | {cell.get('bf16 speed-up over fp32', '—')} "
            f"| {cell.get('int8 speed-up over fp32', '—')} |"
        )
    for name, figures in record["parts"].items():
        for key, value in figures.items():
            if key.startswith("cosine"):
                lines.append(f"\n{name}: {key}: min {value['min']:.6f}, mean {value['mean']:.6f}")
    return "\n".join(lines) + "\n"


PARTS = {
    "matmul": lambda args, work: part_matmul(args),
    "forward": part_forward,
    "embed": part_embed,
    "finetune": part_finetune,
    "pretrain": part_pretrain,
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default=",".join(PARTS), help="comma-separated (default: all)")
    p.add_argument("--slices", type=int, default=3, help="alternation slices (default 3)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--corpus", type=Path, help="a prepared corpus for the pretrain part")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, two slices: that every part runs")
    p.add_argument("--out", type=Path, default=harness.ROOT / "benchmarks" / "results")
    p.add_argument("--data", type=Path, default=Path(os.environ.get("ROBERTA_DATA", harness.DEFAULT_DATA)))
    args = p.parse_args()
    if args.smoke:
        args.slices = 2
    record = harness.measure_parts(PARTS, args, "precision-speed-", threads=args.threads)
    now = record.pop("now")
    text = render(record)
    print(text)
    if not args.smoke:
        from bench import write_run_file

        path = write_run_file(
            args.out, now, "precision-speed", text + "\n```json\n" + json.dumps(record, indent=1) + "\n```\n"
        )
        print(f"written: {path}")


if __name__ == "__main__":
    main()
