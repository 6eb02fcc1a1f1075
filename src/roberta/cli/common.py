"""What the verbs share: the parser, the handler type, subcommand groups, and the command line
built from the option declarations (`roberta.options`), with what reads them."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import typing
from collections.abc import Callable

from roberta.errors import UserError
from roberta.options import MODEL_FLAG, check

# What a command runs, given its parsed arguments.
Handler = Callable[[argparse.Namespace], None]


class Parser(argparse.ArgumentParser):
    """Usage mistakes read like every other refusal: one line naming the command, exit status 2.
    (argparse prints the whole usage block first; `--help` still shows it.) Once parsed, every
    option class declared on the parser is made and checked, so that a value outside its rule is
    refused ("field 'x' must be ...") before the verb reads or writes anything."""

    def error(self, message: str):
        if message.startswith("the following arguments are required:"):
            for action in self._actions:  # the model missing: named as it is named now
                if getattr(action, "model_flags", None) and action.metavar in message:
                    message = message.replace(action.metavar, f"{MODEL_FLAG} {action.metavar}", 1)
        raise UserError(f"{message} (see '{self.prog} --help')")

    def parse_known_args(self, args=None, namespace=None):
        _older_positional_if_unnamed(self, args)
        namespace, extras = super().parse_known_args(args, namespace)
        for cls in getattr(self, "declared", ()):
            options_from(namespace, cls, self.prog.removeprefix("roberta "))
        return namespace, extras


def add_commands(parser: argparse.ArgumentParser, dest: str, metavar: str, commands: dict) -> None:
    subparsers = parser.add_subparsers(dest=dest, metavar=metavar, required=True)
    for name, declare in commands.items():
        summary, _, description = inspect.cleandoc(declare.__doc__).partition("\n\n")
        p = subparsers.add_parser(name, help=summary, description=" ".join(description.split()))
        handler = declare(p)
        if handler is not None:
            p.set_defaults(handler=handler)


def add_options(p: argparse.ArgumentParser, *classes: type, given_only: bool = False) -> None:
    """One argument per field of each options dataclass in `classes` (`roberta.options`):
    positional or a flag (`--max-body-kb` for max_body_kb), typed by its annotation, with its
    default, choices and help, each marked `declared_by` its class. A bool field is a switch
    (`--no-x` too when it is on by default or may be None); a `tuple[str, ...]` field a flag that may
    be repeated (or takes `nargs` values). With `given_only` a flag left out is absent from the
    parsed arguments (the verb tells given from default) and the class is not made at parse time."""
    for cls in classes:
        kinds = typing.get_type_hints(cls)
        groups = {
            name: p.add_mutually_exclusive_group(required=required)
            for name, required in getattr(cls, "EXCLUSIVE", {}).items()
        }
        for f in dataclasses.fields(cls):
            meta = dict(f.metadata)
            target = groups[meta.pop("group")] if "group" in meta else p
            for action in _add_field(target, cls, f, kinds[f.name], meta, given_only):
                action.declared_by = cls
        if not given_only:
            p.declared = [*getattr(p, "declared", ()), cls]


def _add_field(p, cls: type, f: dataclasses.Field, kind, meta: dict, given_only: bool) -> list:
    declared = None if f.default is dataclasses.MISSING else f.default
    default = argparse.SUPPRESS if given_only else declared
    help = meta.pop("help").format(default=declared)
    if meta.pop("model", False):
        return _add_model(p, f.name, help, meta, required=f.default is dataclasses.MISSING)
    if meta.pop("positional", False):
        return [p.add_argument(f.name, help=help, **meta)]
    flags = (meta.pop("flag", "--" + f.name.replace("_", "-")), *meta.pop("older", ()))
    if kind in (bool, bool | None):
        if "negative" in meta:  # two flags, one each way (--uncased / --cased)
            negative, negative_help = meta.pop("negative")
            both = p.add_mutually_exclusive_group()
            on = both.add_argument(*flags, dest=f.name, action="store_true", default=default, help=help)
            off = both.add_argument(
                negative, dest=f.name, action="store_false", default=default, help=negative_help
            )
            return [on, off]
        switch = argparse.BooleanOptionalAction if declared or kind is not bool else "store_true"
        return [p.add_argument(*flags, dest=f.name, action=switch, default=default, help=help)]
    if kind == tuple[str, ...]:
        many = {"nargs": meta.pop("nargs")} if "nargs" in meta else {"action": "append"}
        listed = default if given_only else list(declared)
        return [p.add_argument(*flags, dest=f.name, default=listed, help=help, **many, **meta)]
    typed = next(k for k in (int, float, str) if k in (kind, *typing.get_args(kind)))
    choices = getattr(cls, "CHOICES", {}).get(f.name)
    return [
        p.add_argument(*flags, dest=f.name, type=typed, default=default, choices=choices, help=help, **meta)
    ]


class _OneSpelling(argparse.Action):
    """The model named once: `--model` and an older spelling of it (a flag, or the positional
    argument) both given is refused, whichever comes first."""

    def __call__(self, parser, namespace, values, option_string=None):
        if values is None:  # the older positional, not given
            return
        spelling, key = option_string or self.metavar, f"_spelling_{self.dest}"
        before = getattr(namespace, key, spelling)
        if before != spelling:
            parser.error(f"{before} and {spelling} both name the model: give it once, as {MODEL_FLAG}")
        setattr(namespace, key, spelling)
        setattr(namespace, self.dest, values)


def _add_model(p, name: str, help: str, meta: dict, required: bool) -> list:
    """`--model` (and its older flags) for the field `name`, and the older positional argument
    where the verb took one: then `--model` is required only when the positional is not given."""
    older, positional = meta.pop("older"), meta.pop("older_positional")
    spellings = [*older, *([positional] if positional else [])]
    note = (
        f" (older spelling{'s' if len(spellings) > 1 else ''}: {', '.join(spellings)})" if spellings else ""
    )
    flag = p.add_argument(
        MODEL_FLAG,
        *older,
        dest=name,
        action=_OneSpelling,
        default=None,
        required=required and positional is None,
        metavar=meta.pop("metavar", "CKPT"),
        help=help + note,
    )
    if positional is None:
        return [flag]
    argument = p.add_argument(
        name, nargs="?", action=_OneSpelling, metavar=positional, help=f"the older spelling of {MODEL_FLAG}"
    )
    argument.model_flags = flag.option_strings
    return [flag, argument]


def _older_positional_if_unnamed(p: argparse.ArgumentParser, args) -> None:
    """The older positional model argument is required, as it always was, unless `--model` (or an
    older flag) names the model: then it may be left out. Optional throughout, it would break the
    older spelling: argparse, given `export CKPT --to onnx OUT`, binds CKPT to OUT when the first
    positional may be empty."""
    for action in p._actions:
        flags = getattr(action, "model_flags", None)
        if flags is not None and args is not None:
            given = {a.split("=", 1)[0] for a in args if a.startswith("-")}
            named = bool(given & {*flags, "-h", "--help"})
            action.nargs, action.required = ("?", False) if named else (None, True)


def options_from(args: argparse.Namespace, cls: type, where: str | None = None):
    """The options dataclass `cls` from the parsed arguments `add_options` declared, checked
    against its rules (a UserError "<where>: field 'x' must be ...")."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
    options = cls(**{name: tuple(v) if isinstance(v, list) else v for name, v in values.items()})
    check(options, where or args.verb)
    return options


def load_hub(args: argparse.Namespace):
    """The checkpoint as a hub, on --device, with --batch-tokens, in --precision. int8 sets
    `args.int8`: the verbs quantize after measuring fp32 on their first batch. What runs, and why,
    is `args.precision_line`, which `say_precision` prints once the verb has succeeded (a refusal
    stays one line)."""
    from roberta.hub import check_device, load
    from roberta.runtime.precision import inference_precision, reason

    device = check_device(args.device)  # before the minutes a large checkpoint takes to read
    requested = "int8" if args.int8 else args.precision
    # Checked before the checkpoint is read; what `auto` becomes also needs the model's width (below).
    precision = inference_precision(args.precision, args.int8, device)
    if precision == "int8":
        from roberta.runtime.int8 import require_cpu

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
    """`embed` or `predict` on --input (`HubOptions`, `LineFileOptions` and the verb's --input,
    --out), then the count of rows written."""
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
