"""The request and answer shapes declared once (`roberta.serve.shapes`): the parser reads them, the
OpenAPI document is written from them, and docs/serving.md's endpoint table says the same (the real
answers against the document: test_answers.py)."""

import json
import re
from pathlib import Path

import pytest

from roberta.errors import UserError
from roberta.serve import openapi, shapes
from roberta.serve.shapes import read

SERVING = Path(__file__).resolve().parents[2] / "docs" / "serving.md"


def table_rows() -> dict[str, tuple[str, str]]:
    """docs/serving.md's endpoint table: `POST /path` -> (body cell, answer cell)."""
    rows = {}
    for line in SERVING.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        match = re.match(r"`POST (/[\w/.-]+)`", cells[0]) if len(cells) == 3 else None
        if match:
            rows[match.group(1)] = (cells[1], cells[2])
    return rows


def body_items(cell: str) -> dict[str, tuple[bool, str | None]]:
    """The fields of a body cell's `{...}`: name -> (marked optional with "?", the value shown)."""
    body = re.search(r"`[^`{]*(\{.*?\})`", cell).group(1)[1:-1]
    items = {}
    for item in body.split(", "):
        match = re.fullmatch(r'"(\w+)"(\?)?(?:: (.+))?', item.strip())
        assert match, f"docs/serving.md: cannot read {item!r} in {cell!r}"
        items[match.group(1)] = (match.group(2) == "?", match.group(3))
    return items


def names_in(schema) -> set[str]:
    """Every property name and constant value anywhere in a JSON schema."""
    if isinstance(schema, dict):
        found = set(schema.get("properties", {})) | ({schema["const"]} if "const" in schema else set())
        return found | {n for value in schema.values() for n in names_in(value)}
    if isinstance(schema, list):
        return {n for value in schema for n in names_in(value)}
    return set()


def test_the_docs_table_shows_every_endpoint_with_its_declared_fields_and_defaults():
    rows = table_rows()
    assert set(rows) == set(shapes.REQUESTS)
    for path, fields in shapes.REQUESTS.items():
        items = body_items(rows[path][0])
        assert list(items) and set(items) == set(fields), (path, sorted(items), sorted(fields))
        for name, field in fields.items():
            optional, shown = items[name]
            if field.default is not None:
                assert shown is not None and json.loads(shown) == field.default, (path, name, shown)
            else:
                assert optional != field.required, (path, name, "marked ? exactly when optional")


def test_the_docs_table_answers_name_the_declared_answer_fields():
    for path, (_, answer) in table_rows().items():
        schema = shapes.answer_schema(shapes.ANSWERS[path])
        quoted = set(re.findall(r'"(\w+)"', answer))
        assert set(schema["required"]) <= quoted, (path, answer)
        assert quoted == names_in(schema), (path, quoted ^ names_in(schema))
    health = next(line for line in SERVING.read_text().splitlines() if line.startswith("| `GET /health`"))
    assert names_in(shapes.answer_schema(shapes.HealthAnswer)) <= set(re.findall(r'"(\w+)"', health))


def test_the_openapi_answers_are_the_declaration():
    assert openapi.ANSWERS == {path: shapes.answer_schema(shape) for path, shape in shapes.ANSWERS.items()}
    assert openapi.ANSWERS["/answer"]["properties"]["answers"]["items"] == {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "score": {"type": "number"},
            "start": {"type": "integer", "description": "in context"},
        },
        "required": ["text", "score", "start"],
        "additionalProperties": False,
    }
    head = openapi.ANSWERS["/info"]["properties"]["heads"]["additionalProperties"]
    assert head["required"] == ["kind"] and list(head["properties"]) == ["kind", "labels"]
    assert openapi.ERROR["required"] == ["error"] and openapi.ERROR["additionalProperties"] is False


def test_the_openapi_requests_are_the_declaration():
    for path, fields in shapes.REQUESTS.items():
        schema = openapi.REQUESTS[path]
        assert schema["additionalProperties"] is False and list(schema["properties"]) == list(fields)
        assert schema.get("required", []) == [n for n, f in fields.items() if f.required]
    assert openapi.REQUESTS["/fill-mask"]["properties"]["topk"] == {
        "type": "integer",
        "minimum": 1,
        "default": 5,
        "description": "fillings per text (--max-answers)",
    }


def test_read_gives_the_declared_default_type_and_bounds():
    assert read({}, "/fill-mask", "topk") == 5 and read({}, "/answer", "topk") == 1
    assert read({}, "/embed", "truncate") is False and read({}, "/embed", "pool") is None
    assert read({}, "/predict", "head", "sentiment") == "sentiment"  # a default the model decides
    assert read({"topk": 3}, "/answer", "topk") == 3
    refusals = [
        ({"topk": True}, "/answer", "topk", "field 'topk': expected int, got bool"),
        ({"topk": 0}, "/answer", "topk", "field 'topk': 0 out of range, give 1 or more"),
        ({}, "/answer", "question", "field 'question' is required"),
        ({"context": ""}, "/answer", "context", "field 'context': empty"),
        ({"encoding_format": "hex"}, "/v1/embeddings", "encoding_format", "give 'float' or 'base64'"),
        ({"text": 3}, "/embed", "text", "field 'text': expected str or list, got int"),
        ({"text": "\ud800"}, "/embed", "text", "not valid Unicode text"),
    ]
    for body, path, name, message in refusals:
        with pytest.raises(UserError, match=re.escape(message)):
            read(body, path, name)
    # Bounds the model decides are left to the call that knows them (its message names the range).
    assert read({"topk": 0}, "/fill-mask", "topk") == 0 and read({"pool": "max"}, "/embed", "pool") == "max"
    with pytest.raises(UserError, match="field 'topk': /tag reads no such field"):
        shapes.check_fields({"text": "x", "topk": 1}, "/tag")
