"""`roberta pretrain`: a job (TOML and `--section.key=value` overrides) on a prepared corpus, and
`--teacher`'s distillation options."""

from __future__ import annotations

import argparse
import os

from roberta.cli.common import Handler
from roberta.errors import UserError


def _pretrain(p: argparse.ArgumentParser) -> Handler:
    """pretrain RoBERTa on a prepared corpus (one CPU, one GPU, or torchrun DDP/FSDP)

    Trains on a corpus made by `roberta prepare`, writing RUN/checkpoints/, metrics.jsonl,
    tensorboard/ and curves.png. Any job field can be overridden as --section.key=value (e.g.
    --train.max_steps=1000 --optim.lr=1e-3). Under torchrun every rank runs this same command.
    """
    p.add_argument(
        "--config", help="job TOML, e.g. configs/pretrain-tiny.toml (default: the paper's base recipe)"
    )
    p.add_argument("--data", required=True, help="prepared corpus directory")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument(
        "--tokenizer", help="tokenizer directory saved into checkpoints (default: found in/beside --data)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its latest checkpoint (a finished one goes on if "
        "train.max_steps grew)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace what --out holds (a run, or anything else), once the command has been checked",
    )
    p.add_argument(
        "--init-from", help="start from a checkpoint (ours, HF or fairseq) instead of random weights"
    )
    p.add_argument(
        "--scale", type=float, help="shrink batch, steps and warmup together (same as --train.scale)"
    )
    _pretrain_distill_options(p)
    p.set_defaults(overrides=[])

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.pretrain import load_pretrain_job, pretrain
        from roberta.tasks.pretrain_distill import parse_layers
        from roberta.train import distributed

        extra = [f"--train.scale={args.scale}"] if args.scale is not None else []
        job = load_pretrain_job(args.config, [*args.overrides, *extra])
        result = pretrain(
            job,
            args.data,
            args.out,
            tokenizer=args.tokenizer,
            resume=args.resume,
            overwrite=args.overwrite,
            init_from=args.init_from,
            init_layers=parse_layers(args.init_layers) if args.init_layers else None,
            distill=_pretrain_distillation(args),
        )
        if int(os.environ.get("RANK", "0")) == 0:
            figures = ", ".join(f"{k} {v:.4g}" for k, v in result.valid.items())
            print(f"step {result.step}: {figures}\ncheckpoint: {result.checkpoint}")
        distributed.shutdown()

    return run


def _pretrain_distill_options(p: argparse.ArgumentParser) -> None:
    """`pretrain --teacher`: DistilBERT's distillation terms beside the masked-LM loss, and its
    student made of some of the teacher's layers."""
    # The defaults are PretrainDistillation's, written out: building the parser imports no torch.
    p.add_argument(
        "--init-layers",
        metavar="I,J",
        help="keep only these layers of --init-from (0-based, e.g. 0,2: DistilBERT's every other layer)",
    )
    p.add_argument(
        "--teacher", help="distil from this checkpoint (same tokenizer): its soft masked-LM targets"
    )
    p.add_argument("--temperature", type=float, help="softmax temperature of the soft targets (default 2)")
    p.add_argument(
        "--soft-weight",
        type=float,
        help="weight of the soft-target loss, the masked-LM loss's being 1 (default 2.5)",
    )
    p.add_argument(
        "--cosine-weight",
        type=float,
        help="weight of the cosine loss between last hidden states (default 0.5 where the "
        "teacher's width is the student's, else 0)",
    )


def _pretrain_distillation(args: argparse.Namespace):
    """`--teacher` and its weights as a PretrainDistillation; None without a teacher."""
    from roberta.tasks.pretrain_distill import PretrainDistillation

    weights = {
        "temperature": args.temperature,
        "soft_weight": args.soft_weight,
        "cosine_weight": args.cosine_weight,
    }
    given = {k: v for k, v in weights.items() if v is not None}
    if given and not args.teacher:
        raise UserError("--temperature, --soft-weight and --cosine-weight need --teacher")
    return PretrainDistillation(args.teacher, **given) if args.teacher else None


VERBS = {"pretrain": _pretrain}
