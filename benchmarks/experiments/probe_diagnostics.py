"""Why a checkpoint does (not) beat its random init in `roberta probe`: three quick looks at one task.

- `finetune`: the probe's fine-tuning of CKPT on TASK with another learning rate, epoch count or batch
  size than `roberta.evaluation.probe.RECIPE` (the probe itself never changes its recipe per checkpoint).
- `linear`: a logistic regression on frozen mean-pooled features of each layer (0 = embeddings) of
  CKPT, trained on the probe's training examples of TASK and scored on its dev set: what the
  features hold before any fine-tuning moves them.
- `pair`: for a checkpoint pretrained with a pair head (NSP in a SEGMENT-PAIR or SENTENCE-PAIR run,
  the overlap head in an OVERLAP-PAIR run), that head as a zero-shot score of TASK's dev pairs (NSP:
  the log-odds that the second segment follows the first; overlap: the predicted share of shared
  tokens): Spearman against STS-B's similarity, ROC AUC against a binary task's positive label;
  beside it, the same for the share of shared tokens counted (`data.packing.token_overlap`).

    .venv/bin/python benchmarks/experiments/probe_diagnostics.py finetune CKPT --task STS-B --epochs 10
    .venv/bin/python benchmarks/experiments/probe_diagnostics.py linear CKPT --task SST-2
    .venv/bin/python benchmarks/experiments/probe_diagnostics.py pair CKPT --task STS-B
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from roberta.evaluation import probe
from roberta.tasks.glue import get_task

ROOT = Path(__file__).resolve().parents[2]


def fine_tune(args, task, data) -> None:
    probe.RECIPE = probe.Recipe(args.lr, args.batch_size, args.epochs, examples=args.examples)
    row = probe.Row("diagnostic", args.checkpoint, 0, 0)
    scores = []
    with tempfile.TemporaryDirectory() as work:
        for seed in range(1, args.seeds + 1):
            scores.append(probe.task_score(probe._fine_tune(row, task, seed, data, Path(work) / "cell")))
    known = [s for s in scores if s is not None]
    print(
        f"{args.checkpoint.name} {task.name} lr={args.lr} epochs={args.epochs} batch={args.batch_size}: "
        f"{[None if s is None else round(s, 1) for s in scores]}, median "
        f"{statistics.median(known):.1f}"
        if known
        else "no score"
    )


def linear(args, task, data) -> None:
    from sklearn.linear_model import LogisticRegression

    from roberta.hub import load

    hub = load(args.checkpoint)
    train, _, dev = data
    dev = next(iter(dev.values()))[0]

    def features(examples, layer: int) -> np.ndarray:
        tokens = hub.encode_batch([e.text for e in examples], truncate=True)
        return hub.embed(tokens, layer=layer, pool="mean").float().numpy()

    for layer in range(hub.model.config.num_layers + 1):
        fit = LogisticRegression(max_iter=2000).fit(features(train, layer), [e.label for e in train])
        accuracy = fit.score(features(dev, layer), [e.label for e in dev])
        name = f"{args.checkpoint.name} {task.name} layer {layer}"
        print(f"{name}: linear probe, dev accuracy {100 * accuracy:.1f}")


def pair(args, task, data) -> None:
    from scipy.stats import spearmanr
    from sklearn.metrics import roc_auc_score

    from roberta.data.packing import token_overlap
    from roberta.hub import load
    from roberta.tasks.pretrain import NSP_HEAD, OVERLAP_HEAD

    hub = load(args.checkpoint)
    head = next((h for h in (NSP_HEAD, OVERLAP_HEAD) if h in hub.model.heads), None)
    if head is None:
        raise SystemExit(f"{args.checkpoint}: no pair head (pretrain with a pair format)")
    dev = next(iter(data[2].values()))[0]
    pairs = hub.encode_batch([e.text for e in dev], [e.pair for e in dev], truncate=True)
    logits = hub.predict(head, pairs, return_logits=True).float()  # in inference mode, as the hub runs
    # NSP's label 0 is "B follows A"; the overlap head's one logit is the share of shared tokens.
    scores = {f"{head} head": (logits[:, 0] - logits[:, 1] if head == NSP_HEAD else logits[:, 0]).numpy()}
    words = [
        (hub.encode(e.text, truncate=True)[1:-1].numpy(), hub.encode(e.pair, truncate=True)[1:-1].numpy())
        for e in dev
    ]
    scores["shared tokens counted"] = np.array([token_overlap(a, b) for a, b in words])
    for name, score in scores.items():
        if task.regression:
            rho = spearmanr(score, [e.label for e in dev])[0]
            print(f"{args.checkpoint.name} {task.name}: {name}, zero-shot Spearman {100 * rho:.1f}")
        else:
            same = "entailment" if "entailment" in task.labels else "1"  # the pair says the same / follows
            auc = roc_auc_score([e.label == same for e in dev], score)
            print(
                f"{args.checkpoint.name} {task.name}: {name}, zero-shot ROC AUC {auc:.3f} for label {same!r}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("look", choices=["finetune", "linear", "pair"])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--task", default="SST-2")
    parser.add_argument("--glue", type=Path, default=ROOT.parent / "shared" / "data" / "glue")
    parser.add_argument("--lr", type=float, default=probe.RECIPE.lr)
    parser.add_argument("--epochs", type=float, default=probe.RECIPE.epochs)
    parser.add_argument("--batch-size", type=int, default=probe.RECIPE.batch_size)
    parser.add_argument("--examples", type=int, default=probe.RECIPE.examples)
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    task = get_task(args.task)
    data = probe._read_task(task, args.glue, args.examples)
    {"finetune": fine_tune, "linear": linear, "pair": pair}[args.look](args, task, data)


if __name__ == "__main__":
    main()
