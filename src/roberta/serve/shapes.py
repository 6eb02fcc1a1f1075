"""What each JSON endpoint reads and answers, declared once. `REQUESTS`: every field's JSON type,
default, bounds and description; `endpoints.parse_*` read a request through `read` (400 naming the
field: a wrong type, a missing required field, a value outside the declared bounds), `app` refuses
a field not declared here, and `openapi` writes the request schemas from the same table.
`ANSWERS`: each answer as typed dicts, which `endpoints` and `app` build their answers as and
`openapi` writes the answer schemas from (`answer_schema`). So the parser, the answers, the
document and docs/serving.md's table (checked by tests/serve/test_shapes.py, the real answers by
tests/serve/test_answers.py) cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import UnionType
from typing import (
    Annotated,
    Literal,
    NotRequired,
    TypedDict,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from roberta.errors import UserError
from roberta.model import POOLS
from roberta.options import RUNTIMES

STRING, NUMBER, INTEGER, BOOLEAN = ({"type": t} for t in ("string", "number", "integer", "boolean"))
# JSON's types as Python reads them: bool is an int in Python, but a JSON true is no layer or topk.
KINDS = {"string": str, "integer": int, "boolean": bool, "texts": (str, list)}
TEXTS_DESCRIPTION = (
    "a text, or a list of them (at most --max-items; all together at most --max-request-tokens tokens)"
)


@dataclass(frozen=True)
class Field:
    """One field of a request body. `kind`: "string", "integer", "boolean", or "texts" (a string
    or a non-empty list of strings). `checked_on_use`: the declared bounds (`minimum`, `enum`) are
    also the model's, which the hub call (or the vectors' width) checks with the whole range in its
    message; `read` leaves them to it."""

    kind: str
    description: str = ""
    default: object = None
    required: bool = False
    minimum: int | None = None
    enum: tuple[str, ...] = ()
    nonempty: bool = False
    checked_on_use: bool = False

    def schema(self) -> dict:
        """This field's JSON schema (OpenAPI 3.1)."""
        if self.kind == "texts":
            schema: dict = {"oneOf": [STRING, {"type": "array", "items": STRING, "minItems": 1}]}
        else:
            schema = {"type": self.kind}
        if self.enum:
            schema["enum"] = list(self.enum)
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.nonempty:
            schema["minLength"] = 1
        if self.default is not None:
            schema["default"] = self.default
        return {**schema, "description": self.description} if self.description else schema


def _texts(description: str = TEXTS_DESCRIPTION, required: bool = True) -> Field:
    return Field("texts", description, required=required)


PAIR = _texts("each text's second segment: as many as `text`", required=False)
TRUNCATE = Field("boolean", "cut a text past the model's positions (else 400)", default=False)
EMBED = {
    "pair": PAIR,
    "layer": Field(
        "integer", "0: the embeddings, 1..L a layer, -1 the last", default=-1, checked_on_use=True
    ),
    "pool": Field(
        "string",
        "<s>'s vector or the mean over tokens (default: a sentence encoder's own pooling, else cls)",
        enum=tuple(POOLS),
        checked_on_use=True,
    ),
    "truncate": TRUNCATE,
}
ENCODING_FORMATS = ("float", "base64")

