"""int8 for CPU inference, all of it: dynamic quantization of a model's Linear layers, applied from
outside the model (as the trainer applies DDP) by `Roberta.quantize`, and how far it moves the
outputs from fp32, measured by each verb's `--int8` (`quantize_for_*`: the embed, predict and
fill-mask verbs on their input's first batch, `serve --int8` on `SAMPLE_TEXTS`).

Dynamic quantization stores each `nn.Linear` weight as int8 and quantizes its input at each
call (one scale per call, so a result depends slightly on what else shares its batch); the
products run in int8 on torch's x86 (fbgemm) engine, or where the CPU has AMX's int8 units on its
oneDNN engine, which runs them there: the same quantization (the same error to fp32), and a
base-shape call of 16 sentences 183 us a token against x86's 293 (bf16 208, fp32 602;
benchmarks/results/2026-11-27-2225-serve-profile.md, docs/precision.md). Embeddings, LayerNorm,
GELU, attention scores and softmax stay fp32. Weights get one scale per output row rather than one
per matrix: as fast (415 vs 417 ms for a base FFN on 1,024 tokens, one thread), and closer to fp32 (base
shape, random init, 128 SST-2 sentences: `<s>` cosine min 0.99909 vs 0.99890).

The masked-LM projection onto the vocabulary stays fp32: it is the token embedding (tied), not an
`nn.Linear`. Measured on the base shape (random init, one thread, shared host): it scores one row
per `<mask>`, 4.1 ms fp32 vs 2.4 ms int8 of ~210 ms per SST-2 sentence in `fill_mask`, under 1%;
an int8 copy would add 37 MB beside the fp32 embedding the lookup still needs; and top-1 fillings
agreed with the fp32 model no better (59 of 64 with it int8, 60 with it fp32).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
from tqdm import tqdm

from roberta.errors import UserError
from roberta.runtime.precision import cpu_units

# Real text on which a changed runtime (int8, ONNX) is compared with ours where it has no input of
# its own (`roberta serve --int8`, `roberta export`): varied lengths, so a batch is padded, and a pair.
SAMPLE_TEXTS = (
    ("The quick brown fox jumps over the lazy dog.", None),
    ("RoBERTa is a robustly optimized BERT pretraining approach.", "It drops next sentence prediction."),
    ("Paris is the capital and most populous city of France.", None),
    ("Serving a model means answering requests while they keep coming, one batch at a time.", None),
    ("Hi!", None),
)


def sample_ids(tokenizer, max_length: int) -> list[list[int]]:
    """SAMPLE_TEXTS' ids, each cut to `max_length` tokens."""
    return [
        tokenizer.encode(text, *([pair] if pair else []), max_length=max_length)
        for text, pair in SAMPLE_TEXTS
    ]


def quantize_model(model: nn.Module, device: torch.device) -> nn.Module:
    """`model` (on `device`) quantized in place for CPU inference: refused off the CPU, or on
    weights that are not float32 (what `Roberta.quantize` runs)."""
    require_cpu(device)
    return quantize_linears(model)


def require_cpu(device: torch.device) -> None:
    """int8 products run on the CPU engine only; anything else is a UserError naming the device."""
    if device.type != "cpu":
        raise UserError(
            f"int8 runs on the CPU only (torch's x86/fbgemm dynamic quantization), not on device "
            f"{str(device)!r}: load the model on cpu"
        )


def quantize_engine() -> str:
    """torch's quantized engine for this CPU's int8 products: oneDNN's where the CPU has AMX's int8
    units (and torch has the engine), else torch's default (x86: fbgemm's kernels)."""
    if cpu_units().amx_int8 and "onednn" in torch.backends.quantized.supported_engines:
        return "onednn"
    return torch.backends.quantized.engine


def quantize_linears(model: nn.Module) -> nn.Module:
    """Every `nn.Linear` of `model` replaced, in place, by its dynamically quantized int8 version,
    its weights packed for `quantize_engine()`'s kernels (a packed weight keeps its engine)."""
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {torch.float32}:
        raise UserError(
            f"int8 quantization starts from float32 weights, not {', '.join(sorted(map(str, dtypes)))}: "
            "load the model again, or call .float() first"
        )
    with warnings.catch_warnings():
        # torch 2.13 announces on every call that torch.ao.quantization moves to torchao; the eager
        # dynamic path still works, and needs no other dependency.
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated")
        warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions.*deprecated")
        default, torch.backends.quantized.engine = torch.backends.quantized.engine, quantize_engine()
        try:
            return quantize_dynamic(
                model, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True
            )
        finally:
            torch.backends.quantized.engine = default


def first_batch(seqs: Sequence, batch_tokens: int) -> list:
    """The leading sequences (in input order) that fit one batch of `batch_tokens` padded tokens,
    at least one: the sample on which `--int8` compares int8 with fp32, at the cost of one batch."""
    width = 0
    for count, seq in enumerate(seqs):
        width = max(width, len(seq))
        if count and (count + 1) * width > batch_tokens:
            return list(seqs[:count])
    return list(seqs)


def embedding_agreement(fp32: torch.Tensor, int8: torch.Tensor) -> str:
    """Cosine of each int8 vector with its fp32 one, [N, H] each."""
    cosine = F.cosine_similarity(fp32.float(), int8.float(), dim=-1)
    return f"cosine min {cosine.min():.4f}, mean {cosine.mean():.4f}"


def prediction_agreement(fp32: torch.Tensor, int8: torch.Tensor) -> str:
    """Share of rows whose top-1 class (or token) is the same, and the largest logit difference, [N, C]
    each."""
    difference = f"max |logit difference| {(fp32.float() - int8.float()).abs().max():.3g}"
    if fp32.size(-1) == 1:  # a regression head: one score, no ranking
        return difference
    same = int(fp32.argmax(-1).eq(int8.argmax(-1)).sum())
    return f"top-1 agrees on {same}/{len(fp32)} ({same / len(fp32):.1%}), {difference}"


# `--int8` for each verb (and `serve --int8`): the verb's own hub call on the first batch of its
# input, before and after. The hub is taken as it comes (any object with the calls), so this
# layer-2 module imports no hub.


def quantize_compared(
    roberta,
    sample: Sequence,
    run: Callable[[Sequence], torch.Tensor],
    agreement: Callable[[torch.Tensor, torch.Tensor], str],
) -> str:
    """Quantize the hub `roberta` in place, running `run(sample)` before and after; returns, and
    prints to stderr, one line saying how far int8 moved the outputs (`agreement(fp32, int8)`)."""
    require_cpu(roberta.device)
    fp32 = run(sample)
    roberta.quantize()
    line = f"int8 vs fp32 on the first {len(sample)} input(s): {agreement(fp32, run(sample))}"
    tqdm.write(line, file=sys.stderr)  # above a progress bar, if one is drawn
    return line


def quantize_for_embed(roberta, ids: Sequence, layer: int, pool: str | None) -> str:
    return quantize_compared(
        roberta,
        first_batch(ids, roberta.batch_tokens),
        lambda sample: roberta.embed(sample, layer, pool),
        embedding_agreement,
    )


def quantize_for_predict(roberta, head: str, ids: Sequence) -> str:
    return quantize_compared(
        roberta,
        first_batch(ids, roberta.batch_tokens),
        lambda sample: roberta.predict(head, sample, return_logits=True),
        prediction_agreement,
    )


def quantize_for_fill_mask(roberta, text: str) -> str:
    return quantize_compared(roberta, [text], roberta.mask_logits, prediction_agreement)
