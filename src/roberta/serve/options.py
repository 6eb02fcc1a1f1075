"""`roberta serve`'s options, declared once: each field's default, its command-line help and its
rule. The command line is built from these fields (`add_to_parser`), and `check` refuses a value
outside its rule through `validation.py`, before anything is bound or loaded. Torch-free, so that
building the command line imports no torch.

The request bounds exist because a small request can ask for a lot: 217 bytes of `/fill-mask`
with `topk` at the vocabulary size is tens of megabytes of answer, and fifty thousand one-word
texts fit in a megabyte. Each bound is answered with 413 naming its option, as text-embeddings-
inference and Infinity bound a client's batch.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field

from roberta import validation

RUNTIMES = ("torch", "onnx")


def _option(default, help: str, **argparse_options):
    """A field with its default and its help; "{default}" in the help is the default."""
    return field(default=default, metadata={"help": help, **argparse_options})


@dataclass(frozen=True)
class ServeOptions:
    checkpoint: str = field(
        metadata={"help": "our checkpoint, an HF or fairseq directory; with --runtime onnx an export"}
    )
    host: str = _option("127.0.0.1", "address to bind (default {default}, this machine only)")
    port: int = _option(8080, "port (default {default}; 0: any free port, printed at start)")
    runtime: str = _option(
        "torch", "torch (default), or onnx: a directory written by `roberta export --to onnx`"
    )
    int8: bool = _option(
        False,
        "CPU: int8 Linear layers (torch: printing the agreement with fp32 first; onnx: the export's "
        "int8 graphs)",
    )
    device: str = _option("cpu", "torch device (default {default})")
    max_batch_tokens: int = _option(
        2048, "tokens a batch takes from the queue, and padded tokens per forward pass (default {default})"
    )
    max_wait_ms: float = _option(
        0.0,
        "how long the first queued request waits for others to share its batch (default 0: run "
        "what has arrived; requests arriving meanwhile form the next batch)",
    )
    timeout: float = _option(
        60.0,
        "seconds before a request gets 504; its work stops at the next forward pass (default {default:g})",
    )
    max_body_kb: int = _option(1024, "largest request body in KiB (default {default})")
    max_items: int = _option(256, "texts (or questions) one request may send (default {default})")
    max_request_tokens: int = _option(
        16384, "tokens one request may send, all its texts together (default {default})"
    )
    max_answers: int = _option(
        1024, "rows one answer may hold: fill-mask's topk x texts, answer's topk (default {default})"
    )

    CHOICES = {"runtime": RUNTIMES}
    RANGES = {
        "port": "[0,65535]",
        "max_batch_tokens": ">=1",
        "max_wait_ms": ">=0",
        "timeout": ">0",
        "max_body_kb": ">=1",
        "max_items": ">=1",
        "max_request_tokens": ">=1",
        "max_answers": ">=1",
    }

    @property
    def max_body_bytes(self) -> int:
        return self.max_body_kb << 10


def check(options: ServeOptions) -> None:
    """Every option of its type and within its rule (UserError "serve: field 'x' must be ...")."""
    validation.check_fields(options, "serve")


def add_to_parser(p: argparse.ArgumentParser) -> None:
    """`roberta serve`'s arguments: the checkpoint, then one flag per option."""
    for f in dataclasses.fields(ServeOptions):
        help = f.metadata["help"]
        if f.default is dataclasses.MISSING:
            p.add_argument(f.name, help=help)
            continue
        flag, help = "--" + f.name.replace("_", "-"), help.format(default=f.default)
        if f.type == "bool":
            p.add_argument(flag, action="store_true", help=help)
            continue
        kind = {"int": int, "float": float, "str": str}[f.type]
        p.add_argument(
            flag, type=kind, default=f.default, choices=ServeOptions.CHOICES.get(f.name), help=help
        )


def from_arguments(args: argparse.Namespace) -> ServeOptions:
    return ServeOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServeOptions)})
