"""Every side-by-side benchmark, then one table between markers at the top of RESULTS.md and the
run's own file under benchmarks/results/.

    .venv/bin/python benchmarks/bench.py          # `make bench`: <= 15 minutes on a quiet 2-core CPU
    .venv/bin/python benchmarks/bench.py --full   # `make bench-full`: + base@512, base-shape fine-tuning,
                                                  # larger sizes
    .venv/bin/python benchmarks/bench.py --smoke  # every row at minimal sizes; writes under runs/bench/ only

Runs, each in its own process, at the sizes of the chosen plan (PLANS below): pretrain_step.py,
finetune_throughput.py, and the existing prepare_throughput.py, tokenizer_speed.py and
embed_throughput.py, whose headline figure becomes a row (their full tables: their own results
files). The fp32 matmul peak for MFU is measured once, first. Output of each script:
runs/bench/logs/NAME.log. The rest of RESULTS.md (the index of the other figures) is left as it is;
the same table, dated, becomes benchmarks/results/YYYY-MM-DD-make-bench.md (`make bench-full`:
...-make-bench-full.md), so a later run replaces the table at the top but not the record.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import harness
from harness import Row, Spread, compared


@dataclass(frozen=True)
class Job:
    name: str
    script: str  # under benchmarks/
    args: tuple[str, ...] = ()
    # An existing script's output -> its headline rows; None: the script writes --json rows itself.
    headline: Callable[[str], list[Row]] | None = None
    corpus_mb: float | None = None  # prepare: a corpus sample of about this size (None: the whole corpus)
    precision: str = "fp32"  # bf16: the script's --precision bf16 (both sides), MFU against bf16's peak


def markdown_cells(output: str, first_cell: str) -> list[str]:
    """The cells of the Markdown table row whose first cell is `first_cell`."""
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            return cells
    raise ValueError(f"no table row {first_cell!r}")


def tokenizer_rows(output: str) -> list[Row]:
    ours = markdown_cells(output, "roberta tokenize_ids_flat (tiktoken engine)")
    plain = markdown_cells(output, "tiktoken encode_ordinary_batch (+ id lookup)")
    size = output.split(" MB,", 1)[0].split()[-1]
    name = f"tokenization, {size} MB of the corpus: ours `tokenize_ids_flat` vs plain tiktoken "
    name += "`encode_ordinary_batch`"
    return [compared(name, "MB/s (wall)", [float(ours[2])], [float(plain[2])])]


def prepare_rows(output: str) -> list[Row]:
    ours = markdown_cells(output, "`prepare`")
    plain = markdown_cells(output, "plain `tiktoken` encode_ordinary_batch")
    name = f"`roberta prepare`, {ours[2]} MB of the corpus (ids equal: {plain[7]}) vs plain tiktoken "
    name += "encoding the same lines"
    return [compared(name, "MB/s (wall)", [float(ours[4])], [float(plain[4])])]


def embed_rows(output: str, precision: str = "fp32") -> list[Row]:
    best, ratio, low, high = re.search(
        r"ours / best HF \((\S+)\): ([\d.]+)x \(per slice ([\d.]+)-([\d.]+)x\)", output
    ).groups()

    def rate(system: str) -> float:
        return float(
            re.search(rf"^{re.escape(system)}\s+([\d.]+) sentences/s", output, re.MULTILINE).group(1)
        )

    count = re.search(r"^(\d+) paragraphs", output, re.MULTILINE).group(1)
    return [
        Row(
            f"`embed`, base shape{', bf16 (ours autocast, HF torch_dtype)' if precision == 'bf16' else ''}, "
            f"{count} corpus paragraphs: ours `Roberta.embed` vs HF {best}",
            "sentences/s",
            Spread.of([rate("ours")]),
            Spread.of([rate(best)]),
            Spread(float(ratio), float(low), float(high)),
            goal=1.3,
        )
    ]  # embed_throughput.GOAL_VS_HF (issue #13)


# Sizes. `bench` is meant to fit 15 minutes on a quiet 2-core CPU (12.4 on 2026-11-24).
# Fine-tuning runs six updates per task (SST-2 192 examples at batch 32, RTE 96 and SQuAD 96
# questions at 16): with two or three, the first update (it carries each side's warm-up) weighed
# on the ratio (SST-2 and RTE 1.75x at 96 / 32 examples, 2.29x / 2.21x at these sizes). If it runs
# over, base@128 is the row to move to `full`. `full` adds base@512, more slices and repeats, the
# base shape for fine-tuning and the existing scripts' documented sizes. `smoke` runs every row at
# minimal sizes.
PLANS: dict[str, list[Job]] = {
    "smoke": [
        Job("pretrain", "pretrain_step.py", ("--shapes", "tiny:2x128@64", "--batch", "4", "--slices", "2")),
        Job(
            "finetune",
            "finetune_throughput.py",
            (
                "--examples",
                "SST-2=16:4,RTE=8:4,SQuAD=4:4,CoNLL=16:4",
                "--shape",
                "tiny:2x128",
                "--repeats",
                "2",
            ),
        ),
        Job("prepare", "prepare_throughput.py", ("--big-gb", "0"), prepare_rows, corpus_mb=1),
        Job("tokenizer", "tokenizer_speed.py", ("--mb", "0.5", "--repeats", "1"), tokenizer_rows),
        Job(
            "embed",
            "embed_throughput.py",
            ("--paragraphs", "4", "--slices", "2", "--hf-batch-sizes", "2"),
            embed_rows,
        ),
    ],
    "bench": [
        Job("pretrain-tiny", "pretrain_step.py", ("--shapes", "tiny@128", "--slices", "3")),
        Job("pretrain-base", "pretrain_step.py", ("--shapes", "base@128", "--slices", "2")),
        Job(
            "finetune",
            "finetune_throughput.py",
            ("--examples", "SST-2=192,RTE=96,SQuAD=96:16,CoNLL=192", "--shape", "tiny", "--repeats", "2"),
        ),
        Job("prepare", "prepare_throughput.py", ("--big-gb", "0"), prepare_rows, corpus_mb=16),
        Job("tokenizer", "tokenizer_speed.py", ("--mb", "5", "--repeats", "2"), tokenizer_rows),
        Job(
            "embed",
            "embed_throughput.py",
            ("--paragraphs", "48", "--slices", "2", "--hf-batch-sizes", "8", "--skip", "ort"),
            embed_rows,
        ),
    ],
    "full": [
        Job("pretrain-tiny", "pretrain_step.py", ("--shapes", "tiny@128", "--slices", "5", "--steps", "2")),
        Job("pretrain-base", "pretrain_step.py", ("--shapes", "base@128,base@512", "--slices", "3")),
        Job(
            "finetune",
            "finetune_throughput.py",
            ("--examples", "SST-2=512,RTE=128,SQuAD=64,CoNLL=512", "--shape", "tiny", "--repeats", "3"),
        ),
        Job(
            "finetune-base",
            "finetune_throughput.py",
            ("--examples", "SST-2=128,RTE=32,SQuAD=32:16", "--shape", "base", "--repeats", "3"),
        ),
        Job("prepare", "prepare_throughput.py", ("--big-gb", "0"), prepare_rows),
        Job("tokenizer", "tokenizer_speed.py", ("--mb", "20", "--repeats", "3"), tokenizer_rows),
        Job(
            "embed",
            "embed_throughput.py",
            ("--paragraphs", "300", "--slices", "3", "--hf-batch-sizes", "8"),
            embed_rows,
        ),
    ],
}

# On a CPU with bf16 units (AMX, AVX512-BF16) `make bench` adds bf16 rows: both sides in bf16, beside
# the fp32 rows above (issue #48). Their sizes are the fp32 rows' (bf16 runs several times faster).
BF16_JOBS = [
    Job(
        "pretrain-base-bf16", "pretrain_step.py", ("--shapes", "base@128", "--slices", "2"), precision="bf16"
    ),
    Job(
        "finetune-bf16",
        "finetune_throughput.py",
        ("--examples", "SST-2=192,RTE=96,CoNLL=192", "--shape", "tiny", "--repeats", "2"),
        precision="bf16",
    ),
    Job(
        "embed-bf16",
        "embed_throughput.py",
        ("--paragraphs", "48", "--slices", "2", "--hf-batch-sizes", "8", "--skip", "ort,ours-int8"),
        lambda output: embed_rows(output, "bf16"),
        precision="bf16",
    ),
]

NOTES = """\
What each row times (details: each script's `--help`):
- **Pretraining step**: one run alternates the two sides in slices, the first rotating; each
  side lives in its own worker process (idle while the other runs), so its peak RSS is its own:
  loading, a warm-up update on two sequences (not timed) and every slice. The same weights (one
  random init, our checkpoint and its `convert.export_hf` export), batches and fused AdamW
  (0.9, 0.98, 1e-6, wd 0.01). Timed: forward + backward + AdamW update on batches already in
  memory (books + wiki, GPT-2 BPE, FULL-SENTENCES, ~20% padding at 128, 15% dynamic masking by
  our loader). Ours (`tasks.pretrain.mlm_loss`) computes the real tokens only and the last layer
  and the vocabulary at the masked positions only; HF computes every position.
- **Fine-tuning**: a slice is one whole one-epoch run of each side on the same training subset,
  each in its own process, the first rotating. Ours: `roberta finetune glue|squad|tag`, timed by its
  trainer's clock (real tokens / the tokens_per_s it logs: batch building, forward, backward,
  update; not start-up, tokenization, the dev evaluation or checkpoints). HF: `Trainer`, timed by
  `train_runtime` (the training loop; not model loading or tokenization), dynamic padding with
  random order (its default) or `group_by_length`; CoNLL-2003 tagging: `RobertaForTokenClassification`
  and `DataCollatorForTokenClassification` on our encoded sentences and labels (sentences/s, the
  same tokens on both sides, so the ratio is that of tokens/s). Random-init weights, the same on both sides;
  the same batch, max length, fused AdamW (0.9, 0.98, 1e-6, wd 0.1), linear schedule with 6%
  warmup, no clipping. Peak RSS: the largest of each side's processes (the whole process, imports included).
