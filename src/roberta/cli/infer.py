"""`roberta fill-mask`, `embed` and `predict`: a checkpoint's hub calls on a text or a file."""

from __future__ import annotations

import argparse

from roberta.cli import winograd as winograd_cli
from roberta.cli.common import Handler, hub_options, line_file_options, load_hub, run_line_file, say_precision
from roberta.errors import UserError


def _fill_mask(p: argparse.ArgumentParser) -> Handler:
    """the most likely tokens for the one <mask> in a text

    Prints the --topk fillings of the single <mask> in TEXT (fairseq's fill_mask: the space before
    <mask> belongs to the predicted token), one per line: probability, token, filled text.
    """
    hub_options(p)
    p.add_argument("text", help='text holding exactly one <mask>, e.g. "The capital of France is <mask>."')
    p.add_argument("--topk", type=int, default=5, help="how many fillings (default 5)")

    def run(args: argparse.Namespace) -> None:
        from roberta.checkpoint import require_lm_head

        roberta = load_hub(args)
        require_lm_head(roberta.model, "fill-mask")  # before --int8 prints its comparison
        if args.int8:
            from roberta.infer import quantize_for_fill_mask

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
    hub_options(p)
    line_file_options(
        p,
        input_help="UTF-8 text file, one text per line, or a .parquet / .arrow file",
        out_help=".npy file to write (float32, [lines, hidden])",
    )
    p.add_argument(
        "--columns",
        metavar="NAME",
        help="the text column of a .parquet / .arrow --input, by name (default text)",
    )
    p.add_argument(
        "--layer", type=int, default=-1, help="0 = embeddings, 1..L = layers, -1 = last (default -1)"
    )
    p.add_argument(
        "--pool",
        choices=["cls", "mean"],
        help="<s> vector or mean over tokens (default: a sentence encoder's own pooling, else cls)",
    )

    def run(args: argparse.Namespace) -> None:
        from roberta.infer import embed_file

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
    hub_options(p)
    p.add_argument("--head", help="classification head name (required without --task)")
    p.add_argument(
        "--task",
        metavar="T",
        help="a GLUE task: read --input as its test TSV and write the leaderboard "
        "file (index, label name; a score for STS-B) with the head named T, which must have T's "
        "number of outputs (no --head, --columns or --header with it); or WSC, WNLI-WSC, WinoGrande, "
        "CommonsenseQA: their test files' leaderboard files (docs/winograd.md)",
    )
    line_file_options(
        p,
        input_help="TSV file (tab-separated, no quoting), or a .parquet / .arrow file",
        out_help="TSV file to write",
    )
    # No default: with --task a --columns given is refused, not ignored.
    p.add_argument(
        "--columns",
        help="text column, or two for a pair: 0-based indices or header names, e.g. 0 or 1,2 or "
        "sentence1,sentence2 (names imply --header; default 0). A .parquet / .arrow file's columns "
        "are picked by name only (default text)",
    )
    p.add_argument("--header", action="store_true", help="the first line is a header, not a row")

    def run(args: argparse.Namespace) -> None:
        from roberta.cli.tag import predict_or_tag
        from roberta.infer import predict_file

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
    from roberta.infer import predict_test_file
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
