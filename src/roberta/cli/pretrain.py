"""`roberta pretrain`: a job (TOML and `--section.key=value` overrides) on a prepared corpus, and
`--teacher`'s distillation (options declared in `roberta.options.pretrain`)."""

from __future__ import annotations

import argparse
import os

from roberta.cli.common import Handler, add_options, options_from
from roberta.errors import UserError
from roberta.options.pretrain import PretrainOptions, PretrainTeacher


def _pretrain(p: argparse.ArgumentParser) -> Handler:
    """pretrain RoBERTa on a prepared corpus (one CPU, one GPU, or torchrun DDP/FSDP)

    Trains on a corpus made by `roberta prepare`, writing RUN/checkpoints/, metrics.jsonl,
    tensorboard/ and curves.png. Any job field can be overridden as --section.key=value (e.g.
    --train.max_steps=1000 --optim.lr=1e-3). Under torchrun every rank runs this same command.
    """
    add_options(p, PretrainOptions)
    # Each weight is taken where given only: without --teacher, a weight given is refused.
    add_options(p, PretrainTeacher, given_only=True)
    p.set_defaults(overrides=[])

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.pretrain import load_pretrain_job, pretrain
        from roberta.tasks.pretrain_distill import parse_layers
        from roberta.train import distributed

        o = options_from(args, PretrainOptions)
        extra = [f"--train.scale={o.scale}"] if o.scale is not None else []
        job = load_pretrain_job(o.config, [*args.overrides, *extra])
        run = {"tokenizer": o.tokenizer, "resume": o.resume, "overwrite": o.overwrite}
        layers = parse_layers(o.init_layers) if o.init_layers else None
        start = {"init_from": o.model, "init_layers": layers, "distill": _pretrain_distillation(args)}
        result = pretrain(job, o.data, o.out, **run, **start)
        if int(os.environ.get("RANK", "0")) == 0:
            figures = ", ".join(f"{k} {v:.4g}" for k, v in result.valid.items())
            print(f"step {result.step}: {figures}\ncheckpoint: {result.checkpoint}")
        distributed.shutdown()

    return run


def _pretrain_distillation(args: argparse.Namespace):
    """`--teacher` and its weights as a PretrainDistillation; None without a teacher."""
    from roberta.tasks.pretrain_distill import PretrainDistillation

    given = {k: getattr(args, k) for k in ("temperature", "soft_weight", "cosine_weight") if hasattr(args, k)}
    teacher = getattr(args, "teacher", None)
    if given and not teacher:
        raise UserError("--temperature, --soft-weight and --cosine-weight need --teacher")
    return PretrainDistillation(teacher, **given) if teacher else None


VERBS = {"pretrain": _pretrain}
