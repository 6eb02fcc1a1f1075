"""Every request timed and counted in the metrics and, with `--access-log` (the default), logged in
one line: client, method, path, status, milliseconds, and the items and tokens it sent.

The line holds no body, no header and no query string, so a key never reaches the log; the path
is the one the client sent, undecoded, cut to `PATH_CHARS`, with anything unprintable replaced,
so that no request can write a line of its own into the log. uvicorn's own access log stays off.
"""

from __future__ import annotations

import logging
import sys
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from roberta.serve.metrics import Metrics

ACCESS = logging.getLogger("roberta.serve.access")
PATH_CHARS = 200


def log_to_stderr() -> None:
    """The access lines on stderr, each after its time (how `roberta serve` runs)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    ACCESS.addHandler(handler)
    ACCESS.setLevel(logging.INFO)
    ACCESS.propagate = False


def access_line(scope: Scope, status: int, seconds: float) -> str:
    client = scope.get("client")
    address = f"{client[0]}:{client[1]}" if client else "-"
    path = scope.get("raw_path", scope["path"].encode()).decode("latin-1")[:PATH_CHARS]
    path = "".join(c if c.isprintable() and c != " " else "?" for c in path)
    line = f"{address} {scope['method']} {path} {status} {seconds * 1e3:.1f} ms"
    state = scope.get("state", {})  # what the endpoint noted on `request.state`
    if "items" in state:
        line += f" items={state['items']} tokens={state['tokens']}"
    return line


class Observe:
    """ASGI middleware: each HTTP request's status and duration into `metrics` (by the path when
    it is one of `served`, else "unmatched", so that made-up paths add no series) and the log."""

    def __init__(self, app: ASGIApp, metrics: Metrics, served: frozenset[str], log: bool):
        self.app, self.metrics, self.served, self.log = app, metrics, served, log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500  # 500: raised before answering

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - start
            endpoint = scope["path"] if scope["path"] in self.served else "unmatched"
            self.metrics.request(endpoint, scope["method"], status, seconds)
            if self.log:
                ACCESS.info(access_line(scope, status, seconds))