- **MFU**: FLOPs by one formula for both sides (`harness.training_flops`: 6 x non-embedding
  parameters x tokens + attention + the LM head over the positions that side scores; fine-tuning:
  real tokens only) over the matmul peak of the row's precision measured at the start of the run.
- **bf16 rows** (a CPU with AMX or AVX512-BF16 only): both sides in bf16, at the fp32 rows' sizes:
  pretraining under torch's CPU autocast on both sides, fine-tuning `--train.precision=bf16` against
  HF `Trainer(bf16=True)`, embed `Roberta.use_precision("bf16")` against HF's model in
  `torch_dtype=torch.bfloat16`. The fp32 rows pin fp32 (`ROBERTA_PRECISION=fp32` for ours).
- **prepare, tokenization, embed**: the headline of `prepare_throughput.py`, `tokenizer_speed.py`
  and `embed_throughput.py` at the sizes in `benchmarks/bench.py` (one measurement, or the
  embed script's slices); their full tables and method are in their own files under
  `benchmarks/results/`, linked below. At
  `make bench` sizes start-up weighs more than at their documented sizes (embed: 48 paragraphs,
  without the ONNX Runtime rows); `make bench-full` runs them at those sizes.
"""


def run_logged(argv: list[str], log: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run a script, its output shown as it comes and kept in `log`."""
    lines = []
    with log.open("w") as f:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=harness.ROOT
        )
        for line in proc.stdout:
            print(line, end="", flush=True)
            f.write(line)
            lines.append(line)
    return proc.wait(), "".join(lines)


