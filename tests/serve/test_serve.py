"""`roberta serve`: every endpoint answers what the one-by-one hub call answers, bad requests get a
one-line 4xx and the server stays up, the batcher shares forward passes and keeps order, a
timed-out request frees its slot, and the command itself serves and shuts down gracefully."""

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from roberta import UserError
from roberta.checkpoint import save
from roberta.serve.batcher import Batcher
from roberta.serve.server import ServeOptions, load_hub, make_app
from serve_fixtures import LABELS, Running, call, free_port, serving_hub

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["Hello world!", "A somewhat longer sentence, with a comma and more words in it.", "x"]
FILL = "The capital of France is <mask>."


@pytest.fixture(scope="module")
def hub(shared_data):
    return serving_hub(shared_data)


@pytest.fixture(scope="module")
def server(hub):
    running = Running(hub, max_body_kb=4, timeout=30, max_items=8, max_request_tokens=300, max_answers=40)
    yield running
    running.stop()


def test_endpoints_answer_as_the_hub_does(hub, server):
    status, answer = call(server.url + "/fill-mask", {"text": [FILL, "The capital of Italy is <mask>."]})
    assert status == 200
    expected = hub.fill_mask([FILL, "The capital of Italy is <mask>."], topk=5)
    assert [[f["token"] for f in one] for one in answer["fillings"]] == [
        [t for _, _, t in e] for e in expected
    ]
    assert answer["fillings"][0][0]["token"] == " Paris"
    assert answer["fillings"][0][0]["sequence"] == "The capital of France is Paris."
    assert answer["fillings"][1][0]["score"] == pytest.approx(expected[1][0][1], abs=1e-5)

    ids = [hub.encode(t) for t in TEXTS]
    for options in ({}, {"layer": 1, "pool": "mean"}):
        status, answer = call(server.url + "/embed", {"text": TEXTS, **options})
        one_by_one = torch.cat([hub.embed([i], **options) for i in ids])
        assert status == 200 and torch.tensor(answer["embeddings"]) == pytest.approx(one_by_one, abs=1e-5)

    status, answer = call(server.url + "/v1/embeddings", {"input": TEXTS[0], "model": "any"})
    assert status == 200 and answer["object"] == "list" and answer["usage"]["prompt_tokens"] == len(ids[0])
    assert torch.tensor(answer["data"][0]["embedding"]) == pytest.approx(hub.embed(ids[:1])[0], abs=1e-5)

    status, answer = call(server.url + "/predict", {"head": "topic", "text": TEXTS[1]})
    probabilities = hub.predict("topic", ids[1]).exp()[0]
    assert status == 200 and answer["head"] == "topic"
    (prediction,) = answer["predictions"]
    assert list(prediction["probabilities"]) == list(LABELS)
    assert list(prediction["probabilities"].values()) == pytest.approx(probabilities.tolist(), abs=1e-6)
    assert prediction["label"] == LABELS[int(probabilities.argmax())]

    question, context = "Where did Bob go?", "Bob went home after the game on Sunday."
    status, answer = call(server.url + "/answer", {"question": question, "context": context, "topk": 3})
    expected = hub.answer(question, context, topk=3)
    assert status == 200
    assert [(a["text"], a["start"]) for a in answer["answers"]] == [(t, s) for t, _, s in expected]


def test_info_describes_the_model(hub, server):
    status, info = call(server.url + "/info")
    assert status == 200 and info["runtime"] == "torch" and info["precision"] == "fp32"
    assert info["shape"]["layers"] == hub.model.config.num_layers and info["fill_mask"] is True
    assert info["heads"] == {
        "sentiment": {"kind": "classification", "labels": ["0", "1", "2"]},
        "topic": {"kind": "classification", "labels": list(LABELS)},
        "squad": {"kind": "span"},
    }
    assert info["tokenizer"]["fingerprint"] == hub.tokenizer.fingerprint()


