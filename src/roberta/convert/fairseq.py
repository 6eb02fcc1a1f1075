"""fairseq RoBERTa checkpoints (`model.pt`, with `dict.txt` and GPT-2 BPE files, or a `dict.txt`
of plain symbols) ⇄ our model.

`model.pt` is a pickle. It is read with `torch.load(weights_only=True)` and an allow-list of
data-only classes (argparse args, omegaconf containers as stubs, numpy scalars); nothing in it
can run code.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import typing
from pathlib import Path

import torch

from roberta import checkpoint
from roberta.checkpoint import build_model, check_vocabulary, head_shapes
from roberta.config import RobertaConfig
from roberta.convert import mapping
from roberta.convert.mapping import Field, WeightNames, weight_and_bias
from roberta.errors import UserError
from roberta.io import atomic_directory
from roberta.model import RobertaModel

# The first three are fixed by the weights' shapes: args, if given, must agree.
FIELDS = (
    Field("num_layers", "encoder_layers"),
    Field("hidden_size", "encoder_embed_dim"),
    Field("ffn_size", "encoder_ffn_embed_dim"),
    # Not visible in any shape; RoBERTa's heads are 64 wide.
    Field("num_heads", "encoder_attention_heads", lambda values: max(values["hidden_size"] // 64, 1)),
    Field("dropout", "dropout", 0.1),
    Field("attention_dropout", "attention_dropout", 0.1),
    Field("activation_dropout", "activation_dropout", 0.0),
    Field("classifier_dropout", "pooler_dropout", 0.0),
)
FIXED = {"activation_fn": "gelu", "encoder_normalize_before": False, "untie_weights_roberta": False}


def fairseq_names(prefix: str = "encoder.") -> WeightNames:
    """fairseq's names under `prefix` ("decoder." in early RoBERTa checkpoints)."""
    s = prefix + "sentence_encoder."
    return WeightNames(
        embeddings=[
            ("embed_tokens.weight", s + "embed_tokens.weight"),
            ("embed_positions.weight", s + "embed_positions.weight"),
            *weight_and_bias("embed_layer_norm", s + "emb_layer_norm"),
        ],
        layer=s + "layers.{i}.",
        # fc1 and fc2 keep our names.
        layer_renames={
            "attention.qkv": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
            "attention.out_proj": "self_attn.out_proj",
            "attention_layer_norm": "self_attn_layer_norm",
            "ffn_layer_norm": "final_layer_norm",
        },
        lm_head=prefix + "lm_head.",
        head="classification_heads.{name}.",
    )


# --- safe unpickling -------------------------------------------------------------------------

# omegaconf classes a fairseq `cfg` may be pickled as. They are never imported: each name is
# bound to a stub that only records its pickled state, which `_plain` turns into dicts/lists.
_OMEGACONF_NAMES = (
    "omegaconf.dictconfig.DictConfig",
    "omegaconf.listconfig.ListConfig",
    "omegaconf.base.Metadata",
    "omegaconf.base.ContainerMetadata",
    *(
        f"omegaconf.nodes.{n}"
        for n in ("AnyNode", "StringNode", "IntegerNode", "FloatNode", "BooleanNode", "BytesNode", "PathNode")
    ),
)


class _PickledState:
    """Stand-in for an omegaconf object: keeps the state pickle hands it, runs nothing."""

    def __setstate__(self, state: object) -> None:
        self.state = state


_OMEGACONF_STUBS = [(type(name.rsplit(".", 1)[1], (_PickledState,), {}), name) for name in _OMEGACONF_NAMES]


def _safe_globals() -> list:
    import numpy as np

    # Data-only types fairseq metadata holds: argparse args, omegaconf containers (stubs),
    # numpy scalars in `extra_state`; builtins that omegaconf's state builds with.
    return [
        argparse.Namespace,
        *_OMEGACONF_STUBS,
        (typing.Any, "typing.Any"),
        collections.defaultdict,
        dict,
        list,
        int,
        np.dtype,
        (np._core.multiarray.scalar, "numpy.core.multiarray.scalar"),
        (np._core.multiarray.scalar, "numpy._core.multiarray.scalar"),
        *(type(np.dtype(t)) for t in ("float64", "float32", "int64")),
    ]


def load_pickle(path: Path, map_location: str | torch.device = "cpu") -> dict:
    """`torch.load(weights_only=True)` with the allow-list above; anything else is refused."""
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        with torch.serialization.safe_globals(_safe_globals()):
            value = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises UnpicklingError, RuntimeError or EOFError by cause
        reason = str(e)
        # torch wraps the cause in lines of advice about weights_only=False, which is exactly what
        # we must not do: one line says what was refused, or else what broke.
        refused = re.search(r"GLOBAL (\S+)", reason)
        if refused:
            raise UserError(
                f"{path}: refused to unpickle {refused[1]} (only tensors and plain metadata are loaded)"
            ) from None
        lines = [line.strip() for line in reason.splitlines() if line.strip()]
        causes = [line for line in lines if not line.startswith(("Check the doc", "Weights only load"))]
        detail = (causes or lines or [type(e).__name__])[-1]
        raise UserError(f"{path}: unreadable checkpoint, truncated or corrupt ({detail})") from None
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected a dict of tensors, found {type(value).__name__}")
    return value


