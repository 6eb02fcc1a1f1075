"""The HTTP application: routes, the request body's size limit, one-line JSON errors, and the
middleware around them (outermost first): each request timed, counted and logged; CORS, when
`--cors-origin` names origins; the API key, when there are keys.

Every refusal is `{"error": "<one line>"}` with a 4xx status (5xx only for what is the server's
own fault: a full queue, a timeout, a bug), at most `MESSAGE_CHARS` long whatever the request
held, and none of them stops the server: the worker thread catches what a model call raises and
hands it to the requests that made it. Decoding a body, checking and encoding it, and writing a
large answer run on worker threads, never on the event loop, so /health answers meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from contextlib import asynccontextmanager
from importlib.resources import files

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from roberta.errors import UserError
from roberta.hub import Roberta
from roberta.options import ServeOptions
from roberta.serve import endpoints, openapi, shapes
from roberta.serve.auth import RequireKey
from roberta.serve.batcher import Batcher, QueueFull
from roberta.serve.endpoints import Refused
from roberta.serve.metrics import Metrics
from roberta.serve.observe import Observe

MESSAGE_CHARS = 300  # an error quotes at most this much: a 1 MB body never becomes a 1 MB message
# What a browser sends as Origin (RFC 6454): scheme://host[:port], serialized as the URL parser
# does it: scheme and host in lower case, no path (not even "/"), no user, no default port, no
# wildcard (CORS compares origins as strings: `https://*.example.com` matches no Origin at all).
ORIGIN = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*)://(?P<host>[a-z0-9._-]+|\[[0-9a-f:.]+\])(?::(?P<port>[0-9]+))?"
)
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


async def read_body(request: Request, limit: int) -> bytes:
    """The body, read no further than `limit` bytes (413 past it)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refused(413, f"request body of {declared} bytes is over the limit of {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Refused(413, f"request body over the limit of {limit} bytes")
    return bytes(body)


def json_object(body: bytes) -> dict:
    """The body as a JSON object (UserError: malformed, nested past Python's recursion, not an object)."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"malformed JSON: {e}") from None
    except RecursionError:
        raise UserError("malformed JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise UserError(f"expected a JSON object, got {type(value).__name__}")
    return value


async def _disconnected(request: Request) -> None:
    # The body has been read: what the server receives next is the client going away.
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def wait_for(request: Request, future: asyncio.Future, timeout_s: float) -> list:
    """The job's results; on a timeout or a disconnect the job is cancelled: not yet run, it never
    runs; running, its items left are dropped after the forward pass in progress."""
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
    line = " ".join(str(message).split())
    if len(line) > MESSAGE_CHARS:
        line = line[: MESSAGE_CHARS - 1] + "…"
    return JSONResponse(shapes.Refusal(error=line), status_code=status)


def _json_bytes(answer: dict) -> bytes:
    # Starlette's JSONResponse rendering, made here so that it can run on a worker thread.
    return json.dumps(answer, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


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


def _endpoint(hub: Roberta, batcher: Batcher, options: ServeOptions, path: str, parse, respond) -> Callable:
    """A POST endpoint: `parse` the body into the batcher's job, `respond` with its results. A field
    that `path`'s schema does not name is refused, never ignored."""
    fields = tuple(shapes.REQUESTS[path])

    def check(body: bytes) -> endpoints.Parsed:
        request = json_object(body)
        shapes.check_fields(request, path)
        return parse(hub, request, options)

    async def handle(request: Request) -> Response:
        if request.url.query:  # a parameter in the URL would be ignored: the body says everything
            name = request.url.query.partition("=")[0][:40]
            raise UserError(
                f"query parameter {name!r}: {path} reads a JSON body only (it reads {', '.join(fields)})"
            )
        parsed = await run_in_threadpool(check, await read_body(request, options.max_body_bytes))
        request.state.items, request.state.tokens = len(parsed.items), parsed.tokens  # the access log's
        future = batcher.submit(parsed.key, parsed.items, parsed.lengths)
        results = await wait_for(request, future, options.timeout)
        content = await run_in_threadpool(lambda: _json_bytes(respond(results, parsed)))
        return Response(content, media_type="application/json")

    return handle


def _origin_fault(origin: str) -> str | None:
    """Why `origin` is no Origin a browser sends ("" where its shape alone is wrong), or None."""
    found = ORIGIN.fullmatch(origin)
    if "*" in origin:
        return " (a wildcard matches no Origin header: name each origin)"
    if found is None:
        return " (in lower case, as a browser sends it)" if ORIGIN.fullmatch(origin.lower()) else ""
    port = found["port"]
    if port and (port[0] == "0" or not 0 < int(port) < 65536):
        return f" (port {port} is not a port)"
    if port and DEFAULT_PORTS.get(found["scheme"]) == int(port):
        return f" (a browser leaves out {found['scheme']}'s default port {port})"
    return None


def check_origins(origins: tuple[str, ...]) -> None:
    """Each `--cors-origin` an origin a browser can send, or * (UserError otherwise: a trailing
    slash, a path, a wildcard host, capitals or a default port would silently match no page)."""
    for origin in origins:
        fault = None if origin == "*" else _origin_fault(origin)
        if fault is not None:
            raise UserError(
                f"--cors-origin {origin!r}: an origin is scheme://host[:port] with no path "
                f"(e.g. https://example.com), or *{fault}"
            )


def _middleware(options: ServeOptions, keys: tuple[bytes, ...], metrics: Metrics, served: set[str]) -> list:
    # Outermost first: the access log and metrics see every answer, a 401 and a preflight included;
    # CORS wraps the key check, so that a browser can read a 401 and a preflight needs no key.
    stack = [Middleware(Observe, metrics=metrics, served=frozenset(served), log=options.access_log)]
    if options.cors_origin:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(options.cors_origin),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )
    if keys:
        stack.append(Middleware(RequireKey, keys=keys))
    return stack


