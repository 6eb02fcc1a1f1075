"""The paper's Table 1 (static vs dynamic masking) and Table 2 (input formats) at CPU scale: each
variant is the CPU recipe with the ablation's [data] fields (format, masking, NSP through the pair
formats), pretrained for a fraction of the recipe's steps and measured by `roberta probe`.

Resumable: a finished run is reported as it is (`pretrain --resume`), a killed one continues, and
the probe reads back the cells it has. The random init is probed once (it is the same model for
every variant: same shape, tokenizer and seed) and its cells are given to each variant's probe.
After every variant the table is rewritten, so results arrive as they are measured.

Static masking differs from dynamic only when a sequence comes back: the paper's BERT saw each of
its 10 fixed masks 4 times (40 epochs). At CPU scale the run must therefore cover several epochs,
so the corpus is a part of books + wiki (every fifth file: 35 files, 3.76M tokens, so 15,000 steps of
8 x 128 are ~4 epochs) and static masking keeps one fixed mask per sequence, seen ~4 times as in the
paper.

    mkdir WORK/fifth && ls -d $PWD/../shared/data/corpus/*/* | awk 'NR % 5 == 1' | while read -r f; do
        ln -s "$f" WORK/fifth/; done
    roberta prepare WORK/fifth --tokenizer WORK/tok-8k --out WORK/corpus-fifth
    .venv/bin/python benchmarks/experiments/cpu_ablations.py --corpus WORK/corpus-fifth \
        --work WORK/ablations --glue ../shared/data/glue --steps 15000 \
        --out benchmarks/results/DATE-ablations-cpu.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROBERTA = [sys.executable, "-m", "roberta.cli"]

# name, the [data] overrides (the paper's configs/ablations/*.toml fields), the paper's figures
VARIANTS = [
    (
        "static masking, SEGMENT-PAIR+NSP",
        ["format=segment-pair", "masking=static", "static_copies=1"],
        "Table 1: SQuAD 2.0 78.3, MNLI-m 84.3, SST-2 92.5",
    ),
    (
        "dynamic masking, SEGMENT-PAIR+NSP",
        ["format=segment-pair", "masking=dynamic"],
        "Table 1: SQuAD 2.0 78.7, MNLI-m 84.0, SST-2 92.9; Table 2: MNLI-m 84.0",
    ),
    ("SENTENCE-PAIR+NSP", ["format=sentence-pair", "masking=dynamic"], "Table 2: MNLI-m 82.9"),
    ("FULL-SENTENCES", ["format=full-sentences", "masking=dynamic"], "Table 2: MNLI-m 84.7"),
    ("DOC-SENTENCES", ["format=doc-sentences", "masking=dynamic"], "Table 2: MNLI-m 84.7"),
]


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-").replace("--", "-")


def pretrain(args, name: str, fields: list[str]) -> Path:
    run = args.work / slug(name)
    command = [
        *ROBERTA,
        "pretrain",
        "--config",
        str(args.config),
        "--data",
        str(args.corpus),
        "--out",
        str(run),
        f"--train.max_steps={args.steps}",
        f"--train.checkpoint_every={args.steps // 3}",
        f"--train.eval_every={args.steps // 3}",
        "--train.keep_last=0",
        *(f"--data.{field}" for field in fields),
    ]
    if run.exists():
        command.append("--resume")
    subprocess.run(command, check=True, cwd=ROOT)
    return run


def reuse_random_init(run: Path, baseline: Path) -> None:
    """Give `run`'s probe the random-init cells `baseline` measured (the same model: same shape,
    tokenizer and seed), unless its probe has begun."""
    record = run / "probe" / "probe.json"
    if not record.exists():
        source = json.loads((baseline / "probe" / "probe.json").read_text())
        record.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(baseline / "probe" / "random-init", run / "probe" / "random-init")
        record.write_text(json.dumps({"rows": {"random-init": source["rows"]["random-init"]}}))


def probe(args, run: Path, baseline: Path | None) -> dict:
    if baseline is not None:  # the random init's cells, measured once
        reuse_random_init(run, baseline)
    subprocess.run(
        [
            *ROBERTA,
            "probe",
            str(run),
            "--glue",
            str(args.glue),
            "--checkpoints",
            "last",
            "--seeds",
            str(args.seeds),
            "--no-progress",
        ],
        check=True,
        cwd=ROOT,
    )
    return json.loads((run / "probe" / "probe.json").read_text())


def spread(entry: dict, task: str) -> str:
    from roberta.evaluation.probe import task_score

    scores = [task_score(f) for f in entry["tasks"][task].values()]
    scores = [s for s in scores if s is not None]
    return f"{min(scores):.1f}–{max(scores):.1f}" if scores else "—"


def table(results: list[tuple[str, str, dict]], args) -> str:
    tasks = ("SST-2", "MRPC", "STS-B", "RTE", "CoLA")
    lines = [
        f"# The paper's Tables 1 and 2 at CPU scale ({datetime.date.today()})",
        "",
        f"Command: `.venv/bin/python benchmarks/experiments/cpu_ablations.py --steps {args.steps} "
        f"--seeds {args.seeds} --config {args.config.relative_to(ROOT)}` (corpus: books + wiki, 8K BPE). "
        f"Machine: {platform.processor() or platform.machine()}, 2 cores. Each cell: the median over "
        f"{args.seeds} fine-tuning seeds (the seeds' range in brackets) of `roberta probe`'s fixed recipe.",
        "",
        "| pretraining | " + " | ".join(tasks) + " | average | masked acc. | paper (BERT-base, 1M steps) |",
        "|---" * (len(tasks) + 4) + "|",
    ]
    for name, paper, record in results:
        for row, entry in sorted(record["rows"].items(), key=lambda kv: kv[1]["step"]):
            if row == "random-init" and name != results[0][0]:
                continue
            label = "random init (no pretraining)" if row == "random-init" else name
            cells = [f"{entry['median'][t]:.1f} ({spread(entry, t)})" for t in tasks]
            zero = entry.get("zero_shot", {}).get("masked_accuracy")
            lines.append(
                f"| {label} | "
                + " | ".join(cells)
                + f" | {entry['average']:.1f} | "
                + (f"{zero:.1f}" if zero is not None else "—")
                + f" | {'' if row == 'random-init' else paper} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--glue", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "pretrain-cpu-20min.toml")
    parser.add_argument("--steps", type=int, default=15000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated variant numbers (1-5) to run")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--random-init-from",
        type=Path,
        help="a probed run of the same shape and tokenizer whose random-init cells to reuse",
    )
    args = parser.parse_args()
    args.config = args.config.resolve()
    chosen = {int(i) for i in args.only.split(",") if i} or set(range(1, len(VARIANTS) + 1))
    results, baseline = [], args.random_init_from
    for number, (name, fields, paper) in enumerate(VARIANTS, 1):
        if number not in chosen:
            continue
        run = pretrain(args, name, fields)
        results.append((name, paper, probe(args, run, baseline)))
        baseline = baseline or run
        args.out.write_text(table(results, args))
        print(f"{name}: written to {args.out}", flush=True)


if __name__ == "__main__":
    main()
