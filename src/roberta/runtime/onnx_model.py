"""An ONNX export (`roberta export --to onnx`) run by onnxruntime behind `RobertaModel`'s calls on
token ids, so the hub's code (fill_mask, embed, predict, answer) and the server's batcher run it
unchanged.

The export holds one directory per task in the layout HF's ONNX loaders read (Optimum's
ORTModelFor*, transformers.js, sentence-transformers' ONNX backend): config.json, the tokenizer's
files and onnx/model.onnx (and onnx/model_quantized.onnx with --int8), a graph of `input_ids` and
`attention_mask` [B, T]. onnx.json beside them holds our config and heads. Each call runs its
task's graph: `forward` the feature-extraction one (the last layer only: no graph gives every
layer's states), `head_outputs` the head's, `sentence_embedding` the embedding head's
`sentence_embedding` output. `mask_logits` runs the fill-mask graph's LM head alone, cut out of it
at load, on the `<mask>` rows of the feature-extraction states: onnxruntime computes every output
of a graph it runs, and the whole fill-mask graph scores every position against the vocabulary.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch
from torch import nn

from roberta.checkpoint import check_vocabulary, mark_without_lm_head
from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.model import EMBEDDING_HEAD, EncoderOutput, require_head
from roberta.tokenizer import Tokenizer, load_tokenizer

MANIFEST = "onnx.json"
FORMAT = "roberta-onnx-2"
OLD_FORMATS = ("roberta-onnx-1",)
FEATURES, FILL_MASK = "feature-extraction", "fill-mask"  # the directories of the encoder and the LM
# The outputs of each task's graph, by what it runs: the encoder, the LM head or a head's kind. The
# fill-mask graph gives its hidden states too: where its LM head starts (`lm_head_session`).
OUTPUTS = {
    FEATURES: ["last_hidden_state"],
    FILL_MASK: ["logits", "last_hidden_state"],
    "classification": ["logits"],
    "span": ["start_logits", "end_logits"],
    "tagging": ["logits"],
    "embedding": ["last_hidden_state", "sentence_embedding"],
}
# The pipeline task (transformers.js, Optimum) of each kind of head's directory.
HEAD_TASKS = {
    "classification": "text-classification",
    "span": "question-answering",
    "embedding": FEATURES,
    "tagging": "token-classification",
}


def graph_file(int8: bool = False) -> str:
    """A task directory's graph, where transformers.js looks for it (Optimum finds it there too)."""
    return "onnx/model_quantized.onnx" if int8 else "onnx/model.onnx"


def session(graph: Path | bytes, threads: int, source: Path | None = None, spin: bool = True):
    """An onnxruntime CPU session of the graph at `graph` (or of its bytes, read from `source`), on
    `threads` threads, which spin-wait for work between operators unless `spin` is false
    (UserError: the graph is missing or onnxruntime cannot read it, as in a damaged or half-copied
    export)."""
    import onnxruntime as ort

    source = source or graph
    if isinstance(graph, Path) and not graph.is_file():
        raise UserError(f"{graph}: missing: the export is incomplete (export it again)")
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    try:
        graph = str(graph) if isinstance(graph, Path) else graph
        return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types for damaged graphs
        raise UserError(f"{source}: not a readable ONNX graph ({_first_line(e)})") from None


def lm_head_session(path: Path, threads: int, spin: bool = True):
    """The fill-mask graph at `path` from its `last_hidden_state` to its `logits`: the LM head alone,
    as a session of its own (the weights stay in the one file, shared with the graph)."""
    import onnx
    from onnx.utils import Extractor

    if not path.is_file():
        raise UserError(f"{path}: missing: the export is incomplete (export it again)")
    try:
        part = Extractor(onnx.load(str(path))).extract_model(["last_hidden_state"], ["logits"])
    except Exception as e:  # noqa: BLE001 - onnx raises protobuf's and its own errors
        raise UserError(f"{path}: not a readable ONNX graph ({_first_line(e)})") from None
    return session(part.SerializeToString(), threads, path, spin)


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def graph_inputs(tokens: torch.Tensor, padding_idx: int) -> dict[str, torch.Tensor]:
    """HF's inputs for padded ids: every token but `<pad>` attended to."""
    return {"input_ids": tokens, "attention_mask": tokens.ne(padding_idx).long()}


def per_token(kind: str, output: str) -> bool:
    """Whether `output` of a `kind` graph has a row per token ([B, T, ...]), or one per sequence."""
    return kind != "classification" and output != "sentence_embedding"


