"""`roberta evaluate retrieval` (issue #47): a model's sentence vectors searching a corpus for each
query, in BEIR's layout."""

from __future__ import annotations

import argparse

from roberta.cli.common import Handler, add_options, options_from, print_figures
from roberta.options.retrieval import EvaluateRetrievalOptions


def evaluate_retrieval(p: argparse.ArgumentParser) -> Handler:
    """a model's sentence vectors searching passages: recall@1/@10, MRR@10, nDCG@10 x 100

    Reads BEIR's layout (--corpus corpus.jsonl: _id, title, text; --queries queries.jsonl: _id, text;
    --qrels a TSV with the header query-id, corpus-id, score) and checks it whole first; embeds every
    passage (title and text) and query with --model, searches the corpus by exact cosine for each
    query (in blocks: a large corpus fits in memory) and prints one JSON object: recall@1, recall@10,
    MRR@10 and nDCG@10 x 100 (BEIR's and pytrec_eval's definitions; passages of equal cosine rank by
    id in descending order, as trec_eval breaks ties), and the counts. --model is a checkpoint
    roberta reads (its sentence vector, else --pool) or a sentence-transformers model directory.
    A query without a relevant judgement is refused unless --drop-unjudged.
    """
    add_options(p, EvaluateRetrievalOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.evaluation.retrieval import evaluate_retrieval as evaluate

        o = options_from(args, EvaluateRetrievalOptions)
        print_figures(
            evaluate(o.model, o.corpus, o.queries, o.qrels, o.pool, o.drop_unjudged, not o.no_progress)
        )

    return run