# Each POST endpoint's fields, and no others: a field not named here is refused (400 naming it),
# never ignored. Required fields come first; the order is the document's.
REQUESTS: dict[str, dict[str, Field]] = {
    "/fill-mask": {
        "text": _texts("texts holding exactly one <mask> each"),
        "topk": Field(
            "integer", "fillings per text (--max-answers)", default=5, minimum=1, checked_on_use=True
        ),
    },
    "/embed": {"text": _texts(), **EMBED},
    "/v1/embeddings": {
        "input": _texts(),
        "model": Field("string", "any: the server serves one model, named in the answer"),
        "encoding_format": Field(
            "string",
            "base64: each vector's float32 values, little-endian, as OpenAI sends them",
            default="float",
            enum=ENCODING_FORMATS,
        ),
        "dimensions": Field(
            "integer",
            "the first N components, scaled to length 1 (at most the vector's width)",
            minimum=1,
            checked_on_use=True,
        ),
        "user": Field("string", "the end user, for the client's records: answers do not depend on it"),
        **EMBED,
    },
    "/predict": {
        "text": _texts(),
        "pair": PAIR,
        "head": Field("string", "a classification head (may be left out when there is one)"),
        "truncate": TRUNCATE,
    },
    "/answer": {
        "question": Field("string", required=True, nonempty=True),
        "context": Field("string", "the passage to find the answer in", required=True, nonempty=True),
        "topk": Field("integer", default=1, minimum=1),
        "head": Field("string", "a span head (default: the only one, else squad)"),
    },
    "/tag": {
        "text": _texts("texts to tag; one longer than the model is read whole"),
        "head": Field("string", "a tagging head (may be left out when there is one)"),
    },
}


def request_schema(path: str) -> dict:
    """`path`'s request body as a JSON schema: its fields, the required ones, no other field."""
    fields = REQUESTS[path]
    required = [name for name, field in fields.items() if field.required]
    return {
        "type": "object",
        "properties": {name: field.schema() for name, field in fields.items()},
        **({"required": required} if required else {}),
        "additionalProperties": False,
    }


def check_fields(body: dict, path: str) -> None:
    """Every field of `body` one that `path` reads: a field it would ignore is refused, naming it."""
    fields = REQUESTS[path]
    unknown = next((name for name in body if name not in fields), None)
    if unknown is not None:
        raise UserError(f"field {unknown[:40]!r}: {path} reads no such field (it reads {', '.join(fields)})")


