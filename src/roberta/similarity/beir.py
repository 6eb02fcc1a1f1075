"""A retrieval benchmark in BEIR's layout (Thakur et al. 2021), read and checked whole before a
model runs: every refusal names the file, the line and the field.

- corpus (JSONL): `{"_id": ..., "title": ..., "text": ...}` a line; `title` may be absent or empty.
  A passage is read as BEIR's sentence-transformers models read it: title, a space, text, stripped.
- queries (JSONL): `{"_id": ..., "text": ...}` a line.
- qrels (TSV): a header (`query-id corpus-id score`), then one judgement a line; a score above 0
  marks the passage relevant (trec_eval's relevance level 1), 0 judged not relevant.

Ids are strings (a JSON number is read as its digits, as BEIR's loader does). Refused: a line that is
not a JSON object, a missing or non-string field, an empty id, an id given twice, an empty corpus, a
judgement naming a query or passage the files do not hold, a pair judged twice, a score that is not
an integer. A query without a relevant judgement cannot be scored (recall's denominator is 0): it is
refused, naming its line, unless `drop_unjudged`, which leaves such queries out and says how many.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from roberta.errors import UserError
from roberta.inputs.rows import json_objects, read_tsv

QRELS_HEADER = ("query-id", "corpus-id", "score")


@dataclass(frozen=True)
class Benchmark:
    """The passages and queries (ids and texts, in file order) and each query's judgements."""

    corpus_ids: list[str]
    passages: list[str]
    query_ids: list[str]
    queries: list[str]
    qrels: dict[str, dict[str, int]]  # query id -> {passage id: score}, every query here has one > 0
    dropped: list[str]  # queries left out for want of a relevant judgement (`drop_unjudged`)


def _records(
    path: Path, fields: tuple[str, ...], optional: tuple[str, ...] = ()
) -> Iterator[tuple[int, dict]]:
    """(line, {field: string}) for each non-blank line of a JSONL file, each field checked."""
    for number, record in json_objects(path):
        values = {}
        for name in fields + optional:
            value = record.get(name)
            if value is None and name in optional:
                value = ""
            if name == "_id" and isinstance(value, int) and not isinstance(value, bool):
                value = str(value)
            if value is None:
                raise UserError(f"{path}:{number}: no field {name!r}")
            if not isinstance(value, str):
                raise UserError(f"{path}:{number}: field {name!r} is {json.dumps(value)}, not a string")
            values[name] = value
        if not values["_id"]:
            raise UserError(f"{path}:{number}: field '_id' is empty")
        yield number, values


def _texts(path: Path, what: str, optional: tuple[str, ...] = ()) -> tuple[list[str], list[str], dict]:
    """Ids, texts and {id: line} of a corpus or queries file; duplicates and an empty file refused."""
    ids, texts, lines = [], [], {}
    for number, record in _records(path, ("_id", "text"), optional):
        if record["_id"] in lines:
            raise UserError(
                f"{path}:{number}: field '_id' {record['_id']!r} again (first on line {lines[record['_id']]})"
            )
        lines[record["_id"]] = number
        ids.append(record["_id"])
        title = record.get("title", "")
        texts.append((title + " " + record["text"]).strip() if title else record["text"])
    if not ids:
        raise UserError(f"{path}: no {what}")
    return ids, texts, lines


def read_qrels(path: Path, query_lines: dict, corpus_lines: dict, queries: Path, corpus: Path) -> dict:
    """{query id: {passage id: score}} of a qrels TSV, every id checked against the other files."""
    rows = read_tsv(path)
    number, header = next(rows, (0, None))
    if header is None:
        raise UserError(f"{path}: empty file (a header {' '.join(QRELS_HEADER)} and judgements)")
    if tuple(h.strip() for h in header) != QRELS_HEADER:
        raise UserError(f"{path}:{number}: header {header!r}, expected the columns {', '.join(QRELS_HEADER)}")
    qrels: dict[str, dict[str, int]] = {}
    for number, fields in rows:
        if len(fields) != 3:
            raise UserError(f"{path}:{number}: {len(fields)} fields, expected 3 ({', '.join(QRELS_HEADER)})")
        query, passage, score = (f.strip() for f in fields)
        if query not in query_lines:
            raise UserError(f"{path}:{number}: field 'query-id' {query!r} is not in {queries}")
        if passage not in corpus_lines:
            raise UserError(f"{path}:{number}: field 'corpus-id' {passage!r} is not in {corpus}")
        try:
            value = int(score)
        except ValueError:
            raise UserError(f"{path}:{number}: field 'score' {score!r} is not an integer") from None
        if passage in qrels.setdefault(query, {}):
            raise UserError(f"{path}:{number}: query {query!r} and passage {passage!r} judged twice")
        qrels[query][passage] = value
    return qrels


def read_benchmark(
    corpus: str | Path, queries: str | Path, qrels: str | Path, drop_unjudged: bool = False
) -> Benchmark:
    """The three files read and checked (module docstring); queries without a relevant judgement
    refused, or left out with `drop_unjudged` (listed in `Benchmark.dropped`)."""
    corpus, queries, qrels_path = Path(corpus), Path(queries), Path(qrels)
    for path in (corpus, queries, qrels_path):
        if not path.is_file():
            raise UserError(f"{path}: no such file")
    corpus_ids, passages, corpus_lines = _texts(corpus, "passages", optional=("title",))
    query_ids, texts, query_lines = _texts(queries, "queries")
    judged = read_qrels(qrels_path, query_lines, corpus_lines, queries, corpus)
    unjudged = [q for q in query_ids if not any(s > 0 for s in judged.get(q, {}).values())]
    if unjudged and not drop_unjudged:
        first = unjudged[0]
        raise UserError(
            f"{queries}:{query_lines[first]}: query {first!r} has no relevant judgement in {qrels_path} "
            f"({len(unjudged)} such queries): give --drop-unjudged to leave them out"
        )
    if len(unjudged) == len(query_ids):
        raise UserError(f"{qrels_path}: no query has a relevant judgement (a score above 0)")
    keep = set(query_ids) - set(unjudged)
    kept = [(q, t) for q, t in zip(query_ids, texts) if q in keep]
    return Benchmark(
        corpus_ids,
        passages,
        [q for q, _ in kept],
        [t for _, t in kept],
        {q: judged[q] for q, _ in kept},
        unjudged,
    )
