"""`roberta serve` for a platform team: API keys on every path but the page and /health, Prometheus
metrics that move with the traffic, an OpenAPI document of exactly the served paths whose schemas
the answers meet, CORS for the origins named, and one access line per request without the key."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families

from roberta import UserError, cli
from roberta.checkpoint import save
from roberta.cli.common import options_from
from roberta.serve.server import ServeOptions, make_app
from serve_fixtures import Running, call, fetch, free_port, serving_hub

pytestmark = pytest.mark.usefixtures("one_thread")

KEY, OTHER_KEY = "first-key_0123", "second.key~4567"
TEXTS = ["Hello world!", "A somewhat longer sentence, with a comma."]
FILL = "The capital of France is <mask>."
# A valid request per POST path (each meets its schema in the document).
REQUESTS = {
    "/fill-mask": {"text": FILL, "topk": 2},
    "/embed": {"text": TEXTS, "layer": 1, "pool": "mean"},
    "/v1/embeddings": {"input": TEXTS[0], "model": "any"},
    "/predict": {"head": "topic", "text": TEXTS},
    "/answer": {"question": "Where did Bob go?", "context": "Bob went home after the game.", "topk": 2},
}


@pytest.fixture(scope="module")
def hub(shared_data):
    return serving_hub(shared_data)


@pytest.fixture(scope="module")
def keyed(hub, tmp_path_factory):
    """A server with a key on the command line and one in a file (a comment and a blank line too)."""
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"# the platform's key\n\n  {OTHER_KEY}  \n")
    running = Running(hub, api_key=(KEY,), api_key_file=str(keys), cors_origin=("https://app.example",))
    yield running
    running.stop()


def get(url: str, key: str | None = None, headers: dict | None = None) -> tuple[int, dict, bytes]:
    return fetch(url, headers={**({"Authorization": f"Bearer {key}"} if key else {}), **(headers or {})})


def test_every_path_but_the_page_and_health_needs_a_key(keyed):
    paths = json.loads(get(keyed.url + "/openapi.json", KEY)[2])["paths"]
    assert len(paths) == 10
    for path, operations in paths.items():
        body = json.dumps(REQUESTS.get(path, {})).encode() if "post" in operations else None
        for key in (None, "wrong-key", KEY.upper()):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            status, answer_headers, answer = fetch(keyed.url + path, body, headers)
            if path in ("/", "/health"):
                assert status == 200, path
                continue
            assert status == 401, (path, key)
            challenge = 'Bearer error="invalid_token"' if key else "Bearer"
            assert answer_headers["www-authenticate"] == challenge
            error = json.loads(answer)["error"]
            assert "\n" not in error and KEY not in error and "wrong" not in error
        for key in (KEY, OTHER_KEY):
            status, _, _ = fetch(keyed.url + path, body, {"Authorization": f"Bearer {key}"})
            assert status == 200, (path, key)
    # The scheme's case is free (RFC 7235); a key in another scheme, or bare, is none.
    assert get(keyed.url + "/info", headers={"Authorization": f"bearer {KEY}"})[0] == 200
    assert get(keyed.url + "/info", headers={"Authorization": f"Basic {KEY}"})[0] == 401
    assert get(keyed.url + "/info", headers={"Authorization": KEY})[0] == 401
    assert "API key" in call(keyed.url + "/embed", {"text": "x"})[1]["error"]


def test_the_command_line_repeats_keys_and_origins_and_turns_the_log_off(hub):
    argv = ["serve", "ckpt", "--api-key", "a", "--api-key", "b", "--cors-origin", "*", "--no-access-log"]
    options = options_from(cli.build_parser().parse_args(argv), ServeOptions)
    assert options.api_key == ("a", "b") and options.cors_origin == ("*",) and options.access_log is False
    defaults = options_from(cli.build_parser().parse_args(["serve", "ckpt"]), ServeOptions)
    assert defaults.api_key == () and defaults.cors_origin == () and defaults.access_log is True
    with pytest.raises(UserError, match="field 'api_key' must be a list of strings, not"):
        make_app(ServeOptions("ckpt", api_key=("a", 3)), hub)


def samples(text: str) -> dict[tuple, float]:
    """Every sample of a Prometheus text page: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(url: str, key: str | None = None) -> dict[tuple, float]:
    status, headers, page = get(url + "/metrics", key)
    assert status == 200 and headers["content-type"].startswith("text/plain")
    return samples(page.decode())


def test_metrics_move_with_the_requests_made(hub):
    running = Running(hub)
    try:
        before = scrape(running.url)
        texts = [[f"Sentence {k} " + "word " * k, "x"] for k in range(3)]
        for pair in texts:
            assert call(running.url + "/embed", {"text": pair})[0] == 200
        assert call(running.url + "/embed", {"text": []})[0] == 400
        assert call(running.url + "/no-such-path")[0] == 404
        after = scrape(running.url)
    finally:
        running.stop()

    def moved(name: str, **labels) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0.0)

    embed = {"endpoint": "/embed", "method": "POST"}
    assert moved("roberta_requests_total", **embed, status="200") == 3
    assert moved("roberta_requests_total", **embed, status="400") == 1
    assert moved("roberta_requests_total", endpoint="unmatched", method="GET", status="404") == 1
    assert moved("roberta_requests_total", endpoint="/metrics", method="GET", status="200") == 1
    assert moved("roberta_request_duration_seconds_count", endpoint="/embed") == 4
    assert moved("roberta_request_duration_seconds_sum", endpoint="/embed") > 0
    tokens = sum(len(hub.encode(text)) for pair in texts for text in pair)
    assert moved("roberta_tokens_total") == tokens
    assert moved("roberta_batch_tokens_sum") == tokens
    assert moved("roberta_batch_items_sum") == 6
    assert 1 <= moved("roberta_batch_items_count") <= 3
    assert after[("roberta_queue_depth", ())] == 0


