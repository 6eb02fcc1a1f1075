"""How an option is declared: a dataclass field holding its default, its help and, on the class,
its rule (`CHOICES`, `RANGES`), from which `cli.common.add_options` builds the command line and
`check` refuses a value through `validation.py`.

Field metadata: `help` ("{default}" in it is the default), and for the command line `positional`
(an argument, not a flag), `required`, `metavar`, `nargs`, `older` (older spellings of the flag,
still accepted), `flag` (the flag when it is not the field's name), `negative` (a bool's opposite
flag), `group` (a mutually exclusive group, named in the class's `EXCLUSIVE`: required or not).
"""

from __future__ import annotations

from dataclasses import MISSING, field

from roberta import validation

# The one flag that names the model a verb reads or starts from, as HF's pipelines (`model=`) and
# `--model_name_or_path` name it; each verb's older spellings stay accepted (docs/cli.md).
MODEL_FLAG = "--model"


def argument(help: str, **cli) -> object:
    """A positional argument's field: no default."""
    return field(metadata={"help": help, "positional": True, **cli})


def option(default, help: str, **cli) -> object:
    """A flag's field with its default; "{default}" in `help` is the default."""
    return field(default=default, metadata={"help": help, **cli})


def required(help: str, metavar: str | None = "FILE", **cli) -> object:
    """A flag the verb cannot run without (a file, mostly): no default."""
    return option(None, help, required=True, metavar=metavar, **cli)


def model_option(help: str, older: tuple[str, ...] = (), positional: str | None = None, **cli) -> object:
    """The model a verb reads or starts from: `--model`, with `older` flags and, where the verb took
    one, the `positional` argument (its metavar, e.g. CKPT) as older spellings of it. Giving two
    spellings is refused. Required unless `default=None` is given (another option may start it)."""
    default = cli.pop("default", MISSING)
    meta = {"help": help, "model": True, "older": older, "older_positional": positional, **cli}
    return field(default=default, metadata=meta)


def check(options: object, verb: str) -> None:
    """Every field of `options` of its type and within its rule (UserError "<verb>: field 'x' must
    be ...")."""
    validation.check_fields(options, verb)