# onnxruntime computes every padded position, where torch's path drops them: a batch is run in
# groups of rows of like length, each padding at most this fraction over its real tokens.
PADDING_SLACK = 0.25


def length_groups(lengths: list[int]) -> list[list[int]]:
    """Row indices, by length, in groups whose padded tokens (rows x longest) are at most
    1 + PADDING_SLACK times their real ones."""
    groups: list[list[int]] = []
    real = 0
    for row in sorted(range(len(lengths)), key=lengths.__getitem__):
        # Sorted, the row joining a group is its longest.
        if groups and (len(groups[-1]) + 1) * lengths[row] <= (1 + PADDING_SLACK) * (real + lengths[row]):
            groups[-1].append(row)
            real += lengths[row]
        else:
            groups.append([row])
            real = lengths[row]
    return groups


def run_grouped(
    graph, kind: str, tokens: torch.Tensor, padding_idx: int, outputs: list[str]
) -> list[torch.Tensor]:
    """`outputs` of the `kind` graph `graph` on padded `tokens` [B, T], run by `length_groups` (each
    group cut to its longest row) and put back in the rows' order; positions past a row's length are 0."""
    lengths = tokens.ne(padding_idx).sum(1).tolist()
    found: list[torch.Tensor] = []
    for rows in length_groups(lengths):
        index = torch.tensor(rows)
        part = tokens[index, : max(lengths[row] for row in rows)]
        for k, (name, value) in enumerate(
            zip(outputs, run_graph(graph, graph_inputs(part, padding_idx), outputs))
        ):
            if len(found) == k:  # the first group: the whole batch's outputs, zeros
                size = (
                    (*tokens.shape, *value.shape[2:])
                    if per_token(kind, name)
                    else (len(tokens), *value.shape[1:])
                )
                found.append(value.new_zeros(size))
            if per_token(kind, name):
                found[k][index, : value.size(1)] = value
            else:
                found[k][index] = value
    return found


def run_graph(graph, inputs: dict[str, torch.Tensor], outputs: list[str] | None = None) -> list[torch.Tensor]:
    arrays = graph.run(
        outputs, {name: np.ascontiguousarray(t.detach().cpu().numpy()) for name, t in inputs.items()}
    )
    return [torch.from_numpy(a) for a in arrays]


class OnnxHead(nn.Module):
    """A task head as the hub sees it (kind, labels, pooling) and its task's graph."""

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


class OnnxModel(nn.Module):
    """`RobertaModel`'s inference calls (forward, mask_logits, head_outputs, sentence_embedding, heads)
    on onnxruntime sessions."""

    def __init__(self, config: RobertaConfig, features, lm_head, heads: dict[str, OnnxHead]):
        super().__init__()
        self.config, self.features, self.lm_head = config, features, lm_head
        self.heads = nn.ModuleDict(heads)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def _run(self, graph, kind: str, tokens: torch.Tensor, outputs: list[str]) -> list[torch.Tensor]:
        if tokens.size(1) > self.config.max_seq_len:
            limit = self.config.max_seq_len
            raise UserError(f"sequence of {tokens.size(1)} tokens exceeds the model's {limit} positions")
        return run_grouped(graph, kind, tokens, self.config.padding_idx, outputs)

    def forward(
        self,
        tokens: torch.Tensor,
        return_all_hiddens: bool = False,
        unpad: bool = False,
        select: torch.Tensor | str | None = None,
    ) -> EncoderOutput:
        """The last layer's states, as `RobertaModel.forward` returns them (every position is
        computed: `unpad` and `select` are honoured by what is returned, not by skipping work)."""
        if return_all_hiddens:
            raise UserError(
                "an ONNX export gives the last layer's hidden states only (HF's feature-extraction "
                "graph): for another layer's, run the checkpoint"
            )
        hidden = self._run(self.features, FEATURES, tokens, ["last_hidden_state"])[0]
        if isinstance(select, str):
            hidden = hidden[:, :1]
        elif select is not None:
            hidden = hidden[select]
        return EncoderOutput(hidden, None)

    def mask_logits(self, tokens: torch.Tensor, mask_id: int) -> torch.Tensor:
        hidden = self(tokens, select=tokens.eq(mask_id)).last_hidden_state
        return run_graph(self.lm_head, {"last_hidden_state": hidden[None]})[0][0]

    def head_outputs(self, name: str, tokens: torch.Tensor):
        head = require_head(self.heads, name)
        outputs = self._run(head.graph, head.kind, tokens, OUTPUTS[head.kind])
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def sentence_embedding(self, tokens: torch.Tensor, unpad: bool = False) -> torch.Tensor:
        head = require_head(self.heads, EMBEDDING_HEAD)
        return self._run(head.graph, head.kind, tokens, ["sentence_embedding"])[0]

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
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if found in OLD_FORMATS:
        raise UserError(
            f"{directory}: an ONNX export in the old layout ({found}); the layout moved to one HF-style "
            "directory per task: export the checkpoint again (roberta export CKPT --to onnx OUT)"
        )
    if found != FORMAT:
        raise UserError(f"{path}: not an export of this version ({FORMAT})")
    for field, kind in (("config", dict), ("heads", dict), ("lm_head", bool)):
        if not isinstance(manifest.get(field), kind):
            got = "missing" if field not in manifest else f"a {type(manifest[field]).__name__}"
            raise UserError(f"{path}: field {field!r} must be a JSON {_JSON[kind]}, not {got}")
    for name, spec in manifest["heads"].items():
        if not isinstance(spec, dict) or spec.get("kind") not in HEAD_TASKS:
            raise UserError(f"{path}: field 'heads.{name}' must be an object with a 'kind'")
    return manifest


