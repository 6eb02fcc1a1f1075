"""What the verbs share: the handler type, subcommand groups, and the option groups several verbs
declare (text corpora, line files, the hub's checkpoint options, progress), with what reads them."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import typing
from collections.abc import Callable

from roberta.errors import UserError
from roberta.options import INFERENCE_PRECISIONS

# What a command runs, given its parsed arguments.
Handler = Callable[[argparse.Namespace], None]

GLUE_TASKS_HELP = "CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE or WNLI"


def add_commands(parser: argparse.ArgumentParser, dest: str, metavar: str, commands: dict) -> None:
    subparsers = parser.add_subparsers(dest=dest, metavar=metavar, required=True)
    for name, declare in commands.items():
        summary, _, description = inspect.cleandoc(declare.__doc__).partition("\n\n")
        p = subparsers.add_parser(name, help=summary, description=" ".join(description.split()))
        handler = declare(p)
        if handler is not None:
            p.set_defaults(handler=handler)


def add_options(p: argparse.ArgumentParser, cls: type) -> None:
    """One argument per field of the options dataclass `cls` (`roberta.options`): positional or a
    flag (`--max-body-kb` for max_body_kb), typed by its annotation, with its default, choices and
    help. A bool field is a switch (`--no-x` too when it is on by default); a `tuple[str, ...]`
    field a flag that may be repeated."""
    kinds = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = dict(f.metadata)
        help = meta.pop("help").format(default=f.default)
        if meta.pop("positional", False):
            p.add_argument(f.name, help=help, **meta)
            continue
        flag = "--" + f.name.replace("_", "-")
        if kinds[f.name] is bool:
            action = argparse.BooleanOptionalAction if f.default else "store_true"
            p.add_argument(flag, action=action, default=f.default, help=help)
            continue
        if kinds[f.name] == tuple[str, ...]:
            p.add_argument(flag, action="append", default=list(f.default), help=help, **meta)
            continue
        kind = next(k for k in (int, float, str) if k in (kinds[f.name], *typing.get_args(kinds[f.name])))
        choices = getattr(cls, "CHOICES", {}).get(f.name)
        p.add_argument(flag, type=kind, default=f.default, choices=choices, help=help, **meta)


def options_from(args: argparse.Namespace, cls: type):
    """The options dataclass `cls` from the parsed arguments `add_options` declared."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
    return cls(**{name: tuple(v) if isinstance(v, list) else v for name, v in values.items()})


def progress_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def text_corpus_options(p: argparse.ArgumentParser, out_help: str) -> None:
    """What `prepare` and `train-tokenizer` share: they read text files the same way."""
    p.add_argument(
        "inputs",
        nargs="+",
        help="text files (plain, .gz, .jsonl, .parquet, .arrow), datasets.save_to_disk folders, "
        "or directories of such files",
    )
    p.add_argument("--out", required=True, help=out_help)
    p.add_argument(
        "--text-field",
        "--jsonl-text-field",
        dest="text_field",
        default="text",
        help="text field of .jsonl records, column of .parquet/.arrow files (default text)",
    )
    p.add_argument(
        "--errors",
        choices=["strict", "replace"],
        default="strict",
        help="invalid UTF-8: stop with an error (strict, default) or substitute U+FFFD (replace)",
    )
    progress_option(p)


def text_corpus_settings(args: argparse.Namespace) -> dict:
    """The keyword arguments of `prepare` and `train_tokenizer` that `text_corpus_options` declares."""
    return {"text_field": args.text_field, "errors": args.errors, "progress": not args.no_progress}


def line_file_options(p: argparse.ArgumentParser, input_help: str, out_help: str) -> None:
    """What `embed` and `predict` share: one text (or pair) per line in, one result per line out."""
    p.add_argument("--input", required=True, help=input_help)
    p.add_argument("--out", required=True, help=out_help)
    p.add_argument(
        "--truncate", action="store_true", help="cut texts longer than the model's positions (default: error)"
    )
    progress_option(p)


def hub_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "checkpoint", help="our checkpoint directory, an HF directory, or a fairseq directory / model.pt"
    )
    p.add_argument("--checkpoint-file", help="the .pt file inside a fairseq directory (default model.pt)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument(
        "--batch-tokens",
        type=int,
        default=2048,
        help="padded tokens per batch; inputs are sorted by length so batches hold little padding "
        "(default 2048)",
    )
    p.add_argument(
        "--precision",
        choices=INFERENCE_PRECISIONS,
        default="auto",
        help="fp32; bf16 (autocast: fp32 weights, bf16 matrix products, fp32 outputs); int8 (as "
        "--int8); auto (default): bf16 on a CPU with AMX or AVX512-BF16 units (or a bf16 GPU), fp32 "
        "elsewhere, or what ROBERTA_PRECISION says. The choice is printed to stderr",
    )
    p.add_argument(
        "--int8",
        action="store_true",
        help="CPU only: run the Linear layers in int8 (dynamic quantization; the speed-up depends on "
        "the CPU's int8 support), after printing to stderr how close int8 comes to fp32 on the input's "
        "first batch (embed: cosine of the vectors; predict, fill-mask: share of equal top-1 "
        "predictions). The same as --precision int8",
    )


def load_hub(args: argparse.Namespace):
    """The checkpoint as a hub, on --device, with --batch-tokens, in --precision. int8 sets
    `args.int8`: the verbs quantize after measuring fp32 on their first batch. What runs, and why,
    is `args.precision_line`, which `say_precision` prints once the verb has succeeded (a refusal
    stays one line)."""
    from roberta.hub import check_device, load
    from roberta.precision import inference_precision, reason

    if args.batch_tokens < 1:
        raise UserError(f"--batch-tokens must be at least 1, not {args.batch_tokens}")
    device = check_device(args.device)  # before the minutes a large checkpoint takes to read
    requested = "int8" if args.int8 else args.precision
    # Checked before the checkpoint is read; what `auto` becomes also needs the model's width (below).
    precision = inference_precision(args.precision, args.int8, device)
    if precision == "int8":
        from roberta.int8 import require_cpu

        require_cpu(device)
    roberta = load(args.checkpoint, args.checkpoint_file).to(device)
    roberta.batch_tokens = args.batch_tokens
    width = roberta.model.config.hidden_size
    precision = inference_precision(args.precision, args.int8, device, width=width)
    args.int8 = precision == "int8"
    if not args.int8:
        roberta.use_precision(precision)
    args.precision_line = f"precision: {reason(requested, precision, device, width)}"
    return roberta


def say_precision(args: argparse.Namespace) -> None:
    """The precision an inference verb ran in, on stderr, after its work (see `load_hub`)."""
    import sys

    print(args.precision_line, file=sys.stderr)


def run_line_file(args: argparse.Namespace, run_file: Callable[..., int], noun: str, **options) -> None:
    """`embed` or `predict` on --input: the options `hub_options` and `line_file_options` declare,
    then the count of rows written."""
    rows = run_file(
        load_hub(args),
        input=args.input,
        out=args.out,
        truncate=args.truncate,
        progress=not args.no_progress,
        int8=args.int8,
        **options,
    )
    print(f"{args.out}: {rows} {noun}")
    say_precision(args)


def print_figures(figures: dict) -> None:
    """`evaluate`'s one JSON object; a figure that is no number (an undefined correlation, an
    infinite threshold) is null (`io.to_json`)."""
    from roberta.io import to_json

    print(to_json(figures))
