"""`roberta serve`: a checkpoint (or an ONNX export) behind the batcher and the HTTP application.

uvicorn runs the application; on SIGTERM or Ctrl-C it stops accepting connections, waits for the
requests in flight to be answered, then the application's shutdown lets the batcher finish what
is queued.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from roberta.errors import UserError
from roberta.hub import Roberta, check_device, load
from roberta.serve import endpoints
from roberta.serve.app import Limits, build_app
from roberta.serve.batcher import Batcher

RUNTIMES = ("torch", "onnx")


@dataclass(frozen=True)
class ServeOptions:
    checkpoint: str
    host: str = "127.0.0.1"
    port: int = 8080
    runtime: str = "torch"
    int8: bool = False
    device: str = "cpu"
    max_batch_tokens: int = 2048
    max_wait_ms: float = 0.0
    limits: Limits = Limits()


def check_options(options: ServeOptions) -> None:
    if options.runtime not in RUNTIMES:
        raise UserError(f"runtime {options.runtime!r} unknown; choose one of {', '.join(RUNTIMES)}")
    if options.max_batch_tokens < 1:
        raise UserError(f"--max-batch-tokens must be at least 1, not {options.max_batch_tokens}")
    if options.max_wait_ms < 0:
        raise UserError(f"--max-wait-ms must be 0 or more, not {options.max_wait_ms}")
    if not 0 <= options.port <= 65535:
        raise UserError(f"--port {options.port} out of range 0..65535")


def load_hub(options: ServeOptions) -> Roberta:
    """The hub the server runs: the checkpoint in torch (int8 after printing its agreement), or
    the ONNX export's graphs behind the same hub calls."""
    if options.runtime == "onnx":
        from roberta.onnx_model import load_onnx

        if options.device != "cpu":
            raise UserError("--runtime onnx runs on the CPU (onnxruntime's CPU provider); drop --device")
        hub = Roberta(
            *load_onnx(options.checkpoint, int8=options.int8, threads=torch.get_num_threads())
        ).eval()
    else:
        device = check_device(options.device)
        if options.int8:
            from roberta.int8 import require_cpu

            require_cpu(device)
        hub = load(options.checkpoint).to(device)
        if options.int8:
            from roberta.int8 import quantize_for_embed, sample_ids

            # A server has no input of its own to compare on: the agreement is printed on sample text.
            quantize_for_embed(hub, sample_ids(hub.tokenizer, hub.max_seq_len), -1, "cls")
    hub.batch_tokens = options.max_batch_tokens
    return hub


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
        "precision": "int8" if options.int8 else "fp32",
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
    """The application for `options` (and its batcher): a test passes a hub already loaded."""
    check_options(options)
    hub = hub if hub is not None else load_hub(options)
    forward_passes = count_forward_passes(hub)
    batcher = Batcher(
        lambda key, items: endpoints.run(hub, key, items), options.max_batch_tokens, options.max_wait_ms / 1e3
    )
    static = describe(hub, options, batcher)
    app = build_app(
        hub, batcher, lambda: {**static, "counts": counts(batcher, forward_passes)}, options.limits
    )
    return app, batcher


def serve(options: ServeOptions) -> None:
    """Serve until SIGTERM / Ctrl-C (graceful: requests in flight are answered)."""
    import uvicorn

    app, _ = make_app(options)
    print(f"roberta serve: http://{options.host}:{options.port}/ ({options.runtime}, batching by length)")
    uvicorn.run(app, host=options.host, port=options.port, log_level="warning", access_log=False)
