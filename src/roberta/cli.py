"""The `roberta` command: one verb per stage of the pipeline.

Each verb is a `_<verb>(subparsers)` function that declares its options and binds a handler;
handlers import their module lazily so that `roberta --help` stays instant. A `UserError`
anywhere becomes one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys

from roberta.errors import UserError


def _demo(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="build a tiny model, encode a few sentences and fill a mask (smoke test of the install)",
        description="Builds a randomly initialised tiny RoBERTa, encodes sentences and runs fill-mask.",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for the random weights (default 0)")

    def run(args: argparse.Namespace) -> None:
        from roberta.demo import run_demo

        run_demo(seed=args.seed)

    p.set_defaults(handler=run)


# --- verbs: one function each, registered in VERBS below -------------------------------------

VERBS = [_demo]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roberta",
        description="RoBERTa pretraining, fine-tuning, conversion and inference.",
    )
    subparsers = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for add_verb in VERBS:
        add_verb(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.handler(args)
    except UserError as e:
        print(f"roberta: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("roberta: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
