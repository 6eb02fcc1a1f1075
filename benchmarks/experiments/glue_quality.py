"""GLUE quality: one pretrained checkpoint fine-tuned by `roberta finetune glue`, by HF Trainer, and
a randomly initialised model of the same shape, with the same hyperparameters and seeds.

Three variants per task, each over `--seeds` seeds (1, 2, ...):
  ours    `roberta finetune glue --init PRETRAINED` in a subprocess (the real CLI)
  hf      PRETRAINED exported with `roberta convert --to hf`, fine-tuned by transformers' Trainer
          (AutoModelForSequenceClassification, AutoTokenizer from the export; nothing is downloaded)
  random  `roberta finetune glue --init RANDOM`: the same shape and tokenizer, random weights
Every run evaluates on dev each epoch (or every quarter of `--steps`) and reports its best
evaluation by the task's first metric, as `roberta finetune` picks RUN/best/. Writes
WORK/glue_quality.json (every run, every evaluation) and WORK/glue_quality.md (median and seeds).
A variant whose runs are already complete in WORK is read back, not run again.

    .venv/bin/python benchmarks/experiments/glue_quality.py --pretrained ckpt --work /tmp/quality --epochs 1 \
        --steps SST-2=800
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

# harness.py, shared with the `make bench` scripts, lives one level up in benchmarks/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import hf_trainer_recipe  # noqa: E402
from roberta.tasks.classify import label_ids
from roberta.tasks.glue import GlueTask, get_task, read_split

ROOT = Path(__file__).resolve().parents[2]
TASKS = ["SST-2", "STS-B", "CoLA", "MRPC", "RTE"]
VARIANTS = ["ours", "hf", "random"]


def glue_metrics(task: GlueTask, predictions, labels) -> dict[str, float]:
    """GLUE's official dev metrics, computed here with scikit-learn and scipy (not roberta's code)."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    functions = {
        "accuracy": accuracy_score,
        "f1": f1_score,
        "mcc": matthews_corrcoef,
        "pearson": lambda y, p: pearsonr(p, y)[0],
        "spearman": lambda y, p: spearmanr(p, y)[0],
    }
    return {name: float(functions[name](labels, predictions)) for name in task.metrics}


def budget_args(task: str, args: argparse.Namespace) -> tuple[int | None, float | None]:
    """(updates, epochs) of a task: `--steps` names the large tasks, the rest train `--epochs`."""
    steps = dict(item.split("=") for item in args.steps)
    return (int(steps[task]), None) if task in steps else (None, args.epochs)


