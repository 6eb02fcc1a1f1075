"""The options of `fill-mask`, `embed` and `predict`: a model's hub calls on a text or a file."""

from __future__ import annotations

from dataclasses import dataclass

from roberta.options.declare import argument, model_option, option, required
from roberta.options.models import INFERENCE_PRECISIONS

POOLS = ("cls", "mean")


@dataclass(frozen=True)
class HubOptions:
    """How the model is loaded and run: what every inference verb takes."""

    checkpoint: str = model_option(
        "our checkpoint directory, an HF directory, or a fairseq directory / model.pt", positional="CKPT"
    )
    checkpoint_file: str | None = option(None, "the .pt file inside a fairseq directory (default model.pt)")
    device: str = option("cpu", "torch device (default {default})")
    batch_tokens: int = option(
        2048,
        "padded tokens per batch; inputs are sorted by length so batches hold little padding "
        "(default {default})",
    )
    precision: str = option(
        "auto",
        "fp32; bf16 (matrix products in bf16, their weights held in bf16; LayerNorm and outputs fp32; "
        "checkpoints untouched); int8 (as --int8); auto (default): bf16 on a CPU with AMX or "
        "AVX512-BF16 units (or a bf16 GPU) for a model at least 512 wide, fp32 elsewhere, or what "
        "ROBERTA_PRECISION says. The choice is printed to stderr",
    )
    int8: bool = option(
        False,
        "CPU only: run the Linear layers in int8 (dynamic quantization; the speed-up depends on "
        "the CPU's int8 support), after printing to stderr how close int8 comes to fp32 on the input's "
        "first batch (embed: cosine of the vectors; predict, fill-mask: share of equal top-1 "
        "predictions). The same as --precision int8",
    )

    CHOICES = {"precision": INFERENCE_PRECISIONS}
    RANGES = {"batch_tokens": ">=1"}


@dataclass(frozen=True)
class LineFileOptions:
    """What `embed` and `predict` share beside their --input and --out: one result per input row."""

    truncate: bool = option(False, "cut texts longer than the model's positions (default: error)")
    no_progress: bool = option(False, "no progress bar")


@dataclass(frozen=True)
class FillMaskOptions:
    text: str = argument('text holding exactly one <mask>, e.g. "The capital of France is <mask>."')
    topk: int = option(5, "how many fillings (default {default})")


@dataclass(frozen=True)
class EmbedOptions:
    input: str = required("UTF-8 text file, one text per line, or a .parquet / .arrow file", None)
    out: str = required(".npy file to write (float32, [lines, hidden])", None)
    columns: str | None = option(
        None, "the text column of a .parquet / .arrow --input, by name (default text)", metavar="NAME"
    )
    layer: int = option(-1, "0 = embeddings, 1..L = layers, -1 = last (default {default})")
    pool: str | None = option(
        None, "<s> vector or mean over tokens (default: a sentence encoder's own pooling, else cls)"
    )

    CHOICES = {"pool": POOLS}


@dataclass(frozen=True)
class PredictOptions:
    head: str | None = option(None, "classification head name (required without --task)")
    task: str | None = option(
        None,
        "a GLUE task: read --input as its test TSV and write the leaderboard "
        "file (index, label name; a score for STS-B) with the head named T, which must have T's "
        "number of outputs (no --head, --columns or --header with it); or WSC, WNLI-WSC, WinoGrande, "
        "CommonsenseQA: their test files' leaderboard files (docs/winograd.md)",
        metavar="T",
    )
    input: str = required("TSV file (tab-separated, no quoting), or a .parquet / .arrow file", None)
    out: str = required("TSV file to write", None)
    # No default: with --task a --columns given is refused, not ignored.
    columns: str | None = option(
        None,
        "text column, or two for a pair: 0-based indices or header names, e.g. 0 or 1,2 or "
        "sentence1,sentence2 (names imply --header; default 0). A .parquet / .arrow file's columns "
        "are picked by name only (default text)",
    )
    header: bool = option(False, "the first line is a header, not a row")
