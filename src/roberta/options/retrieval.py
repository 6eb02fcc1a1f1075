"""The options of issue #47: `evaluate retrieval`, and the levers `distill embed` takes to make a
student that retrieves (its pairs and the teacher's in-batch similarity structure)."""

from __future__ import annotations

from dataclasses import dataclass

from roberta.options.declare import model_option, option
from roberta.options.inference import POOLS

# The lever's defaults, which `tasks.embed_distill.Similarity` takes from here. The weight pays on
# query-passage pairs: from the static start, 1 against none took a 2 x 128 student's SQuAD v1.1 dev
# recall@10 from 57.3 to 72.4 (benchmarks/results/2026-11-27-retrieval.md); from the pruned start,
# which already ranks as its teacher does, 0.3 did best (benchmarks/results/2026-11-28-retrieval-3.md).
# It stays off by default because the `--text` recipe's STS-B 81.1 was measured without it.
SIMILARITY_WEIGHT = 0.0
# all-MiniLM-L6-v2's own training scale of 20. A retrieval student learned more of the teacher's order
# among a topic's near passages at 0.1 (benchmarks/results/2026-11-28-retrieval-5.md); the default
# stays the teacher's, which the `--text` recipe and the earlier rounds were measured with.
SIMILARITY_TEMPERATURE = 0.05


@dataclass(frozen=True)
class EvaluateRetrievalOptions:
    model: str = model_option("our checkpoint, an HF or fairseq one, or a sentence-transformers directory")
    corpus: str = option(
        None, "passages, JSONL: _id, title, text (BEIR's corpus.jsonl)", required=True, metavar="FILE"
    )
    queries: str = option(
        None, "queries, JSONL: _id, text (BEIR's queries.jsonl)", required=True, metavar="FILE"
    )
    qrels: str = option(
        None,
        "judgements, TSV with a header: query-id, corpus-id, score (BEIR's qrels/*.tsv; score > 0 relevant)",
        required=True,
        metavar="FILE",
    )
    pool: str | None = option(None, "our checkpoints: pool the last layer this way")
    drop_unjudged: bool = option(
        False, "leave out, with a warning, the queries without a relevant judgement (default: refuse them)"
    )
    no_progress: bool = option(False, "no progress bar")

    CHOICES = {"pool": POOLS}


@dataclass(frozen=True)
class DistillLeverOptions:
    """`distill embed`'s pairs (instead of --text) and the teacher's similarity structure."""

    pairs: str | None = option(
        None,
        "pairs of texts to distill (instead of --text), e.g. pseudo-queries and their passages: both "
        "texts learn the teacher's vectors",
        metavar="FILE",
    )
    text_column: str = option("sentence1", "--pairs: column of the first text (default {default})")
    pair_column: str = option("sentence2", "--pairs: column of the second text (default {default})")
    similarity_weight: float = option(
        SIMILARITY_WEIGHT,
        "weight of the teacher's in-batch similarity structure beside its vectors: KL between the "
        "teacher's and the student's softmax over each text's cosines with the batch's others "
        "(default {default:g}: off; for retrieval students 0.3 from the pruned start, 4-16 from the "
        "static one, docs/retrieval.md)",
    )
    similarity_temperature: float = option(
        SIMILARITY_TEMPERATURE,
        "temperature of that softmax (default {default:g}, the teacher's own; 0.1 for retrieval students "
        "with --topic-batches, docs/retrieval.md)",
    )

    topic_batches: int = option(
        0,
        "draw each batch from one of this many topics, clusters of the teacher's vectors of the "
        "(first) texts, so the in-batch structure ranks near passages (default {default}: batches "
        "at random; about one topic per 4 batches, docs/retrieval.md)",
        metavar="K",
    )

    RANGES = {"similarity_weight": ">=0", "similarity_temperature": ">0", "topic_batches": ">=0"}
