"""Pretraining distillation, DistilBERT's recipe (Sanh et al. 2019): the student's masked-LM loss,
plus the teacher's soft masked-LM targets, plus (where the widths match) a cosine loss pulling
the student's last hidden states toward the teacher's; and a student started from some of the
teacher's layers (DistilBERT took every other one).

    roberta pretrain --config configs/pretrain-tiny.toml --data corpus/ --out runs/student \
        --teacher runs/big/checkpoints/step-N --model runs/big/checkpoints/step-N --init-layers 0,2

The teacher runs in eval mode without gradients on the very batch the student sees (the same
masked positions), so a run resumes exactly as any pretraining run does. Held-out evaluation
reports the student's own masked-LM figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from roberta.checkpoint import require_lm_head
from roberta.data.corpus import check_tokenizer
from roberta.errors import UserError
from roberta.model import RobertaModel
from roberta.options.pretrain import COSINE_WEIGHT, SOFT_WEIGHT, PretrainTeacher  # noqa: F401 (old home)
from roberta.tasks.distill import soft_kl


@dataclass(frozen=True)
class PretrainDistillation(PretrainTeacher):
    """The teacher checkpoint and the weights of its two terms beside the masked-LM loss (1): the
    fields, their defaults (DistilBERT's, `SOFT_WEIGHT`, `COSINE_WEIGHT`) and their rules are
    `pretrain --teacher`'s options (`roberta.options.pretrain.PretrainTeacher`), checked when made."""

    def record(self) -> dict:
        return {k: str(v) if k == "teacher" else v for k, v in dataclasses.asdict(self).items()}


@dataclass
class Teacher:
    """A loaded teacher and the terms it adds to each training batch's loss."""

    model: RobertaModel
    temperature: float
    soft_weight: float
    cosine_weight: float

    @property
    def needs_all_positions(self) -> bool:
        """The cosine term reads every real position's last hidden state, not only the masked ones."""
        return self.cosine_weight > 0

    def terms(
        self,
        tokens: torch.Tensor,
        selected: torch.Tensor,
        hidden: torch.Tensor,
        logits: torch.Tensor,
        unpad: bool,
    ) -> dict[str, torch.Tensor]:
        """Summed soft-target loss over the masked positions (`logits`: the student's there) and,
        if weighted, summed cosine distance over the real positions (`hidden`: the student's
        [B, T, H]); each already multiplied by its weight."""
        with torch.no_grad():
            if self.needs_all_positions:
                taught = self.model(tokens, unpad=unpad).last_hidden_state
                teacher_logits = self.model.lm_logits(taught, selected)
            else:
                teacher_logits = self.model.lm_logits(
                    self.model(tokens, select=selected, unpad=unpad).last_hidden_state
                )
        soft = soft_kl(logits.float(), teacher_logits.float(), self.temperature).sum()
        out = {"soft": self.soft_weight * soft}
        if self.needs_all_positions:
            real = tokens.ne(self.model.config.padding_idx)
            similarity = F.cosine_similarity(hidden[real].float(), taught[real].float(), dim=-1)
            out["cosine"] = self.cosine_weight * (1.0 - similarity).sum()
        return out


def load_teacher(
    settings: PretrainDistillation, student: RobertaModel, data: str | Path, seq_len: int
) -> Teacher:
    """The teacher in eval mode without gradients; refused unless it has a trained masked-LM head
    (a stand-in head would teach random targets), its tokenizer is the one the corpus at `data`
    was prepared with, it scores the student's vocabulary and it reads sequences of `seq_len`."""
    from roberta.convert import load_any

    model, tokenizer = load_any(settings.teacher)
    what = f"--teacher {settings.teacher}"
    require_lm_head(model, "pretrain --teacher (its masked-LM predictions are the soft targets)")
    if model.config.max_seq_len < seq_len:
        raise UserError(
            f"{what}: the teacher reads at most {model.config.max_seq_len} tokens, but the job's "
            f"sequences are {seq_len} (data.seq_len): give --data.seq_len={model.config.max_seq_len} or less"
        )
    if tokenizer is not None:
        check_tokenizer(data, tokenizer, what=what)
    mine, theirs = student.config, model.config
    if (theirs.vocab_size, theirs.padding_idx) != (mine.vocab_size, mine.padding_idx):
        raise UserError(
            f"{what}: the teacher has {theirs.vocab_size} tokens (padding id {theirs.padding_idx}), "
            f"the student {mine.vocab_size} (padding id {mine.padding_idx})"
        )
    same_width = theirs.hidden_size == mine.hidden_size
    cosine = settings.cosine_weight
    if cosine is None:
        cosine = COSINE_WEIGHT if same_width else 0.0
    elif cosine > 0 and not same_width:
        raise UserError(
            f"--cosine-weight {cosine}: the teacher's hidden states are {theirs.hidden_size} wide, the "
            f"student's {mine.hidden_size}; the cosine loss needs equal widths (use --cosine-weight 0)"
        )
    model = model.float().eval().requires_grad_(False)
    return Teacher(model, settings.temperature, settings.soft_weight, cosine)


def keep_layers(model: RobertaModel, layers: list[int], source: str | Path) -> RobertaModel:
    """A model of `model`'s shape but only `layers` (in that order), its embeddings and masked-LM
    head copied; task heads are left behind."""
    count = model.config.num_layers
    if not layers or any(not 0 <= i < count for i in layers) or len(set(layers)) != len(layers):
        raise UserError(
            f"--init-layers {','.join(map(str, layers))}: give distinct layers of {source}, which has "
            f"{count} (0..{count - 1})"
        )
    student = RobertaModel(dataclasses.replace(model.config, num_layers=len(layers)))
    rename = {f"layers.{old}.": f"layers.{new}." for new, old in enumerate(layers)}
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith("heads."):
            continue
        if key.startswith("layers."):
            prefix = ".".join(key.split(".")[:2]) + "."
            if prefix not in rename:
                continue
            key = rename[prefix] + key[len(prefix) :]
        state[key] = value
    student.load_state_dict(state)
    return student


def parse_layers(text: str) -> list[int]:
    """ "0,2" → [0, 2], with a one-line error for anything else."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"--init-layers {text!r}: give layer numbers separated by commas, e.g. 0,2") from None
