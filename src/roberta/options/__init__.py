"""The options of every verb, declared once (a training job's are its sections, in
`train/config.py`, overridden as `--section.key=value`): each field's default, its command-line
help and its rule, a module per family of verbs.

The command line is built from these dataclasses (`cli.common.add_options`), the functions below
take their defaults from them, and `check` refuses a value outside its rule through
`validation.py`, with the training config's "field 'x' must be ..." message, before anything is
read or written. Torch-free, so that building the command line imports no torch.

declare    how a field is declared (`argument`, `option`, `model_option`) and `check`
models     convert, export, serve, probe
inference  fill-mask, embed, predict
corpus     demo, train-tokenizer, prepare
pretrain   pretrain and its --teacher
finetune   finetune and distill: the start, the run, each task's data, the losses
tasks      tagging, Winograd and multiple choice; evaluate glue, squad, sts
"""

from roberta.options.declare import MODEL_FLAG, argument, check, model_option, option
from roberta.options.models import (
    INFERENCE_PRECISIONS,
    RUNTIMES,
    ConvertOptions,
    ExportOptions,
    ProbeOptions,
    ServeOptions,
)

__all__ = [
    "INFERENCE_PRECISIONS",
    "MODEL_FLAG",
    "RUNTIMES",
    "ConvertOptions",
    "ExportOptions",
    "ProbeOptions",
    "ServeOptions",
    "argument",
    "check",
    "model_option",
    "option",
]
