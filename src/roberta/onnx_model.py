"""An ONNX export (`roberta export --to onnx`) run by onnxruntime behind `RobertaModel`'s calls, so
the hub's code (fill_mask, embed, predict, answer) and the server's batcher run it unchanged.

The export's directory holds encoder.onnx (token ids [B, T] -> every layer's hidden states), one
graph per head on those states (lm_head.onnx, head.<name>.onnx), onnx.json (the model's config,
heads and the check made at export) and the tokenizer. The ONNX encoder computes every position
of the padded batch: `unpad` and `select` are honoured by what is returned, not by skipping work.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from roberta.checkpoint import mark_without_lm_head
from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.model import EMBEDDING_HEAD, EncoderOutput, require_head
from roberta.tokenizer import Tokenizer, load_tokenizer

MANIFEST = "onnx.json"
FORMAT = "roberta-onnx-1"
ENCODER, LM_HEAD = "encoder", "lm_head"


def graph_file(name: str, int8: bool = False) -> str:
    """The file of graph `name` ("encoder", "lm_head", "head.<name>") in an export."""
    return f"{name}.int8.onnx" if int8 else f"{name}.onnx"


def hidden_names(config: RobertaConfig) -> list[str]:
    """The encoder's outputs: the embeddings' output, then each layer's."""
    return [f"hidden_{i}" for i in range(config.num_layers + 1)]


def session(path: Path, threads: int):
    """An onnxruntime CPU session of the graph at `path`, on `threads` threads (UserError: the
    graph is missing or onnxruntime cannot read it, as in a damaged or half-copied export)."""
    import onnxruntime as ort

    if not path.is_file():
        raise UserError(f"{path}: missing: the export is incomplete (export it again)")
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types for damaged graphs
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise UserError(f"{path}: not a readable ONNX graph ({reason})") from None


def run_graph(graph, inputs: dict[str, torch.Tensor], outputs: list[str] | None = None) -> list[torch.Tensor]:
    arrays = graph.run(
        outputs, {name: np.ascontiguousarray(t.detach().cpu().numpy()) for name, t in inputs.items()}
    )
    return [torch.from_numpy(a) for a in arrays]


class OnnxHead(nn.Module):
    """A task head's graph: features [B, T, H] -> logits [B, C], start and end logits [B, T], or (with
    the real tokens [B, T]) a sentence vector [B, D]."""

    def __init__(self, spec: dict, graph):
        super().__init__()
        self.kind, self.labels, self._spec, self.graph = (
            spec["kind"],
            tuple(spec.get("labels", ())),
            spec,
            graph,
        )

    def spec(self) -> dict:
        return self._spec

    @property
    def pool(self) -> str | None:
        return self._spec.get("pool")  # a sentence encoder's pooling

    def forward(self, features: torch.Tensor, real: torch.Tensor | None = None):
        inputs = {"features": features} if real is None else {"features": features, "real": real}
        outputs = run_graph(self.graph, inputs)
        return outputs[0] if self.kind in ("classification", "embedding") else tuple(outputs)


class OnnxModel(nn.Module):
    """`RobertaModel`'s inference calls (forward, lm_logits, classify, heads) on onnxruntime sessions."""

    def __init__(self, config: RobertaConfig, encoder, lm_head, heads: dict[str, OnnxHead]):
        super().__init__()
        self.config, self.encoder, self.lm_head = config, encoder, lm_head
        self.heads = nn.ModuleDict(heads)
        self.outputs = hidden_names(config)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def forward(
        self,
        tokens: torch.Tensor,
        return_all_hiddens: bool = False,
        unpad: bool = False,
        select: torch.Tensor | str | None = None,
    ) -> EncoderOutput:
        if tokens.size(1) > self.config.max_seq_len:
            limit = self.config.max_seq_len
            raise UserError(f"sequence of {tokens.size(1)} tokens exceeds the model's {limit} positions")
        wanted = self.outputs if return_all_hiddens else self.outputs[-1:]
        hidden = run_graph(self.encoder, {"tokens": tokens}, wanted)
        if isinstance(select, str):
            hidden[-1] = hidden[-1][:, :1]
        elif select is not None:
            hidden[-1] = hidden[-1][select]
        return EncoderOutput(hidden[-1], hidden if return_all_hiddens else None)

    def lm_logits(self, hidden: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        if selected is not None:
            hidden = hidden[selected]
        return run_graph(self.lm_head, {"hidden": hidden})[0]

    def classify(self, name: str, hidden: torch.Tensor):
        return require_head(self.heads, name)(hidden)

    def sentence_embedding(self, tokens: torch.Tensor, unpad: bool = False) -> torch.Tensor:
        head = require_head(self.heads, EMBEDDING_HEAD)
        return head(self(tokens).last_hidden_state, tokens.ne(self.config.padding_idx))

    def _require_head(self, name: str) -> nn.Module:
        return require_head(self.heads, name)


def read_manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(
            f"{directory}: no {MANIFEST}: not an ONNX export (`roberta export --to onnx`)"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError(f"{path}: not an export of this version ({FORMAT})")
    for field, kind in (("config", dict), ("heads", dict), ("lm_head", bool)):
        if not isinstance(manifest.get(field), kind):
            got = "missing" if field not in manifest else f"a {type(manifest[field]).__name__}"
            raise UserError(f"{path}: field {field!r} must be a JSON {_JSON[kind]}, not {got}")
    for name, spec in manifest["heads"].items():
        if not isinstance(spec, dict) or not isinstance(spec.get("kind"), str):
            raise UserError(f"{path}: field 'heads.{name}' must be an object with a 'kind'")
    return manifest


_JSON = {dict: "object", bool: "true or false"}


def load_onnx(directory: str | Path, int8: bool = False, threads: int = 1) -> tuple[OnnxModel, Tokenizer]:
    """An export's graphs as an `OnnxModel` in eval mode, and its tokenizer; `int8` takes the int8
    graphs (an export made with --int8)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if int8 and not manifest.get("int8"):
        raise UserError(f"{directory}: holds no int8 graphs (export with --int8)")
    config = RobertaConfig.from_dict(manifest["config"], str(directory / MANIFEST))

    def graph(name: str):
        return session(directory / graph_file(name, int8), threads)

    heads = {name: OnnxHead(spec, graph(f"head.{name}")) for name, spec in manifest["heads"].items()}
    model = OnnxModel(config, graph(ENCODER), graph(LM_HEAD) if manifest["lm_head"] else None, heads)
    mark_without_lm_head(model, None if manifest["lm_head"] else str(directory))
    return model.eval(), load_tokenizer(directory)
