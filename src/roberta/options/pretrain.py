"""The options of `roberta pretrain` beside the job's sections (`train/config.py`, overridden as
`--section.key=value`): the run's files, where the model starts, and `--teacher`'s distillation."""

from __future__ import annotations

from dataclasses import dataclass

from roberta.options.declare import check, model_option, option, required

# DistilBERT weighs soft targets : masked LM : cosine as 5 : 2 : 1 (Sanh et al. 2019); here
# relative to the masked LM's weight of 1.
SOFT_WEIGHT = 2.5
COSINE_WEIGHT = 0.5


@dataclass(frozen=True)
class PretrainOptions:
    config: str | None = option(
        None, "job TOML, e.g. configs/pretrain-tiny.toml (default: the paper's base recipe)"
    )
    data: str = required("prepared corpus directory", None)
    out: str = required("run directory", None)
    tokenizer: str | None = option(
        None, "tokenizer directory saved into checkpoints (default: found in/beside --data)"
    )
    resume: bool = option(
        False,
        "continue the run in --out from its latest checkpoint (a finished one goes on if "
        "train.max_steps grew)",
    )
    overwrite: bool = option(
        False, "replace what --out holds (a run, or anything else), once the command has been checked"
    )
    model: str | None = model_option(
        "start from a checkpoint (ours, HF or fairseq) instead of random weights",
        older=("--init-from",),
        default=None,
    )
    scale: float | None = option(None, "shrink batch, steps and warmup together (same as --train.scale)")
    init_layers: str | None = option(
        None,
        "keep only these layers of --model (0-based, e.g. 0,2: DistilBERT's every other layer)",
        metavar="I,J",
    )


@dataclass(frozen=True)
class PretrainTeacher:
    """`pretrain --teacher`: DistilBERT's distillation terms beside the masked-LM loss. On the
    command line each weight is taken only where given (and then needs --teacher); checked when
    made, from the command line or from Python (`tasks.pretrain_distill.PretrainDistillation`)."""

    teacher: str = option(None, "distil from this checkpoint (same tokenizer): its soft masked-LM targets")
    temperature: float = option(2.0, "softmax temperature of the soft targets (default {default:g})")
    soft_weight: float = option(
        SOFT_WEIGHT, "weight of the soft-target loss, the masked-LM loss's being 1 (default {default})"
    )
    # None: COSINE_WEIGHT where the widths match, else 0.
    cosine_weight: float | None = option(
        None,
        f"weight of the cosine loss between last hidden states (default {COSINE_WEIGHT} where the "
        "teacher's width is the student's, else 0)",
    )

    RANGES = {"temperature": ">0", "soft_weight": ">=0", "cosine_weight": ">=0"}

    def __post_init__(self) -> None:
        check(self, "pretrain")
