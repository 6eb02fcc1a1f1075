"""`roberta pretrain`: a prepared corpus and a job config → a run directory.

    from roberta.train import load_job_config, pretrain
    job = load_job_config("configs/pretrain-tiny.toml", ["--train.max_steps=1000"])
    result = pretrain(job, data="corpus/", out="runs/tiny")

Under `torchrun` every rank calls the same function; each reads its own shard of the data.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from roberta.data.corpus import Corpus, check_tokenizer
from roberta.data.loader import DataConfig, PretrainDataset, PretrainLoader
from roberta.data.masking import MaskingConfig
from roberta.data.packing import PAIR_FORMATS
from roberta.errors import UserError
from roberta.model import RobertaModel
from roberta.train import distributed
from roberta.train.config import JobConfig, scaled
from roberta.train.mlm import mlm_objective
from roberta.train.trainer import TrainResult, batch_plan, train

TOKENIZER_FILES = ("vocab.json", "encoder.json", "vocab.txt")


def pretrain(
    job: JobConfig,
    data: str | Path,
    out: str | Path,
    *,
    tokenizer: str | Path | None = None,
    resume: bool = False,
    init_from: str | Path | None = None,
) -> TrainResult:
    """Pretrain from scratch (or from `init_from`: ours, HF or fairseq) on the corpus at `data`.

    The tokenizer (saved into every checkpoint) is `tokenizer`, or the one in `data` or beside
    it if the corpus directory holds one; without any, checkpoints hold the model only.
    """
    job = scaled(job)
    out = Path(out)
    env = distributed.setup(job.train.device)
    corpus = Corpus(data)
    specials = corpus.specials
    tok = _find_tokenizer(Path(data), tokenizer)
    if tok is not None:
        check_tokenizer(data, tok)
    micro, _ = batch_plan(job, env.world_size)

    torch.manual_seed(job.train.seed)  # every rank builds the same initial weights
    if init_from is not None:
        from roberta.convert import load_any

        model, _ = load_any(init_from)
        if model.config.vocab_size != specials.vocab_size or model.config.padding_idx != specials.pad_id:
            raise UserError(
                f"--init-from {init_from}: the model has {model.config.vocab_size} tokens (padding id "
                f"{model.config.padding_idx}), the corpus {specials.vocab_size} (padding id {specials.pad_id})"
            )
        model.train()
    else:
        model = RobertaModel(job.model_config(specials.vocab_size, specials.pad_id))
    if job.data.seq_len > model.config.max_tokens:
        raise UserError(f"data.seq_len = {job.data.seq_len} exceeds the model's {model.config.max_tokens} positions")

    masking = MaskingConfig(
        mask_prob=job.data.mask_prob,
        whole_word=job.data.whole_word,
        span_length=job.data.span_length,
        static_copies=job.data.static_copies if job.data.masking == "static" else 0,
    )
    data_config = DataConfig(format=job.data.format, block_size=job.data.seq_len, masking=masking)

    def dataset(split: str) -> PretrainDataset:
        return PretrainDataset(
            data, split=split, config=data_config, micro_batch=micro, seed=job.train.seed,
            rank=env.rank, world_size=env.world_size,
        )

    train_set, valid_set = dataset("train"), dataset("valid")
    pin = env.device.type == "cuda"
    objective = mlm_objective(
        train_batches=lambda start: iter(
            PretrainLoader(train_set, start_step=start, num_workers=job.data.workers, pin_memory=pin)
        ),
        eval_batches=lambda: PretrainLoader(valid_set, epochs=1),
        padding_idx=specials.pad_id,
        nsp=job.data.format in PAIR_FORMATS,
    )
    if env.is_main:
        _write_job(out, job, data, init_from)
    return train(model, objective, job, out, tokenizer=tok, resume=resume, env=env)


def _find_tokenizer(data: Path, given: str | Path | None):
    from roberta.tokenizer import load_tokenizer

    if given is not None:
        return load_tokenizer(given)
    for candidate in (data, data / "tokenizer", data.parent / "tokenizer"):
        if any((candidate / name).is_file() for name in TOKENIZER_FILES):
            return load_tokenizer(candidate)
    return None


def _write_job(out: Path, job: JobConfig, data, init_from) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {"job": job.to_dict(), "data": str(data), "init_from": str(init_from) if init_from else None}
    tmp = out / ".job.json.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, out / "job.json")
