"""A new student made from its teacher, for `distill embed --new-student LAYERSxWIDTH`.

The student reads the teacher's vocabulary (the teacher's tokenizer files, read as ours), and each
token's embedding starts as the teacher's own sentence vector of that token alone, cut to the
student's width by PCA: Model2Vec's static model (Tulkens and van Dongen 2024) as the starting
point of a transformer. Those vectors already carry most of what the teacher knows about words: a
frequency-weighted mean of them ranks STS-B's dev pairs at a Spearman of 77.5 (all-MiniLM-L6-v2's
30k WordPiece vocabulary, no training), where a random 2 x 128 model gives 56. Distillation then
only has to teach the layers how words combine: one epoch from this start reached 70.5, from a
random init 29.6 (benchmarks/results/2026-11-27-sentence-embeddings.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from roberta.checkpoint import mark_without_lm_head
from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.model import RobertaModel
from roberta.tasks.finetune import with_model_section
from roberta.tasks.pretrain import sinusoidal_positions
from roberta.train.config import JobConfig

HEAD_WIDTH = 64  # BERT's width per attention head: a 128-wide student gets 2 heads
FFN_RATIO = 4  # the FFN is 4x the width, as in every BERT and RoBERTa shape
INIT_STD = 0.05  # the CPU recipe's init for the layers (configs/pretrain-cpu-overlap.toml)


@dataclass(frozen=True)
class StudentShape:
    layers: int
    width: int
    head_width: int = HEAD_WIDTH  # a student pruned from its teacher has the teacher's heads

    @classmethod
    def parse(cls, text: str) -> StudentShape:
        """'2x128': 2 layers 128 wide; anything else refused in one line."""
        match = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", text)
        if not match or int(match[1]) < 1 or int(match[2]) < 2:
            raise UserError(f"--new-student {text!r}: give LAYERSxWIDTH, e.g. 2x128")
        shape = cls(int(match[1]), int(match[2]))
        if shape.width % shape.heads:
            raise UserError(
                f"--new-student {text!r}: a width of {shape.width} does not split into {shape.heads} "
                f"attention heads (one per {shape.head_width} of width)"
            )
        return shape

    @property
    def heads(self) -> int:
        return max(1, self.width // self.head_width)

    def config(self, vocab_size: int, padding_idx: int, max_length: int) -> RobertaConfig:
        """The student's config: no dropout (a small model distilled on few sentences underfits),
        positions for the teacher's longest input past the padding index, as RoBERTa counts them."""
        return RobertaConfig(
            vocab_size=vocab_size,
            hidden_size=self.width,
            num_layers=self.layers,
            num_heads=self.heads,
            ffn_size=FFN_RATIO * self.width,
            max_positions=max_length + padding_idx + 1,
            padding_idx=padding_idx,
            dropout=0.0,
            attention_dropout=0.0,
            init_std=INIT_STD,
        )


def token_texts(tokenizer) -> list[str]:
    """Each token of the vocabulary as text the teacher reads: a byte-level token's characters
    (its leading space dropped), a WordPiece continuation without its '##'."""
    texts = []
    for i in range(tokenizer.vocab_size):
        text = tokenizer.decode([i], skip_special_tokens=False).strip()
        if tokenizer.kind == "wordpiece":
            text = text.removeprefix("##")
        texts.append(text or tokenizer.id_to_token(i))
    return texts


def token_embeddings(vectors: np.ndarray, width: int) -> np.ndarray:
    """The teacher's token vectors [V, D] (D >= width) on their first `width` principal axes,
    centred, at an RMS of 1: well above the position table's (the init std), so each token starts
    as its own word."""
    centred = vectors.astype(np.float64) - vectors.mean(0)
    _, _, axes = np.linalg.svd(centred, full_matrices=False)
    projected = centred @ axes[:width].T
    return (projected / np.sqrt((projected**2).mean())).astype(np.float32)


def teacher_tokens(teacher, progress: bool = True) -> tuple[object, np.ndarray, int]:
    """The sentence-transformers `teacher`'s (a SentenceEncoder) tokenizer, its vector of every token
    of that vocabulary [V, D], and its longest input in tokens."""
    tokenizer = teacher.tokenizer()
    vectors = teacher.encode(token_texts(tokenizer), progress, what="each token of its vocabulary")
    return tokenizer, vectors, teacher.max_length


def new_student(
    tokenizer, vectors: np.ndarray, max_length: int, shape: StudentShape, seed: int
) -> RobertaModel:
    """A `shape` student in `tokenizer`'s vocabulary, its token embeddings the teacher's `vectors`
    of each token cut to its width, the rest initialised by `seed`."""
    torch.manual_seed(seed)
    model = RobertaModel(shape.config(tokenizer.vocab_size, tokenizer.pad_id, max_length))
    config = model.config
    sinusoidal_positions(model.embed_positions.weight, config.padding_idx, config.init_std)
    with torch.no_grad():
        model.embed_tokens.weight.copy_(torch.from_numpy(token_embeddings(vectors, shape.width)))
        model.embed_tokens.weight[config.padding_idx].zero_()
    return model.train()


@dataclass
class NewStudent:
    """Where `distill embed --new-student` starts (a `Start`): the teacher reads its vocabulary once
    per command; each member (--seeds) gets a student initialised by its own seed."""

    teacher: str | Path
    shape: StudentShape
    progress: bool = True
    _tokens: tuple | None = field(default=None, repr=False)

    @property
    def source(self) -> str:
        return f"a new {self.shape.layers}x{self.shape.width} student of {self.teacher}"

    def tokens(self, teacher=None) -> tuple[object, np.ndarray, int]:
        """`teacher_tokens` of the teacher (a SentenceEncoder, read here when not given), once."""
        from roberta.convert.sentence_transformers import SentenceEncoder

        if self._tokens is None:
            teacher = teacher or SentenceEncoder.load(self.teacher)
            if self.shape.width > teacher.dim:
                raise UserError(
                    f"--new-student {self.shape.layers}x{self.shape.width}: wider than the teacher's "
                    f"{teacher.dim}-dimensional vectors; a student is made narrower"
                )
            self._tokens = teacher_tokens(teacher, self.progress)
        return self._tokens

    def load(self, job: JobConfig) -> tuple[RobertaModel, object]:
        tokenizer, vectors, max_length = self.tokens()
        model = new_student(tokenizer, vectors, max_length, self.shape, job.train.seed)
        # Its masked-LM head is never trained: fill-mask refuses it, exports leave it out.
        return mark_without_lm_head(with_model_section(model, job.model, self.source), self.source), tokenizer
