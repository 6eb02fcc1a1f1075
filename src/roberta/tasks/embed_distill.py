"""`distill embed`: a student taught a sentence-transformers teacher's vectors, on sentences or on
pairs of texts, and the teacher's similarity structure within each batch.

- `--text FILE|DIR`: sentences, one a line; each student vector regressed onto the teacher's
  (squared error; Reimers and Gurevych 2020).
- `--pairs FILE`: pairs of texts, such as a query and a passage: both texts regressed onto the
  teacher's vectors, read at up to `--data.max_length` tokens each (the teacher's own limit, 256 word
  pieces for all-MiniLM-L6-v2, lets passages in whole). Issue #47's students learn retrieval from
  pseudo-queries and their passages (the inverse cloze task: benchmarks/experiments/retrieval_data.py).
- `--similarity-weight W`: beside the vectors, the batch's similarity structure. For pairs, each first
  text's softmax over its cosines with the batch's second texts (and each second text's over the
  firsts), at `--similarity-temperature`, is pulled onto the teacher's by KL divergence: the in-batch
  distillation of TCT-ColBERT (Lin et al. 2021), which teaches the ranking a retriever needs, not
  only each vector on its own. For sentences, each one's softmax over the batch's other sentences.
  The default temperature, 0.05, is the scale of 20 all-MiniLM-L6-v2 was itself trained with
  (sentence-transformers' MultipleNegativesRankingLoss).
- `--topic-batches K`: each batch drawn from one of K topics, clusters of the teacher's vectors of
  the (first) texts (`similarity.topics`): the batch's other passages are near ones, whose order
  the structure then teaches (topic-aware sampling, Hofstätter et al. 2021).

The teacher reads every text once; its vectors are cached at RUN/teacher-vectors.npy ([N, D], a pair's
two texts on consecutive rows).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from roberta.errors import UserError
from roberta.model import RobertaModel
from roberta.options.finetune import SIMCSE_TEMPERATURE
from roberta.options.retrieval import SIMILARITY_TEMPERATURE, SIMILARITY_WEIGHT, DistillLeverOptions
from roberta.similarity.pairs import read_pairs
from roberta.similarity.topics import check_count, topics
from roberta.tasks.embed import (
    EmbedData,
    TeacherVectors,
    _run_info,
    embed_loss,
    embed_objective,
    embedding_heads,
    encode_data,
    regression,
    teacher_pass_precision,
    vectors,
)
from roberta.tasks.finetune import Task, sequence_length
from roberta.train.config import JobConfig
from roberta.train.objective import Batch
from roberta.train.run_state import TEACHER_VECTORS
from roberta.validation import check_value


@dataclass(frozen=True)
class Similarity:
    """How much the teacher's in-batch similarity structure weighs beside its vectors, the
    temperature of the softmax over each text's cosines, and the topics a batch is drawn from
    (0: batches drawn at random)."""

    weight: float = SIMILARITY_WEIGHT
    temperature: float = SIMILARITY_TEMPERATURE
    topics: int = 0

    def __post_init__(self) -> None:
        # The command line's rules and message ("field 'similarity_weight' must be ..."): a float
        # field is a finite number, the weight at least 0, the temperature positive.
        fields = (
            ("similarity_weight", self.weight),
            ("similarity_temperature", self.temperature),
            ("topic_batches", self.topics),
        )
        for name, value in fields:
            check_value(DistillLeverOptions, name, value, "distill embed")


def cosine_logits(a: torch.Tensor, b: torch.Tensor, temperature: float, skip_diagonal: bool) -> torch.Tensor:
    """[len(a), len(b)] cosines / temperature; the diagonal at -inf where a text meets itself."""
    logits = F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T / temperature
    if skip_diagonal:
        logits = logits.masked_fill(torch.eye(len(a), dtype=torch.bool, device=a.device), float("-inf"))
    return logits


def structure_loss(
    student: tuple[torch.Tensor, torch.Tensor],
    teacher: tuple[torch.Tensor, torch.Tensor],
    temperature: float,
    same: bool,
) -> torch.Tensor:
    """Summed over the rows: KL(teacher || student) of each row's softmax over the other side's
    texts, both ways for pairs (`same` False), one way for a batch against itself (`same` True,
    itself left out). 0 for a batch of one text against itself (it has no other)."""
    if same and len(student[0]) < 2:
        return student[0].sum() * 0
    directions = [(student, teacher)] if same else [(student, teacher), (student[::-1], teacher[::-1])]
    total = student[0].new_zeros(())
    for (sa, sb), (ta, tb) in directions:
        s = cosine_logits(sa, sb, temperature, same).log_softmax(-1)
        t = cosine_logits(ta, tb, temperature, same).log_softmax(-1)
        if same:  # the diagonal's -inf: its probability is 0 on both sides
            s, t = s.masked_fill(s.isinf(), 0), t.masked_fill(t.isinf(), 0)
        total = total + F.kl_div(s, t, log_target=True, reduction="sum")
    return total if same else total / 2


def distill_loss(model: RobertaModel, batch: Batch, similarity: Similarity) -> dict:
    """A training batch: the squared distance of every text's vector from its teacher's, plus the
    similarity structure's KL at `similarity.weight`; a dev batch (scored pairs): `embed_loss`'s."""
    if "teacher" not in batch:
        return embed_loss(model, batch, SIMCSE_TEMPERATURE)
    teacher = batch["teacher"].float()
    first = vectors(model, batch["tokens"])
    if teacher.dim() == 2:  # sentences
        loss = regression(first, teacher)
        pairs, same = ((first, first), (teacher, teacher)), True
    else:  # pairs: [B, 2, D]
        second = vectors(model, batch["pair"])
        loss = regression(first, teacher[:, 0]) + regression(second, teacher[:, 1])
        pairs, same = ((first, second), (teacher[:, 0], teacher[:, 1])), False
    if similarity.weight > 0:
        loss = loss + similarity.weight * structure_loss(*pairs, similarity.temperature, same)
    return {"loss": loss}


def transfer_texts(data: EmbedData, sentences: list[str]) -> list[str]:
    """What the teacher reads: the sentences, or each pair's two texts on consecutive rows."""
    if data.pairs is None:
        return sentences
    return [text for p in read_pairs(data.pairs, data.columns) for text in (p.text, p.pair)]