def build_app(
    hub: Roberta,
    batcher: Batcher,
    info: Callable[[], dict],
    options: ServeOptions,
    keys: tuple[bytes, ...],
    metrics: Metrics,
) -> Starlette:
    """The application serving `hub` through `batcher` within `options`' limits; `info()` is what
    GET /info answers; `keys` the SHA-256 of the accepted API keys (none: no key needed); `metrics`
    what GET /metrics shows (the batcher reports its batches there)."""

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse(files("roberta.serve").joinpath("index.html").read_text(encoding="utf-8"))

    async def health(request: Request) -> JSONResponse:
        return JSONResponse(shapes.HealthAnswer(status="ok"))

    async def information(request: Request) -> JSONResponse:
        return JSONResponse(info())

    async def description(request: Request) -> JSONResponse:
        return JSONResponse(document)

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
    if any(head.kind == "tagging" for head in hub.model.heads.values()):  # a checkpoint that can tag
        posts["/tag"] = (endpoints.parse_tag, lambda r, p: endpoints.tagged(p.key[1], r))
    routes = [Route("/", page), Route("/health", health), Route("/info", information)]
    routes += [Route("/metrics", metrics.page), Route("/openapi.json", description)]
    routes += [
        Route(path, _endpoint(hub, batcher, options, path, *calls), methods=["POST"])
        for path, calls in posts.items()
    ]
    # The routes are the one list of paths: the document describes exactly these.
    document = openapi.document({route.path: route.methods for route in routes}, bool(keys))

    @asynccontextmanager
    async def lifespan(app: Starlette):
        yield
        # Shutdown (SIGTERM): uvicorn has stopped accepting and waited for the open requests;
        # the worker finishes anything still queued.
        batcher.close()

    handlers = {Exception: _on_error, HTTPException: _on_error, UserError: _on_error, Refused: _on_error}
    handlers[QueueFull] = _on_error
    stack = _middleware(options, keys, metrics, {route.path for route in routes})
    return Starlette(routes=routes, middleware=stack, exception_handlers=handlers, lifespan=lifespan)
