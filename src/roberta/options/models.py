"""The options of `convert`, `export`, `serve` and `probe`: verbs that read a model (or a run) and
write or serve something else."""

from __future__ import annotations

from dataclasses import dataclass

from roberta.options.declare import argument, model_option, option, required

RUNTIMES = ("torch", "onnx")
# What a model runs in for inference (roberta.runtime.precision): auto picks by the hardware.
INFERENCE_PRECISIONS = ("auto", "fp32", "bf16", "int8")


@dataclass(frozen=True)
class ConvertOptions:
    src: str = model_option("checkpoint to read: directory, or a fairseq model.pt", positional="SRC")
    dst: str = argument("directory to write (replaced atomically if it holds a checkpoint)")
    to: str = option("roberta", "format of DST (default {default})")
    tolerance: float = option(1e-5, "largest allowed output difference (default 1e-5)")

    CHOICES = {"to": ("roberta", "hf", "fairseq")}
    RANGES = {"tolerance": ">=0"}


@dataclass(frozen=True)
class ExportOptions:
    checkpoint: str = model_option("our checkpoint, an HF or fairseq directory", positional="CKPT")
    out: str = argument("directory to write (replaced atomically if it holds an export)")
    to: str = option("onnx", "format (default {default})")
    int8: bool = option(False, "also write int8 graphs (onnxruntime dynamic quantization)")
    tolerance: float = option(1e-4, "largest allowed output difference (default 1e-4)")

    CHOICES = {"to": ("onnx",)}
    RANGES = {"tolerance": ">=0"}


@dataclass(frozen=True)
class ProbeOptions:
    run: str = argument("a pretraining run directory (RUN/checkpoints/step-N)")
    glue: str = required("the folder holding the GLUE task folders", "DIR")
    tasks: str | None = option(None, "GLUE tasks, comma-separated (default SST-2,MRPC,STS-B,RTE,CoLA)")
    seeds: int = option(3, "fine-tuning seeds per cell; the median is reported (default {default})")
    checkpoints: str = option("all", "all, last, or step-N names, comma-separated (default {default})")
    limit: int | None = option(None, "at most N training examples per task (quick looks)")
    no_progress: bool = option(False, "no progress bar")

    RANGES = {"seeds": ">=1", "limit": ">=2"}


@dataclass(frozen=True)
class ServeOptions:
    """`roberta serve`'s. The request bounds exist because a small request can ask for a lot: 217
    bytes of `/fill-mask` with `topk` at the vocabulary size is tens of megabytes of answer, and
    fifty thousand one-word texts fit in a megabyte. Each bound is answered with 413 naming its
    option, as text-embeddings-inference and Infinity bound a client's batch."""

    checkpoint: str = model_option(
        "our checkpoint, an HF or fairseq directory; with --runtime onnx an export", positional="CKPT"
    )
    host: str = option("127.0.0.1", "address to bind (default {default}, this machine only)")
    port: int = option(8080, "port (default {default}; 0: any free port, printed at start)")
    runtime: str = option(
        "torch", "torch (default), or onnx: a directory written by `roberta export --to onnx`"
    )
    precision: str = option(
        "auto",
        "fp32, bf16 (autocast), int8 (as --int8), or auto (default): int8 on a CPU with AMX (it "
        "answered requests fastest there), bf16 on one with AVX512-BF16 only (or a bf16 GPU), else "
        "fp32; ROBERTA_PRECISION can say what auto means. --runtime onnx: fp32 or int8",
    )
    int8: bool = option(
        False,
        "CPU: int8 Linear layers (torch: printing the agreement with fp32 first; onnx: the export's "
        "int8 graphs); the same as --precision int8",
    )
    device: str = option("cpu", "torch device (default {default})")
    max_batch_tokens: int = option(
        2048, "tokens a batch takes from the queue, and padded tokens per forward pass (default {default})"
    )
    max_wait_ms: float = option(
        0.0,
        "how long the first queued request waits for others to share its batch (default 0: run "
        "what has arrived; requests arriving meanwhile form the next batch)",
    )
    timeout: float = option(
        60.0,
        "seconds before a request gets 504; its work stops at the next forward pass (default {default:g})",
    )
    max_body_kb: int = option(1024, "largest request body in KiB (default {default})")
    max_items: int = option(256, "texts (or questions) one request may send (default {default})")
    max_request_tokens: int = option(
        16384, "tokens one request may send, all its texts together (default {default})"
    )
    max_answers: int = option(
        1024, "rows one answer may hold: fill-mask's topk x texts, answer's topk (default {default})"
    )
    api_key: tuple[str, ...] = option(
        (),
        "require 'Authorization: Bearer KEY' on every path but / and /health, /metrics included "
        "(repeat for several keys, e.g. while rotating; other users of this machine can read a "
        "command line: prefer --api-key-file)",
        metavar="KEY",
    )
    api_key_file: str | None = option(
        None,
        "file of keys, one a line (blank lines and # comments ignored), required as --api-key's are",
        metavar="FILE",
    )
    cors_origin: tuple[str, ...] = option(
        (),
        "let web pages from ORIGIN (scheme://host[:port], or * for any) call the server from a "
        "browser; repeat for several (default: none)",
        metavar="ORIGIN",
    )
    access_log: bool = option(
        True,
        "one line on stderr per request: client, method, path, status, milliseconds, items, tokens "
        "(default: on)",
    )

    CHOICES = {"runtime": RUNTIMES, "precision": INFERENCE_PRECISIONS}
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
