"""`GET /openapi.json`: an OpenAPI 3.1 document of the served paths, written out as plain dicts.

The request schemas are written from `shapes.REQUESTS`, the declaration `endpoints.parse_*` read
through (and refuse with 400 otherwise); the answer schemas from `shapes.ANSWERS`, the typed dicts
`endpoints` and `app` build their answers as. The document lists the application's routes, and
only them: a route without an operation here fails the application's construction, so the two
cannot drift.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from importlib.metadata import version

from prometheus_client import CONTENT_TYPE_LATEST

from roberta.serve import shapes
from roberta.serve.auth import OPEN_PATHS
from roberta.serve.shapes import STRING, answer_schema, request_schema

# Every refusal's answer (4xx, 5xx).
ERROR = answer_schema(shapes.Refusal)

# What each POST endpoint reads: written from the one declaration the parsers read (`shapes`).
REQUESTS = {path: request_schema(path) for path in shapes.REQUESTS}

# What each JSON endpoint answers: written from the one declaration `endpoints` build them with.
ANSWERS = {path: answer_schema(shape) for path, shape in shapes.ANSWERS.items()}

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