BAD = [
    ("/fill-mask", b"{not json", "malformed JSON"),
    ("/fill-mask", b"[1, 2]", "expected a JSON object"),
    ("/fill-mask", {"text": "no mask here"}, "exactly one <mask>"),
    ("/fill-mask", {"text": FILL, "topk": "3"}, "field 'topk': expected int"),
    ("/fill-mask", {"text": FILL, "topk": 0}, "topk 0 out of range"),
    ("/embed", {"text": " ".join(["word"] * 100)}, "longer than the model's 64 positions"),
    ("/embed", {"text": []}, "an empty list"),
    ("/embed", {"text": ["ok", 3]}, "field 'text'[1]: expected str"),
    ("/embed", {"text": "ok", "layer": 9}, "layer 9 out of range"),
    ("/embed", {"text": "ok", "pool": "max"}, "pool 'max' unknown"),
    ("/predict", {"text": "ok"}, "field 'head' is required"),
    ("/predict", {"text": "ok", "head": "nope"}, "unknown head 'nope'"),
    ("/predict", {"text": "ok", "head": "squad"}, "is a span head"),
    ("/predict", {"text": ["a", "b"], "pair": ["c"], "head": "topic"}, "1 pairs for 2 texts"),
    ("/answer", {"question": "", "context": "x"}, "field 'question': empty"),
    ("/answer", {"question": "Who?"}, "field 'context' is required"),
    ("/answer", {"question": "Who?", "context": ""}, "field 'context': empty"),
    ("/answer", {"question": "Who?", "context": "x", "head": "topic"}, "is a classification head"),
    ("/v1/embeddings", {"input": "x", "encoding_format": "binary"}, "give 'float' or 'base64'"),
    # Valid JSON that is no text: a lone surrogate, in every field that takes text.
    ("/fill-mask", rb'{"text": "The \ud800 <mask>."}', "field 'text': not valid Unicode text"),
    ("/embed", rb'{"text": ["ok", "\udfff"]}', "field 'text'[1]: not valid Unicode text"),
    ("/embed", rb'{"text": "ok", "pair": ["\ud800"]}', "field 'pair'[0]: not valid Unicode text"),
    ("/v1/embeddings", rb'{"input": "a\ud800b"}', "field 'input': not valid Unicode text"),
    ("/predict", rb'{"text": ["\ud800"], "head": "topic"}', "field 'text'[0]: not valid Unicode text"),
    ("/answer", rb'{"question": "\ud800?", "context": "x"}', "field 'question': not valid Unicode"),
    ("/answer", rb'{"question": "Who?", "context": "\udc00"}', "field 'context': not valid Unicode"),
    ("/predict", rb'{"text": "ok", "head": "\ud800"}', "field 'head': not valid Unicode"),
    # Nested past Python's recursion limit.
    ("/embed", b'{"text": ' + b"[" * 1500 + b"]" * 1500 + b"}", "nested too deeply"),
    ("/answer", b"[" * 3000, "nested too deeply"),
]

# The fixture's bounds: 8 items, 300 tokens, 40 answer rows a request.
TOO_MUCH = [
    (
        "/embed",
        {"text": ["a"] * 9},
        "field 'text': items: 9, over the server's limit of 8 per request (--max-items)",
    ),
    ("/v1/embeddings", {"input": ["a"] * 50}, "limit of 8 per request (--max-items)"),
    ("/predict", {"text": ["a"] * 2, "pair": ["b"] * 9, "head": "topic"}, "field 'pair': items: 9"),
    ("/fill-mask", {"text": [FILL] * 8, "topk": 6}, "answer rows (topk 6 x 8 items): 48, over"),
    ("/fill-mask", {"text": FILL, "topk": 50000}, "(--max-answers)"),
    ("/answer", {"question": "Who?", "context": "x", "topk": 41}, "answer rows (topk 41 x 1 item): 41"),
    ("/embed", {"text": ["word " * 60] * 6, "truncate": True}, "tokens: 378, over the server's limit of 300"),
    ("/answer", {"question": "Who?", "context": "word " * 400}, "(--max-request-tokens)"),
]


