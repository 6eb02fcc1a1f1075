"""CoNLL-2003 NER: the pieces of benchmarks/results/2026-11-27-conll-ner.md that `roberta` itself
does not run. `roberta finetune tag` trains our side; this script makes the random init, runs the
same init and recipe through HF (`RobertaForTokenClassification` + `Trainer` +
`DataCollatorForTokenClassification`, words tokenized as HF's token-classification example does:
`is_split_into_words` with `add_prefix_space`, the label on each word's first sub-token, scored by
seqeval on the whole sentences), and draws the dev F1 curves.

    python benchmarks/experiments/conll_ner.py random-init CKPT OUT
    python benchmarks/experiments/conll_ner.py hf HF_DIR OUT --lr 5e-4 --batch 32 --epochs 5 --eval-every 220
    python benchmarks/experiments/conll_ner.py ours CKPT OUT [--prefix-space] [finetune tag options]
    python benchmarks/experiments/conll_ner.py tag-speed CKPT HF_DIR --texts 1000 --batch-size 32
    python benchmarks/experiments/conll_ner.py plot PNG NAME=RUN [NAME=RUN ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

# harness.py, shared with the `make bench` scripts, lives one level up in benchmarks/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "conll2003"


def random_init(ckpt: Path, out: Path) -> None:
    """A model of `ckpt`'s shape and tokenizer at its initialisation, seed 0 (as `roberta probe`'s)."""
    import torch

    from roberta import checkpoint
    from roberta.model import RobertaModel

    model, tokenizer = checkpoint.load(ckpt)
    torch.manual_seed(0)
    checkpoint.save(out, RobertaModel(model.config), tokenizer)


def hf_run(
    hf_dir: Path, out: Path, lr: float, batch: int, epochs: float, eval_every: int, seed: int, limit: int = 0
) -> None:
    import numpy as np
    import torch
    import transformers
    from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    from harness import hf_trainer_recipe
    from roberta.tasks.tag_data import label_set, read_tagged

    transformers.logging.set_verbosity_error()
    splits = {name: read_tagged(DATA / f"{name}.txt")[: limit or None] for name in ("train", "valid", "test")}
    labels = label_set(splits["train"], "iob2")
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir, add_prefix_space=True)
    limit = tokenizer.model_max_length

    def encode(sentences) -> tuple[list[dict], list[list]]:
        rows, word_ids = [], []
        for s in sentences:
            encoded = tokenizer(list(s.words), is_split_into_words=True, truncation=True, max_length=limit)
            previous, aligned = None, []
            for word in encoded.word_ids():
                aligned.append(-100 if word is None or word == previous else labels.index(s.tags[word]))
                previous = word
            rows.append({**encoded, "labels": aligned})
            word_ids.append(encoded.word_ids())
        return rows, word_ids

    encoded = {name: encode(s) for name, s in splits.items()}
    data = {name: rows for name, (rows, _) in encoded.items()}

    def tags(name: str, logits: np.ndarray) -> list[list[str]]:
        """Each sentence's predicted tags at its words' first sub-tokens, a word cut off by
        truncation read as O."""
        found = []
        for sentence, word_ids, scores in zip(splits[name], encoded[name][1], logits):
            words, previous = ["O"] * len(sentence.words), None
            for k, word in enumerate(word_ids):
                if word is not None and word != previous:
                    words[word] = labels[int(scores[k].argmax())]
                previous = word
            found.append(words)
        return found

    def scores(name: str, logits) -> dict:
        gold, predicted = [list(s.tags) for s in splits[name]], tags(name, logits)
        return {
            "precision": 100 * precision_score(gold, predicted),
            "recall": 100 * recall_score(gold, predicted),
            "f1": 100 * f1_score(gold, predicted),
            "accuracy": 100 * accuracy_score(gold, predicted),
        }

    model = transformers.AutoModelForTokenClassification.from_pretrained(
        hf_dir,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={t: i for i, t in enumerate(labels)},
    )
    recipe = hf_trainer_recipe(lr, batch, seed)
    args = TrainingArguments(
        output_dir=str(out / "trainer"), **recipe, num_train_epochs=epochs, eval_strategy="no"
    )
    curve = []

    class DevCurve(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % eval_every == 0 or state.global_step == state.max_steps:
                started = time.perf_counter()
                logits = trainer.predict(data["valid"]).predictions
                figures = scores("valid", logits)
                curve.append(
                    {"step": state.global_step, **figures, "eval_seconds": time.perf_counter() - started}
                )
                print(json.dumps(curve[-1]), flush=True)

    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=data["train"],
        data_collator=DataCollatorForTokenClassification(tokenizer),
        processing_class=tokenizer,
        callbacks=[DevCurve()],
    )
    torch.manual_seed(seed)
    started = time.perf_counter()
    metrics = trainer.train().metrics
    wall = time.perf_counter() - started
    test = scores("test", trainer.predict(data["test"]).predictions)
    best = max(curve, key=lambda row: row["f1"])
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "train_runtime": metrics["train_runtime"],
        "wall_seconds": wall,
        "train_tokens": sum(len(r["input_ids"]) for r in data["train"]) * epochs,
        "dev_curve": curve,
        "best_dev": best,
        "test_at_end": test,
        "truncated_test_sentences": sum(
            len(tokenizer(list(s.words), is_split_into_words=True)["input_ids"]) > limit
            for s in splits["test"]
        ),
    }
    (out / "hf-results.json").write_text(json.dumps(record, indent=2))
    print(json.dumps({k: v for k, v in record.items() if k != "dev_curve"}, indent=2))


def ours_run(ckpt: Path, out: Path, prefix_space: bool, options: list[str]) -> None:
    """`roberta finetune tag` on CoNLL-2003 in this process; with `prefix_space`, the words
    encoded with a space before each sentence's first word too (HF's `add_prefix_space=True`;
    `encoding.encode_words`'s `prefix_space`, which `finetune tag` does not use, since `tag(text)`
    reads running text without it): the parity experiment's one change."""
    import functools

    import roberta.tasks.tag as tag
    from roberta.cli import main as cli

    if prefix_space:
        tag.encode_words = functools.partial(tag.encode_words, prefix_space=True)
    files = [f"--{name}={DATA / f'{split}.txt'}" for name, split in (("train", "train"), ("dev", "valid"))]
    argv = ["finetune", "tag", "--init", str(ckpt), "--out", str(out), *files, f"--test={DATA / 'test.txt'}"]
    raise SystemExit(cli([*argv, *options]))


