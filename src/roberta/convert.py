"""Foreign RoBERTa checkpoints ⇄ ours: HF transformers and fairseq, one name table each.

A table is a list of `(our key, their key)` pairs; the fused `attention.qkv` maps to three
keys (q, k, v stacked on dim 0), so import concatenates them and export splits them. Every
foreign key is either mapped, or named here as ignorable, or the import fails: nothing is
dropped silently. Pickled fairseq checkpoints are read with `torch.load(weights_only=True)`
and an allow-list of data-only classes; nothing in them can run code.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import typing
from collections.abc import Callable
from pathlib import Path

import torch

from roberta import checkpoint
from roberta.checkpoint import build_model, check_vocabulary, head_shapes
from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.io import atomic_directory, read_json
from roberta.model import RobertaModel

Pairs = list[tuple[str, "str | tuple[str, str, str]"]]

# --- name tables ---------------------------------------------------------------------------


def _weight_and_bias(ours: str, theirs: str | tuple[str, ...]) -> Pairs:
    if isinstance(theirs, tuple):
        return [(f"{ours}.{p}", tuple(f"{t}.{p}" for t in theirs)) for p in ("weight", "bias")]
    return [(f"{ours}.{p}", f"{theirs}.{p}") for p in ("weight", "bias")]


def hf_encoder_names(num_layers: int) -> Pairs:
    e = "roberta.embeddings."
    pairs = [
        ("embed_tokens.weight", e + "word_embeddings.weight"),
        ("embed_positions.weight", e + "position_embeddings.weight"),
        *_weight_and_bias("embed_layer_norm", e + "LayerNorm"),
    ]
    for i in range(num_layers):
        ours, theirs = f"layers.{i}.", f"roberta.encoder.layer.{i}."
        qkv = tuple(theirs + f"attention.self.{x}" for x in ("query", "key", "value"))
        pairs += _weight_and_bias(ours + "attention.qkv", qkv)
        pairs += _weight_and_bias(ours + "attention.out_proj", theirs + "attention.output.dense")
        pairs += _weight_and_bias(ours + "attention_layer_norm", theirs + "attention.output.LayerNorm")
        pairs += _weight_and_bias(ours + "fc1", theirs + "intermediate.dense")
        pairs += _weight_and_bias(ours + "fc2", theirs + "output.dense")
        pairs += _weight_and_bias(ours + "ffn_layer_norm", theirs + "output.LayerNorm")
    return pairs


HF_LM_HEAD: Pairs = [
    *_weight_and_bias("lm_head.dense", "lm_head.dense"),
    *_weight_and_bias("lm_head.layer_norm", "lm_head.layer_norm"),
    ("lm_head.bias", "lm_head.bias"),
]
HF_TOKEN_TYPES = "roberta.embeddings.token_type_embeddings.weight"


def hf_head_names(name: str) -> Pairs:
    return _weight_and_bias(f"heads.{name}.dense", "classifier.dense") + _weight_and_bias(
        f"heads.{name}.out_proj", "classifier.out_proj"
    )


def fairseq_names(num_layers: int, heads: typing.Iterable[str], prefix: str = "encoder.") -> Pairs:
    s = prefix + "sentence_encoder."
    pairs = [
        ("embed_tokens.weight", s + "embed_tokens.weight"),
        ("embed_positions.weight", s + "embed_positions.weight"),
        *_weight_and_bias("embed_layer_norm", s + "emb_layer_norm"),
    ]
    for i in range(num_layers):
        ours, theirs = f"layers.{i}.", f"{s}layers.{i}."
        pairs += _weight_and_bias(ours + "attention.qkv", tuple(theirs + f"self_attn.{x}_proj" for x in "qkv"))
        pairs += _weight_and_bias(ours + "attention.out_proj", theirs + "self_attn.out_proj")
        pairs += _weight_and_bias(ours + "attention_layer_norm", theirs + "self_attn_layer_norm")
        pairs += _weight_and_bias(ours + "fc1", theirs + "fc1")
        pairs += _weight_and_bias(ours + "fc2", theirs + "fc2")
        pairs += _weight_and_bias(ours + "ffn_layer_norm", theirs + "final_layer_norm")
    pairs += _weight_and_bias("lm_head.dense", prefix + "lm_head.dense")
    pairs += _weight_and_bias("lm_head.layer_norm", prefix + "lm_head.layer_norm")
    pairs += [("lm_head.bias", prefix + "lm_head.bias")]
    for name in heads:
        pairs += _weight_and_bias(f"heads.{name}.dense", f"classification_heads.{name}.dense")
        pairs += _weight_and_bias(f"heads.{name}.out_proj", f"classification_heads.{name}.out_proj")
    return pairs


def take(state: dict[str, torch.Tensor], pairs: Pairs, expected: dict[str, torch.Tensor], source: str) -> dict:
    """Pop every foreign key of `pairs` from `state` into our names, checking shapes as it goes."""
    ours = {}
    for mine, theirs in pairs:
        names = theirs if isinstance(theirs, tuple) else (theirs,)
        want = expected[mine].shape
        part = torch.Size([want[0] // len(names), *want[1:]])
        for name in names:
            if name not in state:
                raise UserError(f"{source}: missing key {name!r}")
            if state[name].shape != part:
                raise UserError(f"{source}: key {name!r} has shape {list(state[name].shape)}, expected {list(part)}")
        ours[mine] = torch.cat([state.pop(n) for n in names]) if len(names) > 1 else state.pop(names[0])
    return ours


def give(state: dict[str, torch.Tensor], pairs: Pairs) -> dict[str, torch.Tensor]:
    """Our state dict under foreign names; each tensor its own contiguous copy."""
    out = {}
    for mine, theirs in pairs:
        tensor = state[mine].detach()
        if isinstance(theirs, tuple):
            out.update(zip(theirs, (chunk.clone() for chunk in tensor.chunk(len(theirs)))))
        else:
            out[theirs] = tensor.clone()
    return out


def _refuse_leftovers(state: dict, source: str) -> None:
    if state:
        raise UserError(f"{source}: unexpected key(s) {checkpoint.describe_keys(sorted(state))}")


def _same_tensor(state: dict, key: str, other: torch.Tensor, source: str, why: str) -> None:
    """Pop `key` if present; it must equal `other` (a tied copy), since we store it once."""
    if key in state and not torch.equal(state.pop(key), other):
        raise UserError(f"{source}: {key!r} differs from its tied tensor; {why}")


# --- HF transformers -------------------------------------------------------------------------

HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def read_hf(directory: str | Path, map_location: str | torch.device = "cpu") -> tuple[RobertaModel, object | None]:
    """Import an HF `save_pretrained` directory of RobertaForMaskedLM, RobertaForSequenceClassification
    or RobertaModel. Token-type row 0 is folded into the position embeddings (HF adds it to every
    token when no token types are given, which is all RoBERTa ever does)."""
    directory = Path(directory)
    hf = read_json(directory / "config.json")
    source = str(directory / "config.json")
    if hf.get("model_type") != "roberta":
        raise UserError(f"{source}: model_type is {hf.get('model_type')!r}, expected 'roberta'")
    for field, value in (("hidden_act", "gelu"), ("position_embedding_type", "absolute"), ("is_decoder", False)):
        if hf.get(field, value) != value:
            raise UserError(f"{source}: {field} is {hf[field]!r}; only {value!r} is supported")
    try:
        config = RobertaConfig(
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=hf["num_attention_heads"],
            ffn_size=hf["intermediate_size"],
            max_positions=hf["max_position_embeddings"],
            padding_idx=hf.get("pad_token_id", 1),
            dropout=hf.get("hidden_dropout_prob", 0.1),
            attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
            classifier_dropout=hf.get("classifier_dropout") if hf.get("classifier_dropout") is not None
            else hf.get("hidden_dropout_prob", 0.1),
            layer_norm_eps=hf.get("layer_norm_eps", 1e-12),
            init_std=hf.get("initializer_range", 0.02),
        )
    except KeyError as e:
        raise UserError(f"{source}: missing field {e.args[0]!r}") from None

    weights = next((directory / f for f in HF_WEIGHT_FILES if (directory / f).is_file()), None)
    if weights is None:
        raise UserError(f"{directory}: no {' or '.join(HF_WEIGHT_FILES)} (sharded checkpoints are not supported)")
    if weights.suffix == ".safetensors":
        state = checkpoint.read_safetensors(weights, map_location)
    else:
        state = load_pickle(weights, map_location)
    # A bare RobertaModel saves its keys without the "roberta." prefix.
    bare = ("embeddings", "encoder", "pooler")
    state = {("roberta." + k if k.split(".")[0] in bare else k): v for k, v in state.items()}

    has_lm_head = "lm_head.dense.weight" in state
    heads = {}
    if "classifier.dense.weight" in state:
        head = hf.get("roberta_head_name", "classification")
        if "classifier.out_proj.weight" not in state:
            raise UserError(f"{weights}: missing key 'classifier.out_proj.weight'")
        heads[head] = {
            "num_classes": state["classifier.out_proj.weight"].shape[0],
            "inner_dim": state["classifier.dense.weight"].shape[0],
        }
    tokenizer = checkpoint.load_tokenizer_if_present(directory)
    if tokenizer is not None:
        check_vocabulary(tokenizer, config, str(directory))
    model = build_model(config, heads, map_location, initialise=not has_lm_head)
    expected = model.state_dict()

    source = str(weights)
    pairs = hf_encoder_names(config.num_layers) + (HF_LM_HEAD if has_lm_head else [])
    for name in heads:
        pairs += hf_head_names(name)
    ours = take(state, pairs, expected, source)
    if HF_TOKEN_TYPES not in state:
        raise UserError(f"{source}: missing key {HF_TOKEN_TYPES!r}")
    token_types = state.pop(HF_TOKEN_TYPES)
    if token_types.shape[1:] != (config.hidden_size,):
        raise UserError(
            f"{source}: key {HF_TOKEN_TYPES!r} has shape {list(token_types.shape)}, expected [1, {config.hidden_size}]"
        )
    ours["embed_positions.weight"] = ours["embed_positions.weight"] + token_types[0]
    if not has_lm_head:
        ours.update({k: v for k, v in expected.items() if k.startswith("lm_head.")})
    # Tied or unused tensors older HF versions also store: checked, then dropped.
    untied = "untied LM heads are not supported"
    _same_tensor(state, "lm_head.decoder.weight", ours["embed_tokens.weight"], source, untied)
    if has_lm_head:
        _same_tensor(state, "lm_head.decoder.bias", ours["lm_head.bias"], source, "it must equal lm_head.bias")
    for unused in ("roberta.embeddings.position_ids", "roberta.pooler.dense.weight", "roberta.pooler.dense.bias"):
        state.pop(unused, None)
    _refuse_leftovers(state, source)
    checkpoint.load_weights(model, {k: v for k, v in ours.items() if k != checkpoint.TIED_KEY}, source)
    return model.eval(), tokenizer


def hf_config(model: RobertaModel, tokenizer=None) -> dict:
    """An HF `config.json` for our model: every field HF's RobertaConfig reads, spelled out."""
    c = model.config
    heads = head_shapes(model)
    config = {
        "architectures": ["RobertaForSequenceClassification" if heads else "RobertaForMaskedLM"],
        "model_type": "roberta",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "intermediate_size": c.ffn_size,
        "hidden_act": "gelu",
        "hidden_dropout_prob": c.dropout,
        "attention_probs_dropout_prob": c.attention_dropout,
        "classifier_dropout": c.classifier_dropout,
        "max_position_embeddings": c.max_positions,
        "type_vocab_size": 1,
        "initializer_range": c.init_std,
        "layer_norm_eps": c.layer_norm_eps,
        "position_embedding_type": "absolute",
        "pad_token_id": c.padding_idx,
        "bos_token_id": tokenizer.bos_id if tokenizer is not None else 0,
        "eos_token_id": tokenizer.eos_id if tokenizer is not None else 2,
        "is_decoder": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "dtype": "float32",
    }
    for name, shape in heads.items():
        n = shape["num_classes"]
        config.update(
            roberta_head_name=name,
            num_labels=n,
            id2label={str(i): f"LABEL_{i}" for i in range(n)},
            label2id={f"LABEL_{i}": i for i in range(n)},
            problem_type="regression" if n == 1 else "single_label_classification",
        )
    return config


