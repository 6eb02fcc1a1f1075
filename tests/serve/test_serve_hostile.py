"""`roberta serve` against a hostile client: what the server keeps stays bounded (every metrics
label from a closed set, whatever methods and paths arrive, keyed or not), every request field is
honoured or refused with a 400 naming it (OpenAI's `dimensions`, `encoding_format`, `user`, token
ids), and a megabyte of whitespace is text like any other."""

from __future__ import annotations

import base64
import http.client
import json
import threading

import numpy as np
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from data_fixtures import write_byte_tokenizer
from roberta import Roberta, RobertaConfig, RobertaModel
from roberta.serve import openapi
from roberta.tokenizer import load_tokenizer
from serve_fixtures import Running, call, fetch

pytestmark = pytest.mark.usefixtures("one_thread")

KEY = "hostile-test-key"
# Methods a client may send: RFC 9110's, WebDAV's and others a parser may know, and made-up ones.
KNOWN = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH"]
ODD = ["PROPFIND", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "SEARCH", "REPORT", "PURGE", "LINK"]


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Roberta:
    tok = load_tokenizer(write_byte_tokenizer(tmp_path_factory.mktemp("tok")))
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2, ffn_size=64, max_positions=66
    )
    model = RobertaModel(config)
    model.add_classification_head("sentiment", 3)
    return Roberta(model, tok).eval()


@pytest.fixture(scope="module")
def server(hub):
    running = Running(hub, max_body_kb=8192)  # a million \u3000 is 6 MB of JSON
    yield running
    running.stop()


def scrape(url: str, key: str | None) -> dict[tuple, float]:
    """Every sample of the /metrics page: (name, sorted labels) -> value."""
    status, _, page = fetch(url + "/metrics", headers={"Authorization": f"Bearer {key}"} if key else {})
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(page.decode())
        for s in family.samples
    }


def send(port: int, method: str, path: str, key: str | None = None) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, headers={"Authorization": f"Bearer {key}"} if key else {})
        return connection.getresponse().status
    finally:
        connection.close()


@pytest.mark.parametrize("key", [None, KEY], ids=["open", "keyed"])
def test_the_metrics_page_stays_flat_whatever_methods_and_paths_a_client_sends(hub, key):
    running = Running(hub, api_key=(KEY,)) if key else Running(hub)
    try:
        page = lambda: scrape(running.url, KEY if key else None)  # noqa: E731
        for method in [*KNOWN, "MADEUP"]:
            send(running.port, method, "/made-up")
            send(running.port, method, "/embed")
        page()  # the first scrape adds the /metrics series
        before = page()
        statuses = set()
        for k in range(150):
            method = ODD[k % len(ODD)] if k % 3 == 0 else f"X{k:03d}"
            statuses.add(send(running.port, method, f"/path-{k}"))
            statuses.add(send(running.port, method, "/embed"))
            statuses.add(send(running.port, KNOWN[k % len(KNOWN)], f"/made-up/{k}?q={k}"))
        after = page()
    finally:
        running.stop()
    assert statuses <= {401, 404, 405}, statuses
    # The same series, only their counts moved (each: the 450 requests' own ones and the scrapes').
    assert set(after) == set(before)
    methods = {dict(labels).get("method") for name, labels in after if name == "roberta_requests_total"}
    endpoints = {dict(labels).get("endpoint") for name, labels in after if name == "roberta_requests_total"}
    assert methods <= {*KNOWN, "other"} and endpoints <= {"unmatched", "/embed", "/metrics"}
    assert sum(v for (name, _), v in after.items() if name == "roberta_requests_total") >= 450


def embeddings(server, body: dict) -> tuple[int, dict]:
    return call(server.url + "/v1/embeddings", body)


def test_openai_dimensions_shorten_and_renormalise_as_openai_does(hub, server):
    texts = ["Hello world!", "Zürich, 東京"]
    status, full = embeddings(server, {"input": texts, "model": "m", "user": "someone"})
    assert status == 200
    width = len(full["data"][0]["embedding"])
    assert width == hub.embed_width() == 32
    for dimensions in (1, 8, width):
        status, short = embeddings(server, {"input": texts, "dimensions": dimensions})
        assert status == 200
        for row, whole in zip(short["data"], full["data"]):
            want = np.array(whole["embedding"][:dimensions])
            assert np.allclose(row["embedding"], want / np.linalg.norm(want), atol=1e-6)
            assert abs(np.linalg.norm(row["embedding"]) - 1) < 1e-6
    status, packed = embeddings(server, {"input": texts, "encoding_format": "base64", "dimensions": 8})
    assert status == 200
    decoded = np.frombuffer(base64.b64decode(packed["data"][1]["embedding"]), dtype="<f4")
    assert decoded.shape == (8,) and np.allclose(decoded, short_of(full, 1, 8), atol=1e-6)


def short_of(answer: dict, row: int, dimensions: int) -> np.ndarray:
    vector = np.array(answer["data"][row]["embedding"][:dimensions])
    return vector / np.linalg.norm(vector)


