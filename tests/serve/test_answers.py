"""Every endpoint's real answer, from a micro model with every kind of head served in this
process, is exactly what the OpenAPI document (written from `roberta.serve.shapes.ANSWERS`)
declares (jsonschema, as test_serve_platform.py checks its answers): each object holds its required
fields and no undeclared one, each value of its type, each `oneOf` met by exactly one option."""

import jsonschema
import pytest
import torch

from roberta import Roberta, RobertaConfig, RobertaModel
from roberta.model import SpanHead, TaggingHead
from roberta.tokenizer import load_tokenizer
from serve_fixtures import Running, call
from tag_fixtures import LABELS as TAGS
from tag_fixtures import MICRO

pytestmark = pytest.mark.usefixtures("one_thread")

SENTENCE = "Angela Merkel met Emmanuel Macron in Paris on Monday, and Google said nothing."


@pytest.fixture(scope="module")
def server(shared_data):
    """A random micro model with a labelled and an unlabelled classification head, a regression
    head, a span head and a tagging head (its projection scaled up, so that it finds entities)."""
    tokenizer = load_tokenizer(shared_data / "gpt2_bpe")
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig(vocab_size=tokenizer.vocab_size, **MICRO))
    model.add_classification_head("topic", 2, labels=("sport", "politics"))
    model.add_classification_head("sentiment", 3)
    model.add_classification_head("rating", 1)
    model.add_head("squad", SpanHead(model.config))
    model.add_head("ner", TaggingHead(model.config, len(TAGS), TAGS))
    with torch.no_grad():
        model.heads["ner"].out_proj.weight.mul_(40)
    running = Running(Roberta(model, tokenizer).eval(), max_items=8)
    yield running
    running.stop()


REQUESTS = {
    "/fill-mask": [{"text": ["The capital of France is <mask>.", "A <mask> day"], "topk": 2}],
    "/embed": [{"text": ["Hello world!", "x"]}, {"text": "x", "layer": 1, "pool": "mean"}],
    "/v1/embeddings": [
        {"input": ["Hello world!", "x"], "model": "any"},
        {"input": "x", "encoding_format": "base64", "dimensions": 8},
    ],
    "/predict": [{"head": h, "text": ["Hello world!", "x"]} for h in ("topic", "sentiment", "rating")],
    "/answer": [{"question": "Where did Bob go?", "context": "Bob went home after the game.", "topk": 3}],
    "/tag": [{"text": [SENTENCE, "x"]}],
}


def test_every_answer_is_exactly_its_declared_shape(server):
    status, document = call(server.url + "/openapi.json")
    assert status == 200
    answered = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            content = operation["responses"]["200"]["content"]
            if "application/json" not in content:
                continue
            schema = content["application/json"]["schema"]
            for body in REQUESTS.get(path, [None]) if method == "post" else [None]:
                status, answer = call(server.url + path, body)
                assert status == 200, (path, body, answer)
                jsonschema.validate(answer, schema)
                answered[path] = answer
    assert set(answered) == set(REQUESTS) | {"/health", "/info", "/openapi.json"}
    # The optional and the alternative parts were met too: a head's labels, a regression's score,
    # a base64 vector, an entity.
    heads = answered["/info"]["heads"]
    assert heads["topic"] == {"kind": "classification", "labels": ["sport", "politics"]}
    assert heads["ner"] == {"kind": "tagging"}
    assert [set(p) for p in answered["/predict"]["predictions"]] == [{"score"}, {"score"}]  # rating
    assert isinstance(answered["/v1/embeddings"]["data"][0]["embedding"], str)
    assert answered["/tag"]["entities"][0], "no entity found: the Entity fields went unchecked"


def test_every_refusal_is_the_declared_error(server):
    status, document = call(server.url + "/openapi.json")
    error = document["components"]["schemas"]["Error"]
    for path, body in (("/embed", {"text": 3}), ("/embed", {"text": "x", "top": 1}), ("/nowhere", None)):
        status, answer = call(server.url + path, body)
        assert status in (400, 404), (path, status)
        jsonschema.validate(answer, error)
