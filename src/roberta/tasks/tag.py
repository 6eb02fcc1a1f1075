"""Token tagging (NER, parts of speech): a tagging head on every token, trained on words' first
sub-tokens (or all of them), sentences longer than the model read in overlapping windows, and dev
(and test) scored by entities as conlleval scores them (`tagging.metric`) with token accuracy.

    roberta finetune tag --model CKPT --train train.txt --dev valid.txt --test test.txt --out RUN
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from roberta.errors import UserError
from roberta.model import RobertaModel
from roberta.options.tasks import TagTrainingOptions
from roberta.padding import bucket_rows
from roberta.runtime.batching import pad
from roberta.tagging.encoding import (
    IGNORE,
    EncodedSentence,
    TagWindow,
    encode_words,
    make_windows,
    sentence_rows,
    token_labels,
)
from roberta.tagging.metric import entities, entity_scores
from roberta.tagging.predict import default_stride
from roberta.tasks.finetune import Batching, Recipe, Task, batched_objective, mean_loss, task_length
from roberta.tasks.tag_data import (
    TagColumns,
    TaggedSentence,
    check_scheme,
    check_tags,
    label_ids,
    label_set,
    read_tagged,
)
from roberta.train.config import JobConfig
from roberta.train.trainer import EXAMPLES, Batch, Objective

# The recipe's LR, batch and epochs are `finetune tag`'s --lr, --batch-size and --epochs, declared
# with their source in roberta.options.tasks.
TAG_LR, TAG_BATCH, TAG_EPOCHS = (
    TagTrainingOptions.lr,
    TagTrainingOptions.batch_size,
    TagTrainingOptions.epochs,
)
TAG_HEAD = TagTrainingOptions.head
# Batches in plain random order, as HF's Trainer draws them: length-grouped batches cost CoNLL-2003
# 2.4 dev F1 at the same recipe (73.1 vs 75.5; benchmarks/results/2026-11-27-conll-ner.md).
# --data.group_by_length=true brings them back.
TAG_SHUFFLED = "--data.group_by_length=false"


def tag_recipe(lr: float = TAG_LR, batch_size: int = TAG_BATCH, epochs: float = TAG_EPOCHS) -> Recipe:
    """The tagging recipe at this LR, batch and epochs, its batches in random order."""
    return Recipe(lr, batch_size, epochs, (TAG_SHUFFLED,))


@dataclass(frozen=True)
class TagData:
    """What `finetune tag` reads and how: the files, where words and tags are, the scheme, the
    labels (given, else the training data's), what an unseen dev/test tag is read as (None:
    refused), labels on every sub-token or the first, and the windows' shared sub-tokens."""

    train: str | Path
    dev: str | Path
    test: str | Path | None = None
    columns: TagColumns = field(default_factory=TagColumns)
    scheme: str = "iob2"
    labels: tuple[str, ...] = ()
    unseen_as: str | None = None
    label_all: bool = False
    stride: int | None = None
    head: str = TAG_HEAD


@dataclass(frozen=True)
class TagSet:
    """A held-out set, encoded: its sentences' sub-tokens, their windows and the gold tags."""

    sentences: list[EncodedSentence]
    windows: list[TagWindow]
    gold: list[tuple[str, ...]]


def continuing_labels(labels: Sequence[str]) -> list[int]:
    """Each label's id on a word's later sub-tokens (`label_all`): B-X's I-X where there is one."""
    index = {label: i for i, label in enumerate(labels)}
    return [index.get("I" + label[1:], i) if label.startswith("B-") else i for i, label in enumerate(labels)]