REFUSED = [
    ("/v1/embeddings", {"input": "x", "dimensions": 0}, "field 'dimensions': 0 out of range, give 1..32"),
    ("/v1/embeddings", {"input": "x", "dimensions": 33}, "field 'dimensions': 33 out of range"),
    ("/v1/embeddings", {"input": "x", "dimensions": "8"}, "field 'dimensions': expected int, got str"),
    ("/v1/embeddings", {"input": "x", "dimensions": True}, "field 'dimensions': expected int, got bool"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, "field 'encoding_format': 'int8'"),
    ("/v1/embeddings", {"input": "x", "user": 7}, "field 'user': expected str, got int"),
    ("/v1/embeddings", {"input": "x", "model": None}, "field 'model': expected str, got NoneType"),
    ("/v1/embeddings", {"input": [1, 2, 3]}, "field 'input': token ids are not served"),
    ("/v1/embeddings", {"input": [[1, 2], [3]]}, "field 'input': token ids are not served"),
    ("/v1/embeddings", {"input": ["ok", None]}, "field 'input'[1]: expected str, got NoneType"),
    ("/v1/embeddings", {"input": []}, "field 'input': an empty list"),
    ("/v1/embeddings", {"input": "x", "dimension": 8}, "field 'dimension': /v1/embeddings reads no such"),
    ("/embed", {"text": "x", "normalize": True}, "field 'normalize': /embed reads no such field"),
    ("/embed", {"text": "x", "dimensions": 8}, "field 'dimensions': /embed reads no such field"),
    ("/predict", {"text": "x", "topk": 2}, "field 'topk': /predict reads no such field"),
    ("/fill-mask", {"text": "a <mask>", "truncate": True}, "field 'truncate': /fill-mask reads no such"),
    ("/answer", {"question": "q", "context": "c", "pair": "p"}, "field 'pair': /answer reads no such"),
]


@pytest.mark.parametrize("path, body, cause", REFUSED, ids=[f"{p}-{list(b)[-1]}" for p, b, _ in REFUSED])
def test_a_field_is_honoured_or_refused_naming_it(server, path, body, cause):
    status, answer = call(server.url + path, body)
    assert status == 400 and cause in answer["error"], answer


def test_a_query_parameter_on_a_post_is_refused_naming_it(server):
    status, answer = call(server.url + "/v1/embeddings?dimensions=8", {"input": "x"})
    assert (
        status == 400
        and "query parameter 'dimensions': /v1/embeddings reads a JSON body only" in answer["error"]
    )
    assert call(server.url + "/embed?", {"text": "x"})[0] == 200  # an empty query is none


def test_every_field_a_schema_names_is_one_its_endpoint_reads(server):
    """A field the document names is never refused as unknown (each with a value of its type)."""
    values = {"text": "Hello <mask>", "input": "x", "pair": "y", "layer": -1, "pool": "mean"}
    values |= {"truncate": True, "topk": 1, "head": "sentiment", "question": "q", "context": "c"}
    values |= {"model": "m", "encoding_format": "float", "dimensions": 4, "user": "u"}
    for path, schema in openapi.REQUESTS.items():
        assert schema["additionalProperties"] is False
        for name in schema["properties"]:
            body = {k: values[k] for k in schema.get("required", ())} | {name: values[name]}
            status, answer = call(server.url + path, body)
            assert "reads no such field" not in answer.get("error", ""), (path, name, answer)


@pytest.mark.parametrize("kind", [" ", "\n", "\t", "\u3000", "\u2028", "\x85"], ids=repr)
def test_a_million_whitespace_characters_are_text_over_http(hub, server, kind):
    text = "Hello" + kind * 1_000_000 + "world"
    status, answer = call(server.url + "/embed", {"text": text, "truncate": True}, timeout=120)
    assert status == 200, answer
    ids = hub.encode(text, truncate=True)
    assert np.allclose(answer["embeddings"][0], hub.embed([ids])[0].tolist(), atol=1e-5)
    # Untruncated, it is over the bounds: refused in one line, never a 500.
    status, answer = call(server.url + "/predict", {"text": text}, timeout=120)
    assert status in (400, 413) and "\n" not in answer["error"], answer
    status, answer = embeddings(server, {"input": ["fine", text], "truncate": True})
    assert status == 200 and len(answer["data"]) == 2


def test_a_megabyte_word_and_mixed_scripts_are_text_over_http(hub, server):
    for text in ("a" * 1_000_000, "naïve東京Москва😀ελλάδα" * 20_000):
        status, answer = call(server.url + "/predict", {"text": text, "truncate": True}, timeout=120)
        assert status == 200 and len(answer["predictions"]) == 1, answer
        status, answer = call(server.url + "/fill-mask", {"text": text + " <mask>"}, timeout=120)
        assert status in (400, 413) and "\n" not in answer["error"], answer


def test_an_answer_over_a_megabyte_of_whitespace_is_found_or_refused_in_one_line(server):
    body = {"question": "Where?", "context": "Home." + " " * 1_000_000 + "Bob went home."}
    status, answer = call(server.url + "/answer", body, timeout=120)
    assert status in (200, 400, 413), answer
    assert json.dumps(answer).count("\n") == 0


def test_health_answers_while_a_request_is_being_read(hub, server, monkeypatch):
    """Checking a request runs on a worker thread: while one is held there, /health and another
    client's request are answered."""
    held, release = threading.Event(), threading.Event()
    check = hub.check_embed

    def slow_check(layer, pool):
        if pool == "mean":  # the held request's
            held.set()
            assert release.wait(60)
        return check(layer, pool)

    monkeypatch.setattr(hub, "check_embed", slow_check)
    answers = []
    slow = threading.Thread(
        target=lambda: answers.append(call(server.url + "/embed", {"text": "x", "pool": "mean"}, timeout=90))
    )
    slow.start()
    try:
        assert held.wait(30)
        assert call(server.url + "/health", timeout=10) == (200, {"status": "ok"})
        assert call(server.url + "/embed", {"text": "another client"}, timeout=10)[0] == 200
        assert not answers  # still held
    finally:
        release.set()
        slow.join(60)
    assert answers[0][0] == 200


def test_origins_a_browser_sends_are_accepted():
    from roberta.serve.app import check_origins

    check_origins(("*", "https://app.example", "http://localhost:3000", "http://[::1]:8080"))
    check_origins(("http://127.0.0.1:8000", "https://a-b.example.co.uk", "https://app.example:8443"))