def text_value(value: str, name: str) -> str:
    """`value` if it is text that can be encoded: JSON can spell a lone surrogate (\\ud800), which is
    no character and no tokenizer takes."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UserError(
            f"field {name}: not valid Unicode text (a lone surrogate at character {e.start})"
        ) from None
    return value


def read(body: dict, path: str, name: str, default: object = None):
    """Field `name` of a request to `path`, as declared: of its type, within its bounds, its
    declared default (or `default`, one that depends on the model) when left out."""
    field = REQUESTS[path][name]
    if name not in body:
        if field.required:
            raise UserError(f"field {name!r} is required")
        return field.default if default is None else default
    value = body[name]
    kind = KINDS[field.kind]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        expected = " or ".join(k.__name__ for k in kinds)
        raise UserError(f"field {name!r}: expected {expected}, got {type(value).__name__}")
    if isinstance(value, str):
        text_value(value, repr(name))
    if field.nonempty and not value:
        raise UserError(f"field {name!r}: empty")
    if field.checked_on_use:
        return value
    if field.minimum is not None and value < field.minimum:
        raise UserError(f"field {name!r}: {value} out of range, give {field.minimum} or more")
    if field.enum and value not in field.enum:
        raise UserError(f"field {name!r}: {value[:40]!r}, give {' or '.join(map(repr, field.enum))}")
    return value


# What each endpoint answers, declared once as typed dicts: `endpoints` and `app` build their
# answers with these names (/info's dict is `server.describe`'s), `openapi` writes the answer
# schemas from them (`answer_schema`); tests/serve/test_answers.py checks every endpoint's real
# answer against the document, test_shapes.py docs/serving.md's table. A description rides on
# `Annotated`; `Literal` is a constant (one value) or an enumeration; `A | B` is one of them.
class Filling(TypedDict):
    sequence: str
    score: float
    token: str


class FillMaskAnswer(TypedDict):
    fillings: list[list[Filling]]


Vectors = Annotated[list[list[float]], "one vector per text, in order"]


class EmbedAnswer(TypedDict):
    embeddings: Vectors


class OpenAIEmbedding(TypedDict):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | Annotated[str, "encoding_format base64"]


class Usage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingsAnswer(TypedDict):
    object: Literal["list"]
    data: list[OpenAIEmbedding]
    model: str
    usage: Usage


class Classified(TypedDict):
    label: str
    probabilities: dict[str, float]


class Regressed(TypedDict):
    score: float


class PredictAnswer(TypedDict):
    head: str
    predictions: list[Classified | Annotated[Regressed, "a one-output (regression) head"]]


class Span(TypedDict):
    text: str
    score: float
    start: Annotated[int, "in context"]


class SpansAnswer(TypedDict):
    answers: list[Span]


class Entity(TypedDict):
    type: str
    text: str
    start: Annotated[int, "first character, in the text"]
    end: Annotated[int, "past the last character"]
    score: float


class TagAnswer(TypedDict):
    head: str
    entities: list[Annotated[list[Entity], "one list per text, in order"]]


class HealthAnswer(TypedDict):
    status: Literal["ok"]


class Shape(TypedDict):
    layers: int
    hidden_size: int
    attention_heads: int
    ffn_size: int
    max_seq_len: int
    vocab_size: int


class Head(TypedDict):
    kind: str
    labels: NotRequired[list[str]]  # a classification head's


class TokenizerInfo(TypedDict):
    kind: str
    vocab_size: int
    fingerprint: str


class Batching(TypedDict):
    max_batch_tokens: int
    max_wait_ms: float


class Limits(TypedDict):
    max_body_kb: int
    max_items: int
    max_request_tokens: int
    max_answers: int
    timeout_s: float


class Counts(TypedDict):
    forward_passes: int
    rounds: int
    calls: int
    requests: int


class InfoAnswer(TypedDict):
    model: str
    runtime: Literal[RUNTIMES]
    precision: Literal["fp32", "bf16", "int8"]
    device: str
    shape: Shape
    fill_mask: bool
    heads: dict[str, Head]
    tokenizer: TokenizerInfo
    batching: Batching
    limits: Limits
    counts: Counts


class Refusal(TypedDict):
    error: Annotated[str, "what was refused, in one line of at most 300 characters"]


# Each JSON endpoint's answer (a 200; any other status answers a `Refusal`).
ANSWERS: dict[str, object] = {
    "/fill-mask": FillMaskAnswer,
    "/embed": EmbedAnswer,
    "/v1/embeddings": OpenAIEmbeddingsAnswer,
    "/predict": PredictAnswer,
    "/answer": SpansAnswer,
    "/tag": TagAnswer,
    "/health": HealthAnswer,
    "/info": InfoAnswer,
    "/openapi.json": Annotated[dict, "this document"],
}
JSON_TYPES = {str: STRING, float: NUMBER, int: INTEGER, bool: BOOLEAN, dict: {"type": "object"}}


def answer_schema(shape) -> dict:
    """An answer's declared shape (`ANSWERS`' values and what they hold) as a JSON schema
    (OpenAPI 3.1): a typed dict is an object of exactly its fields, all required but NotRequired ones."""
    origin, args = get_origin(shape), get_args(shape)
    if origin is Annotated:
        return {**answer_schema(args[0]), "description": args[1]}
    if origin is Literal:
        kind = JSON_TYPES[type(args[0])]
        return {**kind, "const": args[0]} if len(args) == 1 else {**kind, "enum": list(args)}
    if origin in (Union, UnionType):
        return {"oneOf": [answer_schema(arg) for arg in args]}
    if origin is list:
        return {"type": "array", "items": answer_schema(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": answer_schema(args[1])}
    if not is_typeddict(shape):
        return JSON_TYPES[shape]
    fields = get_type_hints(shape, include_extras=True)
    required = [name for name, hint in fields.items() if get_origin(hint) is not NotRequired]
    properties = {
        name: answer_schema(get_args(hint)[0] if get_origin(hint) is NotRequired else hint)
        for name, hint in fields.items()
    }
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
