"""Fine-tuning throughput (examples/s): `roberta finetune` beside HF `Trainer`, same weights.

Each side is a whole short fine-tuning run in its own process: one epoch over a fixed subset
of a task's training data (a seeded sample of SST-2 or RTE train.tsv; the first questions of
SQuAD v1.1 dev-v1.1.json, the only SQuAD file here, as training data). The sides run in turn,
the first rotating, --repeats times; each reports its training time and its own peak RSS.

  ours         `roberta finetune glue|squad ...` as a user runs it (length-grouped batches,
               padded to the longest). Training time: the trainer's own clock, which covers
               batch building, forward, backward and update, not start-up, tokenization, the
               end-of-run dev evaluation or checkpoints: real tokens / the tokens_per_s it logs
               once for the whole run (--train.log_every larger than the run).
  HF           `Trainer` + `AutoModelForSequenceClassification` (SQuAD:
               `AutoModelForQuestionAnswering`; CoNLL: `AutoModelForTokenClassification` and
               `DataCollatorForTokenClassification`, our encoded sentences and their first-sub-token
               labels handed over as they are), `DataCollatorWithPadding`, random order (its
               defaults) or `train_sampling_strategy="group_by_length"`. Training time:
               `train_runtime` of `Trainer.train()`, which covers the training loop, not model
               loading or tokenization; no evaluation, no saving.

Both: the same random-init model (ours saved as a checkpoint and exported with
`convert.export_hf`; each side adds a new head), the same batch (the task's recipe unless
given), max length 512 (SQuAD: our windows of 384 tokens, stride 128, handed to HF as they
are), fused AdamW (each side's default) with betas 0.9/0.98, eps 1e-6, weight decay 0.1, a
linear schedule with 6% warmup, no gradient clipping (HF's max_grad_norm=0), the task's
learning rate, seed 1, the same threads. examples/s = training examples (SQuAD: windows) /
training time. MFU counts real tokens only.

    .venv/bin/python benchmarks/finetune_throughput.py --examples SST-2=512,RTE=128,SQuAD=64
    .venv/bin/python benchmarks/finetune_throughput.py --examples SST-2=128,RTE=32,SQuAD=16:16 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import harness
from roberta.config import RobertaConfig

HF_DEFAULT, HF_GROUPED = "HF Trainer", "HF Trainer, group_by_length"
GOALS = {HF_DEFAULT: 2.0, HF_GROUPED: 1.2, "SQuAD": 1.3}  # from the issues: ours / HF examples/s
CONLL_GOALS = {HF_DEFAULT: 2.0, HF_GROUPED: 1.2}  # issue #46: token tagging at 2x HF Trainer's default
DEV_EXAMPLES = 16  # our CLI evaluates dev at the end (not timed); a few rows keep that short
SQUAD_MAX_LENGTH, SQUAD_STRIDE, SQUAD_MAX_QUERY = 384, 128, 64


@dataclass(frozen=True)
class Task:
    name: str  # SST-2, RTE, SQuAD or CoNLL (CoNLL-2003 NER tagging)
    examples: int  # training examples (SQuAD: questions) per run
    batch: int
    lr: float

    @property
    def squad(self) -> bool:
        return self.name == "SQuAD"

    @property
    def conll(self) -> bool:
        return self.name == "CoNLL"


@dataclass
class Setup:
    """What both sides of one task read: files under --work, made once, not timed."""

    task: Task
    train: Path  # GLUE: a task directory with train.tsv + dev.tsv; SQuAD: the training JSON
    dev: Path | None  # SQuAD's dev JSON
    lengths: list[int]  # real tokens of each training example (SQuAD: window) in our encoding
    windows: Path | None = None  # SQuAD, CoNLL: our training windows (and labels), for HF


def tasks(sizes: str) -> list[Task]:
    """Tasks from "TASK=N[:B],...": N training examples (SQuAD: questions), batch B (default: the
    recipe's)."""
    from roberta.tasks.glue import get_task
    from roberta.tasks.squad import SQUAD_BATCH, SQUAD_LR
    from roberta.tasks.tag import TAG_BATCH, TAG_LR

    found = []
    for item in sizes.split(","):
        name, _, size = item.partition("=")
        count, _, batch = size.partition(":")
        if name == "SQuAD":
            found.append(Task(name, int(count), int(batch or SQUAD_BATCH), SQUAD_LR))
        elif name == "CoNLL":
            found.append(Task(name, int(count), int(batch or TAG_BATCH), TAG_LR))
        else:
            glue = get_task(name)
            found.append(Task(glue.name, int(count), int(batch or glue.batch_size), glue.lr))
    return found


def models(shape: str, data: Path, work: Path) -> tuple[Path, Path, RobertaConfig]:
    """Our checkpoint and its HF export (same weights, the GPT-2 BPE), and the config."""
    import torch

    from roberta import checkpoint
    from roberta.convert import export_hf
    from roberta.model import RobertaModel
    from roberta.tokenizer import load_tokenizer
    from time_to_quality import model_config

    tokenizer = load_tokenizer(data / "gpt2_bpe")
    torch.manual_seed(0)
    model = RobertaModel(model_config(shape, None, tokenizer.vocab_size, 512))
    ours, hf = work / "model-ours", work / "model-hf"
    for path in (ours, hf):
        shutil.rmtree(path, ignore_errors=True)
    checkpoint.save(ours, model, tokenizer)
    export_hf(hf, model, tokenizer)
    return ours, hf, model.config


def glue_setup(task: Task, data: Path, work: Path) -> Setup:
    from roberta.tasks.classify import encode
    from roberta.tasks.glue import get_task, read_split
    from roberta.tokenizer import load_tokenizer

    out = work / task.name
    out.mkdir(parents=True, exist_ok=True)
    train = (data / "glue" / task.name / "train.tsv").read_text(encoding="utf-8").splitlines()
    dev = (data / "glue" / task.name / "dev.tsv").read_text(encoding="utf-8").splitlines()
    rows = sorted(random.Random(0).sample(range(1, len(train)), task.examples))
    (out / "train.tsv").write_text("\n".join([train[0], *(train[i] for i in rows)]) + "\n", encoding="utf-8")
    (out / "dev.tsv").write_text("\n".join(dev[: DEV_EXAMPLES + 1]) + "\n", encoding="utf-8")
    examples = read_split(get_task(task.name), out / "train.tsv", labelled=True)
    lengths = [len(ids) for ids in encode(load_tokenizer(data / "gpt2_bpe"), examples, 512)]
    return Setup(task, out, None, lengths)


def squad_setup(task: Task, data: Path, work: Path) -> Setup:
    from roberta.qa.examples import read_squad
    from roberta.qa.windows import make_windows
    from roberta.tokenizer import load_tokenizer

    out = work / "SQuAD"
    out.mkdir(parents=True, exist_ok=True)
    articles = json.loads((data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    (out / "train.json").write_text(json.dumps(squad_subset(articles, task.examples)))
    (out / "dev.json").write_text(json.dumps(squad_subset(articles[::-1], 4)))
    tokenizer = load_tokenizer(data / "gpt2_bpe")
    windows = make_windows(
        tokenizer,
        read_squad(out / "train.json", "1.1"),
        SQUAD_MAX_LENGTH,
        SQUAD_STRIDE,
        SQUAD_MAX_QUERY,
        train=True,
    ).windows
    records = [
        {"input_ids": w.tokens.tolist(), "start_positions": w.start_position, "end_positions": w.end_position}
        for w in windows
    ]
    (out / "windows.json").write_text(json.dumps(records))
    return Setup(
        task, out / "train.json", out / "dev.json", [len(w.tokens) for w in windows], out / "windows.json"
    )


def conll_setup(task: Task, data: Path, work: Path) -> Setup:
    """The first N sentences of CoNLL-2003's train.txt (and 16 of valid.txt), and our training
    windows with their labels (first sub-tokens), which HF is handed as they are."""
    import numpy as np

    from roberta.tagging.encoding import encode_words, make_windows, token_labels
    from roberta.tasks.tag_data import label_ids, label_set, read_tagged
    from roberta.tokenizer import load_tokenizer

    out = work / "CoNLL"
    out.mkdir(parents=True, exist_ok=True)
    for name, count in (("train", task.examples), ("valid", DEV_EXAMPLES)):
        write_conll(read_tagged(data / "conll2003" / f"{name}.txt")[:count], out / f"{name}.txt")
    tokenizer = load_tokenizer(data / "gpt2_bpe")
    sentences = read_tagged(out / "train.txt")
    labels = label_set(sentences, "iob2")
    encoded = encode_words(tokenizer, [s.words for s in sentences])
    ids = label_ids(out / "train.txt", sentences, labels)
    per_token = [token_labels(e, i) for e, i in zip(encoded, ids)]
    windows = make_windows(encoded, tokenizer.bos_id, tokenizer.eos_id, 512, 127, per_token)
    records = [{"input_ids": w.tokens.tolist(), "labels": np.asarray(w.labels).tolist()} for w in windows]
    (out / "windows.json").write_text(json.dumps({"labels": labels, "windows": records}))
    return Setup(
        task, out / "train.txt", out / "valid.txt", [len(w.tokens) for w in windows], out / "windows.json"
    )


def write_conll(sentences, path: Path) -> None:
    """Sentences as CoNLL lines of word and tag, a blank line after each."""
    path.write_text(
        "".join("".join(f"{w} {t}\n" for w, t in zip(s.words, s.tags)) + "\n" for s in sentences),
        encoding="utf-8",
    )


def squad_subset(articles: list[dict], questions: int) -> dict:
    """The first `questions` questions of these articles, as an official SQuAD v1.1 file."""
    kept = []
    for article in articles:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            qas = paragraph["qas"][:questions]
            questions -= len(qas)
            if qas:
                paragraphs.append({"context": paragraph["context"], "qas": qas})
            if questions == 0:
                break
        kept.append({"title": article["title"], "paragraphs": paragraphs})
        if questions == 0:
            break
    return {"version": "1.1", "data": kept}


def ours_argv(setup: Setup, init: Path, out: Path, precision: str) -> list[str]:
    task = setup.task
    roberta = str(Path(sys.executable).with_name("roberta"))
    if task.squad:
        verb = ["squad", "--version", "1.1", "--train", str(setup.train), "--dev", str(setup.dev)]
        verb += ["--stride", str(SQUAD_STRIDE), "--max-query", str(SQUAD_MAX_QUERY)]
    elif task.conll:
        verb = ["tag", "--train", str(setup.train), "--dev", str(setup.dev), "--lr", str(task.lr)]
    else:
        verb = ["glue", "--task", task.name, "--data", str(setup.train)]
    batch = [f"--train.batch_size={task.batch}", f"--train.micro_batch_size={task.batch}"]
    cpu = "--train.seed=1 --train.device=cpu --train.log_every=1000000000".split()
    cpu.append(f"--train.precision={precision}")
    paths = ["--init", str(init), "--out", str(out)]
    return [roberta, "finetune", *verb, *paths, "--train.epochs=1", *batch, *cpu]


def ours_seconds(run_dir: Path, tokens: int) -> float:
    """Training time from the one train record the run logged: its tokens / tokens_per_s."""
    records = [
        json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    train = [r for r in records if r["split"] == "train"]
    if len(train) != 1:
        raise SystemExit(f"{run_dir}: expected one train record in metrics.jsonl, found {len(train)}")
    return tokens / train[0]["tokens_per_s"]


def hf_argv(setup: Setup, hf_dir: Path, out: Path, strategy: str, threads: int, precision: str) -> list[str]:
    task = setup.task
    spec = {
        "task": task.name,
        "hf_dir": str(hf_dir),
        "out": str(out),
        "batch": task.batch,
        "lr": task.lr,
        "strategy": strategy,
        "threads": threads,
        "precision": precision,
        "train": str(setup.windows if task.squad or task.conll else setup.train / "train.tsv"),
    }
    return [sys.executable, __file__, "--hf-run", json.dumps(spec)]


def hf_run(spec: dict) -> None:
    """The --hf-run child: one HF Trainer run; prints {"seconds", "examples", "tokens"} as JSON."""
    import torch
    import transformers
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(spec["threads"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["hf_dir"])
    collator = DataCollatorWithPadding(tokenizer)
    if spec["task"] == "SQuAD":
        windows = json.loads(Path(spec["train"]).read_text())
        dataset = [{**w, "attention_mask": [1] * len(w["input_ids"])} for w in windows]
        model = transformers.AutoModelForQuestionAnswering.from_pretrained(spec["hf_dir"])
    elif spec["task"] == "CoNLL":
        # HF's token-classification recipe: RobertaForTokenClassification, labels padded with -100.
        saved = json.loads(Path(spec["train"]).read_text())
        dataset = [{**w, "attention_mask": [1] * len(w["input_ids"])} for w in saved["windows"]]
        labels = saved["labels"]
        model = transformers.AutoModelForTokenClassification.from_pretrained(
            spec["hf_dir"], num_labels=len(labels), id2label=dict(enumerate(labels))
        )
        collator = transformers.DataCollatorForTokenClassification(tokenizer)
    else:
        from roberta.tasks.classify import label_ids
        from roberta.tasks.glue import get_task, read_split

        task = get_task(spec["task"])
        examples = read_split(task, spec["train"], labelled=True)
        pairs = [e.pair for e in examples] if task.pair_column else None
        encoded = tokenizer([e.text for e in examples], pairs, truncation=True, max_length=512)
        labels = label_ids(examples, task.labels, spec["train"])
        dataset = [
            {"input_ids": ids, "attention_mask": mask, "labels": label}
            for ids, mask, label in zip(encoded["input_ids"], encoded["attention_mask"], labels)
        ]
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            spec["hf_dir"], num_labels=len(task.labels)
        )
    recipe = harness.hf_trainer_recipe(spec["lr"], spec["batch"], seed=1)
    if spec.get("precision") == "bf16":
        recipe["bf16"] = True  # HF Trainer's bf16 on a CPU: torch's CPU autocast, as ours runs
    args = TrainingArguments(
        output_dir=spec["out"],
        **recipe,
        num_train_epochs=1,
        train_sampling_strategy=spec["strategy"],
        eval_strategy="no",
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=dataset, data_collator=collator, processing_class=tokenizer
    )
    seconds = trainer.train().metrics["train_runtime"]
    print(
        json.dumps(
            {
                "seconds": seconds,
                "examples": len(dataset),
                "tokens": sum(len(d["input_ids"]) for d in dataset),
            }
        )
    )


class Sides:
    """The runs of one task, each side's rate per slice and its largest peak RSS."""

    def __init__(self, setup: Setup, ours: Path, hf: Path, work: Path, threads: int, precision: str):
        self.setup, self.ours, self.hf, self.work, self.threads = setup, ours, hf, work, threads
        self.precision = precision
        self.peak_rss: dict[str, float] = {}

    def ours_run(self) -> float:
        out = self.work / "runs" / f"{self.setup.task.name}-ours"
        shutil.rmtree(out, ignore_errors=True)
        self._run("ours", ours_argv(self.setup, self.ours, out, self.precision))
        seconds = ours_seconds(out, sum(self.setup.lengths))
        shutil.rmtree(out)
        return len(self.setup.lengths) / seconds

    def hf_run(self, side: str) -> float:
        out = self.work / "runs" / f"{self.setup.task.name}-hf"
        strategy = "group_by_length" if side == HF_GROUPED else "random"
        result = json.loads(
            self._run(
                side, hf_argv(self.setup, self.hf, out, strategy, self.threads, self.precision)
            ).splitlines()[-1]
        )
        shutil.rmtree(out, ignore_errors=True)
        if result["tokens"] != sum(self.setup.lengths):  # HF's tokenizer and ours should agree exactly
            print(
                f"  note: HF's encoding holds {result['tokens']} real tokens, ours {sum(self.setup.lengths)}"
            )
        return result["examples"] / result["seconds"]

    def _run(self, side: str, argv: list[str]) -> str:
        result = harness.require_success(
            harness.run_measured(argv, harness.thread_env(self.threads)), f"{side} run"
        )
        self.peak_rss[side] = max(self.peak_rss.get(side, 0.0), result.peak_rss_mb)
        return result.stdout


def compare(
    setup: Setup, ours: Path, hf: Path, config: RobertaConfig, args: argparse.Namespace, peak: float
) -> list[harness.Row]:
    task = setup.task
    baselines = [HF_DEFAULT] if task.squad else [HF_DEFAULT, HF_GROUPED]
    goals = (
        CONLL_GOALS if task.conll else {name: GOALS["SQuAD" if task.squad else name] for name in baselines}
    )
    mean_length = statistics.mean(setup.lengths)
    print(
        f"{task.name}: {task.examples} examples, {len(setup.lengths)} sequences of {mean_length:.0f} "
        f"tokens on average (max {max(setup.lengths)}), batch {task.batch}",
        flush=True,
    )
    sides = Sides(setup, ours, hf, args.work, args.threads, args.precision)
    runs = {"ours": sides.ours_run, **{name: (lambda n=name: sides.hf_run(n)) for name in baselines}}
    rates = harness.alternate(runs, args.repeats)
    flops_per_example = harness.training_flops(config, round(mean_length), sum(setup.lengths)) / len(
        setup.lengths
    )

    def mfu(side: str) -> float:
        return harness.Spread.of(rates[side]).median * flops_per_example / peak

    unit = "windows/s" if task.squad else "sentences/s" if task.conll else "examples/s"
    what = (
        f"SQuAD v1.1 ({len(setup.lengths)} windows of ≤ {SQUAD_MAX_LENGTH} tokens, stride {SQUAD_STRIDE}"
        if task.squad
        else f"CoNLL-2003 NER tagging ({len(setup.lengths)} sentences"
        if task.conll
        else f"{task.name} ({len(setup.lengths)} examples of ≤ 512 tokens"
    )
    what += f", mean {mean_length:.0f})"
    shape = f"{config.num_layers} x {config.hidden_size}"
    shape += ", bf16 autocast (both)" if args.precision == "bf16" else ""
    return [
        harness.compared(
            f"fine-tuning {what}, {shape}, batch {task.batch}: `roberta finetune` vs {name}",
            unit,
            rates["ours"],
            rates[name],
            goal=goals[name],
            rss_mb=(sides.peak_rss["ours"], sides.peak_rss[name]),
            mfu=(mfu("ours"), mfu(name)),
            memory_goal=not (task.squad or task.conll),  # tagging's goal (#46) is speed alone
        )
        for name in baselines
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--examples",
        default="SST-2=512,RTE=128,SQuAD=64",
        help="TASK=N[:B],...: N training examples per run (SQuAD: questions; CoNLL: sentences), batch B "
        "(default: the task's recipe: SST-2 32, RTE 16, SQuAD 48, CoNLL 32); tasks SST-2, RTE, SQuAD, CoNLL "
        "(default SST-2=512,RTE=128,SQuAD=64)",
    )
    p.add_argument(
        "--shape",
        default="tiny",
        help="model: PRESET[:LAYERSxWIDTH], e.g. tiny, base, tiny:2x128 (default tiny)",
    )
    p.add_argument("--repeats", type=int, default=3, help="runs of each side (default 3)")
    p.add_argument("--threads", type=int, default=2)
    harness.add_data_and_work(p, harness.ROOT / "runs" / "bench" / "finetune", "scratch directory")
    harness.add_row_options(p, "ours with --train.precision=bf16, HF's Trainer with bf16=True")
    p.add_argument("--hf-run", help=argparse.SUPPRESS)  # the HF child: a JSON spec
    args = p.parse_args()
    if args.hf_run:
        hf_run(json.loads(args.hf_run))
        return
    peak = (
        args.peak_gflops * 1e9
        if args.peak_gflops
        else harness.peak_matmul_flops(args.threads, args.precision)
    )
    args.work.mkdir(parents=True, exist_ok=True)
    ours, hf, config = models(args.shape, args.data, args.work)
    rows = []
    for task in tasks(args.examples):
        setup = (
            squad_setup(task, args.data, args.work)
            if task.squad
            else conll_setup(task, args.data, args.work)
            if task.conll
            else glue_setup(task, args.data, args.work)
        )
        rows += compare(setup, ours, hf, config, args, peak)
    print(harness.format_table(rows))
    harness.write_rows(args.json, rows)


if __name__ == "__main__":
    main()
