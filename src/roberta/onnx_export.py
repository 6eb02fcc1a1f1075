"""`roberta export --to onnx`: the encoder and every head as ONNX graphs, checked against our logits.

torch.onnx's TorchScript exporter (dynamo=False: torch's newer exporter needs onnxscript) traces
the model on a padded batch, so the attention mask is in the graph: traced without padding, the
model's no-padding shortcut would drop it. Batch and sequence axes are dynamic. The graphs run
with onnxruntime on a padded batch of real text before anything is published: every hidden
state, the masked-LM logits and each head's outputs are compared with PyTorch's, the largest
difference printed, and above `tolerance` the export fails. `int8` adds onnxruntime's dynamic
quantization of each graph (int8 weights, one scale per output channel, as `Roberta.quantize`),
printing how closely it agrees with fp32 as `--int8` does; it is not held to the tolerance.
"""

from __future__ import annotations

import logging
import math
import warnings
from pathlib import Path

import torch
from torch import nn

from roberta.batching import pad
from roberta.checkpoint import head_shapes, mark_without_lm_head, without_lm_head
from roberta.errors import UserError
from roberta.int8 import embedding_agreement, prediction_agreement, sample_ids
from roberta.io import atomic_directory, write_json
from roberta.model import EmbeddingHead, RobertaModel
from roberta.onnx_model import (
    ENCODER,
    FORMAT,
    LM_HEAD,
    MANIFEST,
    OnnxHead,
    OnnxModel,
    graph_file,
    hidden_names,
    session,
)
from roberta.options import ExportOptions
from roberta.validation import check_value

OPSET = 17


class _Encoder(nn.Module):
    """The model as tokens -> every hidden state: the signature the encoder graph has."""

    def __init__(self, model: RobertaModel):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(self.model(tokens, return_all_hiddens=True).hidden_states)


def sample_batch(model: RobertaModel, tokenizer) -> torch.Tensor:
    """The sample text's ids, padded: [B, T]."""
    return pad(sample_ids(tokenizer, model.config.max_seq_len), tokenizer.pad_id)


def _export(
    module: nn.Module, example: torch.Tensor | tuple, path: Path, names: tuple[list[str], list[str]]
) -> None:
    inputs, outputs = names
    axes = {name: {0: "batch", 1: "length"} for name in inputs + outputs}
    if inputs == ["hidden"]:  # the masked-LM head scores rows [N, H]
        axes = {name: {0: "rows"} for name in inputs + outputs}
    if outputs == ["embedding"]:  # a sentence encoder's vector [B, D]
        axes["embedding"] = {0: "batch"}
    with warnings.catch_warnings():
        # The TorchScript exporter warns that it is legacy and that traced Python conditions are
        # constants; the check after export compares every output.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            example if isinstance(example, tuple) else (example,),
            str(path),
            dynamo=False,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=OPSET,
        )


def write_graphs(model: RobertaModel, directory: Path, tokens: torch.Tensor) -> dict[str, Path]:
    """Every graph of `model` into `directory`: {graph name: file}."""
    with torch.inference_mode(False), torch.no_grad():
        hidden = model(tokens).last_hidden_state
        graphs = {ENCODER: directory / graph_file(ENCODER)}
        _export(_Encoder(model), tokens, graphs[ENCODER], (["tokens"], hidden_names(model.config)))
        if without_lm_head(model) is None:
            graphs[LM_HEAD] = directory / graph_file(LM_HEAD)
            _export(
                model.lm_head,
                hidden[tokens.ne(model.config.padding_idx)],
                graphs[LM_HEAD],
                (["hidden"], ["logits"]),
            )
        for name, head in model.heads.items():
            graphs[f"head.{name}"] = directory / graph_file(f"head.{name}")
            if head.kind == EmbeddingHead.kind:  # pooling reads which tokens are real
                real = tokens.ne(model.config.padding_idx)
                _export(head, (hidden, real), graphs[f"head.{name}"], (["features", "real"], ["embedding"]))
                continue
            outputs = ["logits"] if head.kind == "classification" else ["start", "end"]
            _export(head, hidden, graphs[f"head.{name}"], (["features"], outputs))
    return graphs


def onnx_model(model: RobertaModel, directory: Path, int8: bool = False) -> OnnxModel:
    """The graphs written in `directory` for `model`, as an `OnnxModel` (one thread: a check)."""
    heads = {
        name: OnnxHead(head.spec(), session(directory / graph_file(f"head.{name}", int8), 1))
        for name, head in model.heads.items()
    }
    lm = session(directory / graph_file(LM_HEAD, int8), 1) if without_lm_head(model) is None else None
    exported = OnnxModel(model.config, session(directory / graph_file(ENCODER, int8), 1), lm, heads)
    return mark_without_lm_head(exported, without_lm_head(model)).eval()