def run_ours(task: str, init: Path, run_dir: Path, args: argparse.Namespace) -> list[dict]:
    """`roberta finetune glue --seeds N` as a user runs it; each seed's best evaluation from results.json."""
    steps, epochs = budget_args(task, args)
    budget = (
        [f"--train.epochs={epochs}"]
        if steps is None
        else ["--train.epochs=0", f"--train.max_steps={steps}", "--eval-every", str(steps // 4)]
    )
    command = [sys.executable, "-m", "roberta.cli", "finetune", "glue", "--task", task]
    command += ["--data", str(args.data / task), "--init", str(init), "--out", str(run_dir)]
    command += ["--seeds", str(args.seeds), f"--optim.lr={args.lr}"]
    command += [f"--train.batch_size={args.batch}", f"--train.micro_batch_size={args.batch}"]
    command += [f"--data.max_length={args.max_length}", "--train.seed=1", *budget]
    seed_dirs = [run_dir / f"seed{s}" for s in range(1, args.seeds + 1)] if args.seeds > 1 else [run_dir]
    if not all((d / "results.json").is_file() for d in seed_dirs):
        shutil.rmtree(run_dir, ignore_errors=True)  # a half-finished earlier attempt: start it over
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        env = os.environ | {"OMP_NUM_THREADS": str(args.threads)}
        with open(run_dir.with_suffix(".log"), "w") as log:
            subprocess.run(command, check=True, env=env, stdout=log, stderr=subprocess.STDOUT)
    runs = []
    for seed, seed_dir in enumerate(seed_dirs, start=1):
        result = json.loads((seed_dir / "results.json").read_text())
        evaluations = [e for e in result["evaluations"] if e.get("split") == "dev"]
        best = next(e for e in evaluations if e["step"] == result["best"]["step"])
        runs.append(run_record(task, seed, best, evaluations, " ".join(command[1:])))
    return runs


def run_record(task: str, seed: int, best: dict, evaluations: list[dict], how: str) -> dict:
    metrics = get_task(task).metrics
    return {
        "task": task,
        "seed": seed,
        "step": best["step"],
        "best": {m: best[m] for m in metrics},
        "evaluations": evaluations,
        "how": how,
    }


def run_hf(task_name: str, hf_dir: Path, work: Path, args: argparse.Namespace) -> list[dict]:
    """HF Trainer with the hyperparameters `roberta finetune` uses (finetune.COMMON_DEFAULTS):
    AdamW (0.9, 0.98, 1e-6), weight decay 0.1 off biases and LayerNorm, no clipping, linear
    decay after 6% warmup, batches grouped by length."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # everything is local: a missing file must fail, not download
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    task = get_task(task_name)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)

    def dataset(file: str) -> list[dict]:
        examples = read_split(task, args.data / task_name / file, labelled=True)
        pairs = [e.pair for e in examples] if task.pair_column else None
        encoded = tokenizer([e.text for e in examples], pairs, truncation=True, max_length=args.max_length)
        labels = [e.label for e in examples] if task.regression else label_ids(examples, task.labels, file)
        return [{"input_ids": ids, "labels": label} for ids, label in zip(encoded["input_ids"], labels)]

    train, dev = dataset("train.tsv"), dataset("dev.tsv")

    def compute_metrics(prediction) -> dict[str, float]:
        logits, labels = prediction
        predictions = logits.squeeze(-1) if task.regression else logits.argmax(-1)
        return glue_metrics(task, predictions, labels)

    steps, epochs = budget_args(task_name, args)
    runs = []
    for seed in range(1, args.seeds + 1):
        set_seed(seed)  # the new head's initial weights
        model = AutoModelForSequenceClassification.from_pretrained(hf_dir, num_labels=task.num_classes)
        training = TrainingArguments(
            output_dir=str(work / "hf-trainer"),
            **hf_trainer_recipe(args.lr, args.batch, seed),
            per_device_eval_batch_size=args.batch,
            num_train_epochs=epochs or 1,
            max_steps=steps or -1,
            eval_strategy="steps" if steps else "epoch",
            eval_steps=steps // 4 if steps else None,
            data_seed=seed,
            train_sampling_strategy="group_by_length",
        )
        trainer = Trainer(
            model=model,
            args=training,
            train_dataset=train,
            eval_dataset=dev,
            data_collator=DataCollatorWithPadding(tokenizer),
            compute_metrics=compute_metrics,
        )
        trainer.train()
        evaluations = [
            {"step": row["step"], **{m: row[f"eval_{m}"] for m in task.metrics}}
            for row in trainer.state.log_history
            if f"eval_{task.metric}" in row
        ]
        best = max(evaluations, key=lambda e: e[task.metric])
        runs.append(run_record(task_name, seed, best, evaluations, "transformers Trainer"))
    return runs


def random_init(pretrained: Path, out: Path, seed: int) -> Path:
    """A checkpoint of the pretrained one's shape and tokenizer with fresh weights (seeded)."""
    from roberta import checkpoint
    from roberta.model import RobertaModel

    if not out.exists():
        _, tokenizer = checkpoint.load(pretrained)
        config, _, _ = checkpoint.read_config(pretrained)
        torch.manual_seed(seed)
        checkpoint.save(out, RobertaModel(config), tokenizer)
    return out


def hf_export(pretrained: Path, out: Path) -> Path:
    if not out.exists():
        command = [sys.executable, "-m", "roberta.cli", "convert", str(pretrained), str(out), "--to", "hf"]
        subprocess.run(command, check=True)
    return out


def table(records: list[dict]) -> str:
    """Per task and metric: median over seeds (x 100) and the seeds' values, one column per variant."""
    lines = ["| task | metric | " + " | ".join(VARIANTS) + " |", "|---|---|" + "---|" * len(VARIANTS)]
    for task in TASKS:
        for metric in get_task(task).metrics:
            cells = []
            for variant in VARIANTS:
                values = [
                    100 * r["best"][metric] for r in records if r["variant"] == variant and r["task"] == task
                ]
                cells.append(
                    f"**{statistics.median(values):.1f}** ({', '.join(f'{v:.1f}' for v in values)})"
                    if values
                    else "not run"
                )
            if any(c != "not run" for c in cells):
                lines.append(f"| {task} | {metric} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    intro, details = __doc__.split("\n\n", 1)
    p = argparse.ArgumentParser(
        description=intro, epilog=details, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--pretrained", type=Path, required=True, help="our pretrained checkpoint (with its tokenizer)"
    )
    p.add_argument(
        "--work", type=Path, required=True, help="runs, the HF export, the random init, the results"
    )
    data_root = Path(os.environ.get("ROBERTA_DATA", ROOT.parent / "shared" / "data"))
    p.add_argument("--data", type=Path, default=data_root / "glue", help="GLUE task directories")
    p.add_argument("--tasks", nargs="+", default=TASKS, choices=TASKS)
    p.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument(
        "--epochs", type=float, default=10, help="epochs of every task not in --steps (default 10)"
    )
    p.add_argument(
        "--steps",
        nargs="*",
        default=["SST-2=800"],
        metavar="TASK=N",
        help="tasks trained for N updates instead, evaluated every N/4 (default SST-2=800)",
    )
    p.add_argument(
        "--max-length", type=int, default=128, help="tokens per input; the 2 x 128 model has 128 positions"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--init-seed", type=int, default=1, help="seed of the random-init weights")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)

    results_file = args.work / "glue_quality.json"
    saved = json.loads(results_file.read_text()) if results_file.exists() else {"runs": []}
    records = saved["runs"]
    for task in args.tasks:
        for variant in args.variants:
            done = [r for r in records if (r["variant"], r["task"]) == (variant, task)]
            if variant == "hf" and len(done) == args.seeds:
                continue  # HF runs keep no run directory: a complete set in the JSON is the record
            started = time.time()
            if variant == "hf":
                runs = run_hf(task, hf_export(args.pretrained, args.work / "pretrained-hf"), args.work, args)
            else:
                init = (
                    args.pretrained
                    if variant == "ours"
                    else random_init(args.pretrained, args.work / "random-init", args.init_seed)
                )
                runs = run_ours(task, init, args.work / "ft" / variant / task, args)
            records = [r for r in records if (r["variant"], r["task"]) != (variant, task)]
            records += [{"variant": variant, **r, "minutes": (time.time() - started) / 60} for r in runs]
            settings = {k: str(v) for k, v in vars(args).items()}
            saved = {"command": " ".join(sys.argv), "settings": settings, "runs": records}
            results_file.write_text(json.dumps(saved, indent=2) + "\n")
            (args.work / "glue_quality.md").write_text(table(records))
            print(f"{task} {variant}: " + ", ".join(f"{r['best']}" for r in runs), flush=True)
    print(table(records))


if __name__ == "__main__":
    main()
