"""A micro model with every kind of head, and `roberta serve`'s application running in this process
on a free loopback port (uvicorn in a thread), for the serving tests."""

from __future__ import annotations

import functools
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import torch
import uvicorn

from roberta import Roberta
from roberta.model import SpanHead
from roberta.serve.server import ServeOptions, make_app
from test_hub import MICRO, trained_hub

LABELS = ("sport", "politics")


@functools.cache
def serving_hub(shared_data: Path) -> Roberta:
    """test_hub's micro model (it fills "The capital of France is <mask>." with " Paris"), with a
    3-class head "sentiment", a 2-class head "topic" with label names, and a span head "squad".
    Built once per session: the tests only read it."""
    hub = trained_hub(shared_data, MICRO)
    torch.manual_seed(1)
    hub.model.add_classification_head("topic", 2, labels=LABELS)
    hub.model.add_head("squad", SpanHead(MICRO))
    return hub.eval()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Running:
    """The application of `options` for `hub`, served by uvicorn in a thread until `stop()`."""

    def __init__(self, hub: Roberta, **options):
        self.app, self.batcher = make_app(ServeOptions("micro", **options), hub)
        self.port = free_port()
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the server did not start"
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


def fetch(
    url: str,
    data: bytes | None = None,
    headers: dict | None = None,
    method: str | None = None,
    timeout: float = 30,
) -> tuple[int, dict, bytes]:
    """(status, headers with lower-case names, body) of a request, a refusal's too."""
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def call(
    url: str, body=None, raw: bytes | None = None, timeout: float = 30, key: str | None = None
) -> tuple[int, dict]:
    """(status, JSON answer) of a GET (no body) or a POST of `body` as JSON (or of `raw` bytes),
    with `Authorization: Bearer <key>` when a key is given."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    status, _, answer = fetch(url, data, headers, timeout=timeout)
    return status, json.loads(answer)
