"""The job configuration: typed dataclasses read from TOML and overridden with `--section.key=value`.

A job file has the sections [model], [data], [optim], [schedule] and [train]; every key is a
field below, every field has a default, so a file only states what differs. [data] belongs to
the task: its dataclass is passed in by the task (`load_job_config(..., data=PretrainData)`), so
a fine-tuning job has no masking or packing options. Each section may declare `CHOICES` (allowed
values) and `RANGES` (bounds) for its fields (`roberta.validation`): a value read from a file or
an override is refused with its file and line, or the override, and the field; a section built
in code checks itself.
`train.scale` shrinks a paper-sized recipe by one number (see `scaled`); `budget` turns epochs
and fractions into steps once the task knows how many batches an epoch holds.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.validation import check_fields, check_value, field_types


class JobSection:
    """A section of the job file: built, it checks its fields against its annotations, `CHOICES`
    and `RANGES`, naming them `NAME.field` in the refusal."""

    NAME: ClassVar[str]

    def __post_init__(self) -> None:
        check_fields(self, "job", prefix=f"{self.NAME}.")


@dataclass(frozen=True)
class ModelSection(JobSection):
    NAME: ClassVar = "model"

    preset: str = "base"
    # Any of these replaces the preset's value; None keeps it. vocab_size comes from the tokenizer.
    hidden_size: int | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    ffn_size: int | None = None
    max_positions: int | None = None
    dropout: float | None = None
    attention_dropout: float | None = None
    classifier_dropout: float | None = None  # inside sentence-level heads
    init_std: float | None = None  # std of the normal initialisation (BERT's and fairseq's: 0.02)
    # How the position table starts when the model is built from scratch: "normal" like every
    # other weight, or "sinusoidal" (tasks.pretrain.sinusoidal_positions; still learned).
    position_init: str = "normal"
    # How pretraining's forward computes, the same loss and gradients either way (fine-tuning
    # ignores them). The last layer computes the masked positions only (all the loss reads; ~85%
    # of that layer's products skipped); false: every position, as HF and fairseq do.
    last_layer_masked_only: bool = True
    # The layers compute the real tokens only, padding left out but for attention (dropout's
    # random stream included); false: every position of the padded batch.
    unpad: bool = True

    # Fields that choose how a model is built or run rather than its shape (not RobertaConfig's).
    NOT_CONFIG: ClassVar = ("preset", "position_init", "last_layer_masked_only", "unpad")
    PRETRAINING_ONLY: ClassVar = ("last_layer_masked_only", "unpad")
    CHOICES: ClassVar = {
        "preset": ("tiny", "medium", "base", "large"),
        "position_init": ("normal", "sinusoidal"),
    }
    RANGES: ClassVar = {
        "hidden_size": ">0",
        "num_layers": ">0",
        "num_heads": ">0",
        "ffn_size": ">0",
        "max_positions": ">0",
        "dropout": "[0,1)",
        "attention_dropout": "[0,1)",
        "classifier_dropout": "[0,1)",
        "init_std": ">0",
    }


@dataclass(frozen=True)
class NoData:
    """The [data] section of a job whose task reads no job-level data options."""


@dataclass(frozen=True)
class OptimSection(JobSection):
    NAME: ClassVar = "optim"

    lr: float = 6e-4
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    weight_decay: float = 0.01
    clip_norm: float = 0.0  # 0 = no clipping (the paper's setting)
    # How AdamW's update runs: one fused kernel over all parameters (the default), torch's
    # multi-tensor `foreach` path, or a per-parameter loop. The same update to rounding.
    implementation: str = "fused"

    CHOICES: ClassVar = {"implementation": ("fused", "foreach", "for-loop")}
    RANGES: ClassVar = {"lr": ">0", "eps": ">0", "weight_decay": ">=0", "clip_norm": ">=0", "betas": "[0,1)"}


@dataclass(frozen=True)
class ScheduleSection(JobSection):
    NAME: ClassVar = "schedule"

    kind: str = "linear"  # linear | polynomial | wsd (warmup-stable-decay)
    warmup_steps: int = 24000
    power: float = 1.0  # polynomial decay exponent
    end_lr: float = 0.0
    decay_fraction: float = 0.1  # wsd: the last fraction of steps that decays
    warmup_fraction: float = 0.0  # > 0: warmup is this fraction of all updates (replaces warmup_steps)

    CHOICES: ClassVar = {"kind": ("linear", "polynomial", "wsd")}
    RANGES: ClassVar = {
        "warmup_steps": ">=0",
        "power": ">0",
        "end_lr": ">=0",
        "decay_fraction": "[0,1]",
        "warmup_fraction": "[0,1)",
    }


@dataclass(frozen=True)
class TrainSection(JobSection):
    NAME: ClassVar = "train"

    batch_size: int = 8192  # sequences per optimizer step, over all ranks
    micro_batch_size: int = 32  # sequences per forward pass on one rank
    max_steps: int = 500000
    epochs: float = 0.0  # > 0: the budget is this many passes over the training data (replaces max_steps)
    scale: float = 1.0  # multiplies batch_size, max_steps and warmup_steps (Table 3 keeps equal compute)
    seed: int = 1
    precision: str = "auto"  # auto (bf16 on a GPU or CPU with bf16 units, else fp32) | fp32 | bf16 | fp16
    parallel: str = "ddp"  # ddp | fsdp
    device: str = "auto"  # auto | cpu | cuda
    log_every: int = 10
    eval_every: int = 1000  # 0: at the end of every epoch
    eval_batches: int = 50  # micro-batches of each held-out set per evaluation, per rank; 0 = all
    checkpoint_every: int = 1000  # 0: at the end of every epoch
    keep_last: int = 3
    best_metric: str = ""  # the evaluation figure RUN/best/ is chosen by ("" = the task's own)
    peak_tflops: float = 0.0  # for MFU; 0 = known GPU table or a measured CPU matmul peak
    progress: bool = True  # the progress bar (`roberta probe` runs many short runs under one bar of its own)
    # Where the records go besides metrics.jsonl and curves.png (train.metrics.REPORTERS); W&B runs
    # offline unless WANDB_API_KEY is set.
    report_to: str = "tensorboard"

    CHOICES: ClassVar = {
        "precision": ("auto", "fp32", "bf16", "fp16"),
        "parallel": ("ddp", "fsdp"),
        "device": ("auto", "cpu", "cuda"),
        "report_to": ("tensorboard", "wandb", "tensorboard,wandb", "wandb,tensorboard", "none"),
    }
    RANGES: ClassVar = {
        "batch_size": ">0",
        "micro_batch_size": ">0",
        "max_steps": ">0",
        "epochs": ">=0",
        "scale": ">0",
        "log_every": ">0",
        "eval_every": ">=0",
        "eval_batches": ">=0",
        "checkpoint_every": ">=0",
        "keep_last": ">=0",
        "peak_tflops": ">=0",
    }


@dataclass(frozen=True)
class JobConfig:
    model: ModelSection = field(default_factory=ModelSection)
    data: object = field(default_factory=NoData)  # the task's dataclass
    optim: OptimSection = field(default_factory=OptimSection)
    schedule: ScheduleSection = field(default_factory=ScheduleSection)
    train: TrainSection = field(default_factory=TrainSection)

    def model_config(self, vocab_size: int, padding_idx: int = 1) -> RobertaConfig:
        m = self.model
        chosen = {f.name: getattr(m, f.name) for f in dataclasses.fields(m) if f.name not in m.NOT_CONFIG}
        overrides = {k: v for k, v in chosen.items() if v is not None}
        return RobertaConfig.preset(m.preset, vocab_size=vocab_size, padding_idx=padding_idx, **overrides)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def load_job_config(
    path: str | Path | None = None,
    overrides: list[str] = (),
    data: object = NoData(),
    defaults: list[str] = (),
) -> JobConfig:
    """Read a TOML job file (or start from defaults) and apply `--section.key=value` overrides.

    `data` is the task's [data] section with its defaults; `defaults` are overrides a task
    applies before the file (its own recipe), so the file and the command line still win. A step
    budget given in the file or on the command line (`train.max_steps`) replaces a recipe's epoch
    budget, unless `train.epochs` is given there too.
    """
    values: dict[str, dict] = {}
    lines: list[str] = []
    source = "defaults"
    if path is not None:
        path = Path(path)
        source = str(path)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise UserError(f"{path}: no such config file") from None
        except UnicodeDecodeError as e:
            raise UserError(f"{path}: not UTF-8 text (byte {e.start})") from None
        except OSError as e:
            raise UserError(f"{path}: cannot read ({e.strerror})") from None
        try:
            values = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise UserError(f"{path}: invalid TOML ({e})") from None
        lines = text.splitlines()
    job = JobConfig(data=data)
    for item in defaults:
        job = apply_override(job, item)
    given: set[str] = set()  # keys set by the file or the command line
    for section, table in values.items():
        if not isinstance(table, dict):
            raise UserError(f"{source}:{_line_of(lines, section)}: {section!r} is not a [section]")
        for key, value in table.items():
            where = f"{source}:{_line_of(lines, key)}"
            job = _set(job, f"{section}.{key}", value, where)
            given.add(f"{section}.{key}")
    for item in overrides:
        job = apply_override(job, item)
        given.add(_parse_override(item)[0])
    if "train.max_steps" in given and "train.epochs" not in given:
        job = dataclasses.replace(job, train=dataclasses.replace(job.train, epochs=0.0))
    return job


def _parse_override(item: str) -> tuple[str, str]:
    """`--train.max_steps=100` (or without dashes) → ("train.max_steps", "100")."""
    match = re.fullmatch(r"(?:--)?([a-z_]+\.[a-z_]+)=(.*)", item.strip(), flags=re.S)
    if not match:
        raise UserError(f"override {item!r}: expected --section.key=value")
    return match[1], match[2]


def apply_override(job: JobConfig, item: str) -> JobConfig:
    """`--train.max_steps=100` (or without dashes) → a new JobConfig with that field changed."""
    key, text = _parse_override(item)
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text  # a bare word such as --train.precision=bf16
    return _set(job, key, value, f"override --{key}")


def _set(job: JobConfig, key: str, value, where: str) -> JobConfig:
    section_name, _, name = key.partition(".")
    sections = {f.name for f in dataclasses.fields(JobConfig)}
    if section_name not in sections:
        raise UserError(f"{where}: unknown section {section_name!r} (known: {', '.join(sorted(sections))})")
    section = getattr(job, section_name)
    hints = field_types(type(section))
    if name not in hints:
        raise UserError(
            f"{where}: unknown key {key!r} (known: {', '.join(f'{section_name}.{k}' for k in hints)})"
        )
    value = check_value(type(section), name, value, where, prefix=f"{section_name}.")
    return dataclasses.replace(job, **{section_name: dataclasses.replace(section, **{name: value})})


def _line_of(lines: list[str], key: str) -> int:
    for number, line in enumerate(lines, 1):
        if re.match(rf"\s*(\[{re.escape(key)}\]|{re.escape(key)}\s*=)", line):
            return number
    return 0


def scaled(job: JobConfig) -> JobConfig:
    """Apply train.scale: batch, steps and warmup shrink together, so the equal-compute recipes
    of Table 3 stay (nearly) equal. The batch is then rounded to a multiple of the micro-batch
    (or the micro-batch lowered to the batch) so that accumulation divides it."""
    s = job.train.scale  # positive: TrainSection checks itself
    if s == 1.0:
        return job

    def shrink(n: int) -> int:
        return max(1, math.ceil(n * s))

    batch, micro_batch_size = shrink(job.train.batch_size), job.train.micro_batch_size
    if batch <= micro_batch_size:
        micro_batch_size = batch
    else:
        batch = max(1, round(batch / micro_batch_size)) * micro_batch_size
    train = dataclasses.replace(
        job.train,
        batch_size=batch,
        micro_batch_size=micro_batch_size,
        max_steps=shrink(job.train.max_steps),
        scale=1.0,
    )
    schedule = dataclasses.replace(job.schedule, warmup_steps=shrink(job.schedule.warmup_steps))
    return dataclasses.replace(job, train=train, schedule=schedule)


def budget(job: JobConfig, updates_per_epoch: int | None) -> JobConfig:
    """Steps from epochs, warmup from its fraction, and per-epoch evaluation and checkpoints
    (`eval_every` / `checkpoint_every` = 0), once the task knows its epoch length."""
    t, schedule = job.train, job.schedule
    needs_epoch = t.epochs > 0 or t.eval_every == 0 or t.checkpoint_every == 0
    if needs_epoch and not updates_per_epoch:
        raise UserError(
            "train.epochs, eval_every = 0 and checkpoint_every = 0 need a task with a fixed epoch length"
        )
    max_steps = max(1, math.ceil(t.epochs * updates_per_epoch)) if t.epochs > 0 else t.max_steps
    train = dataclasses.replace(
        t,
        max_steps=max_steps,
        eval_every=t.eval_every or updates_per_epoch,
        checkpoint_every=t.checkpoint_every or updates_per_epoch,
    )
    if schedule.warmup_fraction > 0:
        schedule = dataclasses.replace(
            schedule, warmup_steps=max(1, round(schedule.warmup_fraction * max_steps))
        )
    return dataclasses.replace(job, train=train, schedule=schedule)
