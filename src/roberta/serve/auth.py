"""API keys: which ones the server accepts (`--api-key`, `--api-key-file`), and the middleware that
answers 401 to a request without one of them.

A key is never printed, logged or echoed: a refusal names the option, the file and the line, not
the value. Only each key's SHA-256 is kept for the comparison, which runs in constant time
(`hmac.compare_digest`) over digests of equal length, so neither a key's characters nor its
length can be timed from outside.
"""

from __future__ import annotations

import hashlib
import hmac
import string

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from roberta.errors import UserError
from roberta.options import ServeOptions

# Open whatever the keys: the static page (it asks for the key itself) and what a load balancer probes.
OPEN_PATHS = frozenset({"/", "/health"})
# What an Authorization header carries reliably: visible ASCII, no spaces (RFC 6750's token is narrower).
_KEY_CHARACTERS = frozenset(string.ascii_letters + string.digits + string.punctuation)


def _checked(key: str, where: str) -> str:
    if not key or not set(key) <= _KEY_CHARACTERS:
        raise UserError(f"{where}: a key must be one or more visible ASCII characters, no spaces")
    return key


def read_key_file(path: str) -> list[str]:
    """The keys in `path`, one a line, blank lines and `#` comments left out (UserError: a file
    that cannot be read, holds no key, or a line that is no key)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise UserError(f"--api-key-file {path}: {reason}") from None
    keys = [
        _checked(line.strip(), f"--api-key-file {path}, line {number}")
        for number, line in enumerate(lines, 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not keys:
        raise UserError(f"--api-key-file {path}: holds no key (blank lines and # comments are ignored)")
    return keys


def accepted_keys(options: ServeOptions) -> tuple[bytes, ...]:
    """The SHA-256 of every key `options` accept (empty: no authentication)."""
    keys = [_checked(key, "--api-key") for key in options.api_key]
    if options.api_key_file is not None:
        keys += read_key_file(options.api_key_file)
    return tuple(_digest(key.encode()) for key in keys)


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def _bearer(scope: Scope) -> bytes | None:
    """The token of the request's `Authorization: Bearer <token>` header (the scheme in any case)."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            return token.strip() if scheme.lower() == b"bearer" else None
    return None


def authorized(scope: Scope, keys: tuple[bytes, ...]) -> bool:
    token = _bearer(scope)
    if token is None:
        return False
    digest = _digest(token)
    # Every key is compared, matched or not, so the time taken says nothing about which one matched.
    return any([hmac.compare_digest(digest, key) for key in keys])


class RequireKey:
    """ASGI middleware: a request for a path outside `OPEN_PATHS` without an accepted key gets 401,
    `{"error": ...}` and `WWW-Authenticate: Bearer` (RFC 6750: `error="invalid_token"` for a wrong one)."""

    def __init__(self, app: ASGIApp, keys: tuple[bytes, ...]):
        self.app, self.keys = app, keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS or authorized(scope, self.keys):
            await self.app(scope, receive, send)
            return
        if _bearer(scope) is None:
            message, challenge = "this server needs an API key: send 'Authorization: Bearer <key>'", "Bearer"
        else:
            message, challenge = "the API key was refused", 'Bearer error="invalid_token"'
        refusal = JSONResponse({"error": message}, 401, headers={"WWW-Authenticate": challenge})
        await refusal(scope, receive, send)
