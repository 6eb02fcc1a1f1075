"""`roberta finetune tag` and `roberta evaluate tag`: token tagging (NER, parts of speech) trained
from CoNLL column files or JSONL / Parquet rows of tokens and tags, and a tagged file scored."""

from __future__ import annotations

import argparse

from roberta.cli.common import Handler, print_figures


def _data_options(p: argparse.ArgumentParser) -> None:
    """Where a tagged file's words and tags are, and how its tags read."""
    p.add_argument(
        "--tag-column",
        type=int,
        metavar="N",
        default=-1,
        help="CoNLL files: the column of the tags, 0-based, -1 the last (default -1; CoNLL-2003's NER "
        "tags are column 3, its POS tags column 1)",
    )
    p.add_argument(
        "--word-column",
        type=int,
        default=0,
        metavar="N",
        help="CoNLL files: the column of the words (default 0)",
    )
    p.add_argument(
        "--tokens-field",
        default="tokens",
        metavar="NAME",
        help="JSONL/Parquet: the list of words (default tokens)",
    )
    p.add_argument(
        "--tags-field", default="tags", metavar="NAME", help="JSONL/Parquet: the list of tags (default tags)"
    )
    p.add_argument(
        "--scheme",
        default="iob2",
        metavar="S",
        help="the tags' scheme: iob2 (default), iob1, iobes, or none (plain labels such as parts of "
        "speech: scored by token accuracy)",
    )


def _columns(args: argparse.Namespace):
    from roberta.tasks.tag_data import TagColumns

    names = tuple(x.strip() for x in args.labels.split(",")) if getattr(args, "labels", None) else ()
    return TagColumns(args.word_column, args.tag_column, args.tokens_field, args.tags_field, names)


# Batches in plain random order, as HF's Trainer draws them: length-grouped batches cost CoNLL-2003
# 2.4 dev F1 at the same recipe (73.1 vs 75.5; benchmarks/results/2026-11-27-conll-ner.md).
# --data.group_by_length=true brings them back.
TAG_SHUFFLED = "--data.group_by_length=false"


def _training_options(p: argparse.ArgumentParser) -> None:
    """What `finetune tag` alone takes: the labels, how they meet sub-tokens, the recipe."""
    p.add_argument("--labels", metavar="A,B,...", help="the labels in the head's order (default: training's)")
    p.add_argument(
        "--unseen-tags-as", metavar="LABEL", help="read a dev/test tag training never saw as LABEL (e.g. O)"
    )
    p.add_argument(
        "--label-all-tokens",
        action="store_true",
        help="train every sub-token of a word on its label (B- continuing as I-), not only the first",
    )
    p.add_argument(
        "--stride",
        type=int,
        metavar="N",
        help="sub-tokens shared by the windows of a long sentence (default: a quarter)",
    )
    p.add_argument("--head", default="tagger", help="name of the tagging head (default tagger)")
    p.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (default 5e-5)")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per update (default 32)")
    p.add_argument("--epochs", type=float, default=3, help="epochs (default 3)")


def finetune_tag(p: argparse.ArgumentParser) -> Handler:
    """token tagging (named entities, parts of speech) from CoNLL files or JSONL/Parquet rows

    Reads --train, --dev and optionally --test: CoNLL column files (a word and its tags a line, blank
    lines between sentences, -DOCSTART- lines skipped; --tag-column picks the tags) or .jsonl /
    .parquet / .arrow rows of a list of words (--tokens-field) and their tags (--tags-field; numbers
    with --labels naming them). Labels come from the training data unless --labels gives them; a
    dev or test tag training never saw is refused unless --unseen-tags-as names the label it is
    read as. Words are encoded as the vocabulary needs (byte-level BPE: a space before every word but
    the first; WordPiece: its word pieces), the label on each word's first sub-token (every
    sub-token with --label-all-tokens); sentences longer than the model are read in overlapping
    windows. Dev (and test) are scored by entity precision, recall and F1 (conlleval's, per type
    and micro) and token accuracy each epoch; the best dev F1 is kept as RUN/best/.
    """
    from roberta.cli.finetune import _finetune_options

    p.add_argument("--train", required=True, metavar="FILE", help="tagged training file")
    p.add_argument("--dev", required=True, metavar="FILE", help="tagged dev file (picks RUN/best/)")
    p.add_argument("--test", metavar="FILE", help="tagged test file, scored beside dev")
    _data_options(p)
    _training_options(p)
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from functools import partial

        from roberta.cli.finetune import _run_finetune
        from roberta.tasks.tag import TagData, plan_tagging
        from roberta.tasks.tag_data import check_scheme

        data = TagData(
            args.train,
            args.dev,
            args.test,
            _columns(args),
            check_scheme(args.scheme),
            _columns(args).label_names,
            args.unseen_tags_as,
            args.label_all_tokens,
            args.stride,
            args.head,
        )
        extra = (TAG_SHUFFLED,)
        _run_finetune(args, partial(plan_tagging, data), args.lr, args.batch_size, args.epochs, extra)

    return run


def evaluate_tag(p: argparse.ArgumentParser) -> Handler:
    """score a tagged file against the gold one: entity P/R/F1 (conlleval) and token accuracy

    Reads --gold and --predictions (each a CoNLL file or JSONL/Parquet rows, as `finetune tag` reads
    them: the same sentences and words in the same order) and prints one JSON object of percentages:
    micro precision, recall and F1 over entities as conlleval (and the seqeval library) count them,
    token accuracy, and precision_T / recall_T / f1_T for each entity type T.
    """
    p.add_argument("--gold", required=True, metavar="FILE", help="the tagged reference")
    p.add_argument("--predictions", required=True, metavar="FILE", help="the same sentences, tagged")
    _data_options(p)
    p.add_argument("--labels", metavar="A,B,...", help="names of numeric tags in JSONL/Parquet rows")

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.tag_data import evaluate_tagged

        print_figures(evaluate_tagged(args.gold, args.predictions, _columns(args), args.scheme))

    return run


def predict_or_tag(predict_file):
    """`predict`'s file call, which a tagging --head turns into tagging: --input a CoNLL file (words
    in column 0, or the one --columns gives) or JSONL/Parquet rows of `tokens`; --out CoNLL lines
    of word and tag (JSONL rows of tokens and tags where it ends in .jsonl)."""

    def run(
        roberta, *, head: str, columns: str | None = None, header: bool = False, int8: bool = False, **rest
    ):
        module = roberta.model.heads[head] if head in roberta.model.heads else None
        if module is None or module.kind != "tagging":
            return predict_file(roberta, head=head, columns=columns, header=header, int8=int8, **rest)
        from roberta.errors import UserError
        from roberta.hub.tag import tag_file

        if columns is not None and not columns.isdigit():
            raise UserError(f"--columns {columns!r}: a tagging head reads the words' column, a number")
        if int8:
            roberta.quantize()
        return tag_file(roberta, rest["input"], rest["out"], head, int(columns or 0))

    return run
