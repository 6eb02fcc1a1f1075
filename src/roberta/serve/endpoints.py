"""How each JSON endpoint's requests are read, run together, and answered.

`parse_*` checks one request's body on its own, each field as `shapes.REQUESTS` declares it (a
UserError names the field), and encodes it, so
a bad request is refused before it joins a batch and never fails the requests batched with it.
A request asking for more than the server's bounds (`ServeOptions.max_items`,
`max_request_tokens`, `max_answers`) is refused with 413 naming the bound, before it is encoded
where the count alone decides. `run` is the batcher's call: items of one key through one hub list
call (the hub sorts by length and pads per batch), so an answer is the one-by-one hub call's, to
rounding.
"""

from __future__ import annotations

import base64
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from roberta.errors import UserError
from roberta.hub import Roberta
from roberta.options import ServeOptions
from roberta.serve import shapes
from roberta.serve.shapes import read, text_value


class Refused(Exception):
    """A request refused with an HTTP status other than 400, and a one-line reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Parsed:
    """One request, ready for the batcher: what to run (`key`), on which items, each item's tokens."""

    key: Hashable
    items: list
    lengths: list[int]
    shape: dict = field(default_factory=dict)  # how the answer is written (OpenAI's dimensions, ...)

    @property
    def tokens(self) -> int:
        return sum(self.lengths)


def _over(what: str, count: int, limit: int, option: str) -> Refused:
    return Refused(413, f"{what}: {count}, over the server's limit of {limit} per request (--{option})")


def _bounded(parsed: Parsed, options: ServeOptions) -> Parsed:
    if parsed.tokens > options.max_request_tokens:
        raise _over("tokens", parsed.tokens, options.max_request_tokens, "max-request-tokens")
    return parsed


def _texts(body: dict, options: ServeOptions, path: str, name: str = "text") -> list[str] | None:
    """A string, or a non-empty list of at most `max_items` strings, as a list (None: an optional
    field left out)."""
    value = read(body, path, name)
    if value is None:
        return None
    texts = [value] if isinstance(value, str) else value
    if not texts:
        raise UserError(f"field {name!r}: an empty list")
    if len(texts) > options.max_items:
        raise _over(f"field {name!r}: items", len(texts), options.max_items, "max-items")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise UserError(f"field {name!r}[{i}]: expected str, got {type(text).__name__}")
        text_value(text, f"{name!r}[{i}]")
    return texts


def _ids(hub: Roberta, body: dict, options: ServeOptions, path: str, name: str = "text") -> list:
    texts = _texts(body, options, path, name)
    pairs = _texts(body, options, path, "pair")
    if pairs is not None and len(pairs) != len(texts):
        raise UserError(f"field 'pair': {len(pairs)} pairs for {len(texts)} texts")
    return hub.encode_batch(texts, pairs, truncate=read(body, path, "truncate"))


def _only_head(hub: Roberta, kind: str, fallback: str) -> str:
    """The checkpoint's one head of `kind`, when it has exactly one; else `fallback`."""
    names = [name for name, head in hub.model.heads.items() if head.kind == kind]
    return names[0] if len(names) == 1 else fallback


def _answer_rows(topk: int, items: int, options: ServeOptions) -> None:
    if topk * items > options.max_answers:
        what = f"answer rows (topk {topk} x {items} item{'s' * (items > 1)})"
        raise _over(what, topk * items, options.max_answers, "max-answers")


def parse_fill_mask(hub: Roberta, body: dict, options: ServeOptions) -> Parsed:
    texts = _texts(body, options, "/fill-mask")
    topk = read(body, "/fill-mask", "topk")
    hub.check_fill_mask(topk)
    _answer_rows(topk, len(texts), options)
    lengths = [len(hub.encode_masked(text)) for text in texts]
    return _bounded(Parsed(("fill-mask", topk), texts, lengths), options)


def parse_embed(
    hub: Roberta, body: dict, options: ServeOptions, path: str = "/embed", name: str = "text"
) -> Parsed:
    # No pool: the model's own sentence vector (a sentence encoder's pooling), else <s>.
    layer, pool = read(body, path, "layer"), read(body, path, "pool")
    hub.check_embed(layer, pool)
    ids = _ids(hub, body, options, path, name)
    return _bounded(Parsed(("embed", layer, pool), ids, list(map(len, ids))), options)


def parse_openai_embeddings(hub: Roberta, body: dict, options: ServeOptions) -> Parsed:
    """OpenAI's request: `input` a string or a list of strings (token ids are refused: they are
    numbered by OpenAI's tokenizer, not this model's), `model` any (one model is served), `user`
    kept by nobody, `encoding_format` float or base64, `dimensions` the first N components
    scaled to length 1, as OpenAI shortens its vectors."""
    path = "/v1/embeddings"
    read(body, path, "model"), read(body, path, "user")
    encoding = read(body, path, "encoding_format")
    value = read(body, path, "input")
    if isinstance(value, list) and any(isinstance(v, (int, list)) and not isinstance(v, bool) for v in value):
        raise UserError(
            "field 'input': token ids are not served (they are another tokenizer's numbers): send text"
        )
    parsed = parse_embed(hub, body, options, path, "input")
    dimensions = read(body, path, "dimensions")
    if dimensions is not None:
        width = hub.embed_width(*parsed.key[1:])
        if not 1 <= dimensions <= width:
            raise UserError(
                f"field 'dimensions': {dimensions} out of range, give 1..{width} (the vectors' width)"
            )
    return Parsed(parsed.key, parsed.items, parsed.lengths, {"dimensions": dimensions, "encoding": encoding})