def corpus_sample(data: Path, megabytes: float, work: Path) -> Path:
    """A data directory whose corpus/ links whole corpus files (every other one, in name order)
    up to about `megabytes`, and the GPT-2 BPE: the existing scripts read $ROBERTA_DATA."""
    out = work / f"data-{megabytes:g}mb"
    shutil.rmtree(out, ignore_errors=True)
    (out / "corpus").mkdir(parents=True)
    (out / "gpt2_bpe").symlink_to(data / "gpt2_bpe")
    size = 0
    for path in sorted((data / "corpus").glob("*/*.txt"))[::2]:
        (out / "corpus" / path.parent.name).mkdir(exist_ok=True)
        (out / "corpus" / path.parent.name / path.name).symlink_to(path)
        size += path.stat().st_size
        if size >= megabytes * 1e6:
            break
    return out


def run_job(job: Job, args: argparse.Namespace, peaks: dict[str, float]) -> tuple[list[Row], bool]:
    """The job's rows, and whether it succeeded."""
    print(f"\n=== {job.name}: benchmarks/{job.script} {' '.join(job.args)}", flush=True)
    logs = args.work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(harness.ROOT / "benchmarks" / job.script), *job.args]
    argv += ["--precision", job.precision] if job.precision != "fp32" else []
    env = harness.thread_env(args.threads)
    peak = peaks[job.precision]
    rows_file = args.work / f"{job.name}.json"
    if job.headline is None:
        rows_file.unlink(missing_ok=True)
        argv += ["--data", str(args.data), "--threads", str(args.threads)]
        argv += ["--peak-gflops", str(peak / 1e9), "--json", str(rows_file)]
    else:
        sample = corpus_sample(args.data, job.corpus_mb, args.work) if job.corpus_mb else args.data
        env["ROBERTA_DATA"] = str(sample)
    started = time.perf_counter()
    code, output = run_logged(argv, logs / f"{job.name}.log", env)
    print(f"=== {job.name}: {harness.elapsed(started)}", flush=True)
    failed = [Row(f"{job.name}: **failed**, see runs/bench/logs/{job.name}.log", "—", None, None)]
    if code != 0:
        return failed, False
    if job.headline is None:
        return harness.read_rows(rows_file), True
    try:
        return job.headline(output), True
    except (AttributeError, ValueError, IndexError):
        return failed, False