def _loss(head: str, pad_id: int, model: RobertaModel, batch: Batch) -> dict:
    """Cross-entropy summed over the labelled sub-tokens: the last layer computes only those
    (`select`), and the layers the real tokens only (`unpad`). A held-out batch gives its logits."""
    tokens = batch["tokens"]
    if "window" in batch:
        logits = model.heads[head](model(tokens).last_hidden_state).float()
        return {EXAMPLES: {"window": batch["window"], "set": batch["set"], "logits": logits}}
    labels = batch["labels"]
    chosen = labels.ne(IGNORE)
    select = _bucketed(chosen, tokens.ne(pad_id)) if torch.is_autocast_enabled("cpu") else chosen
    hidden = model(tokens, unpad=True, select=select).last_hidden_state
    if select is not chosen:
        hidden = hidden[chosen[select]]
    logits = model.heads[head](hidden).float()
    return {"loss": F.cross_entropy(logits, labels[chosen], reduction="sum")}


def _bucketed(chosen: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The labelled positions and as many unlabelled real ones (`<s>`, `</s>`, later sub-tokens;
    the first in flat order) as round their count up to one of few sizes: the last layer's bf16
    products then come in few shapes, each built once by oneDNN (`padding.Unpadded.of`). The extra
    rows' outputs are dropped before the head, so the loss is the exact selection's to rounding."""
    n = int(chosen.sum())
    spare = (real & ~chosen).flatten().nonzero().squeeze(1)[: bucket_rows(n) - n]
    select = chosen.flatten().clone()
    select[spare] = True
    return select.view_as(chosen)


def predicted_tags(held_out: TagSet, labels: Sequence[str], windows: np.ndarray, logits: np.ndarray) -> list:
    """Each sentence's predicted tags from its windows' gathered logits (any order)."""
    order = np.asarray(windows, dtype=np.int64)
    rows = [None] * len(held_out.windows)
    for k, w in enumerate(order):
        rows[w] = logits[k, : len(held_out.windows[w].tokens)]
    per_piece = sentence_rows(held_out.sentences, held_out.windows, rows)
    return [
        tuple(labels[i] for i in rows[s.first].argmax(-1)) for s, rows in zip(held_out.sentences, per_piece)
    ]


def tag_objective(
    data: TagData,
    labels: list[str],
    train: list[TagWindow],
    held_out: dict[str, TagSet],
    batching: Batching,
    max_length: int,
) -> Objective:
    pad_id = batching.pad_id

    def train_batch(indices: np.ndarray) -> Batch:
        chosen = [train[i] for i in indices]
        return {
            "tokens": pad([w.tokens for w in chosen], pad_id),
            "labels": pad([w.labels for w in chosen], IGNORE),
        }

    names = list(held_out)

    def collate(name: str, indices: np.ndarray) -> Batch:
        # A fixed width: gathered [B, T, labels] logits are concatenated across batches and ranks.
        # Each example carries its set (the loop scores a set without naming it).
        return {
            "tokens": pad([held_out[name].windows[i].tokens for i in indices], pad_id, max_length),
            "window": torch.from_numpy(indices.astype(np.int64)),
            "set": torch.full((len(indices),), names.index(name), dtype=torch.long),
        }

    def metrics(sums: dict[str, float], gathered: dict[str, np.ndarray]) -> dict[str, float]:
        if not gathered:  # the training loss's window
            return mean_loss(sums)
        held = held_out[names[int(gathered["set"][0])]]
        predicted = predicted_tags(held, labels, gathered["window"], gathered["logits"])
        if data.scheme == "none":
            return _accuracy(held.gold, predicted)
        figures = entity_scores(held.gold, predicted)
        return {name: figures[name] for name in _figures(held.gold, data.scheme)}

    return batched_objective(
        data.head,
        batching,
        train_lengths=[len(w.tokens) for w in train],
        train_batch=train_batch,
        eval_sets={
            name: ([len(w.tokens) for w in s.windows], functools.partial(collate, name))
            for name, s in held_out.items()
        },
        heads={data.head: {"kind": "tagging", "num_labels": len(labels), "labels": labels}},
        loss=functools.partial(_loss, data.head, pad_id),
        metrics=metrics,
        best_metric="f1" if data.scheme != "none" else "accuracy",
        figures={name: _figures(s.gold, data.scheme) for name, s in held_out.items()},
        counts=lambda batch: {} if "window" in batch else {"loss": int(batch["labels"].ne(IGNORE).sum())},
        row_updates=True,
    )


def _accuracy(gold, predicted) -> dict[str, float]:
    hits = sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
    return {"accuracy": 100.0 * hits / max(sum(map(len, gold)), 1)}


def _figures(gold: Sequence[Sequence[str]], scheme: str) -> tuple[str, ...]:
    if scheme == "none":
        return ("accuracy",)
    # The log keeps each type's F1; `roberta evaluate tag` reports its precision and recall too.
    types = sorted({type_ for tags in gold for type_, _, _ in entities(tags)})
    return ("precision", "recall", "f1", "accuracy", *(f"f1_{t}" for t in types))


def read_sets(data: TagData) -> tuple[dict[str, list[TaggedSentence]], list[str]]:
    """Every file read and checked, and the labels (given, else the training data's)."""
    check_scheme(data.scheme)
    paths = {"train": data.train, "dev": data.dev, **({"test": data.test} if data.test else {})}
    sets = {name: read_tagged(path, data.columns) for name, path in paths.items()}
    for name, sentences in sets.items():
        check_tags(paths[name], sentences, data.scheme)
    labels = label_set(sets["train"], data.scheme, data.labels)
    if data.unseen_as is not None and data.unseen_as not in labels:
        raise UserError(f"--unseen-tags-as {data.unseen_as!r}: not a label (labels: {', '.join(labels)})")
    label_ids(paths["train"], sets["train"], labels)  # given labels must cover training's tags
    return sets, labels


def plan_tagging(data: TagData, job: JobConfig, model: RobertaModel, tokenizer, source: str | Path) -> Task:
    """The tagging task read, checked and encoded for `model` (fine-tuned from `source`); RUN/best/
    holds the best dev entity F1 (token accuracy with --scheme none)."""
    sets, labels = read_sets(data)
    spec = {"kind": "tagging", "num_labels": len(labels), "labels": labels}
    _check_existing_head(model, data.head, spec, source)
    max_length = task_length(job, model, source, {data.head: spec}, 3, "<s> words </s>")
    stride = default_stride(max_length) if data.stride is None else data.stride
    paths = {"train": data.train, "dev": data.dev, "test": data.test}
    encoded, ids = {}, {}
    for name, sentences in sets.items():
        encoded[name] = encode_words(tokenizer, [s.words for s in sentences])
        ids[name] = label_ids(paths[name], sentences, labels, None if name == "train" else data.unseen_as)
    continuing = continuing_labels(labels)
    train_labels = [
        token_labels(e, i, data.label_all, continuing) for e, i in zip(encoded["train"], ids["train"])
    ]
    args = (tokenizer.bos_id, tokenizer.eos_id, max_length, stride)
    train = make_windows(encoded["train"], *args, labels=train_labels)
    held_out = {
        name: TagSet(
            encoded[name],
            make_windows(encoded[name], *args),
            [tuple(labels[i] for i in row) for row in ids[name]],
        )
        for name in sets
        if name != "train"
    }
    return Task(
        objective=lambda member, rank, world: tag_objective(
            data, labels, train, held_out, Batching(member, tokenizer.pad_id, rank, world), max_length
        ),
        max_length=max_length,
        run_info={"task": "tag", "scheme": data.scheme, "labels": labels, "label_all": data.label_all},
    )


def _check_existing_head(model: RobertaModel, name: str, spec: dict, source: str | Path) -> None:
    if name in model.heads and model.heads[name].kind == "tagging":
        have = model.heads[name].spec()["num_labels"]
        if have != spec["num_labels"]:
            raise UserError(
                f"{source}: head {name!r} has {have} labels but this data has {spec['num_labels']}; "
                "start a new head with --init-task"
            )