def test_bad_requests_get_a_one_line_4xx_and_the_server_stays_up(server):
    for path, body, message in BAD:
        raw = body if isinstance(body, bytes) else None
        status, answer = call(server.url + path, None if raw else body, raw=raw)
        assert status == 400, (path, body, answer)
        assert message in answer["error"] and "\n" not in answer["error"], (path, answer)
    for path, body, message in TOO_MUCH:
        status, answer = call(server.url + path, body)
        assert status == 413 and message in answer["error"], (path, body, answer)
    # An error quotes a long text's start only, never the whole request.
    status, answer = call(server.url + "/fill-mask", {"text": "no mask " * 400})
    assert status == 400 and "exactly one <mask>" in answer["error"] and len(answer["error"]) <= 300
    status, answer = call(server.url + "/predict", {"text": "ok", "head": "h" * 3000})
    assert status == 400 and len(answer["error"]) <= 300
    status, answer = call(server.url + "/embed", raw=b'{"text": "' + b"a" * 5000 + b'"}')
    assert status == 413 and "over the limit of 4096" in answer["error"]
    # Chunked, with no length declared: counted as it arrives.
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request("POST", "/embed", body=iter([b'{"text": "', b"a" * 5000, b'"}']), encode_chunked=True)
    response = connection.getresponse()
    assert response.status == 413 and "over the limit" in json.loads(response.read())["error"]
    connection.close()
    assert call(server.url + "/nowhere")[0] == 404
    assert call(server.url + "/fill-mask")[0] == 405  # a GET
    long = {"text": " ".join(["word"] * 100), "truncate": True}
    with pytest.warns(UserWarning, match="truncated 1 text"):
        assert call(server.url + "/embed", long)[0] == 200
    assert call(server.url + "/health") == (200, {"status": "ok"})


def test_concurrent_requests_share_a_forward_pass_and_keep_order(hub):
    running = Running(hub, max_wait_ms=400)
    try:
        before = call(running.url + "/info")[1]["counts"]["forward_passes"]
        texts = [f"Sentence number {k} " + "word " * k for k in range(8)]
        with ThreadPoolExecutor(len(texts)) as pool:
            answers = list(pool.map(lambda t: call(running.url + "/embed", {"text": t}), texts))
        counts = call(running.url + "/info")[1]["counts"]
    finally:
        running.stop()
    # All eight arrived within the wait: the worker ran them as one hub call of one forward pass.
    assert counts["forward_passes"] - before <= 2 and counts["calls"] <= 2
    for text, (status, answer) in zip(texts, answers):
        assert status == 200
        assert torch.tensor(answer["embeddings"][0]) == pytest.approx(
            hub.embed([hub.encode(text)])[0], abs=1e-5
        )