_JSON = {dict: "object", bool: "true or false"}


# A graph's token and position tables (int8 graphs keep them as `..._quantized`).
TABLES = {
    "vocab_size": re.compile(r"(?:^|\.)embed_tokens\.weight(?:_quantized)?$"),
    "max_positions": re.compile(r"(?:^|\.)embed_positions\.weight(?:_quantized)?$"),
}


def check_graph_tables(graph: Path, config: RobertaConfig, manifest: Path) -> None:
    """The rows of `graph`'s token and position tables as `manifest`'s config gives them: the
    limits a server enforces come from the config, so a manifest claiming more positions than the
    graph has would let long texts through to onnxruntime's out-of-range error (UserError, at load).
    A graph that is missing or unreadable is left to `session` to name."""
    import onnx

    try:
        initializers = onnx.load(str(graph), load_external_data=False).graph.initializer
    except Exception:  # noqa: BLE001 - `session` names it
        return
    shapes = {
        field: next(
            (tuple(i.dims) for i in initializers if pattern.search(i.name) and len(i.dims) == 2), None
        )
        for field, pattern in TABLES.items()
    }
    for field, shape in shapes.items():
        if shape is None:
            raise UserError(f"{graph}: no {TABLES[field].pattern} table: not a graph of this export")
        for name, want, found in (
            (field, getattr(config, field), shape[0]),
            ("hidden_size", config.hidden_size, shape[1]),
        ):
            if found != want:
                raise UserError(
                    f"{manifest}: field 'config.{name}' is {want}, but {graph} holds {found}: "
                    "the manifest disagrees with its graph (export it again)"
                )


def load_onnx(
    directory: str | Path, int8: bool = False, threads: int = 1, spin: bool = True
) -> tuple[OnnxModel, Tokenizer]:
    """An export's graphs as an `OnnxModel` in eval mode, and its tokenizer; `int8` takes the int8
    graphs (an export made with --int8); `threads` and `spin` are each session's (`session`)."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if int8 and not manifest.get("int8"):
        raise UserError(f"{directory}: holds no int8 graphs (export with --int8)")
    config = RobertaConfig.from_dict(manifest["config"], str(directory / MANIFEST))
    graph = graph_file(int8)
    tasks = [FEATURES, *manifest["heads"], *([FILL_MASK] if manifest["lm_head"] else [])]
    for task in tasks:
        if (directory / task / graph).is_file():
            check_graph_tables(directory / task / graph, config, directory / MANIFEST)
    tokenizer = load_tokenizer(directory / FEATURES)
    check_vocabulary(tokenizer, config, str(directory / FEATURES))
    for task in tasks[1:]:  # what Optimum and transformers.js read in each task's directory
        if load_tokenizer(directory / task).fingerprint() != tokenizer.fingerprint():
            raise UserError(
                f"{directory / task}: its tokenizer differs from {directory / FEATURES}'s: "
                "the export's directories disagree (export it again)"
            )
    heads = {
        name: OnnxHead(spec, session(directory / name / graph, threads, spin=spin))
        for name, spec in manifest["heads"].items()
    }
    lm_head = lm_head_session(directory / FILL_MASK / graph, threads, spin) if manifest["lm_head"] else None
    model = OnnxModel(config, session(directory / FEATURES / graph, threads, spin=spin), lm_head, heads)
    mark_without_lm_head(model, None if manifest["lm_head"] else str(directory))
    return model.eval(), tokenizer
