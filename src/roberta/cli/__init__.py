"""The `roberta` command: one verb per stage of the pipeline, a module per family of verbs.

corpus    demo, train-tokenizer, prepare
pretrain  pretrain (and --teacher)
finetune  finetune TASK, distill TASK, probe
evaluate  evaluate TASK
infer     fill-mask, embed, predict
models    convert, export, serve
common    the parser, the handler type, subcommand groups, the command line built from the
          options' declarations (`roberta.options`)

Each verb is a `_<verb>(parser)` function whose docstring is its --help: it adds its options'
declarations (`add_options`) and returns its handler, which calls the layer below. Handlers import
their module lazily so that `roberta --help` stays instant. A `UserError` or an `OSError` (a file or
place that cannot be used) anywhere becomes one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from roberta.errors import UserError

# Large CPU tensors on transparent huge pages: torch reads this once, at its first allocation, so it
# is set before anything imports torch. A base@128 CPU training step has 13x fewer page faults and
# runs 6-9% faster; the numbers are the same (benchmarks/experiments/huge-pages.md). THP_MEM_ALLOC_ENABLE=0
# turns it off.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from roberta.cli import corpus, evaluate, finetune, infer, models, pretrain  # noqa: E402
from roberta.cli.common import Parser, add_commands  # noqa: E402

# A command is a function that declares its options on the parser it is given and returns the
# function that runs it (None for a group of subcommands); its docstring is its --help: the first
# line the summary in the list of commands, the rest the description. In `roberta --help`'s order:
_ORDER = (
    "demo train-tokenizer prepare convert pretrain finetune distill evaluate fill-mask embed predict "
    "probe serve export"
).split()
_ALL = {**corpus.VERBS, **pretrain.VERBS, **finetune.VERBS, **evaluate.VERBS, **infer.VERBS, **models.VERBS}
VERBS = {name: _ALL[name] for name in _ORDER}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="roberta", description="RoBERTa pretraining, fine-tuning, conversion and inference.")
    add_commands(parser, "verb", "VERB", VERBS)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"roberta: warning: {message}", file=sys.stderr)


def describe_os_error(e: OSError) -> str:
    """'<file>: <reason>' in one line; for a failed rename the file is the destination, the
    name the user gave (the source is a temporary that is already gone)."""
    reason = e.strerror or str(e) or type(e).__name__
    name = e.filename2 if e.filename2 is not None else e.filename
    return reason if name is None else f"{name}: {reason}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        # Verbs that take `--section.key=value` overrides declare `overrides`; for all others an
        # unknown argument is still an error.
        args, unknown = parser.parse_known_args(argv)
        if unknown and not hasattr(args, "overrides"):
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        if unknown:
            args.overrides = [*args.overrides, *unknown]
        with warnings.catch_warnings():
            # Library warnings (a truncated text, say) read as one line on the command line.
            warnings.showwarning = _one_line_warning
            args.handler(args)
    except UserError as e:
        print(f"roberta: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        # A file the user named, or the place it lives, cannot be used (permission, no space,
        # a directory where a file belongs...): the environment's fault, not a bug, so one line.
        print(f"roberta: error: {describe_os_error(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("roberta: interrupted", file=sys.stderr)
        return 130
    return 0