def test_a_client_that_goes_away_frees_its_slot(hub):
    running = Running(hub, max_wait_ms=1500)
    try:
        before = call(running.url + "/info")[1]["counts"]
        body = json.dumps({"text": FILL}).encode()
        with socket.create_connection(("127.0.0.1", running.port)) as s:
            s.sendall(
                b"POST /fill-mask HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            time.sleep(0.3)  # queued: the worker waits 1.5 s for company
        time.sleep(2)
        after = call(running.url + "/info")[1]["counts"]
    finally:
        running.stop()
    # The request was dropped before it ran: no forward pass, no answer (the /info calls run none).
    assert after["forward_passes"] == before["forward_passes"] and after["requests"] == before["requests"]


def test_a_request_that_timed_out_stops_costing_at_the_next_forward_pass(hub):
    # Every forward pass takes 0.2 s; a request of 8 texts needs 8 of them (16-token batches).
    slow = hub.model.register_forward_pre_hook(lambda *_: time.sleep(0.2))
    running = Running(hub, timeout=0.5, max_batch_tokens=16)
    try:
        texts = [f"Sentence number {k} has a few words." for k in range(8)]
        before = call(running.url + "/info")[1]["counts"]["forward_passes"]
        status, answer = call(running.url + "/embed", {"text": texts})
        assert status == 504 and answer == {"error": "not answered within 0.5 s"}
        time.sleep(1.0)
        spent = call(running.url + "/info")[1]["counts"]["forward_passes"] - before
        # The passes run before the timeout, and the one in progress when it came: not all 8.
        assert spent <= 4, spent
        status, answer = call(running.url + "/embed", {"text": texts[0]})
        assert status == 200  # the worker is free again
    finally:
        running.stop()
        slow.remove()


def test_int8_serving_prints_its_agreement_and_stays_close(hub, tmp_path, capsys):
    ckpt = save(tmp_path / "ckpt", hub.model, hub.tokenizer)
    int8 = load_hub(ServeOptions(str(ckpt), int8=True, max_batch_tokens=512))
    assert "int8 vs fp32 on the first 5 input(s): cosine min" in capsys.readouterr().err
    assert int8.batch_tokens == 512 and int8.fill_mask(FILL, topk=1)[0][2] == " Paris"
    with pytest.raises(UserError, match="holds no int8 graphs|not an ONNX export"):
        load_hub(ServeOptions(str(ckpt), runtime="onnx", int8=True))
    with pytest.raises(UserError, match="field 'max_wait_ms' must be at least 0, not -1"):
        make_app(ServeOptions(str(ckpt), max_wait_ms=-1), hub)


def run_jobs(batcher: Batcher, jobs: list[tuple], timeout: float = 10) -> list:
    async def main():
        futures = [batcher.submit(key, items, [1] * len(items)) for key, items in jobs]
        return await asyncio.gather(*(asyncio.wait_for(f, timeout) for f in futures), return_exceptions=True)

    return asyncio.run(main())


def test_batcher_groups_by_key_keeps_order_and_survives_errors():
    calls = []

    def run(key, items):
        calls.append((key, list(items)))
        if "bad" in items:
            raise ValueError("boom")
        return [f"{key}:{item}" for item in items]

    batcher = Batcher(run, max_batch_tokens=100, max_wait_s=0.2)
    try:
        results = run_jobs(batcher, [("a", [1, 2]), ("b", [3]), ("c", [4]), ("c", ["bad"]), ("a", [5])])
        assert results[:3] == [["a:1", "a:2"], ["b:3"], ["c:4"]] and results[4] == ["a:5"]
        assert isinstance(results[3], ValueError)  # the failing request alone gets the error
        assert sorted(calls, key=str) == sorted(
            [("a", [1, 2, 5]), ("b", [3]), ("c", [4, "bad"]), ("c", [4]), ("c", ["bad"])], key=str
        )  # one call per key, and a failed shared call run again request by request
        assert run_jobs(batcher, [("a", [6])]) == [["a:6"]]  # the worker outlived the error
    finally:
        batcher.close()


def test_a_request_that_times_out_frees_its_slot():
    ran, release = [], threading.Event()

    def run(key, items):
        ran.extend(items)
        release.wait(5)
        return items

    batcher = Batcher(run, max_batch_tokens=1, max_wait_s=0)

    async def main():
        first = batcher.submit("k", ["first"], [1])  # occupies the worker
        await asyncio.sleep(0.1)
        late = batcher.submit("k", ["late"], [1])
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(late, 0.1)  # cancels it
        release.set()
        return await first

    try:
        assert asyncio.run(main()) == ["first"]
    finally:
        batcher.close()
    assert ran == ["first"]  # the abandoned job never ran


@pytest.mark.slow
def test_roberta_serve_command_answers_and_finishes_in_flight_work_on_sigterm(hub, tmp_path):
    ckpt = save(tmp_path / "ckpt", hub.model, hub.tokenizer)
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # The command a user types: the `roberta` script installed beside this interpreter.
    command = [str(Path(sys.executable).with_name("roberta")), "serve", str(ckpt), "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--max-wait-ms", "1500"], env=env, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read()
            try:
                if call(url + "/health", timeout=1)[0] == 200:
                    break
            except OSError:
                assert time.monotonic() < deadline, "roberta serve did not start"
                time.sleep(0.2)
        status, answer = call(url + "/fill-mask", {"text": FILL})
        assert status == 200 and answer["fillings"][0][0]["token"] == " Paris"
        with ThreadPoolExecutor(1) as pool:
            in_flight = pool.submit(call, url + "/fill-mask", {"text": FILL, "topk": 1})
            time.sleep(0.5)  # queued: the worker waits 1.5 s for company
            process.send_signal(signal.SIGTERM)
            status, answer = in_flight.result(timeout=30)
        assert status == 200 and answer["fillings"][0][0]["token"] == " Paris"
        # uvicorn re-raises the SIGTERM it handled once shut down, so the status says what stopped it.
        assert process.wait(timeout=30) in (0, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