def _plain(value: object) -> object:
    """omegaconf stubs → plain dicts, lists and values."""
    if isinstance(value, _PickledState):
        state = getattr(value, "state", None)
        if not isinstance(state, dict):
            return None
        return _plain(state["_content"] if "_content" in state else state.get("_val"))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def fairseq_hyperparameters(ckpt: dict) -> dict:
    """The model's hyperparameters from `args` (argparse) or `cfg["model"]`, or {} if neither."""
    if isinstance(ckpt.get("args"), argparse.Namespace):
        return vars(ckpt["args"])
    cfg = _plain(ckpt.get("cfg"))
    model = cfg.get("model") if isinstance(cfg, dict) else None
    # fairseq keeps a legacy (argparse) model's options in cfg.model as a Namespace.
    return vars(model) if isinstance(model, argparse.Namespace) else model if isinstance(model, dict) else {}


# --- import ----------------------------------------------------------------------------------


def read_fairseq(
    path: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[RobertaModel, object | None]:
    """Import a fairseq RoBERTa `model.pt` (or its directory, with `dict.txt` and the GPT-2 BPE files,
    or a `dict.txt` of plain symbols). A state dict without `lm_head.*` keys gives a model marked
    as having no masked-LM head (`checkpoint.without_lm_head`)."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.pt"
    source = str(path)
    ckpt = load_pickle(path, map_location)
    state, prefix = model_state(ckpt, source)
    config = read_fairseq_config(state, prefix, fairseq_hyperparameters(ckpt), source)
    heads = classification_heads(state)
    tokenizer = checkpoint.load_tokenizer_if_present(path.parent)
    if tokenizer is not None:
        check_vocabulary(tokenizer, config, str(path.parent))
    lm_head = any(k.startswith(prefix + "lm_head.") for k in state)
    model = build_model(config, heads, map_location, initialise=not lm_head)
    pairs = fairseq_names(prefix).pairs(config.num_layers, heads, lm_head=lm_head)
    ours = mapping.import_state(state, pairs, model.state_dict(), source)
    if lm_head:
        if prefix + "lm_head.weight" not in state:
            raise UserError(f"{source}: missing key {prefix + 'lm_head.weight'!r}")
        mapping.same_tensor(state, prefix + "lm_head.weight", ours["embed_tokens.weight"], source)
    mapping.refuse_leftovers(state, source)
    checkpoint.load_weights(model, ours, source, lm_head=lm_head)
    return checkpoint.mark_without_lm_head(model, None if lm_head else source).eval(), tokenizer


def model_state(ckpt: dict, source: str) -> tuple[dict[str, torch.Tensor], str]:
    """A copy of the checkpoint's state dict under current fairseq names, and its prefix."""
    state = ckpt.get("model")
    if not isinstance(state, dict):
        raise UserError(f"{source}: no 'model' state dict (keys: {', '.join(map(str, ckpt))})")
    prefix = next(
        (p for p in ("encoder.", "decoder.") if f"{p}sentence_encoder.embed_tokens.weight" in state), None
    )
    if prefix is None:
        raise UserError(
            f"{source}: missing key 'encoder.sentence_encoder.embed_tokens.weight'; not a fairseq RoBERTa"
        )
    return upgrade_names(state, prefix + "sentence_encoder."), prefix


def upgrade_names(state: dict[str, torch.Tensor], s: str) -> dict[str, torch.Tensor]:
    """Older fairseq names → the ones our table uses (fairseq's own upgrade does the same)."""
    upgraded = {}
    for key, tensor in state.items():
        fused = re.fullmatch(r"(.*\.self_attn\.)in_proj_(weight|bias)", key)
        if fused:
            upgraded.update({f"{fused[1]}{x}_proj.{fused[2]}": t for x, t in zip("qkv", tensor.chunk(3))})
        elif key.startswith(s + "layernorm_embedding."):
            upgraded[key.replace("layernorm_embedding.", "emb_layer_norm.")] = tensor
        elif not key.endswith((".version", "._float_tensor")):
            upgraded[key] = tensor
    return upgraded


def classification_heads(state: dict[str, torch.Tensor]) -> dict[str, dict[str, int]]:
    """`{name: spec}` of the classification heads in a fairseq state dict."""
    return {
        k.split(".")[1]: mapping.classifier_spec(state[k], state[k.replace("out_proj", "dense")])
        for k in state
        if k.startswith("classification_heads.") and k.endswith(".out_proj.weight")
    }


def read_fairseq_config(
    state: dict[str, torch.Tensor], prefix: str, meta: dict, source: str
) -> RobertaConfig:
    """The config the weights' shapes give, with what they cannot show taken from `meta`."""
    mapping.check_fixed(FIXED, meta, source, label="args.")
    s = prefix + "sentence_encoder."
    vocab_size, hidden = state[s + "embed_tokens.weight"].shape
    num_layers = len({k.split(".")[3] for k in state if k.startswith(s + "layers.")})
    weights = {
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "num_layers": num_layers,
        "ffn_size": state[s + "layers.0.fc1.weight"].shape[0] if num_layers else hidden,
        "max_positions": state[s + "embed_positions.weight"].shape[0],
    }
    return mapping.config_from(FIELDS, meta, source, label="args.", weights=weights)


# --- export ----------------------------------------------------------------------------------


def fairseq_args(model: RobertaModel, tokenizer=None) -> argparse.Namespace:
    """The metadata fairseq needs to rebuild the model (its `roberta` architecture). `bpe` is
    fairseq's GPT-2 BPE only for a byte-level BPE tokenizer: a symbol vocabulary has none."""
    c = model.config
    return argparse.Namespace(
        arch="roberta",
        task="masked_lm",
        criterion="masked_lm",
        **mapping.config_to(FIELDS, c),
        **FIXED,
        max_positions=c.max_seq_len,
        tokens_per_sample=c.max_seq_len,
        pooler_activation_fn="tanh",
        encoder_layerdrop=0.0,
        encoder_layers_to_keep=None,
        bpe="gpt2" if tokenizer is not None and tokenizer.kind in ("gpt2", "hf") else None,
    )


def write_fairseq(directory: Path, model: RobertaModel, tokenizer=None) -> None:
    """Write `model.pt` (fairseq key names, argparse args) and the tokenizer's files."""
    source = checkpoint.without_lm_head(model)
    if source is not None:
        raise UserError(
            f"{source}: holds no masked-LM head, and a fairseq RoBERTa checkpoint must have one "
            "(convert it --to hf or --to roberta)"
        )
    heads = mapping.classifiers_only(head_shapes(model), "fairseq")
    if model.config.padding_idx != 1:
        raise UserError(f"fairseq RoBERTa pads with id 1; this model pads with {model.config.padding_idx}")
    state = mapping.export_state(model.state_dict(), fairseq_names().pairs(model.config.num_layers, heads))
    state["encoder.lm_head.weight"] = state["encoder.sentence_encoder.embed_tokens.weight"]
    ckpt = {
        "args": fairseq_args(model, tokenizer),
        "model": state,
        # fairseq's checkpoint upgrade reads these; a fresh, untrained history.
        "optimizer_history": [
            {
                "criterion_name": "MaskedLmLoss",
                "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {"best": None},
                "num_updates": 0,
            }
        ],
        "extra_state": {"train_iterator": {"epoch": 1}},
    }
    torch.save(ckpt, directory / "model.pt")
    if tokenizer is not None:
        write_fairseq_tokenizer(directory, tokenizer)


def write_fairseq_tokenizer(directory: Path, tokenizer) -> None:
    """GPT-2 `encoder.json` + `vocab.bpe` + fairseq `dict.txt` giving the same ids.

    An HF vocabulary in fairseq's layout (<s> <pad> </s> <unk> first, <mask> last) becomes a
    GPT-2 encoder whose "GPT-2 ids" are the model ids, and a dict.txt listing them in order, so
    fairseq's index 4 + line is the model id again. A GPT-2 tokenizer and a symbol vocabulary
    keep the files they came with.
    """
    if tokenizer.kind in ("gpt2", "symbols"):
        tokenizer.save(directory)
        return
    layout = [tokenizer.bos_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id, tokenizer.mask_id]
    if tokenizer.kind != "hf" or layout != [0, 1, 2, 3, tokenizer.vocab_size - 1]:
        raise UserError(
            f"a {tokenizer.kind} tokenizer with special ids {layout} has no fairseq dict.txt equivalent "
            f"(fairseq needs byte-level BPE with <s> <pad> </s> <unk> = 0..3 and <mask> last)"
        )
    vocab = {tokenizer.id_to_token(i): i for i in range(tokenizer.vocab_size)}
    (directory / "encoder.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    # From the merges, not a merges.txt: an HF tokenizer may have come as a tokenizer.json.
    (directory / "vocab.bpe").write_text(
        "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in tokenizer.merges), encoding="utf-8"
    )
    (directory / "dict.txt").write_text("".join(f"{i} 1\n" for i in range(4, tokenizer.vocab_size - 1)))


def export_fairseq(directory: str | Path, model: RobertaModel, tokenizer=None) -> Path:
    """Export to fairseq's layout: `model.pt` + `dict.txt` (+ GPT-2 BPE files for a GPT-2 tokenizer)."""
    with atomic_directory(directory) as tmp:
        write_fairseq(tmp, model, tokenizer)
    return Path(directory)
