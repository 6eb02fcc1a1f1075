"""Sentence embeddings: a checkpoint trained into a sentence encoder, whose vectors' cosine ranks
pairs of texts as people do, on the one trainer.

One objective per source of signal:
- `finetune embed --text FILE|DIR` (sentences, one a line): unsupervised SimCSE (Gao et al.
  2021). Each sentence goes through the encoder twice, with its own dropout each time; the two
  vectors are a positive pair and the batch's other sentences its negatives (InfoNCE at
  temperature 0.05).
- `finetune embed --pairs FILE`: pairs of texts. With --score-column, CoSENT (Su 2022): for every
  two pairs of the batch whose gold scores are ordered, the cosines are pushed into the same
  order; without scores, each pair's second text is its first's positive among the batch's other
  second texts (supervised SimCSE; with --negative-column a hard negative per pair as well).
- `distill embed --teacher DIR --text FILE|DIR`: the student's vector regressed onto a
  sentence-transformers teacher's for the same sentence (squared error; Reimers and Gurevych
  2020), the teacher's vectors computed once and cached at RUN/teacher-vectors.npy. A
  student of another width learns a linear map onto the teacher's. Its plan, with `--pairs` and the
  teacher's in-batch similarity structure, is `tasks/embed_distill.py`'s.

The pooling (`<s>`, or the mean over the tokens) and that map are the model's `embedding` head,
saved with every checkpoint, so `roberta embed`, the hub's `embed()`, `serve` and the HF export
give the trained vector. The dev set is pairs with gold scores (STS-B's dev.tsv): the Spearman
correlation of their cosines picks RUN/best/.

In-batch negatives are the micro-batch's: with gradient accumulation (train.micro_batch_size below
train.batch_size), or on several processes, each micro-batch is its own set of negatives.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from roberta.errors import UserError
from roberta.inputs.text import InputOptions, TrainingText
from roberta.model import EMBEDDING_HEAD, RobertaModel
from roberta.options.finetune import EmbedDataOptions, EmbedPairsOptions
from roberta.runtime.batching import pad
from roberta.runtime.precision import reason, resolve
from roberta.similarity.metric import sts_figures
from roberta.similarity.pairs import Columns, Pair, read_pairs
from roberta.tasks.distill import cached_array
from roberta.tasks.finetune import Batching, Recipe, Task, batched_objective, mean_loss, sequence_length
from roberta.train import distributed
from roberta.train.config import JobConfig
from roberta.train.objective import EXAMPLES, Batch, Objective
from roberta.train.run_state import TEACHER_VECTORS
from roberta.validation import check_value

COSENT_SCALE = 20.0  # Su 2022: cosines x 20 inside the log-sum-exp
# The recipe's defaults: SimCSE's batch 64 and one epoch, at an LR a small model moves with; a
# student distilled from nothing starts far from its teacher and takes a larger one.
EMBED_LR, EMBED_BATCH, EMBED_EPOCHS = 3e-5, 64, 1
DISTILL_EMBED_LR = 5e-4
# Sentences are short, and a batch of similar lengths would make its negatives easy to tell apart.
EMBED_DEFAULTS = ("--data.max_length=128", "--data.group_by_length=false")
# SimCSE's positives differ by dropout alone: a checkpoint trained without any gets 0.1.
EMBED_RECIPE = Recipe(
    EMBED_LR,
    EMBED_BATCH,
    EMBED_EPOCHS,
    (*EMBED_DEFAULTS, "--model.dropout=0.1", "--model.attention_dropout=0.1"),
)
DISTILL_EMBED_RECIPE = Recipe(DISTILL_EMBED_LR, EMBED_BATCH, EMBED_EPOCHS, EMBED_DEFAULTS)
TEACHER_BATCH = 64  # sentences per teacher forward while caching its vectors


def read_sentences(inputs: Sequence[str | Path], limit: int | None, progress: bool = True) -> list[str]:
    """The non-blank lines of text files, a directory of them, JSONL or Parquet/Arrow records (as
    `prepare` reads them, every line a sentence), the first `limit` of them if given."""
    text = TrainingText(list(inputs), InputOptions(line_is_document=True), progress)
    sentences: list[str] = []
    try:
        for batch in text.batches():
            sentences.extend(s for s in batch if s.strip())
            if limit is not None and len(sentences) >= limit:
                break
    finally:
        text.close()
    return sentences[:limit]


# --- losses ------------------------------------------------------------------------------------


def info_nce(
    anchors: torch.Tensor, positives: torch.Tensor, temperature: float, negatives: torch.Tensor | None = None
) -> torch.Tensor:
    """Summed over the batch: -log of the softmax, over every positive (and negative) of the
    batch, of each anchor's cosine with its own positive, the cosines divided by `temperature`."""
    candidates = positives if negatives is None else torch.cat([positives, negatives])
    logits = F.normalize(anchors, dim=-1) @ F.normalize(candidates, dim=-1).T / temperature
    return F.cross_entropy(logits, torch.arange(len(anchors), device=anchors.device), reduction="sum")


