"""CommonsenseQA fine-tuning: `roberta finetune commonsenseqa` beside HF transformers'
`RobertaForMultipleChoice` + `Trainer`, from the same init, with the same recipe and data.

Two measurements, both sides in their own processes:

  accuracy     one whole run each on the training file (--train-examples, default all 9,741),
               --epochs epochs, then the dev accuracy of the final model on all 1,221 dev questions
               (ours: the run's last evaluation; HF: `Trainer.predict` on dev). The issue's goal: within
               2 points of each other (the same task and numbers).
  throughput   short runs of one epoch over --slice-examples training questions, ours and HF's
               alternating --repeats times (the first side rotating, harness.alternate), examples/s
               = questions / training time (ours: the trainer's clock, real tokens / the tokens_per_s
               it logs once for the run; HF: `train_runtime`). Goal: ours >= 2x.

Both sides get the very same id sequences: our `encode_options` with fairseq's layout
(`<s> Q: question </s> A: choice </s>`, 5 per question), handed to HF as input_ids (so the two
cannot differ in tokenization); HF pads each batch to [B, 5, longest] with an attention mask
(its `DataCollatorForMultipleChoice` does the same). The init: our checkpoint and its HF export
(`convert.export_hf`); each side adds a new head (ours: the ranking head on <s>; HF's: the pooler
and its classifier). Recipe (both): AdamW (0.9, 0.98), eps 1e-6, weight decay 0.01, linear decay
after 5% warmup, no clipping, batch 16, --lr, seed 1, the checkpoint's dropouts, the same threads.
Each side's own batch order (ours length-grouped, HF's random: each default).

    .venv/bin/python benchmarks/commonsenseqa_vs_hf.py --init runs/cpu-recipe/checkpoints/step-N
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import harness

CSQA_DIR = "commonsenseqa"
BATCH = 16


def prepare(args: argparse.Namespace) -> dict:
    """The training subsets, dev and the HF export, under --work (not timed)."""
    from roberta.checkpoint import load
    from roberta.convert import export_hf
    from roberta.tasks.choice import COMMONSENSEQA, encode_options, read_commonsenseqa

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load(args.init)
    hf = work / "model-hf"
    shutil.rmtree(hf, ignore_errors=True)
    export_hf(hf, model, tokenizer)
    source = args.data / CSQA_DIR
    lines = (source / "train_rand_split.jsonl").read_text().splitlines()
    files = {
        "train": lines[: args.train_examples],
        "slice": lines[: args.slice_examples],
        "dev": (source / "dev_rand_split.jsonl").read_text().splitlines(),
    }
    length = min(128, model.config.max_seq_len)
    spec = {"hf": str(hf), "init": str(args.init), "lr": args.lr, "threads": args.threads}
    for name, rows in files.items():
        path = work / f"{name}.jsonl"
        path.write_text("\n".join(rows) + "\n")
        examples = read_commonsenseqa(path)
        encoded = [encode_options(tokenizer, e, COMMONSENSEQA, length) for e in examples]
        (work / f"{name}.ids.json").write_text(
            json.dumps({"ids": encoded, "labels": [e.label for e in examples]})
        )
        spec[name] = str(path)
        spec[f"{name}_ids"] = str(work / f"{name}.ids.json")
        spec[f"{name}_tokens"] = sum(len(s) for options in encoded for s in options)
    return spec


def ours_argv(spec: dict, train: str, out: Path, epochs: int, dev: str) -> list[str]:
    roberta = str(Path(sys.executable).with_name("roberta"))
    return [
        roberta, "finetune", "commonsenseqa", "--train", train, "--dev", dev,
        "--init", spec["init"], "--out", str(out), f"--optim.lr={spec['lr']}",
        f"--train.epochs={epochs}", "--train.seed=1", "--train.device=cpu",
        "--train.log_every=1000000000",
    ]  # fmt: skip


def ours_run(spec: dict, work: Path, name: str, epochs: int, dev: str) -> tuple[float, dict]:
    """(training seconds, the run's last evaluation) of one `roberta finetune commonsenseqa`."""
    out = work / "runs" / f"ours-{name}"
    shutil.rmtree(out, ignore_errors=True)
    result = harness.require_success(
        harness.run_measured(
            ours_argv(spec, spec[name], out, epochs, dev), harness.thread_env(spec["threads"])
        ),
        "ours",
    )
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = [r for r in records if r["split"] == "train"]
    seconds = epochs * spec[f"{name}_tokens"] / train[-1]["tokens_per_s"] if len(train) == 1 else float("nan")
    evaluation = json.loads((out / "results.json").read_text())["evaluations"][-1]
    shutil.rmtree(out, ignore_errors=True)
    return seconds, {**evaluation, "peak_rss_mb": result.peak_rss_mb}


def hf_run(spec: dict, name: str, epochs: int, evaluate: bool) -> dict:
    """The --hf-run child: HF Trainer on the same id sequences; prints seconds (and accuracy)."""
    import torch
    import transformers
    from transformers import Trainer, TrainingArguments

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(spec["threads"])

    def dataset(path: str) -> list[dict]:
        data = json.loads(Path(path).read_text())
        return [{"input_ids": ids, "labels": label} for ids, label in zip(data["ids"], data["labels"])]

    def collate(rows: list[dict]) -> dict:
        width = max(len(s) for r in rows for s in r["input_ids"])
        ids = torch.full((len(rows), len(rows[0]["input_ids"]), width), 1, dtype=torch.long)
        for i, r in enumerate(rows):
            for j, s in enumerate(r["input_ids"]):
                ids[i, j, : len(s)] = torch.tensor(s)
        return {
            "input_ids": ids,
            "attention_mask": ids.ne(1).long(),
            "labels": torch.tensor([r["labels"] for r in rows]),
        }

    model = transformers.RobertaForMultipleChoice.from_pretrained(spec["hf"])
    recipe = {
        **harness.hf_trainer_recipe(spec["lr"], BATCH, seed=1),
        "weight_decay": 0.01,
        "warmup_steps": 0.05,
    }
    args = TrainingArguments(
        output_dir=str(Path(spec["hf"]).parent / "runs" / f"hf-{name}"),
        **recipe,
        num_train_epochs=epochs,
        eval_strategy="no",
        per_device_eval_batch_size=64,
        remove_unused_columns=False,
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=dataset(spec[f"{name}_ids"]), data_collator=collate
    )
    seconds = trainer.train().metrics["train_runtime"]
    out = {"seconds": seconds}
    if evaluate:
        predicted = trainer.predict(dataset(spec["dev_ids"]))
        out["accuracy"] = 100.0 * float((predicted.predictions.argmax(-1) == predicted.label_ids).mean())
    return out


def hf(spec: dict, name: str, epochs: int, evaluate: bool) -> dict:
    argv = [sys.executable, __file__, "--hf-run", json.dumps([spec, name, epochs, evaluate])]
    result = harness.require_success(harness.run_measured(argv, harness.thread_env(spec["threads"])), "HF")
    return {**json.loads(result.stdout.strip().splitlines()[-1]), "peak_rss_mb": result.peak_rss_mb}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init", type=Path, help="our checkpoint (default: the one runs/cpu-recipe/READY names)")
    p.add_argument("--lr", type=float, default=1e-4, help="peak LR, both sides (default 1e-4)")
    p.add_argument("--epochs", type=int, default=2, help="epochs of the accuracy runs (default 2)")
    p.add_argument("--train-examples", type=int, default=9741, help="training questions, accuracy runs")
    p.add_argument("--slice-examples", type=int, default=640, help="training questions per throughput slice")
    p.add_argument("--repeats", type=int, default=3, help="throughput slices of each side (default 3)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip-accuracy", action="store_true")
    harness.add_data_and_work(p, harness.ROOT / "runs" / "bench" / "commonsenseqa", "scratch directory")
    p.add_argument("--hf-run", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.hf_run:
        print(json.dumps(hf_run(*json.loads(args.hf_run))))
        return
    if args.init is None:
        args.init = Path((harness.ROOT / "runs" / "cpu-recipe" / "READY").read_text().strip())
    started = time.perf_counter()
    spec = prepare(args)
    print(f"{harness.machine()}; {harness.versions()}; init {args.init}", flush=True)
    report = {}
    if not args.skip_accuracy:
        seconds, ours = ours_run(spec, args.work, "train", args.epochs, spec["dev"])
        theirs = hf(spec, "train", args.epochs, evaluate=True)
        report["accuracy"] = {
            "ours": ours["accuracy"],
            "hf": theirs["accuracy"],
            "ours_s": seconds,
            "hf_s": theirs["seconds"],
        }
        print(
            f"dev accuracy: ours {ours['accuracy']:.2f}, HF {theirs['accuracy']:.2f} "
            f"({harness.elapsed(started)})",
            flush=True,
        )
    count = args.slice_examples
    tiny_dev = str(args.work / "tiny-dev.jsonl")
    Path(tiny_dev).write_text("\n".join(Path(spec["dev"]).read_text().splitlines()[:16]) + "\n")
    rates = harness.alternate(
        {
            "ours": lambda: count / ours_run(spec, args.work, "slice", 1, tiny_dev)[0],
            "HF": lambda: count / hf(spec, "slice", 1, evaluate=False)["seconds"],
        },
        args.repeats,
    )
    row = harness.compared(
        f"CommonsenseQA fine-tuning ({count} questions x 5 choices, batch {BATCH}): ours vs HF "
        "RobertaForMultipleChoice + Trainer",
        "questions/s",
        rates["ours"],
        rates["HF"],
        goal=2.0,
    )
    print(harness.format_table([row]))
    report["throughput"] = {"ours": rates["ours"], "hf": rates["HF"], "ratio_median": row.ratios.median}
    print(json.dumps(report), flush=True)
    print(f"done in {harness.elapsed(started)}")


if __name__ == "__main__":
    main()
