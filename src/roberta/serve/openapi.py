"""`GET /openapi.json`: an OpenAPI 3.1 document of the served paths, written out as plain dicts.

The request schemas are written from `shapes.REQUESTS`, the declaration `endpoints.parse_*` read
through (and refuse with 400 otherwise); the answer schemas say what `endpoints` answer. The
document lists the application's routes, and only them: a route without an operation here fails
the application's construction, so the two cannot drift.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from importlib.metadata import version

from prometheus_client import CONTENT_TYPE_LATEST

from roberta.options import RUNTIMES
from roberta.serve import shapes
from roberta.serve.auth import OPEN_PATHS
from roberta.serve.shapes import BOOLEAN, INTEGER, NUMBER, STRING, request_schema


def _object(properties: dict, required: tuple[str, ...] = (), **rest) -> dict:
    return {
        "type": "object",
        "properties": properties,
        **({"required": list(required)} if required else {}),
        **rest,
    }


def _array(items: dict, **rest) -> dict:
    return {"type": "array", "items": items, **rest}


VECTORS = _array(_array(NUMBER), description="one vector per text, in order")

ERROR = _object(
    {"error": {**STRING, "description": "what was refused, in one line of at most 300 characters"}},
    ("error",),
)

# What each POST endpoint reads: written from the one declaration the parsers read (`shapes`).
REQUESTS = {path: request_schema(path) for path in shapes.REQUESTS}

PREDICTION = {
    "oneOf": [
        _object(
            {"label": STRING, "probabilities": {"type": "object", "additionalProperties": NUMBER}},
            ("label", "probabilities"),
        ),
        _object({"score": NUMBER}, ("score",), description="a one-output (regression) head"),
    ]
}
ANSWERS = {
    "/fill-mask": _object(
        {
            "fillings": _array(
                _array(
                    _object(
                        {"sequence": STRING, "score": NUMBER, "token": STRING}, ("sequence", "score", "token")
                    )
                )
            )
        },
        ("fillings",),
    ),
    "/embed": _object({"embeddings": VECTORS}, ("embeddings",)),
    "/v1/embeddings": _object(
        {
            "object": {**STRING, "const": "list"},
            "data": _array(
                _object(
                    {
                        "object": {**STRING, "const": "embedding"},
                        "index": INTEGER,
                        "embedding": {
                            "oneOf": [_array(NUMBER), {**STRING, "description": "encoding_format base64"}]
                        },
                    },
                    ("object", "index", "embedding"),
                )
            ),
            "model": STRING,
            "usage": _object({"prompt_tokens": INTEGER, "total_tokens": INTEGER}),
        },
        ("object", "data", "model", "usage"),
    ),
    "/predict": _object({"head": STRING, "predictions": _array(PREDICTION)}, ("head", "predictions")),
    "/answer": _object(
        {
            "answers": _array(
                _object(
                    {"text": STRING, "score": NUMBER, "start": {**INTEGER, "description": "in context"}},
                    ("text", "score", "start"),
                )
            )
        },
        ("answers",),
    ),
    "/tag": _object(
        {
            "head": STRING,
            "entities": _array(
                _array(
                    _object(
                        {
                            "type": STRING,
                            "text": STRING,
                            "start": {**INTEGER, "description": "first character, in the text"},
                            "end": {**INTEGER, "description": "past the last character"},
                            "score": NUMBER,
                        },
                        ("type", "text", "start", "end", "score"),
                    ),
                    description="one list per text, in order",
                )
            ),
        },
        ("head", "entities"),
    ),
    "/health": _object({"status": {**STRING, "const": "ok"}}, ("status",)),
    "/info": _object(
        {
            "model": STRING,
            "runtime": {**STRING, "enum": list(RUNTIMES)},
            "precision": {**STRING, "enum": ["fp32", "bf16", "int8"]},
            "device": STRING,
            "shape": {"type": "object", "additionalProperties": INTEGER},
            "fill_mask": BOOLEAN,
            "heads": {
                "type": "object",
                "additionalProperties": _object({"kind": STRING, "labels": _array(STRING)}, ("kind",)),
            },
            "tokenizer": {"type": "object"},
            "batching": {"type": "object"},
            "limits": {"type": "object"},
            "counts": {"type": "object", "additionalProperties": INTEGER},
        }
    ),
    "/openapi.json": {"type": "object", "description": "this document"},
}

SUMMARIES = {
    "/": "the page that tries the endpoints in a browser",
    "/health": "whether the server is up",
    "/info": "the model's shape, heads, tokenizer, precision, batching, limits and counts",
    "/metrics": "Prometheus metrics (text exposition format)",
    "/openapi.json": "this document",
    "/fill-mask": "the most likely tokens for the one <mask> of each text",
    "/embed": "one vector per text",
    "/v1/embeddings": "one vector per text, in OpenAI's request and answer",
    "/predict": "a classification head's label and probabilities per text",
    "/answer": "the spans of a passage that answer a question",
    "/tag": "the entities of each text (type, characters, score) from a tagging head",
}

# Besides the answer, what every POST may get: each an {"error"} object.
REFUSALS = {
    "400": "a malformed or invalid request (the field is named)",
    "413": "a body, item count, token count or answer over the server's bounds (the option is named)",
    "503": "the queue is full or the server is stopping: retry later",
    "504": "not answered within --timeout",
}
TEXT_MEDIA = {"/": "text/html", "/metrics": CONTENT_TYPE_LATEST}


def _content(media: str, schema: dict) -> dict:
    return {"content": {media: {"schema": schema}}}


def _refusal(description: str) -> dict:
    return {
        "description": description,
        **_content("application/json", {"$ref": "#/components/schemas/Error"}),
    }


def _operation(path: str, method: str, keys_required: bool) -> dict:
    name = path.strip("/").replace("/", "-").replace(".", "-") or "page"
    answer = (
        _content(TEXT_MEDIA[path], STRING)
        if path in TEXT_MEDIA
        else _content("application/json", ANSWERS[path])
    )
    responses = {"200": {"description": SUMMARIES[path], **answer}}
    operation = {"operationId": f"{method}-{name}", "summary": SUMMARIES[path]}
    if method == "post":
        operation["requestBody"] = {"required": True, **_content("application/json", REQUESTS[path])}
        responses |= {code: _refusal(description) for code, description in REFUSALS.items()}
    if keys_required and path in OPEN_PATHS:
        operation["security"] = []  # no key needed here, whatever the document's default
    elif keys_required:
        responses["401"] = _refusal("no key, or one the server does not accept")
    return {**operation, "responses": responses}


def document(routes: Mapping[str, Collection[str]], keys_required: bool) -> dict:
    """The OpenAPI document of `routes` (path -> its HTTP methods; HEAD, which answers as GET,
    is left out), with the bearer scheme required but on / and /health when keys are."""
    paths = {
        path: {m.lower(): _operation(path, m.lower(), keys_required) for m in sorted(methods) if m != "HEAD"}
        for path, methods in routes.items()
    }
    components: dict = {"schemas": {"Error": ERROR}}
    doc = {
        "openapi": "3.1.0",
        "info": {
            "title": "roberta serve",
            "version": version("roberta"),
            "description": "A RoBERTa checkpoint's hub calls behind JSON endpoints, batched by length.",
        },
        "paths": paths,
        "components": components,
    }
    if keys_required:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