def cosent(cosines: torch.Tensor, scores: torch.Tensor, scale: float = COSENT_SCALE) -> torch.Tensor:
    """log(1 + sum over every two pairs i, j with scores[i] > scores[j] of exp(scale (cos_j - cos_i))),
    times the batch's pairs: the trainer divides by them, so micro-batches average by their size."""
    worse = scores[:, None] > scores[None, :]  # [i, j]: pair i should have the higher cosine
    gaps = (scale * (cosines[None, :] - cosines[:, None]))[worse]
    return torch.logsumexp(torch.cat([gaps.new_zeros(1), gaps]), dim=0) * len(cosines)


def regression(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Summed over the batch: each student vector's squared distance from its teacher's (for unit
    teacher vectors such as all-MiniLM-L6-v2's, on the scale of 2 - 2 cos)."""
    return ((student - teacher) ** 2).sum(-1).sum()


def vectors(model: RobertaModel, tokens: torch.Tensor) -> torch.Tensor:
    return model.sentence_embedding(tokens).float()


def embed_loss(model: RobertaModel, batch: Batch, temperature: float) -> dict:
    """The loss the batch's keys call for: a teacher's vectors, a pair with scores (every dev batch
    too, which also hands evaluation its cosines), pairs without, or sentences alone (SimCSE)."""
    first = vectors(model, batch["tokens"])
    if "teacher" in batch:
        return {"loss": regression(first, batch["teacher"].float())}
    if "pair" not in batch:
        a, b = vectors(model, torch.cat([batch["tokens"], batch["tokens"]])).chunk(2)
        return {"loss": info_nce(a, b, temperature)}
    second = vectors(model, batch["pair"])
    if "score" not in batch:
        negatives = vectors(model, batch["negative"]) if "negative" in batch else None
        return {"loss": info_nce(first, second, temperature, negatives)}
    cosines = F.cosine_similarity(first, second, dim=-1)
    return {"loss": cosent(cosines, batch["score"]), EXAMPLES: {"cosine": cosines, "score": batch["score"]}}


def _metrics(sums: dict[str, float], examples: dict[str, np.ndarray]) -> dict[str, float]:
    figures = mean_loss(sums)
    if examples:
        figures.update(sts_figures(examples["cosine"], examples["score"]))
    return figures


# --- the task ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbedData:
    """What an embedding run reads: sentences (`text`) or a table of `pairs`, and the dev pairs."""

    dev: Path
    text: tuple[str | Path, ...] = ()
    pairs: Path | None = None
    columns: Columns = Columns()
    dev_columns: Columns = Columns(score="score")
    max_sentences: int | None = None

    def __post_init__(self) -> None:
        check_value(EmbedDataOptions, "max_sentences", self.max_sentences, "embed")
        if bool(self.text) == (self.pairs is not None):
            raise UserError("give --text (sentences, one a line) or --pairs (a table of pairs), one of them")
        if self.dev_columns.score is None:
            raise UserError("the dev pairs need a score column: their cosines are ranked against it")


@dataclass(frozen=True)
class Encoded:
    """Token ids of the training examples (each a tuple: text, and pair and negative if any), their
    scores, and the dev pairs'."""

    train: list[tuple[list[int], ...]]
    scores: list[float] | None
    dev: list[tuple[list[int], list[int]]]
    dev_scores: list[float]


def check_correlation_pairs(pairs: Sequence[Pair], path: str | Path, use: str) -> None:
    """Refuse pairs whose correlation cannot exist whatever the model: fewer than two, or one
    score for every pair (Spearman and Pearson are undefined; `use` says what they were for)."""
    if len(pairs) < 2:
        raise UserError(f"{path}: {len(pairs)} pair, but a correlation needs at least 2 ({use})")
    if pairs[0].score is not None and len({p.score for p in pairs}) == 1:
        raise UserError(
            f"{path}: every pair scores {pairs[0].score:g}: a correlation with a constant is "
            f"undefined ({use})"
        )


def check_learnable(data: EmbedData, job: JobConfig) -> None:
    """Refuse, before the text is read under a bar, a contrastive run whose loss is 0 whatever the
    weights: each example's negatives are the other examples of its forward pass (SimCSE, in-batch
    negatives), and CoSENT ranks pairs of pairs. The pairs themselves are checked by `check_pairs`."""
    what = "sentence" if data.pairs is None else "pair"
    loss = LOSSES[objective_name(data)]
    per_pass = min(job.train.batch_size, job.train.micro_batch_size)
    if per_pass < 2:
        raise UserError(
            f"--train.micro_batch_size/batch_size: {per_pass} {what} per forward pass: {loss} loss needs "
            "at least 2, or it is 0 and nothing is learned"
        )
    if data.pairs is None:  # the first two sentences only, without a bar
        found = len(read_sentences(data.text, min(2, data.max_sentences or 2), progress=False))
        if found < 2:
            source = ", ".join(map(str, data.text))
            raise UserError(
                f"{source}: {found} sentence{'s' * (found != 1)}"
                f"{' (--max-sentences)' if data.max_sentences == 1 else ''}: {loss} loss needs another "
                "sentence in the batch (at least 2), or it is 0 and nothing is learned"
            )


def check_pairs(encoded: Encoded, data: EmbedData) -> None:
    """`check_learnable` for the training pairs of --pairs, once read."""
    if data.pairs is None:
        return
    loss = LOSSES[objective_name(data)]
    if len(encoded.train) < 2:
        raise UserError(
            f"{data.pairs}: {len(encoded.train)} pair: {loss} loss needs another pair in the batch "
            "(at least 2), or it is 0 and nothing is learned"
        )
    if encoded.scores is not None and len(set(encoded.scores)) == 1:
        raise UserError(
            f"{data.pairs}: every pair scores {encoded.scores[0]:g}: {loss} loss is 0 and nothing is learned"
        )


LOSSES = {"simcse": "SimCSE's", "cosent": "CoSENT's", "in-batch negatives": "the in-batch"}


def encode_data(data: EmbedData, tokenizer, max_length: int, progress: bool) -> tuple[Encoded, list[str]]:
    """The data read, checked and encoded, dev first (its errors before minutes of reading text);
    with the training sentences, for a teacher to read."""
    dev = read_pairs(data.dev, data.dev_columns)
    check_correlation_pairs(dev, data.dev, "the dev Spearman picks the best checkpoint")

    def ids(texts: list[str]) -> list[list[int]]:
        return tokenizer.encode_batch(texts, None, max_length=max_length, truncation="longest_first")

    dev_ids = list(zip(ids([p.text for p in dev]), ids([p.pair for p in dev])))
    dev_scores = [p.score for p in dev]
    if data.pairs is not None:
        pairs = read_pairs(data.pairs, data.columns)
        fields = [ids([p.text for p in pairs]), ids([p.pair for p in pairs])]
        if data.columns.negative is not None:
            fields.append(ids([p.negative for p in pairs]))
        scores = [p.score for p in pairs] if data.columns.score is not None else None
        return Encoded(list(zip(*fields)), scores, dev_ids, dev_scores), []
    sentences = read_sentences(data.text, data.max_sentences, progress)
    return Encoded([(x,) for x in ids(sentences)], None, dev_ids, dev_scores), sentences


def embed_objective(
    encoded: Encoded,
    heads: dict[str, dict],
    job: JobConfig,
    pad_id: int,
    rank: int,
    world: int,
    temperature: float,
    teacher: Callable[[], np.ndarray] | None = None,
    groups: Callable[[], np.ndarray] | None = None,
) -> Objective:
    """Batches of the training examples (their teacher's vectors, rows of `teacher()`, if any; a
    batch from one of `groups`, if given) and of the dev pairs, and the loss their keys call for
    (`embed_loss`)."""
    names = ("tokens", "pair", "negative")

    def collate(examples: Sequence[tuple[list[int], ...]], scores, indices: np.ndarray) -> Batch:
        batch = {
            name: pad([examples[i][k] for i in indices], pad_id)
            for k, name in enumerate(names[: len(examples[0])])
        }
        if scores is not None:
            batch["score"] = torch.tensor([scores[i] for i in indices], dtype=torch.float32)
        if teacher is not None:
            batch["teacher"] = torch.from_numpy(np.asarray(teacher()[indices]))
        return batch

    def lengths(examples: Sequence[tuple[list[int], ...]]) -> list[int]:
        return [max(map(len, x)) for x in examples]  # a sequence's length, for batching and attention FLOPs

    def dev_batch(indices: np.ndarray) -> Batch:
        batch = {name: pad([encoded.dev[i][k] for i in indices], pad_id) for k, name in enumerate(names[:2])}
        return {**batch, "score": torch.tensor([encoded.dev_scores[i] for i in indices], dtype=torch.float32)}

    def processed(batch: Batch) -> int:
        """The real tokens the encoder ran (throughput and MFU): every text of the batch, and a
        SimCSE batch twice."""
        real = sum(int(batch[k].ne(pad_id).sum()) for k in names if k in batch)
        return 2 * real if "pair" not in batch and "teacher" not in batch else real

    objective = batched_objective(
        "embed",
        Batching(job, pad_id, rank, world),
        train_lengths=lengths(encoded.train),
        train_batch=lambda indices: collate(encoded.train, encoded.scores, indices),
        eval_sets={"dev": (lengths(encoded.dev), dev_batch)},
        heads=heads,
        loss=functools.partial(embed_loss, temperature=temperature),
        metrics=_metrics,
        best_metric="spearman",
        figures={"dev": ("loss", "pearson", "spearman")},
        counts=lambda batch: {"loss": len(batch["tokens"])},
        train_groups=groups,
    )
    return dataclasses.replace(objective, tokens=processed)


def embedding_heads(
    model: RobertaModel, pool: str | None, dim: int | None, source: str | Path
) -> dict[str, dict]:
    """The task's `embedding` head: the starting model's where it has one (a --pool, or a
    teacher's width `dim`, other than its own is refused), else a new one pooling by `pool`
    (default mean) with a map onto `dim` where that is not the model's width."""
    width = None if dim in (None, model.config.hidden_size) else dim
    if EMBEDDING_HEAD not in model.heads:
        spec = {"kind": "embedding", "pool": pool or "mean", **({"dim": width} if width else {})}
        return {EMBEDDING_HEAD: spec}
    have = model.heads[EMBEDDING_HEAD].spec()
    if pool is not None and pool != have["pool"]:
        raise UserError(
            f"{source}: its embedding head pools by {have['pool']!r}, not {pool!r}: give --pool "
            f"{have['pool']}, or start from a checkpoint without one"
        )
    if dim is not None and have.get("dim", model.config.hidden_size) != dim:
        raise UserError(
            f"{source}: its embedding head gives {have.get('dim', model.config.hidden_size)} dimensions, "
            f"the teacher's vectors {dim}"
        )
    return {EMBEDDING_HEAD: have}


def plan_embedding(
    data: EmbedData,
    pool: str | None,
    temperature: float,
    job: JobConfig,
    model: RobertaModel,
    tokenizer,
    source: str | Path,
    progress: bool = True,
) -> Task:
    """Contrastive training of `model` (from `source`) into a sentence encoder on `data`, checked and
    encoded; RUN/best/ holds the checkpoint of the best dev Spearman, with its embedding head."""
    check_value(EmbedPairsOptions, "temperature", temperature, "finetune embed")
    heads = embedding_heads(model, pool, None, source)
    max_length = sequence_length(job, model, 3, "<s> text </s>")
    check_learnable(data, job)
    encoded, _ = encode_data(data, tokenizer, max_length, progress)
    check_pairs(encoded, data)
    return Task(
        objective=lambda member, rank, world: embed_objective(
            encoded, heads, member, tokenizer.pad_id, rank, world, temperature
        ),
        max_length=max_length,
        run_info={"task": "embed", "objective": objective_name(data), **_run_info(heads, encoded)},
    )


def objective_name(data: EmbedData) -> str:
    if data.pairs is None:
        return "simcse"
    return "cosent" if data.columns.score is not None else "in-batch negatives"


def _run_info(heads: dict[str, dict], encoded: Encoded) -> dict:
    return {"embedding": heads[EMBEDDING_HEAD], "examples": len(encoded.train), "dev_pairs": len(encoded.dev)}


def teacher_pass_precision(requested: str) -> tuple[str, str]:
    """What a sentence-transformers teacher's pass over the texts runs in, and why (for the run's
    record). The teacher runs on the CPU (SentenceEncoder.load) and its pass is inference over many
    texts, where bf16 paid even at all-MiniLM-L6-v2's 384 width (2.4x on passages, 2.5x on short
    texts with AMX), unlike the narrow students' training that MIN_CPU_WIDTH keeps in fp32: `auto`
    is bf16 wherever the CPU has native bf16 units, whatever the width."""
    cpu = torch.device("cpu")
    chosen = resolve(requested, cpu)
    return chosen, reason(requested, chosen, cpu)


@dataclass
class TeacherVectors:
    """The teacher's vectors of the training sentences, cached at --out (`cached_array`)."""

    teacher: object | None  # roberta.convert.sentence_transformers.SentenceEncoder
    sentences: list[str]
    progress: bool = True
    precision: str = "fp32"  # of the teacher's pass (fp32, bf16): part of what the cache was made from
    array: np.ndarray | None = None

    def prepare(self, out: Path, placement: distributed.Placement) -> None:
        teacher, precision = self.teacher, self.precision
        want = (
            {"teacher": teacher.fingerprint(), "data": texts_hash(self.sentences), "precision": precision}
            if placement.is_main
            else {}
        )
        compute = lambda: teacher.encode(  # noqa: E731
            self.sentences, self.progress, what="the training sentences", precision=precision
        )
        self.array = cached_array(out, TEACHER_VECTORS, want, compute, placement)
        self.teacher = None

    def vectors(self) -> np.ndarray:
        return self.array


def texts_hash(texts: Sequence[str]) -> str:
    """sha256 of the texts, in order (each with its length, so no two lists hash alike by joining)."""
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()