def parse_predict(hub: Roberta, body: dict, options: ServeOptions) -> Parsed:
    head = read(body, "/predict", "head", _only_head(hub, "classification", ""))
    if not head:
        raise UserError("field 'head' is required: the checkpoint has several classification heads, or none")
    hub.head(head, "classification")
    ids = _ids(hub, body, options, "/predict")
    return _bounded(Parsed(("predict", head), ids, list(map(len, ids))), options)


def parse_answer(hub: Roberta, body: dict, options: ServeOptions) -> Parsed:
    question = read(body, "/answer", "question")
    if not question.strip():
        raise UserError("field 'question': empty")
    context = read(body, "/answer", "context")
    topk = read(body, "/answer", "topk")
    _answer_rows(topk, 1, options)
    head = read(body, "/answer", "head", _only_head(hub, "span", "squad"))
    hub.head(head, "span")
    tokens = len(hub.tokenizer.encode(question, context))
    return _bounded(Parsed(("answer", head, topk), [(question, context)], [tokens]), options)


def parse_tag(hub: Roberta, body: dict, options: ServeOptions) -> Parsed:
    """Texts to tag: a text longer than the model is read whole (in windows), so only the
    request's token bound limits it."""
    texts = _texts(body, options, "/tag")
    head = read(body, "/tag", "head", _only_head(hub, "tagging", ""))
    if not head:
        raise UserError("field 'head' is required: the checkpoint has several tagging heads, or none")
    hub.head(head, "tagging")
    lengths = [len(ids) + 2 for ids in hub.tokenizer.tokenize_ids_batch(texts)]
    return _bounded(Parsed(("tag", head), texts, lengths), options)


def run(hub: Roberta, key: tuple, items: list) -> Sequence:
    """The hub's list call for one round's items of one key: one result per item, in order."""
    what = key[0]
    if what == "fill-mask":
        return hub.fill_mask(items, topk=key[1])
    if what == "embed":
        return hub.embed(items, layer=key[1], pool=key[2]).tolist()
    if what == "predict":
        return list(hub.predict(key[1], items, return_logits=True).float())
    if what == "answer":
        questions, contexts = zip(*items)
        return hub.answer(list(questions), list(contexts), topk=key[2], name=key[1])
    if what == "tag":
        return hub.tag(items, name=key[1])
    raise ValueError(f"no endpoint runs {key!r}")


# Each answer is built as `shapes.ANSWERS` declares it (the typed dicts openapi writes out).
def fillings(results: list) -> shapes.FillMaskAnswer:
    return shapes.FillMaskAnswer(
        fillings=[
            [shapes.Filling(sequence=text, score=score, token=token) for text, score, token in result]
            for result in results
        ]
    )


def embeddings(results: list) -> shapes.EmbedAnswer:
    return shapes.EmbedAnswer(embeddings=results)


def _openai_vector(vector: list[float], dimensions: int | None, encoding: str) -> list[float] | str:
    if dimensions is not None:
        part = np.asarray(vector[:dimensions], dtype=np.float64)
        norm = float(np.linalg.norm(part))
        vector = (part / norm if norm > 0 else part).tolist()
    if encoding == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector


def openai_embeddings(results: list, parsed: Parsed, model: str) -> shapes.OpenAIEmbeddingsAnswer:
    shape = parsed.shape
    vectors = [_openai_vector(v, shape.get("dimensions"), shape.get("encoding", "float")) for v in results]
    return shapes.OpenAIEmbeddingsAnswer(
        object="list",
        data=[
            shapes.OpenAIEmbedding(object="embedding", index=i, embedding=v) for i, v in enumerate(vectors)
        ],
        model=model,
        usage=shapes.Usage(prompt_tokens=parsed.tokens, total_tokens=parsed.tokens),
    )


def predictions(hub: Roberta, head: str, results: list[torch.Tensor]) -> shapes.PredictAnswer:
    """Each row's label and class probabilities (a one-output regression head: its score)."""
    module = hub.model.heads[head]
    out: list[shapes.Classified | shapes.Regressed] = []
    for logits in results:
        if len(logits) == 1:
            out.append(shapes.Regressed(score=float(logits[0])))
            continue
        labels = label_names(module)
        probabilities = logits.softmax(-1).tolist()
        best = max(range(len(labels)), key=probabilities.__getitem__)
        out.append(shapes.Classified(label=labels[best], probabilities=dict(zip(labels, probabilities))))
    return shapes.PredictAnswer(head=head, predictions=out)


def label_names(head) -> list[str]:
    """A classification head's class names: those it was trained with, else "0".."C-1"."""
    return list(head.labels) or [str(i) for i in range(head.spec()["num_classes"])]


def tagged(head: str, results: list[list[shapes.Entity]]) -> shapes.TagAnswer:
    """Each text's entities (the hub's): type, text, character offsets [start, end) and score."""
    return shapes.TagAnswer(head=head, entities=results)


def answers(results: list) -> shapes.SpansAnswer:
    (spans,) = results
    return shapes.SpansAnswer(
        answers=[shapes.Span(text=text, score=score, start=start) for text, score, start in spans]
    )
