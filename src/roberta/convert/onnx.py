"""`roberta export --to onnx`: one directory per task in the layout HF's ONNX loaders read, every
graph checked against our outputs.

OUT/feature-extraction/ (RobertaModel: last_hidden_state), OUT/fill-mask/ (RobertaForMaskedLM:
logits) where the checkpoint has an LM head, and OUT/<head name>/ for each task head: a
classification or regression head (RobertaForSequenceClassification: logits), a span head
(RobertaForQuestionAnswering: start_logits, end_logits), a tagging head (RobertaForTokenClassification:
logits per token), a sentence encoder's embedding head
(RobertaModel: last_hidden_state, and sentence_embedding, its pooling and map, with
sentence-transformers' modules beside). Each holds config.json, the tokenizer's files (`convert
--to hf`'s) and onnx/model.onnx, where transformers.js's `pipeline(task, dir)` looks and Optimum's
`ORTModelFor*.from_pretrained(dir)` and `SentenceTransformer(dir, backend="onnx")` find it. Each
directory stands alone, as a model on the Hub does: every graph holds the encoder's weights.

torch.onnx's TorchScript exporter (dynamo=False: torch's newer exporter needs onnxscript) traces
each graph on a padded batch; batch and sequence axes are dynamic. Attention follows
`attention_mask`, position ids count the non-`<pad>` ids (HF's and fairseq's rule), so a
right-padded batch gives HF's numbers. The graphs run with onnxruntime on a padded batch of real
text before anything is published: every output of every graph is compared with PyTorch's at the
real tokens, the largest difference printed, and above `tolerance` the export fails, writing
nothing. `int8` adds onnxruntime's dynamic quantization of each graph (onnx/model_quantized.onnx:
int8 weights, one scale per output channel, as `Roberta.quantize`), printing how closely it agrees
with fp32 as `--int8` does; it is not held to the tolerance.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from roberta.checkpoint import head_shapes, without_lm_head
from roberta.convert.hf import classifier_fields, tagging_fields, task_config, write_hf_tokenizer
from roberta.convert.sentence_transformers import write_modules
from roberta.errors import UserError
from roberta.io import atomic_directory, write_json
from roberta.model import EmbeddingHead, RobertaModel
from roberta.options import ExportOptions
from roberta.runtime.batching import pad
from roberta.runtime.int8 import embedding_agreement, prediction_agreement, sample_ids
from roberta.runtime.onnx_model import (
    FEATURES,
    FILL_MASK,
    FORMAT,
    HEAD_TASKS,
    MANIFEST,
    OUTPUTS,
    graph_file,
    graph_inputs,
    per_token,
    run_graph,
    session,
)
from roberta.validation import check_value

OPSET = 17
ARCHITECTURES = {
    FEATURES: "RobertaModel",
    FILL_MASK: "RobertaForMaskedLM",
    "classification": "RobertaForSequenceClassification",
    "span": "RobertaForQuestionAnswering",
    "embedding": "RobertaModel",
    "tagging": "RobertaForTokenClassification",
}


class TaskGraph(nn.Module):
    """The model as one task's graph: (input_ids, attention_mask) -> that task's `OUTPUTS`."""

    def __init__(self, model: RobertaModel, task: str):
        super().__init__()
        self.model, self.task = model, task

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden = self.model(input_ids, attention_mask=attention_mask).last_hidden_state
        if self.task == FEATURES:
            return (hidden,)
        if self.task == FILL_MASK:
            return self.model.lm_head(hidden), hidden
        head = self.model.heads[self.task]
        if head.kind == EmbeddingHead.kind:  # pooled over the tokens attended to, as HF's pipelines pool
            return hidden, head(hidden, attention_mask)
        out = head(hidden)
        return out if isinstance(out, tuple) else (out,)


def tasks(model: RobertaModel) -> dict[str, str]:
    """{directory: what its graph runs (FEATURES, FILL_MASK or the head's kind)}: the encoder, the
    masked LM where the model has its head, and each task head under its name."""
    clash = {FEATURES, FILL_MASK} & set(model.heads)
    if clash:
        raise UserError(f"head {clash.pop()!r}: the name of a task's directory in an export; rename the head")
    found = {FEATURES: FEATURES, **({FILL_MASK: FILL_MASK} if without_lm_head(model) is None else {})}
    return {**found, **{name: head.kind for name, head in model.heads.items()}}


def sample_batch(model: RobertaModel, tokenizer) -> torch.Tensor:
    """The sample text's ids, padded: [B, T]."""
    return pad(sample_ids(tokenizer, model.config.max_seq_len), tokenizer.pad_id)


def _export(module: nn.Module, inputs: dict[str, torch.Tensor], path: Path, kind: str) -> None:
    axes = {name: {0: "batch", 1: "sequence"} for name in inputs}
    axes.update(
        {
            name: {0: "batch", 1: "sequence"} if per_token(kind, name) else {0: "batch"}
            for name in OUTPUTS[kind]
        }
    )
    with warnings.catch_warnings():
        # The TorchScript exporter warns that it is legacy and that traced Python conditions are
        # constants; the check after export compares every output.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            tuple(inputs.values()),
            str(path),
            dynamo=False,
            input_names=list(inputs),
            output_names=OUTPUTS[kind],
            dynamic_axes=axes,
            opset_version=OPSET,
        )


def write_task(directory: Path, model: RobertaModel, tokenizer, task: str, tokens: torch.Tensor) -> Path:
    """The task `task`'s directory: config.json, the tokenizer, sentence-transformers' modules for an
    embedding head, and the graph, which is returned."""
    kind = tasks(model)[task]
    directory.mkdir()
    config = task_config(model, ARCHITECTURES[kind], tokenizer)
    if kind == "classification":
        config.update(classifier_fields(task, model.heads[task].spec()))
    if kind == "tagging":
        config.update(tagging_fields(task, model.heads[task].spec()))
    write_json(directory / "config.json", config)
    write_hf_tokenizer(directory, tokenizer, model.config.max_seq_len)
    if kind == EmbeddingHead.kind:
        head = model.heads[task]
        write_modules(directory, head.pool, model.config.hidden_size, model.config.max_seq_len, head.proj)
    graph = directory / graph_file()
    graph.parent.mkdir()
    with torch.inference_mode(False), torch.no_grad():
        _export(TaskGraph(model, task), graph_inputs(tokens, model.config.padding_idx), graph, kind)
    return graph


def outputs(
    model: RobertaModel, tokens: torch.Tensor, run: Callable[[str], list[torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """Every output of every task's graph as `run(task)` computes it on `tokens`, by
    "<task>.<output>", a per-token output at the real tokens only."""
    real = tokens.ne(model.config.padding_idx)
    found = {}
    for task, kind in tasks(model).items():
        for name, value in zip(OUTPUTS[kind], run(task)):
            found[f"{task}.{name}"] = value[real] if per_token(kind, name) else value
    return found


def ours(model: RobertaModel, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """`outputs` as PyTorch computes them."""
    inputs = graph_inputs(tokens, model.config.padding_idx)
    with torch.inference_mode(False), torch.no_grad():
        return outputs(model, tokens, lambda task: list(TaskGraph(model, task).eval()(**inputs)))


def exported(model: RobertaModel, directory: Path, tokens: torch.Tensor, int8: bool = False) -> dict:
    """`outputs` as onnxruntime computes them with the graphs in `directory` (one thread: a check)."""
    inputs = graph_inputs(tokens, model.config.padding_idx)
    return outputs(
        model, tokens, lambda task: run_graph(session(directory / task / graph_file(int8), 1), inputs)
    )


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
    """How close the int8 graphs come to fp32, as `--int8` says it: the vectors' cosine, the top-1
    agreement of the logits."""
    parts = []
    for task, kind in tasks(model).items():
        if kind in (FEATURES, EmbeddingHead.kind):
            output = f"{task}.{OUTPUTS[kind][-1]}"
            parts.append(f"{task}: {embedding_agreement(ours[output], int8[output])}")
        elif kind in (FILL_MASK, "classification"):
            parts.append(f"{task}: {prediction_agreement(ours[f'{task}.logits'], int8[f'{task}.logits'])}")
    return "int8 vs fp32 on the sample text: " + "; ".join(parts)


def quantize(graphs: list[Path]) -> None:
    """Each graph's int8 version beside it (onnxruntime's dynamic quantization, per-channel weights)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # onnxruntime logs a suggestion to the root logger for every graph (shape pre-processing, which
    # matters for convolutions, not for these MatMuls): kept off the user's terminal.
    logging.disable(logging.WARNING)
    try:
        for graph in graphs:
            quantized = graph.with_name(Path(graph_file(int8=True)).name)
            quantize_dynamic(graph, quantized, weight_type=QuantType.QInt8, per_channel=True)
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
    reference = ours(model, tokens)
    with atomic_directory(out, replace_if=(MANIFEST,)) as tmp:
        graphs = [write_task(tmp / task, model, tokenizer, task, tokens) for task in tasks(model)]
        line = check(reference, exported(model, tmp, tokens), tolerance)
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
            quantize(graphs)
            manifest["int8_agreement"] = agreement(reference, exported(model, tmp, tokens, int8=True), model)
            print(manifest["int8_agreement"])
        write_json(tmp / MANIFEST, manifest)
    named = [
        f"{task} ({HEAD_TASKS[kind]})" if kind in HEAD_TASKS else task for task, kind in tasks(model).items()
    ]
    print(f"{out}: {', '.join(named)}")
    return Path(out)