def tag_speed(ckpt: Path, hf_dir: Path, count: int, batch_size: int, slices: int) -> None:
    """`tag()` beside HF's token-classification pipeline (aggregation_strategy="simple", batched)
    on the same model: CoNLL-2003 test sentences as running text, alternating slices, texts/s."""
    import statistics

    import torch
    import transformers

    import roberta
    from roberta.tasks.tag_data import read_tagged

    transformers.logging.set_verbosity_error()
    texts = [" ".join(s.words) for s in read_tagged(DATA / "test.txt")][:count]
    hub = roberta.load(ckpt)
    model = transformers.AutoModelForTokenClassification.from_pretrained(hf_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    pipe = transformers.pipeline(
        "token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple", device=-1
    )
    sides = {
        "ours: tag()": lambda: hub.tag(texts),
        f"HF pipeline, batch_size={batch_size}": lambda: pipe(texts, batch_size=batch_size),
    }
    found = {name: run() for name, run in sides.items()}  # warm-up, and the answers compared
    ours, theirs = found.values()
    same = sum(
        [(e["type"], e["start"], e["end"]) for e in a]
        == [(e["entity_group"], e["start"], e["end"]) for e in b]
        for a, b in zip(ours, theirs)
    )
    rates: dict[str, list[float]] = {name: [] for name in sides}
    for k in range(slices):
        for name in list(sides)[k % 2 :] + list(sides)[: k % 2]:
            started = time.perf_counter()
            with torch.inference_mode():
                sides[name]()
            rates[name].append(len(texts) / (time.perf_counter() - started))
    for name, values in rates.items():
        each = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name}: {statistics.median(values):.1f} texts/s (slices {each})")
    ratio = statistics.median(rates["ours: tag()"]) / statistics.median(
        rates[f"HF pipeline, batch_size={batch_size}"]
    )
    print(f"ours / HF: {ratio:.2f}x; texts whose entities (type, start, end) agree: {same}/{len(texts)}")


def plot(png: Path, runs: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for item in runs:
        name, _, path = item.partition("=")
        path = Path(path)
        if (path / "hf-results.json").is_file():
            rows = json.loads((path / "hf-results.json").read_text())["dev_curve"]
            points = [(r["step"], r["f1"]) for r in rows]
        else:
            rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
            points = [(r["step"], r["f1"]) for r in rows if r.get("split") == "dev" and "f1" in r]
        ax.plot(*zip(*points), marker="o", label=name)
    ax.set_xlabel("updates (batch 32)")
    ax.set_ylabel("CoNLL-2003 dev entity F1")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("random-init")
    r.add_argument("ckpt", type=Path)
    r.add_argument("out", type=Path)
    h = sub.add_parser("hf")
    h.add_argument("hf_dir", type=Path)
    h.add_argument("out", type=Path)
    h.add_argument("--lr", type=float, default=5e-4)
    h.add_argument("--batch", type=int, default=32)
    h.add_argument("--epochs", type=float, default=5)
    h.add_argument("--eval-every", type=int, default=220)
    h.add_argument("--seed", type=int, default=1)
    h.add_argument("--limit", type=int, default=0, help="the first N sentences of each split (a smoke run)")
    o = sub.add_parser("ours")
    o.add_argument("ckpt", type=Path)
    o.add_argument("out", type=Path)
    o.add_argument("--prefix-space", action="store_true", help="a space before the first word too")
    t = sub.add_parser("tag-speed")
    t.add_argument("ckpt", type=Path)
    t.add_argument("hf_dir", type=Path)
    t.add_argument("--texts", type=int, default=1000)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--slices", type=int, default=4)
    g = sub.add_parser("plot")
    g.add_argument("png", type=Path)
    g.add_argument("runs", nargs="+")
    args, rest = p.parse_known_args()  # `ours`: the rest are `finetune tag` options
    if rest and args.what != "ours":
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.what == "random-init":
        random_init(args.ckpt, args.out)
    elif args.what == "hf":
        hf_run(
            args.hf_dir, args.out, args.lr, args.batch, args.epochs, args.eval_every, args.seed, args.limit
        )
    elif args.what == "ours":
        ours_run(args.ckpt, args.out, args.prefix_space, rest)
    elif args.what == "tag-speed":
        tag_speed(args.ckpt, args.hf_dir, args.texts, args.batch_size, args.slices)
    else:
        plot(args.png, args.runs)


if __name__ == "__main__":
    main()
