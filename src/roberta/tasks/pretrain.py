"""Pretraining: the masked-LM objective (+ NSP for the paper's pair-format baselines, + the token
overlap of a pair for OVERLAP-PAIR) and
`roberta pretrain`, a prepared corpus and a job config → a run directory.

    from roberta.tasks.pretrain import load_pretrain_job, pretrain
    job = load_pretrain_job("configs/pretrain-tiny.toml", ["--train.max_steps=1000"])
    result = pretrain(job, data="corpus/", out="runs/tiny")

Batches are dicts with `tokens` [B, T] (padded with the model's padding id), `labels` [B, T]
(the original token at masked positions, IGNORE_INDEX elsewhere) and, for NSP formats,
`nsp_labels` [B] (0: B follows A, 1: B is from another document), for OVERLAP-PAIR `overlap` [B]
(the share of tokens A and B have in common, `data.packing.token_overlap`). Under `torchrun` every rank
calls the same function; each reads its own shard of the data.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F

from roberta.data.corpus import Corpus, check_tokenizer
from roberta.data.loader import DataConfig, PretrainDataset, PretrainLoader
from roberta.data.masking import IGNORE_INDEX, MaskingConfig
from roberta.data.packing import FORMATS, NSP_FORMATS, OVERLAP_PAIR
from roberta.errors import UserError
from roberta.io import read_json
from roberta.model import RobertaModel
from roberta.tasks.pretrain_distill import PretrainDistillation, Teacher, keep_layers, load_teacher
from roberta.train import distributed, run_state
from roberta.train.config import JobConfig, load_job_config, scaled
from roberta.train.metrics import training_flops_per_token
from roberta.train.trainer import JOB_FILE, Batch, Objective, TrainResult, batch_plan, plan_run, train
from roberta.validation import check_fields


@dataclass(frozen=True)
class PretrainData:
    """The [data] section of a pretraining job: how blocks are packed and masked. (How the
    forward computes, `last_layer_masked_only` and `unpad`, is [model]'s.)"""

    format: str = (
        "full-sentences"  # full-sentences | doc-sentences | segment-pair | sentence-pair | overlap-pair
    )
    masking: str = "dynamic"  # dynamic | static
    static_copies: int = 10  # static masking: how many fixed masks each sequence gets (BERT used 10)
    seq_len: int = 512
    mask_prob: float = 0.15
    whole_word: bool = False
    span_length: int = 1  # > 1: mask spans of this many tokens (or words)
    workers: int = 0  # DataLoader worker processes (0: batches built in the training process)

    CHOICES: ClassVar = {"format": FORMATS, "masking": ("dynamic", "static")}
    RANGES: ClassVar = {
        "static_copies": ">0",
        "seq_len": ">0",
        "mask_prob": "(0,1)",
        "span_length": ">0",
        "workers": ">=0",
    }

    def __post_init__(self) -> None:
        check_fields(self, "job", prefix="data.")


def load_pretrain_job(path: str | Path | None = None, overrides: list[str] = ()) -> JobConfig:
    """A pretraining job: the paper's recipe, then the TOML file, then the overrides, then
    `train.scale` applied (batch, steps and warmup shrunk together). What the data decides
    (epochs into steps) is the only later change, in `trainer.plan_run`."""
    return scaled(load_job_config(path, overrides, data=PretrainData()))


NSP_HEAD = "nsp"
NSP_LABELS = "nsp_labels"
OVERLAP_HEAD = "overlap"  # one logit: on `<s>` the pair's token overlap, on a token whether it is shared
OVERLAP_LABELS = "overlap"
SHARED_LABELS = "shared"
PAIR_HEADS = {NSP_HEAD: 2, OVERLAP_HEAD: 1}  # a pair objective's head on `<s>` and its outputs


def pair_head_for(data_format: str) -> str | None:
    """The head on `<s>` a data format trains beside the masked LM, if any."""
    if data_format in NSP_FORMATS:
        return NSP_HEAD
    return OVERLAP_HEAD if data_format == OVERLAP_PAIR else None


@dataclass(frozen=True)
class MaskedLM:
    """What the masked-LM loss computes besides the masked tokens: a pair objective on `<s>` if
    `pair_head` names one (`PAIR_HEADS`: "nsp" or "overlap"); the last layer and the vocabulary at the
    masked positions only, and the real tokens only (`unpad`); with a `teacher`, its distillation
    terms beside it (`roberta.tasks.pretrain_distill`)."""

    pair_head: str | None = None
    last_layer_masked_only: bool = True
    unpad: bool = True
    teacher: Teacher | None = None


def mlm_objective(
    train_batches: Callable[[int], Iterator[Batch]],
    eval_batches: Callable[[], Iterable[Batch]],
    padding_idx: int,
    seq_len: int,
    mask_prob: float,
    terms: MaskedLM = MaskedLM(),
) -> Objective:
    """The masked-LM objective, with the `terms` it names."""
    pair_head, teacher = terms.pair_head, terms.teacher

    def add_heads(model: RobertaModel) -> None:
        if pair_head and pair_head not in model.heads:
            model.add_classification_head(pair_head, PAIR_HEADS[pair_head])

    def counts(batch: Batch) -> dict[str, float]:
        found = {"mlm": int(batch["labels"].ne(IGNORE_INDEX).sum())}
        if pair_head:
            found[pair_head] = int(batch["tokens"].size(0))
        if pair_head == OVERLAP_HEAD:
            found["shared"] = int(batch[SHARED_LABELS].ge(0).sum())
        if teacher is not None:
            found["soft"] = found["mlm"]
            if teacher.needs_all_positions:
                found["cosine"] = int(batch["tokens"].ne(padding_idx).sum())
        return found

    def tokens(batch: Batch) -> int:
        return int(batch["tokens"].ne(padding_idx).sum())

    return Objective(
        name="pretrain",
        add_heads=add_heads,
        train_batches=train_batches,
        eval_sets={"valid": eval_batches},
        counts=counts,
        loss=lambda model, batch: mlm_loss(model, batch, terms),
        metrics=mlm_metrics,
        tokens=tokens,
        flops_per_token=lambda config: _flops_per_token(
            config, seq_len, mask_prob, terms.last_layer_masked_only and not pair_head, teacher
        ),
        # No RUN/best by default: a pretraining checkpoint is large and the last one is what is
        # used; --train.best_metric=loss keeps the lowest held-out loss as well.
        higher_is_better=False,
    )


def _flops_per_token(
    config, seq_len: int, mask_prob: float, masked_only: bool, teacher: Teacher | None
) -> float:
    # The LM head (and the last layer, unless switched off) runs on the masked positions only:
    # count it there. A teacher adds its forward pass, a third of what training it would cost.
    masked_only = masked_only and not (teacher and teacher.needs_all_positions)
    last = mask_prob if masked_only else 1.0
    flops = training_flops_per_token(config, seq_len, head_tokens=mask_prob, last_layer_tokens=last)
    if teacher is not None:
        flops += training_flops_per_token(teacher.model.config, seq_len, mask_prob, last) / 3
    return flops


def mlm_loss(model: RobertaModel, batch: Batch, terms: MaskedLM = MaskedLM()) -> dict[str, torch.Tensor]:
    pair_head, unpad, teacher = terms.pair_head, terms.unpad, terms.teacher
    labels = batch["labels"]
    selected = labels.ne(IGNORE_INDEX)
    targets = labels[selected]
    distilling = teacher is not None and model.training  # held-out figures are the student's own
    # (A pair head reads `<s>` as well, the cosine term every position.)
    if terms.last_layer_masked_only and not pair_head and not (distilling and teacher.needs_all_positions):
        hidden = None
        logits = model.lm_logits(
            model(batch["tokens"], select=selected, unpad=unpad).last_hidden_state
        ).float()
    else:
        hidden = model(batch["tokens"], unpad=unpad).last_hidden_state
        # Scoring only masked positions skips ~85% of the vocabulary projection (most of a small
        # model's FLOPs).
        logits = model.lm_logits(hidden, selected).float()
    out = {
        "mlm": F.cross_entropy(logits, targets, reduction="sum"),
        "mlm_correct": (logits.argmax(-1) == targets).sum(),
    }
    if pair_head == NSP_HEAD:
        nsp_logits = model.classify(NSP_HEAD, hidden).float()
        out["nsp"] = F.cross_entropy(nsp_logits, batch[NSP_LABELS], reduction="sum")
        out["nsp_correct"] = (nsp_logits.argmax(-1) == batch[NSP_LABELS]).sum()
    elif pair_head == OVERLAP_HEAD:
        # Cross-entropy against a soft target: the overlap as the probability of a coin, so the
        # term has NSP's scale and its gradient the sigmoid's, not a squared error's vanishing one.
        logit, target = model.classify(OVERLAP_HEAD, hidden).float().squeeze(-1), batch[OVERLAP_LABELS]
        out["overlap"] = F.binary_cross_entropy_with_logits(logit, target, reduction="sum")
        out["overlap_error"] = (logit.sigmoid() - target).abs().sum()
        # The same head on every labelled token (each as a one-token sequence, so the head reads it as
        # its `<s>`): one label per token, where the pair gives one, so matching is learnt sooner.
        flags = batch[SHARED_LABELS]
        labelled = flags.ge(0)
        token_logit = model.classify(OVERLAP_HEAD, hidden[labelled].unsqueeze(1)).float().squeeze(-1)
        out["shared"] = F.binary_cross_entropy_with_logits(token_logit, flags[labelled], reduction="sum")
        out["shared_correct"] = (token_logit.gt(0) == flags[labelled].bool()).sum()
    if distilling:
        out.update(teacher.terms(batch["tokens"], selected, hidden, logits, unpad))
    return out


def mlm_metrics(sums: dict[str, float], examples: dict | None = None) -> dict[str, float]:
    """loss (nats per masked token), perplexity, masked-token accuracy; NSP loss and accuracy, or the
    overlap loss and mean absolute error, if present."""
    n = max(sums["mlm_count"], 1.0)
    loss = sums["mlm"] / n
    figures = {"loss": loss, "perplexity": math.exp(min(loss, 50.0)), "accuracy": sums["mlm_correct"] / n}
    if "nsp" in sums:
        m = max(sums["nsp_count"], 1.0)
        figures.update(nsp_loss=sums["nsp"] / m, nsp_accuracy=sums["nsp_correct"] / m)
    if "overlap" in sums:
        m = max(sums["overlap_count"], 1.0)
        figures.update(overlap_loss=sums["overlap"] / m, overlap_error=sums["overlap_error"] / m)
        t = max(sums["shared_count"], 1.0)
        figures.update(shared_loss=sums["shared"] / t, shared_accuracy=sums["shared_correct"] / t)
    for term in ("soft", "cosine"):  # distillation's, weighted, in training windows only
        if term in sums:
            figures[f"{term}_loss"] = sums[term] / max(sums[f"{term}_count"], 1.0)
    return figures


@torch.no_grad()
def sinusoidal_positions(weight: torch.Tensor, padding_idx: int, std: float) -> None:
    """Start a learned position table [P, H] as the original Transformer's sinusoids: sin/cos of
    the position at geometric frequencies, at RMS `std` (the normal init's). The table is still
    learned, so the architecture and every export stay RoBERTa's; what changes is that attention
    can tell near from far at step 0. A 2 x 128 model pretrained for 20 CPU minutes leaves its
    plateau minutes sooner this way (benchmarks/experiments/recipe-search.md). `[model] position_init`
    (the CPU recipe)."""
    width = weight.size(1)
    count = weight.size(0) - padding_idx - 1
    position = torch.arange(count, dtype=torch.float32, device=weight.device)[:, None]
    exponent = -torch.arange(0, width, 2, dtype=torch.float32, device=weight.device) / width
    angle = position * 10000.0**exponent
    scale = std * math.sqrt(2)  # a sin/cos column has RMS 1/sqrt(2)
    weight.zero_()  # the padding row and the one before it stay zero: positions start after padding_idx
    weight[padding_idx + 1 :, 0::2] = angle.sin() * scale
    weight[padding_idx + 1 :, 1::2] = angle[:, : width // 2].cos() * scale


def pretrain(
    job: JobConfig,
    data: str | Path,
    out: str | Path,
    *,
    tokenizer: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    init_from: str | Path | None = None,
    init_layers: list[int] | None = None,
    distill: PretrainDistillation | None = None,
) -> TrainResult:
    """Pretrain from scratch (or from `init_from`: ours, HF or fairseq) on the corpus at `data`.

    The tokenizer (saved into every checkpoint) is `tokenizer`, or the one `prepare` saved in
    `data`, or one beside it; without any (a corpus from elsewhere), checkpoints hold the model
    only, with a warning: fill-mask and fine-tuning need a tokenizer beside the weights.

    `out` follows the run-directory rule (`run_state.directory_modes`): a used directory needs
    `resume` (continue: a finished run goes on if `train.max_steps` grew) or `overwrite`.

    `init_layers` keeps only those layers of `init_from`; `distill` adds a teacher's terms to the
    loss (`roberta.tasks.pretrain_distill`). A resumed run must name the teacher it started with.
    """
    out = Path(out)
    placement = distributed.setup(job.train.device)
    (mode,) = run_state.directory_modes(out, [out], resume, overwrite)
    corpus = Corpus(data)
    tok = _find_tokenizer(Path(data), tokenizer)
    if tok is not None:
        check_tokenizer(data, tok)
    else:
        warnings.warn(
            f"{data}: no tokenizer in or beside the corpus, so checkpoints will hold the model only "
            "(pass --tokenizer DIR to save it with them)",
            stacklevel=2,
        )
    torch.manual_seed(job.train.seed)  # every rank builds the same initial weights
    model = _initial_model(job, corpus, data, init_from, init_layers)
    resumed = run_state.resumes(mode)
    teacher = _teacher(distill, model, data, job.data.seq_len, out if resumed else None, placement.device)
    objective = _objective(job, data, corpus, placement, teacher)
    objective.add_heads(model)
    plan = plan_run(
        model, objective, job, out, world_size=placement.world_size, resume=resumed, tokenizer=tok
    )
    if placement.is_main and (overwrite or mode == "restart"):  # everything checked: the old run may go
        run_state.clear_directory(out)
    distributed.barrier()
    run_info = {
        "data": str(data),
        "init_from": str(init_from) if init_from else None,
        "init_layers": init_layers,
        "distill": distill.record() if distill else None,
    }
    return train(model, objective, job, out, tokenizer=tok, placement=placement, run_info=run_info, plan=plan)


def _teacher(
    distill: PretrainDistillation | None,
    model: RobertaModel,
    data: str | Path,
    seq_len: int,
    resumed: Path | None,
    device: torch.device,
) -> Teacher | None:
    """The loaded teacher (None without `distill`), on `device`. A run `resumed` goes on with the
    objective it was started with."""
    if resumed is not None:
        job_file = resumed / JOB_FILE
        recorded = read_json(job_file).get("distill") if job_file.is_file() else None
        given = distill.record() if distill else None
        if recorded != given:
            raise UserError(
                f"{job_file}: field 'distill' is {recorded}, but this command gives {given}: resume "
                "with the teacher and settings the run started with"
            )
    if distill is None:
        return None
    teacher = load_teacher(distill, model, data, seq_len)
    teacher.model.to(device)
    return teacher


def _initial_model(
    job: JobConfig,
    corpus: Corpus,
    data: str | Path,
    init_from: str | Path | None,
    init_layers: list[int] | None = None,
) -> RobertaModel:
    """A model of the job's shape, or `init_from` (ours, HF or fairseq; only `init_layers` of it,
    if given), for the corpus's vocabulary."""
    specials = corpus.specials
    if init_layers is not None and init_from is None:
        raise UserError("--init-layers picks layers of --model: give --model too")
    if init_from is not None:
        from roberta.checkpoint import mark_without_lm_head
        from roberta.convert import load_any

        model, init_tokenizer = load_any(init_from)
        if init_tokenizer is not None:
            check_tokenizer(data, init_tokenizer, what=f"--model {init_from}")
        if model.config.vocab_size != specials.vocab_size or model.config.padding_idx != specials.pad_id:
            raise UserError(
                f"--model {init_from}: the model has {model.config.vocab_size} tokens (padding id "
                f"{model.config.padding_idx}), the corpus {specials.vocab_size} (padding id "
                f"{specials.pad_id})"
            )
        if init_layers is not None:
            model = keep_layers(model, init_layers, init_from)
        # A body imported without a masked-LM head starts one here from its seeded weights, and trains it.
        model = mark_without_lm_head(model, None).train()
    else:
        model = RobertaModel(job.model_config(specials.vocab_size, specials.pad_id))
        if job.model.position_init == "sinusoidal":
            sinusoidal_positions(
                model.embed_positions.weight, model.config.padding_idx, model.config.init_std
            )
    if job.data.seq_len > model.config.max_seq_len:
        raise UserError(
            f"data.seq_len = {job.data.seq_len} exceeds the model's {model.config.max_seq_len} positions"
        )
    return model


def _objective(
    job: JobConfig,
    data: str | Path,
    corpus: Corpus,
    placement: distributed.Placement,
    teacher: Teacher | None = None,
) -> Objective:
    """The masked-LM objective (+ the pair formats' objective) over this rank's share of the corpus."""
    micro_batch_size, _ = batch_plan(job, placement.world_size)
    masking = MaskingConfig(
        mask_prob=job.data.mask_prob,
        whole_word=job.data.whole_word,
        span_length=job.data.span_length,
        static_copies=job.data.static_copies if job.data.masking == "static" else 0,
    )
    data_config = DataConfig(format=job.data.format, seq_len=job.data.seq_len, masking=masking)

    def dataset(split: str) -> PretrainDataset:
        return PretrainDataset(
            data,
            split=split,
            config=data_config,
            micro_batch_size=micro_batch_size,
            seed=job.train.seed,
            rank=placement.rank,
            world_size=placement.world_size,
        )

    train_set, valid_set = dataset("train"), dataset("valid")
    pin = placement.device.type == "cuda"
    return mlm_objective(
        train_batches=lambda start: iter(
            PretrainLoader(train_set, start_step=start, num_workers=job.data.workers, pin_memory=pin)
        ),
        eval_batches=lambda: PretrainLoader(valid_set, epochs=1),
        padding_idx=corpus.specials.pad_id,
        seq_len=job.data.seq_len,
        mask_prob=job.data.mask_prob,
        terms=MaskedLM(
            pair_head_for(job.data.format), job.model.last_layer_masked_only, job.model.unpad, teacher
        ),
    )


def _find_tokenizer(data: Path, given: str | Path | None):
    from roberta.tokenizer import TOKENIZER_FILES, load_tokenizer

    if given is not None:
        return load_tokenizer(given)
    for candidate in (data, data / "tokenizer", data.parent / "tokenizer"):
        if any((candidate / name).is_file() for name in TOKENIZER_FILES):
            return load_tokenizer(candidate)
    return None