def outputs(model: nn.Module, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Everything an export holds, computed by `model` (ours or the ONNX one) on `tokens`: every hidden
    state, the masked-LM logits at the real tokens, each head's outputs (span logits at the real tokens)."""
    real = tokens.ne(model.config.padding_idx)
    with torch.inference_mode():
        hidden = model(tokens, return_all_hiddens=True).hidden_states
        found = {f"hidden_{i}": h[real] for i, h in enumerate(hidden)}
        if without_lm_head(model) is None:
            found["lm_logits"] = model.lm_logits(hidden[-1], real)
        for name, head in model.heads.items():
            if head.kind == EmbeddingHead.kind:
                found[f"head.{name}"] = head(hidden[-1], real)
                continue
            result = model.classify(name, hidden[-1])
            if head.kind == "classification":
                found[f"head.{name}"] = result
            else:
                found[f"head.{name}"] = torch.stack([r[real] for r in result])
    return found


def check(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], tolerance: float) -> str:
    """One line of each output's largest difference; a UserError above `tolerance`."""
    differences = {name: float((ours[name].float() - theirs[name].float()).abs().max()) for name in ours}
    line = ", ".join(f"{name} {d:.2e}" for name, d in differences.items())
    # A NaN difference (an output that is not a number) counts as the worst, and fails.
    worst = max(
        differences, key=lambda name: math.inf if math.isnan(differences[name]) else differences[name]
    )
    if not differences[worst] <= tolerance:
        raise UserError(
            f"ONNX outputs differ from ours by up to {differences[worst]:.3g} ({worst}), over the "
            f"tolerance {tolerance:g}: {line}"
        )
    return f"ONNX vs PyTorch, largest |difference| {differences[worst]:.2e} (tolerance {tolerance:g}): {line}"


def agreement(ours: dict[str, torch.Tensor], int8: dict[str, torch.Tensor], model: RobertaModel) -> str:
    """How close the int8 graphs come to fp32, as `--int8` says it: `<s>` cosine, top-1 agreement."""
    last = hidden_names(model.config)[-1]
    parts = [f"embeddings: {embedding_agreement(ours[last], int8[last])}"]
    if "lm_logits" in ours:
        parts.append(f"masked LM: {prediction_agreement(ours['lm_logits'], int8['lm_logits'])}")
    for name, head in model.heads.items():
        if head.kind == "classification":
            parts.append(f"{name}: {prediction_agreement(ours[f'head.{name}'], int8[f'head.{name}'])}")
    return "int8 vs fp32 on the sample text: " + "; ".join(parts)


def quantize(directory: Path, graphs: dict[str, Path]) -> None:
    """Each graph's int8 version beside it (onnxruntime's dynamic quantization, per-channel weights)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # onnxruntime logs a suggestion to the root logger for every graph (shape pre-processing, which
    # matters for convolutions, not for these MatMuls): kept off the user's terminal.
    logging.disable(logging.WARNING)
    try:
        for name, path in graphs.items():
            quantize_dynamic(
                path, directory / graph_file(name, int8=True), weight_type=QuantType.QInt8, per_channel=True
            )
    finally:
        logging.disable(logging.NOTSET)


def export_onnx(
    checkpoint: str | Path,
    out: str | Path,
    int8: bool = ExportOptions.int8,
    tolerance: float = ExportOptions.tolerance,
) -> Path:
    """Export the checkpoint at `checkpoint` (ours, HF or fairseq) to the directory `out`, checked."""
    from roberta.convert import load_any

    check_value(ExportOptions, "tolerance", tolerance, "export")

    model, tokenizer = load_any(Path(checkpoint), "cpu")
    if tokenizer is None:
        raise UserError(
            f"{checkpoint}: no tokenizer files beside the weights; an export carries its tokenizer"
        )
    model = model.float().eval()
    tokens = sample_batch(model, tokenizer)
    reference = outputs(model, tokens)
    with atomic_directory(out, replace_if=(MANIFEST,)) as tmp:
        graphs = write_graphs(model, tmp, tokens)
        line = check(reference, outputs(onnx_model(model, tmp), tokens), tolerance)
        print(line)
        manifest = {
            "format": FORMAT,
            "config": model.config.to_dict(),
            "heads": head_shapes(model),
            "lm_head": without_lm_head(model) is None,
            "int8": int8,
            "check": line,
        }
        if int8:
            quantize(tmp, graphs)
            manifest["int8_agreement"] = agreement(
                reference, outputs(onnx_model(model, tmp, int8=True), tokens), model
            )
            print(manifest["int8_agreement"])
        tokenizer.save(tmp)
        write_json(tmp / MANIFEST, manifest)
    print(f"{out}: {', '.join(sorted(p.name for p in Path(out).glob('*.onnx')))}")
    return Path(out)