def plan_embedding_distillation(
    data: EmbedData,
    teacher_dir: str | Path,
    pool: str | None,
    job: JobConfig,
    model: RobertaModel,
    tokenizer,
    source: str | Path,
    progress: bool = True,
    similarity: Similarity = Similarity(),
    teacher_precision: str = "auto",
) -> Task:
    """The student `model` (from `source`) trained to give a sentence-transformers teacher's
    vectors (read in `teacher_precision`) for the sentences of `data.text`, or both texts of
    `data.pairs`, and (`similarity`) its similarity structure; RUN/best/: the best dev Spearman's."""
    from roberta.convert.sentence_transformers import SentenceEncoder

    if data.pairs is not None and (data.columns.score or data.columns.negative):
        raise UserError(
            f"{data.pairs}: distill embed reads the pairs' two texts only; the teacher's vectors are "
            "their labels (drop the score and negative columns)"
        )
    max_length = sequence_length(job, model, 3, "<s> text </s>")
    teacher = SentenceEncoder.load(teacher_dir)  # refused before a bar is drawn over the text
    heads = embedding_heads(model, pool, teacher.dim, source)
    encoded, sentences = encode_data(data, tokenizer, max_length, progress)
    if data.pairs is not None and len(encoded.train) < 1:
        raise UserError(f"{data.pairs}: no pairs")
    if similarity.topics:
        check_count(similarity.topics, len(encoded.train))
    chosen, why = teacher_pass_precision(teacher_precision)
    cache = TeacherVectors(teacher, transfer_texts(data, sentences), progress, chosen)
    per_example = 1 if data.pairs is None else 2
    shape = (-1, teacher.dim) if per_example == 1 else (-1, 2, teacher.dim)
    teacher_vectors = lambda: cache.vectors().reshape(shape)  # noqa: E731

    def objective(member: JobConfig, rank: int, world: int):
        groups = None
        if similarity.topics:  # the topics of the first texts, a pair's query, once the cache is made
            seed = member.train.seed
            groups = lambda: topics(cache.vectors()[::per_example], similarity.topics, seed)  # noqa: E731
        made = embed_objective(
            encoded, heads, member, tokenizer.pad_id, rank, world, SIMCSE_TEMPERATURE, teacher_vectors, groups
        )
        return dataclasses.replace(made, loss=lambda m, batch: distill_loss(m, batch, similarity))

    return Task(
        objective=objective,
        max_length=max_length,
        run_info={
            "task": "embed",
            "objective": "distillation" + (" (pairs)" if data.pairs is not None else ""),
            "teacher": str(teacher_dir),
            "teacher_precision": why,
            "similarity": dataclasses.asdict(similarity),
            **_run_info(heads, encoded),
        },
        prepare=cache.prepare,
        keep=TEACHER_VECTORS,
    )
