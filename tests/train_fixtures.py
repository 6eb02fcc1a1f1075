"""A micro pretraining job on synthetic data, runnable in-process, as a subprocess, or under torchrun.

Sequence g of the synthetic stream depends only on (seed, g), and micro-batch p of rank r holds
sequences (p * world + r) * micro ... + micro - 1, so one process with batch 2b and two ranks
with micro-batch b see exactly the same global batches.

    python tests/train_fixtures.py RUN_DIR [--resume] [--section.key=value ...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

from roberta.data.masking import MaskingConfig, MaskVocab, mask_tokens, masking_rng
from roberta.model import RobertaModel
from roberta.tasks.pretrain import NSP_LABELS, MaskedLM, load_pretrain_job, mlm_objective
from roberta.train import distributed
from roberta.train.trainer import TrainResult, batch_plan, train

VOCAB, SEQ = 300, 32
BOS, PAD, EOS, MASK = 0, 1, 2, VOCAB - 1
MICRO_JOB = [
    "--model.preset=tiny",
    "--model.hidden_size=64",
    "--model.num_layers=2",
    "--model.num_heads=4",
    "--model.ffn_size=128",
    f"--model.max_positions={SEQ + 2}",
    f"--data.seq_len={SEQ}",
    "--optim.lr=1e-3",
    "--schedule.warmup_steps=3",
    "--train.batch_size=8",
    "--train.micro_batch_size=4",
    "--train.max_steps=12",
    "--train.log_every=1",
    "--train.eval_every=4",
    "--train.eval_batches=2",
    "--train.checkpoint_every=4",
    "--train.keep_last=2",
    "--train.device=cpu",
    "--train.peak_tflops=0.1",
]
_VOCAB = MaskVocab(mask_id=MASK, special_ids=(BOS, PAD, EOS, 3, MASK), vocab_size=VOCAB)


def sequence(seed: int, g: int, nsp: bool) -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng([seed, g])
    # A learnable pattern (arithmetic progressions over 40 ids) so losses fall, with some padding.
    length = int(rng.integers(SEQ // 2, SEQ - 1))
    start, stride = rng.integers(0, 40), rng.integers(1, 5)
    body = 4 + (start + stride * np.arange(length)) % 40
    tokens = np.concatenate([[BOS], body, [EOS]])
    inputs, labels = mask_tokens(tokens, masking_rng(seed, 0, g), MaskingConfig(), _VOCAB)
    pad = SEQ - len(tokens)
    inputs = np.pad(inputs, (0, pad), constant_values=PAD)
    labels = np.pad(labels, (0, pad), constant_values=-100)
    return inputs, labels, int(stride % 2)


def batches(seed: int, micro: int, rank: int, world: int, start: int, nsp: bool, poison_at: int = -1):
    p = start
    while True:
        rows = [sequence(seed, (p * world + rank) * micro + i, nsp) for i in range(micro)]
        batch = {
            "tokens": torch.from_numpy(np.stack([r[0] for r in rows])),
            "labels": torch.from_numpy(np.stack([r[1] for r in rows])),
        }
        if nsp:
            batch[NSP_LABELS] = torch.tensor([r[2] for r in rows])
        if p == poison_at:
            batch["tokens"][0, 1] = -7  # an impossible id: the test's objective turns it into a NaN loss
        yield batch
        p += 1


def initial_model(overrides: list[str] = ()) -> RobertaModel:
    job = load_pretrain_job(None, [*MICRO_JOB, *overrides])
    torch.manual_seed(job.train.seed)
    return RobertaModel(job.model_config(VOCAB, PAD))


def run(
    run_dir: str | Path, overrides: list[str] = (), resume: bool = False, poison_at: int = -1
) -> TrainResult:
    job = load_pretrain_job(None, [*MICRO_JOB, *overrides])
    placement = distributed.setup(job.train.device)
    micro_batch_size, _ = batch_plan(job, placement.world_size)
    model = initial_model(overrides)
    nsp = job.data.format in ("segment-pair", "sentence-pair")
    objective = mlm_objective(
        train_batches=lambda start: batches(
            job.train.seed, micro_batch_size, placement.rank, placement.world_size, start, nsp, poison_at
        ),
        eval_batches=lambda: batches(
            job.train.seed + 1, micro_batch_size, placement.rank, placement.world_size, 0, nsp
        ),
        padding_idx=PAD,
        seq_len=job.data.seq_len,
        mask_prob=job.data.mask_prob,
        terms=MaskedLM("nsp" if nsp else None, job.model.last_layer_masked_only, job.model.unpad),
    )
    if poison_at >= 0:
        objective = _nan_on_bad_ids(objective)
    return train(model, objective, job, run_dir, resume=resume, placement=placement)


def _nan_on_bad_ids(objective):
    import dataclasses

    def loss(model, batch):
        bad = batch["tokens"].lt(0).any()
        batch = {**batch, "tokens": batch["tokens"].clamp(min=0)}
        out = objective.loss(model, batch)
        return {**out, "mlm": out["mlm"] * (torch.nan if bad else 1.0)}

    return dataclasses.replace(objective, loss=loss)


if __name__ == "__main__":
    torch.set_num_threads(1)
    run_dir, rest = sys.argv[1], sys.argv[2:]
    resume = "--resume" in rest
    result = run(run_dir, [a for a in rest if a != "--resume"], resume=resume)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"finished step {result.step}")
    distributed.shutdown()
