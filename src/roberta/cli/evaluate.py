"""`roberta evaluate TASK`: a predictions file scored with a benchmark's official metrics."""

from __future__ import annotations

import argparse

from roberta.cli import retrieval as retrieval_cli
from roberta.cli import tag as tag_cli
from roberta.cli import winograd as winograd_cli
from roberta.cli.common import Handler, add_commands, add_options, print_figures
from roberta.options.tasks import EvaluateGlueOptions, EvaluateSquadOptions, EvaluateStsOptions


def _evaluate(p: argparse.ArgumentParser) -> None:
    """score predictions with a benchmark's official metrics, or a model's sentence vectors on STS

    Prints one JSON object with the benchmark's official metrics for a predictions file (glue,
    squad), or the STS correlations of a model's sentence vectors (sts).
    """
    add_commands(p, "task_family", "TASK", EVALUATE_TASKS)


def _evaluate_glue(p: argparse.ArgumentParser) -> Handler:
    """score a GLUE predictions TSV against a labelled dev file

    Matches the rows of --predictions (the GLUE server's TSV: a header, then index<TAB>prediction,
    the label name as in the data files or a score for STS-B) to --dev by index and prints the
    task's official metrics as one JSON object: accuracy; F1 and accuracy for MRPC and QQP; Matthews
    correlation (mcc) for CoLA; Pearson and Spearman for STS-B. A correlation that is undefined
    (every prediction, or every label, the same) is null, with a warning; MCC of constant
    predictions and F1 with no positive class anywhere are 0, as scikit-learn has them.
    """
    add_options(p, EvaluateGlueOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.glue import evaluate_predictions, get_task

        print_figures(evaluate_predictions(get_task(args.task), args.dev, args.predictions))

    return run


def _evaluate_squad(p: argparse.ArgumentParser) -> Handler:
    """score SQuAD v1.1/v2.0 predictions with the official metrics

    Scores --predictions (the official format: a JSON object {question id: answer text}, "" for no
    answer) against the official --dev JSON exactly as the official v1.1 / v2.0 evaluation scripts
    do, and prints one JSON object of percentages: exact_match, f1, total, missing (questions
    without a prediction, scored 0); for v2.0 also HasAns_*/NoAns_* and, with --null-odds,
    best_exact/best_f1 and the thresholds that reach them.
    """
    add_options(p, EvaluateSquadOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.qa.metric import evaluate_squad

        print_figures(evaluate_squad(args.dev, args.predictions, args.version, args.null_odds))

    return run


def _evaluate_sts(p: argparse.ArgumentParser) -> Handler:
    """a model's sentence vectors on scored pairs (STS-B): Spearman and Pearson of cosines x 100

    Embeds both texts of every pair of --data (CSV, TSV, JSONL or Parquet; STS-B's dev.tsv as it
    is) with --model and prints one JSON object: the Spearman and Pearson correlations, x 100, of
    the pairs' cosines with their scores. --model is a checkpoint roberta reads (its sentence
    vector: a sentence encoder's stored pooling, else --pool, default cls) or a sentence-transformers
    model directory (read by that library, offline: the anchor, e.g. all-MiniLM-L6-v2).
    """
    add_options(p, EvaluateStsOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.evaluation.sts import evaluate_sts
        from roberta.similarity.pairs import Columns

        print_figures(
            evaluate_sts(args.model, args.data, Columns.parse(args.columns, "--columns"), args.pool)
        )

    return run


EVALUATE_TASKS = {
    "glue": _evaluate_glue,
    "squad": _evaluate_squad,
    "sts": _evaluate_sts,
    "retrieval": retrieval_cli.evaluate_retrieval,
    "tag": tag_cli.evaluate_tag,
    **winograd_cli.EVALUATE_TASKS,
}
VERBS = {"evaluate": _evaluate}