def test_the_openapi_document_is_valid_lists_the_routes_and_the_answers_meet_it(hub, keyed):
    running = Running(hub)
    try:
        status, document = call(running.url + "/openapi.json")
        assert status == 200
        validate(document)
        assert set(document["paths"]) == {route.path for route in running.app.routes}
        assert "security" not in document and "securitySchemes" not in document["components"]
        for path, body in REQUESTS.items():
            operation = document["paths"][path]["post"]
            jsonschema.validate(body, operation["requestBody"]["content"]["application/json"]["schema"])
            status, answer = call(running.url + path, body)
            assert status == 200, (path, answer)
            jsonschema.validate(
                answer, operation["responses"]["200"]["content"]["application/json"]["schema"]
            )
        for path in ("/health", "/info"):
            schema = document["paths"][path]["get"]["responses"]["200"]["content"]["application/json"][
                "schema"
            ]
            jsonschema.validate(call(running.url + path)[1], schema)
        error = call(running.url + "/embed", {"text": []})[1]
        jsonschema.validate(error, document["components"]["schemas"]["Error"])
    finally:
        running.stop()

    secured = json.loads(get(keyed.url + "/openapi.json", KEY)[2])
    validate(secured)
    assert secured["security"] == [{"bearer": []}]
    assert secured["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    assert secured["paths"]["/health"]["get"]["security"] == []
    assert "401" in secured["paths"]["/metrics"]["get"]["responses"]
    assert "401" in secured["paths"]["/embed"]["post"]["responses"]


def preflight(url: str, origin: str) -> tuple[int, dict]:
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    status, answer_headers, _ = fetch(url + "/embed", headers=headers, method="OPTIONS")
    return status, answer_headers


def test_cors_lets_the_named_origins_in_and_no_others(hub, keyed):
    status, headers = preflight(keyed.url, "https://app.example")  # no key: a preflight carries none
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example"
    assert "authorization" in headers["access-control-allow-headers"].lower()
    status, headers = preflight(keyed.url, "https://elsewhere.example")
    assert status == 400 and "access-control-allow-origin" not in headers
    # An answer, and a 401 too, is readable by the page (it can tell the user the key is wrong).
    origin = {"Origin": "https://app.example"}
    assert get(keyed.url + "/info", KEY, origin)[1]["access-control-allow-origin"] == "https://app.example"
    assert get(keyed.url + "/info", None, origin)[1]["access-control-allow-origin"] == "https://app.example"

    running = Running(hub)  # no --cors-origin: no CORS header, ever
    try:
        status, headers = preflight(running.url, "https://app.example")
        assert status == 405 and "access-control-allow-origin" not in headers
        assert "access-control-allow-origin" not in get(running.url + "/info", headers=origin)[1]
    finally:
        running.stop()


def access_lines(caplog, count: int) -> list[str]:
    """The access lines logged, once there are `count` (a line follows its answer's last byte)."""
    deadline = time.monotonic() + 10
    while True:
        lines = [r.getMessage() for r in caplog.records if r.name == "roberta.serve.access"]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)


def test_each_request_is_one_access_line_without_the_key(keyed, hub, caplog):
    caplog.set_level(logging.INFO, logger="roberta.serve.access")
    assert call(keyed.url + "/embed", {"text": TEXTS}, key=KEY)[0] == 200
    assert call(keyed.url + "/embed", {"text": TEXTS}, key="a-wrong-key")[0] == 401
    assert fetch(keyed.url + "/health?token=" + KEY)[0] == 200
    lines = access_lines(caplog, 3)
    assert len(lines) == 3, lines
    tokens = sum(len(hub.encode(text)) for text in TEXTS)
    assert lines[0].startswith("127.0.0.1:") and " POST /embed 200 " in lines[0]
    assert lines[0].endswith(f" ms items=2 tokens={tokens}")
    assert " POST /embed 401 " in lines[1] and lines[2].split()[1:4] == ["GET", "/health", "200"]
    assert not any(KEY in line or "wrong" in line for line in lines)

    caplog.clear()
    quiet = Running(hub, access_log=False)
    try:
        assert call(quiet.url + "/health")[0] == 200
    finally:
        quiet.stop()  # its thread has ended: every line it would write is written
    assert not [r for r in caplog.records if r.name == "roberta.serve.access"]


@pytest.mark.slow
def test_roberta_serve_with_a_key_file_says_so_and_logs_requests_to_stderr(hub, tmp_path):
    ckpt = save(tmp_path / "ckpt", hub.model, hub.tokenizer)
    (tmp_path / "keys").write_text(KEY + "\n")
    port = free_port()
    command = [str(Path(sys.executable).with_name("roberta")), "serve", str(ckpt), "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--api-key-file", str(tmp_path / "keys")],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read()
            try:
                if call(f"http://127.0.0.1:{port}/health", timeout=1)[0] == 200:
                    break
            except OSError:
                assert time.monotonic() < deadline, "roberta serve did not start"
                time.sleep(0.2)
        assert call(f"http://127.0.0.1:{port}/embed", {"text": "x"}, key=KEY)[0] == 200
        assert call(f"http://127.0.0.1:{port}/embed", {"text": "x"})[0] == 401
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert "API key required" in out and KEY not in out + err
    lines = [line for line in err.splitlines() if " /embed " in line]
    assert len(lines) == 2 and " POST /embed 200 " in lines[0] and " POST /embed 401 " in lines[1], err
