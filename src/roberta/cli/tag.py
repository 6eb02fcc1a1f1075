"""`roberta finetune tag` and `roberta evaluate tag`: token tagging (NER, parts of speech) trained
from CoNLL column files or JSONL / Parquet rows of tokens and tags, and a tagged file scored."""

from __future__ import annotations

import argparse

from roberta.cli.common import Handler, add_options, options_from, print_figures
from roberta.options.tasks import EvaluateTagOptions, TagColumnsOptions, TagFilesOptions, TagTrainingOptions


def _columns(args: argparse.Namespace):
    """Where the words and tags are, and the tags' names (`TagColumnsOptions`)."""
    from roberta.tasks.tag_data import TagColumns

    o = options_from(args, TagColumnsOptions)
    names = tuple(x.strip() for x in o.labels.split(",")) if o.labels else ()
    return TagColumns(o.word_column, o.tag_column, o.tokens_field, o.tags_field, names)


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

    add_options(p, TagFilesOptions, TagColumnsOptions, TagTrainingOptions)
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from functools import partial

        from roberta.cli.finetune import _run_finetune
        from roberta.tasks.tag import TagData, plan_tagging, tag_recipe

        files, o = options_from(args, TagFilesOptions), options_from(args, TagTrainingOptions)
        columns = _columns(args)
        data = TagData(
            files.train,
            files.dev,
            files.test,
            columns,
            args.scheme,  # one of the declared choices: argparse refused any other
            columns.label_names,
            o.unseen_tags_as,
            o.label_all_tokens,
            o.stride,
            o.head,
        )
        _run_finetune(args, partial(plan_tagging, data), tag_recipe(o.lr, o.batch_size, o.epochs))

    return run


def evaluate_tag(p: argparse.ArgumentParser) -> Handler:
    """score a tagged file against the gold one: entity P/R/F1 (conlleval) and token accuracy

    Reads --gold and --predictions (each a CoNLL file or JSONL/Parquet rows, as `finetune tag` reads
    them: the same sentences and words in the same order) and prints one JSON object of percentages:
    micro precision, recall and F1 over entities as conlleval (and the seqeval library) count them,
    token accuracy, and precision_T / recall_T / f1_T for each entity type T.
    """
    add_options(p, EvaluateTagOptions, TagColumnsOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.tag_data import evaluate_tagged

        o = options_from(args, EvaluateTagOptions)
        columns = _columns(args)
        print_figures(evaluate_tagged(o.gold, o.predictions, columns, args.scheme))

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
