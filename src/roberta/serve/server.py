"""`roberta serve`: a checkpoint (or an ONNX export) behind the batcher and the HTTP application.

The options are checked, then the address bound (a port in use or a host that does not resolve is
one error line, before anything loads), then the API keys read and the CORS origins checked,
then the model loaded. uvicorn runs the application on
that socket; on SIGTERM or Ctrl-C it stops accepting connections, waits for the requests in
flight to be answered, then the application's shutdown lets the batcher finish what is queued.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import torch

from roberta.errors import UserError
from roberta.hub import Roberta, check_device, load
from roberta.options import ServeOptions, check
from roberta.runtime.precision import inference_precision, reason
from roberta.serve import endpoints
from roberta.serve.app import build_app, check_origins
from roberta.serve.auth import accepted_keys
from roberta.serve.batcher import Batcher
from roberta.serve.metrics import Metrics
from roberta.serve.observe import log_to_stderr

__all__ = ["ServeOptions", "listen", "load_hub", "make_app", "serve"]


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to (`host`, `port`), as uvicorn would bind it (UserError: a host that does not
    resolve, an address in use or not this machine's, a port that needs privileges)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise UserError(f"--host {host!r}: cannot be resolved ({e.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def load_hub(options: ServeOptions) -> Roberta:
    """The hub the server runs, in --precision: the checkpoint in torch (int8 after printing its
    agreement, bf16 with the products' weights held in bf16), or the ONNX export's graphs behind
    the same hub calls."""
    if options.runtime == "onnx":
        from roberta.runtime.onnx_model import load_onnx

        if options.device != "cpu":
            raise UserError("--runtime onnx runs on the CPU (onnxruntime's CPU provider); drop --device")
        precision = inference_precision(options.precision, options.int8, torch.device("cpu"), "onnx")
        # Threads that do not spin between operators: a server's request threads (JSON, tokenizing)
        # need the cores meanwhile (benchmarks/results/2026-11-27-onnx-under-load.md).
        threads = torch.get_num_threads()
        onnx = load_onnx(options.checkpoint, int8=precision == "int8", threads=threads, spin=False)
        hub = Roberta(*onnx).eval()
        hub.precision = precision  # the graphs' own; nothing to autocast
    else:
        device = check_device(options.device)
        if inference_precision(options.precision, options.int8, device) == "int8":  # asked for by name
            from roberta.runtime.int8 import require_cpu

            require_cpu(device)  # before the minutes a large checkpoint takes to read
        # Loaded on one thread: the batcher's worker is then the only thread with an OpenMP team of
        # its own, whose threads then spin between operators as libgomp lets them while it manages no
        # more threads than cores: 8.6% more requests served (bf16, 32 clients, the median of five A/B
        # pairs, -0.7% to +14.3%: benchmarks/results/2026-11-27-2225-serve-profile.md).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            hub = _load_torch(options, device)
        finally:
            torch.set_num_threads(threads)  # what the worker's first forward pass takes up
        precision = hub.precision
    requested = "int8" if options.int8 else options.precision
    width = hub.model.config.hidden_size
    print(f"precision: {reason(requested, precision, hub.device, width)}", file=sys.stderr)
    hub.batch_tokens = options.max_batch_tokens
    return hub


def _load_torch(options: ServeOptions, device: torch.device) -> Roberta:
    """The checkpoint in --precision: int8 after printing its agreement on sample text, else
    `use_precision` (bf16: the products' weights held in bf16)."""
    hub = load(options.checkpoint).to(device)
    width = hub.model.config.hidden_size
    precision = inference_precision(options.precision, options.int8, device, serving=True, width=width)
    if precision == "int8":
        from roberta.runtime.int8 import quantize_for_embed, sample_ids

        # A server has no input of its own to compare on: the agreement is printed on sample text.
        quantize_for_embed(hub, sample_ids(hub.tokenizer, hub.max_seq_len), -1, None)
        return hub
    return hub.use_precision(precision)


def count_forward_passes(hub: Roberta) -> list[int]:
    """A one-element counter of the encoder's forward passes (how a test sees requests share one)."""
    counter = [0]

    def count(*_) -> None:
        counter[0] += 1

    hub.model.register_forward_pre_hook(count)
    return counter


def describe(hub: Roberta, options: ServeOptions, batcher: Batcher) -> dict:
    """What GET /info answers but the counts: the model's shape, heads, tokenizer, precision, batching."""
    c, t = hub.model.config, hub.tokenizer
    heads = {
        name: {
            "kind": head.kind,
            **({"labels": endpoints.label_names(head)} if head.kind == "classification" else {}),
        }
        for name, head in hub.model.heads.items()
    }
    return {
        "model": Path(options.checkpoint).name,
        "runtime": options.runtime,
        "precision": hub.precision,
        "device": str(hub.device),
        "shape": {
            "layers": c.num_layers,
            "hidden_size": c.hidden_size,
            "attention_heads": c.num_heads,
            "ffn_size": c.ffn_size,
            "max_seq_len": c.max_seq_len,
            "vocab_size": c.vocab_size,
        },
        "fill_mask": _can_fill_mask(hub),
        "heads": heads,
        "tokenizer": {"kind": t.kind, "vocab_size": t.vocab_size, "fingerprint": t.fingerprint()},
        "batching": {"max_batch_tokens": batcher.max_batch_tokens, "max_wait_ms": batcher.max_wait_s * 1e3},
        "limits": {
            "max_body_kb": options.max_body_kb,
            "max_items": options.max_items,
            "max_request_tokens": options.max_request_tokens,
            "max_answers": options.max_answers,
            "timeout_s": options.timeout,
        },
    }


def counts(batcher: Batcher, forward_passes: list[int]) -> dict:
    """Since start: the encoder's forward passes, the worker's rounds and hub calls, requests answered."""
    stats = batcher.stats
    return {
        "forward_passes": forward_passes[0],
        "rounds": stats.rounds,
        "calls": stats.calls,
        "requests": stats.jobs,
    }


def _can_fill_mask(hub: Roberta) -> bool:
    try:
        hub.check_fill_mask(1)
    except UserError:
        return False
    return True


def make_app(options: ServeOptions, hub: Roberta | None = None):
    """The application for `options` (and its batcher): a test passes a hub already loaded. The
    keys and origins are checked before the model loads."""
    check(options, "serve")
    keys = accepted_keys(options)
    check_origins(options.cors_origin)
    hub = hub if hub is not None else load_hub(options)
    forward_passes = count_forward_passes(hub)
    metrics = Metrics()
    batcher = Batcher(
        lambda key, items: endpoints.run(hub, key, items),
        options.max_batch_tokens,
        options.max_wait_ms / 1e3,
        on_batch=metrics.batch,
    )
    metrics.watch_queue(batcher.queued)
    static = describe(hub, options, batcher)

    def info() -> dict:
        return {**static, "counts": counts(batcher, forward_passes)}

    return build_app(hub, batcher, info, options, keys, metrics), batcher


def serve(options: ServeOptions) -> None:
    """Serve until SIGTERM / Ctrl-C (graceful: requests in flight are answered)."""
    import uvicorn

    check(options, "serve")
    sock = listen(options.host, options.port)
    try:
        app, _ = make_app(options)
        port = sock.getsockname()[1]
        key = ", API key required" if options.api_key or options.api_key_file else ""
        print(
            f"roberta serve: http://{options.host}:{port}/ ({options.runtime}, batching by length{key})",
            flush=True,  # a log collector reading a pipe sees it now, not at exit
        )
        if options.access_log:
            log_to_stderr()
        # uvicorn's own access log stays off: ours (observe.py) has the duration and leaves out the query.
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
