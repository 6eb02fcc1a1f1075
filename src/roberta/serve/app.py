"""The HTTP application: routes, the request body's size limit, and one-line JSON errors.

Every refusal is `{"error": "<one line>"}` with a 4xx status (5xx only for what is the server's
own fault: a full queue, a timeout, a bug), and none of them stops the server: the worker thread
catches what a model call raises and hands it to the requests that made it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib.resources import files

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from roberta.errors import UserError
from roberta.hub import Roberta
from roberta.serve import endpoints
from roberta.serve.batcher import Batcher, QueueFull


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1 << 20
    timeout_s: float = 60.0


class Refused(Exception):
    """A request refused with an HTTP status and a one-line reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


async def read_json(request: Request, limit: int) -> dict:
    """The body as a JSON object, read no further than `limit` bytes (413 past it)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refused(413, f"request body of {declared} bytes is over the limit of {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Refused(413, f"request body over the limit of {limit} bytes")
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"malformed JSON: {e}") from None
    if not isinstance(value, dict):
        raise UserError(f"expected a JSON object, got {type(value).__name__}")
    return value


async def _disconnected(request: Request) -> None:
    # The body has been read: what the server receives next is the client going away.
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def wait_for(request: Request, future: asyncio.Future, timeout_s: float) -> list:
    """The job's results; on a timeout or a disconnect the job is cancelled, freeing its slot."""
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({future, gone}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if future in done:
        return future.result()
    future.cancel()
    if gone in done:
        raise Refused(499, "client closed the request")
    raise Refused(504, f"not answered within {timeout_s:g} s")


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(message).split())}, status_code=status)


async def _on_error(request: Request, e: Exception) -> JSONResponse:
    if isinstance(e, UserError):
        return error(400, str(e))
    if isinstance(e, Refused):
        return error(e.status, str(e))
    if isinstance(e, QueueFull):
        return error(503, str(e))
    if isinstance(e, HTTPException):
        return error(e.status_code, e.detail)
    return error(500, f"{type(e).__name__}: {e}")


def build_app(
    hub: Roberta, batcher: Batcher, info: Callable[[], dict], limits: Limits = Limits()
) -> Starlette:
    """The application serving `hub` through `batcher`; `info()` is what GET /info answers."""

    def endpoint(parse, respond):
        async def handle(request: Request) -> JSONResponse:
            parsed = parse(hub, await read_json(request, limits.max_body_bytes))
            future = batcher.submit(parsed.key, parsed.items, parsed.tokens)
            return JSONResponse(respond(await wait_for(request, future, limits.timeout_s), parsed))

        return handle

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse(files("roberta.serve").joinpath("index.html").read_text(encoding="utf-8"))

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def information(request: Request) -> JSONResponse:
        return JSONResponse(info())

    model_name = info()["model"]
    # path -> (parse the body, shape the answer from the results and the parsed request)
    posts = {
        "/fill-mask": (endpoints.parse_fill_mask, lambda r, p: endpoints.fillings(r)),
        "/embed": (endpoints.parse_embed, lambda r, p: endpoints.embeddings(r)),
        "/predict": (endpoints.parse_predict, lambda r, p: endpoints.predictions(hub, p.key[1], r)),
        "/answer": (endpoints.parse_answer, lambda r, p: endpoints.answers(r)),
        "/v1/embeddings": (
            endpoints.parse_openai_embeddings,
            lambda r, p: endpoints.openai_embeddings(r, p, model_name),
        ),
    }
    routes = [Route("/", page), Route("/health", health), Route("/info", information)]
    routes += [Route(path, endpoint(*calls), methods=["POST"]) for path, calls in posts.items()]

    @asynccontextmanager
    async def lifespan(app: Starlette):
        yield
        # Shutdown (SIGTERM): uvicorn has stopped accepting and waited for the open requests;
        # the worker finishes anything still queued.
        batcher.close()

    handlers = {Exception: _on_error, HTTPException: _on_error, UserError: _on_error, Refused: _on_error}
    handlers[QueueFull] = _on_error
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