def write_run_file(folder: Path, when: datetime.datetime, what: str, text: str) -> Path:
    """`text`, the run's own record, as `folder/YYYY-MM-DD-what.md`; a second run the same day gets
    its time in the name too, so no run's record replaces another's."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{when:%Y-%m-%d}-{what}.md"
    if path.exists():
        path = folder / f"{when:%Y-%m-%d-%H%M}-{what}.md"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--full", action="store_true", help="the big rows too (longer than 15 minutes)")
    size.add_argument("--smoke", action="store_true", help="minimal sizes, to check that every row runs")
    p.add_argument("--threads", type=int, default=2, help="threads of each side (default 2)")
    harness.add_data_and_work(
        p, harness.ROOT / "runs" / "bench", "logs, caches, scratch (default runs/bench)"
    )
    p.add_argument(
        "--results",
        type=Path,
        help="file whose marked table is rewritten (default benchmarks/RESULTS.md; --smoke: a copy in "
        "--work); the run's own file goes to results/ beside it",
    )
    args = p.parse_args()
    plan = "smoke" if args.smoke else "full" if args.full else "bench"
    args.work.mkdir(parents=True, exist_ok=True)
    if args.results is None and args.smoke:
        args.results = args.work / "RESULTS-smoke.md"
        shutil.copyfile(harness.RESULTS, args.results)
    results = args.results or harness.RESULTS

    started = time.perf_counter()
    now = datetime.datetime.now(datetime.UTC)
    date = now.strftime("%Y-%m-%d %H:%M UTC")
    from roberta.runtime.precision import cpu_units

    jobs = PLANS[plan] + (BF16_JOBS if plan != "smoke" and cpu_units().native_bf16 else [])
    precisions = sorted({job.precision for job in jobs})
    peaks = {p: harness.peak_matmul_flops(args.threads, p) for p in precisions}
    peak = peaks["fp32"]
    for p, value in peaks.items():
        print(f"{p} matmul peak at {args.threads} threads: {value / 1e9:.1f} GFLOP/s", flush=True)
    rows, ok = [], True
    for job in jobs:
        found, succeeded = run_job(job, args, peaks)
        rows += found
        ok &= succeeded
    command, what = {
        "smoke": ("bench.py --smoke", "bench-smoke"),
        "full": ("make bench-full", "make-bench-full"),
        "bench": ("make bench", "make-bench"),
    }[plan]
    block = (
        f"## Side by side: ours vs HF transformers and plain encoders (`{command}`)\n\n"
        f"Measured {date} by `{command}` in {harness.elapsed(started)}: {harness.machine()}; "
        f"{harness.versions()}; threads per side: {args.threads}; large tensors on huge pages for both "
        f"sides: {'yes' if harness.thread_env(args.threads)['THP_MEM_ALLOC_ENABLE'] == '1' else 'no'} "
        f"(THP_MEM_ALLOC_ENABLE); fp32 matmul peak {peak / 1e9:.1f} GFLOP/s"
        + (f", bf16 {peaks['bf16'] / 1e9:.1f}" if "bf16" in peaks else "")
        + " "
        f"(2048 x 2048, best of 3). Each figure: median over slices (min–max); the ratio is the median of "
        f"the per-slice ratios.\n\n"
        f"{harness.format_table(rows)}\n\n{NOTES}"
    )
    harness.rewrite_marked(results, block)
    record = write_run_file(results.parent / "results", now, what, f"# `{command}`, {date}\n\n{block}\n")
    print(f"\n{block}\nwritten: {results}, {record}")
    if not ok:
        raise SystemExit("some benchmarks failed; see runs/bench/logs/")


if __name__ == "__main__":
    main()