def write_hf(directory: Path, model: RobertaModel, tokenizer=None) -> None:
    """Write an HF `save_pretrained`-style directory into the (empty, temporary) `directory`."""
    from safetensors.torch import save_file

    heads = head_shapes(model)
    if len(heads) > 1:
        raise UserError(f"HF RoBERTa holds one classification head; this model has {len(heads)}: {', '.join(heads)}")
    for name, shape in heads.items():
        if shape["inner_dim"] != model.config.hidden_size:
            raise UserError(
                f"head {name!r}: HF needs inner_dim == hidden_size {model.config.hidden_size}, not {shape['inner_dim']}"
            )
    pairs = hf_encoder_names(model.config.num_layers) + HF_LM_HEAD
    for name in heads:
        pairs += hf_head_names(name)
    state = give(model.state_dict(), pairs)
    state[HF_TOKEN_TYPES] = torch.zeros(1, model.config.hidden_size, dtype=state["lm_head.bias"].dtype)
    (directory / "config.json").write_text(json.dumps(hf_config(model, tokenizer), indent=2) + "\n")
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        write_hf_tokenizer(directory, tokenizer, model.config.max_tokens)


def write_hf_tokenizer(directory: Path, tokenizer, max_length: int) -> None:
    """The tokenizer's own files, plus what `transformers.AutoTokenizer` needs: vocab.json +
    merges.txt in model ids for byte-level BPE (a GPT-2 vocab.bpe is already a merges.txt) and a
    tokenizer_config.json naming the class and the special tokens."""
    tokenizer.save(directory)
    ids = {role: getattr(tokenizer, f"{role}_id") for role in ("bos", "eos", "unk", "pad", "mask")}
    names = {role: tokenizer.id_to_token(i) for role, i in ids.items()}
    config = {
        "model_max_length": max_length,
        **{f"{role}_token": name for role, name in names.items()},
        "cls_token": names["bos"],
        "sep_token": names["eos"],
        # RoBERTa's <mask> swallows the space before it, so "Hello <mask>" is two tokens as in fairseq.
        "added_tokens_decoder": {
            str(i): {"content": names[role], "lstrip": role == "mask" and tokenizer.kind != "wordpiece",
                     "rstrip": False, "normalized": False, "single_word": False, "special": True}
            for role, i in sorted(ids.items(), key=lambda item: item[1])
        },
    }
    if tokenizer.kind == "wordpiece":
        existing = directory / "tokenizer_config.json"
        lowercase = existing.is_file() and read_json(existing).get("do_lower_case", False)
        config.update(tokenizer_class="BertTokenizer", do_lower_case=lowercase)
    else:
        config.update(tokenizer_class="RobertaTokenizer", add_prefix_space=False)
        if tokenizer.kind == "gpt2":
            vocab = {tokenizer.id_to_token(i): i for i in range(tokenizer.vocab_size)}
            (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
            (directory / "merges.txt").write_bytes((directory / "vocab.bpe").read_bytes())
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def export_hf(directory: str | Path, model: RobertaModel, tokenizer=None) -> Path:
    """Export to a directory that `transformers.AutoModelForMaskedLM.from_pretrained` loads."""
    with atomic_directory(directory) as tmp:
        write_hf(tmp, model, tokenizer)
    return Path(directory)


# --- fairseq ---------------------------------------------------------------------------------

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
        refused = re.search(r"GLOBAL (\S+)", reason)
        if refused:
            what = refused.group(1)
            raise UserError(f"{path}: refused to unpickle {what} (only tensors and plain metadata are loaded)") from None
        # torch wraps the cause in advice about weights_only=False, which is exactly what we must not do.
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


def _upgrade_fairseq_names(state: dict, prefix: str, num_layers: int) -> None:
    """Older fairseq names → the ones our table uses (fairseq's own upgrade does the same)."""
    s = prefix + "sentence_encoder."
    for p in ("weight", "bias"):
        if f"{s}layernorm_embedding.{p}" in state:
            state[f"{s}emb_layer_norm.{p}"] = state.pop(f"{s}layernorm_embedding.{p}")
        for i in range(num_layers):
            fused = f"{s}layers.{i}.self_attn.in_proj_{p}"
            if fused in state:
                q, k, v = state.pop(fused).chunk(3)
                state.update({f"{s}layers.{i}.self_attn.{x}_proj.{p}": t for x, t in zip("qkv", (q, k, v))})
    for key in [k for k in state if k.endswith(".version") or k.endswith("._float_tensor")]:
        del state[key]


def read_fairseq(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[RobertaModel, object | None]:
    """Import a fairseq RoBERTa `model.pt` (or its directory, with `dict.txt` and the GPT-2 BPE files)."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.pt"
    ckpt = load_pickle(path, map_location)
    state = ckpt.get("model")
    if not isinstance(state, dict):
        raise UserError(f"{path}: no 'model' state dict (keys: {', '.join(map(str, ckpt))})")
    state = dict(state)
    source = str(path)
    prefix = next((p for p in ("encoder.", "decoder.") if f"{p}sentence_encoder.embed_tokens.weight" in state), None)
    if prefix is None:
        raise UserError(f"{source}: missing key 'encoder.sentence_encoder.embed_tokens.weight'; not a fairseq RoBERTa")
    s = prefix + "sentence_encoder."
    num_layers = len({k.split(".")[3] for k in state if k.startswith(s + "layers.")})
    _upgrade_fairseq_names(state, prefix, num_layers)
    vocab_size, hidden = state[s + "embed_tokens.weight"].shape
    meta = fairseq_hyperparameters(ckpt)
    supported = (("activation_fn", "gelu"), ("encoder_normalize_before", False), ("untie_weights_roberta", False))
    for field, value in supported:
        if meta.get(field, value) != value:
            raise UserError(f"{source}: args.{field} is {meta[field]!r}; only {value!r} is supported")
    ffn = state[s + "layers.0.fc1.weight"].shape[0] if num_layers else hidden
    inferred = {"encoder_layers": num_layers, "encoder_embed_dim": hidden, "encoder_ffn_embed_dim": ffn}
    for field, value in inferred.items():
        if field in meta and meta[field] != value:
            raise UserError(f"{source}: args.{field} is {meta[field]}, the weights say {value}")
    config = RobertaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_layers=num_layers,
        # Not visible in any shape; RoBERTa's heads are 64 wide.
        num_heads=meta.get("encoder_attention_heads", max(hidden // 64, 1)),
        ffn_size=inferred["encoder_ffn_embed_dim"],
        max_positions=state[s + "embed_positions.weight"].shape[0],
        dropout=meta.get("dropout", 0.1),
        attention_dropout=meta.get("attention_dropout", 0.1),
        activation_dropout=meta.get("activation_dropout", 0.0),
        classifier_dropout=meta.get("pooler_dropout", 0.0),
    )
    heads = {
        k.split(".")[1]: {"num_classes": state[k].shape[0], "inner_dim": state[k.replace("out_proj", "dense")].shape[0]}
        for k in state
        if k.startswith("classification_heads.") and k.endswith(".out_proj.weight")
    }
    tokenizer = checkpoint.load_tokenizer_if_present(path.parent)
    if tokenizer is not None:
        check_vocabulary(tokenizer, config, str(path.parent))
    model = build_model(config, heads, map_location)
    ours = take(state, fairseq_names(num_layers, heads, prefix), model.state_dict(), source)
    if prefix + "lm_head.weight" not in state:
        raise UserError(f"{source}: missing key {prefix + 'lm_head.weight'!r}")
    untied = "untied LM heads are not supported"
    _same_tensor(state, prefix + "lm_head.weight", ours["embed_tokens.weight"], source, untied)
    _refuse_leftovers(state, source)
    checkpoint.load_weights(model, ours, source)
    return model.eval(), tokenizer


def fairseq_args(model: RobertaModel) -> argparse.Namespace:
    """The metadata fairseq needs to rebuild the model (its `roberta` architecture)."""
    c = model.config
    return argparse.Namespace(
        arch="roberta",
        task="masked_lm",
        criterion="masked_lm",
        encoder_layers=c.num_layers,
        encoder_embed_dim=c.hidden_size,
        encoder_ffn_embed_dim=c.ffn_size,
        encoder_attention_heads=c.num_heads,
        max_positions=c.max_tokens,
        tokens_per_sample=c.max_tokens,
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        activation_dropout=c.activation_dropout,
        pooler_dropout=c.classifier_dropout,
        activation_fn="gelu",
        pooler_activation_fn="tanh",
        encoder_normalize_before=False,
        untie_weights_roberta=False,
        encoder_layerdrop=0.0,
        encoder_layers_to_keep=None,
        bpe="gpt2",
    )


def write_fairseq(directory: Path, model: RobertaModel, tokenizer=None) -> None:
    """Write `model.pt` (fairseq key names, argparse args) and the tokenizer's files."""
    heads = head_shapes(model)
    if model.config.padding_idx != 1:
        raise UserError(f"fairseq RoBERTa pads with id 1; this model pads with {model.config.padding_idx}")
    state = give(model.state_dict(), fairseq_names(model.config.num_layers, heads))
    state["encoder.lm_head.weight"] = state["encoder.sentence_encoder.embed_tokens.weight"]
    ckpt = {
        "args": fairseq_args(model),
        "model": state,
        # fairseq's checkpoint upgrade reads these; a fresh, untrained history.
        "optimizer_history": [
            {"criterion_name": "MaskedLmLoss", "optimizer_name": "FairseqAdam", "lr_scheduler_state": {"best": None},
             "num_updates": 0}
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
    fairseq's index 4 + line is the model id again.
    """
    if tokenizer.kind == "gpt2":
        tokenizer.save(directory)
        return
    layout = [tokenizer.bos_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id, tokenizer.mask_id]
    if tokenizer.kind != "hf" or layout != [0, 1, 2, 3, tokenizer.vocab_size - 1]:
        raise UserError(
            f"a {tokenizer.kind} tokenizer with special ids {layout} has no fairseq dict.txt equivalent "
            f"(fairseq needs byte-level BPE with <s> <pad> </s> <unk> = 0..3 and <mask> last)"
        )
    vocab = {tokenizer.id_to_token(i): i for i in range(tokenizer.vocab_size)}
    (directory / "encoder.json").write_text(json.dumps(vocab, ensure_ascii=False))
    tokenizer.save(directory)
    os.replace(directory / "merges.txt", directory / "vocab.bpe")
    os.remove(directory / "vocab.json")
    (directory / "dict.txt").write_text("".join(f"{i} 1\n" for i in range(4, tokenizer.vocab_size - 1)))


def export_fairseq(directory: str | Path, model: RobertaModel, tokenizer=None) -> Path:
    """Export to fairseq's layout: `model.pt` + `dict.txt` (+ GPT-2 BPE files for a GPT-2 tokenizer)."""
    with atomic_directory(directory) as tmp:
        write_fairseq(tmp, model, tokenizer)
    return Path(directory)


# --- any format, and checked conversion ------------------------------------------------------


def detect_format(path: str | Path) -> str:
    """'roberta', 'hf' or 'fairseq' for a checkpoint directory (or a fairseq `.pt` file)."""
    path = Path(path)
    if path.is_file() and path.suffix == ".pt":
        return "fairseq"
    if not path.is_dir():
        raise UserError(f"{path}: no such checkpoint directory")
    if checkpoint.is_checkpoint(path):
        return "roberta"
    if (path / "config.json").is_file() and "model_type" in read_json(path / "config.json"):
        return "hf"
    if (path / "model.pt").is_file():
        return "fairseq"
    raise UserError(f"{path}: not a roberta, HF transformers or fairseq checkpoint (no config.json or model.pt)")


def load_any(path: str | Path, map_location: str | torch.device = "cpu") -> tuple[RobertaModel, object | None]:
    """Our checkpoint, an HF directory or a fairseq `model.pt`/directory → (model in eval mode, tokenizer)."""
    fmt = detect_format(path)
    if fmt == "roberta":
        return checkpoint.load(path, map_location)
    return (read_hf if fmt == "hf" else read_fairseq)(path, map_location)


def probe_batch(config: RobertaConfig, seed: int = 0) -> torch.Tensor:
    """Three sequences of unequal length, right-padded: exercises the padding mask and positions."""
    generator = torch.Generator().manual_seed(seed)
    lengths = [min(n, config.max_tokens) for n in (13, 8, 3)]
    tokens = torch.full((len(lengths), max(lengths)), config.padding_idx)
    for row, n in enumerate(lengths):
        ids = torch.randint(0, config.vocab_size - 1, (n,), generator=generator)
        tokens[row, :n] = ids + (ids >= config.padding_idx).long()  # every id but padding
    return tokens


@torch.no_grad()
def model_outputs(model: RobertaModel, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every hidden state, the LM logits and each head's logits, by name."""
    out = model(tokens, return_all_hiddens=True)
    outputs = {f"hidden_states[{i}]": h for i, h in enumerate(out.hidden_states)}
    outputs["lm_logits"] = model.lm_logits(out.last_hidden_state)
    outputs.update({f"heads.{name}": model.classify(name, out.last_hidden_state) for name in model.heads})
    return outputs


@torch.no_grad()
def transformers_outputs(
    directory: Path, tokens: torch.Tensor, padding_idx: int, heads: list[str]
) -> dict[str, torch.Tensor]:
    """The same outputs as `model_outputs`, computed by HF transformers from an exported directory."""
    import transformers
    from transformers.utils import logging

    mask = tokens.ne(padding_idx).long()
    # Loading a classifier checkpoint as a masked LM warns about the unused head: expected here.
    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        mlm = transformers.AutoModelForMaskedLM.from_pretrained(directory).float().eval()
        out = mlm(input_ids=tokens, attention_mask=mask, output_hidden_states=True)
        outputs = {f"hidden_states[{i}]": h for i, h in enumerate(out.hidden_states)}
        outputs["lm_logits"] = out.logits
        for name in heads:
            classifier = transformers.AutoModelForSequenceClassification.from_pretrained(directory).float().eval()
            outputs[f"heads.{name}"] = classifier(input_ids=tokens, attention_mask=mask).logits
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()
    return outputs


def max_difference(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor]) -> float:
    """Largest absolute difference over all outputs (padding positions included: they match too)."""
    if reference.keys() != candidate.keys():
        raise UserError(f"converted model has outputs {sorted(candidate)}, expected {sorted(reference)}")
    return max((reference[k].float() - candidate[k].float()).abs().max().item() for k in reference)


WRITERS: dict[str, Callable[[Path, RobertaModel, object], None]] = {
    "roberta": checkpoint.write,
    "hf": write_hf,
    "fairseq": write_fairseq,
}


def convert(src: str | Path, dst: str | Path, to: str = "roberta", tolerance: float = 1e-5) -> float:
    """Convert a checkpoint of any known format to `to`, verify it, and return the largest difference.

    Both the source model and the written one (run by HF transformers itself for `to="hf"`, when
    it is installed) score a probe batch in fp32 eval mode; above `tolerance` nothing is left at
    `dst` and a UserError is raised.
    """
    if to not in WRITERS:
        raise UserError(f"unknown target format {to!r}; choose one of {', '.join(WRITERS)}")
    model, tokenizer = load_any(src)
    model = model.float().eval()
    tokens = probe_batch(model.config)
    reference = model_outputs(model, tokens)
    with atomic_directory(dst) as tmp:
        WRITERS[to](tmp, model, tokenizer)
        checker = "roberta"
        if to == "hf" and _transformers_available():
            candidate = transformers_outputs(tmp, tokens, model.config.padding_idx, list(model.heads))
            checker = "transformers"
        else:
            candidate = model_outputs(load_any(tmp)[0].float(), tokens)
        difference = max_difference(reference, candidate)
        print(
            f"{src} -> {dst} ({to}): largest difference on a probe batch of {len(tokens)} padded sequences, "
            f"{len(reference)} outputs, read back by {checker}: {difference:.3g}"
        )
        if not difference <= tolerance:
            raise UserError(
                f"conversion check failed: largest difference {difference:.3g} exceeds {tolerance:g}; "
                f"nothing written to {dst}"
            )
    return difference


def _transformers_available() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True
