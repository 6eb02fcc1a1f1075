"""`roberta fill-mask`, `embed` and `predict`: a checkpoint's hub calls on a text or a file."""

from __future__ import annotations

import argparse

from roberta.cli import winograd as winograd_cli
from roberta.cli.common import Handler, add_options, load_hub, run_line_file, say_precision
from roberta.errors import UserError
from roberta.options.inference import (
    EmbedOptions,
    FillMaskOptions,
    HubOptions,
    LineFileOptions,
    PredictOptions,
)


def _fill_mask(p: argparse.ArgumentParser) -> Handler:
    """the most likely tokens for the one <mask> in a text

    Prints the --topk fillings of the single <mask> in TEXT (fairseq's fill_mask: the space before
    <mask> belongs to the predicted token), one per line: probability, token, filled text.
    """
    add_options(p, HubOptions, FillMaskOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.checkpoint import require_lm_head

        roberta = load_hub(args)
        require_lm_head(roberta.model, "fill-mask")  # before --int8 prints its comparison
        if args.int8:
            from roberta.runtime.int8 import quantize_for_fill_mask

            quantize_for_fill_mask(roberta, args.text)
        for filled, score, token in roberta.fill_mask(args.text, topk=args.topk):
            print(f"{score:.4f}\t{token!r}\t{filled}")
        say_precision(args)

    return run


def _embed(p: argparse.ArgumentParser) -> Handler:
    """one vector per line of a text file (or row of a Parquet/Arrow file), into a .npy file

    Embeds each line of --input (row k of --out is line k+1) with the chosen layer and pooling; a
    .parquet or .arrow file gives one vector per row, of the column --columns names (default text).
    Lines are read in chunks and sorted by length within a chunk, so files larger than memory stream
    through; --out is written under a temporary name and renamed when complete.
    """
    add_options(p, HubOptions, EmbedOptions, LineFileOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.hub.files import embed_file

        run_line_file(args, embed_file, "vectors", layer=args.layer, pool=args.pool, columns=args.columns)

    return run


def _predict(p: argparse.ArgumentParser) -> Handler:
    """classify each row of a TSV, Parquet or Arrow file with a classification head, or tag a file

    Runs the classification head --head on the text (or text pair) of each row of --input: a TSV
    file, or a .parquet / .arrow file whose text column(s) --columns names (default text). --out
    gets a header and per row the predicted label index and each class's probability (a one-output
    regression head: its score); written under a temporary name, then renamed. With a tagging --head,
    --input is a CoNLL file (words in column 0 or --columns N) or JSONL/Parquet rows of `tokens`, and
    --out gets each word's tag (CoNLL lines; JSONL rows where --out ends in .jsonl).
    """
    add_options(p, HubOptions, PredictOptions, LineFileOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.cli.tag import predict_or_tag
        from roberta.hub.files import predict_file

        if args.task:
            if not winograd_cli.predict_task(args):
                _predict_task(args)
            return
        if not args.head:
            raise UserError("predict: give --head (or --task for a GLUE test file)")
        run_line_file(
            args,
            predict_or_tag(predict_file),
            "predictions",
            head=args.head,
            columns=args.columns,
            header=args.header,
        )

    return run


def _predict_task(args: argparse.Namespace) -> None:
    """`predict --task`: a GLUE test TSV into its leaderboard file."""
    from roberta.hub.files import predict_test_file
    from roberta.tasks.glue import get_task

    # The task fixes the head (named after it) and the columns (its test file's header).
    given = [
        option
        for option, value in (("--head", args.head), ("--columns", args.columns), ("--header", args.header))
        if value
    ]
    if given:
        raise UserError(
            f"predict: {given[0]} means nothing with --task (it reads the task's test columns "
            f"with the head named {args.task!r})"
        )
    task = get_task(args.task)
    print(
        f"{args.out}: {predict_test_file(load_hub(args), task, args.input, args.out, args.int8)} predictions"
    )
    say_precision(args)


VERBS = {"fill-mask": _fill_mask, "embed": _embed, "predict": _predict}
