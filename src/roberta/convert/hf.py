"""HF transformers `save_pretrained` directories ⇄ our model.

Reads RobertaForMaskedLM, RobertaForSequenceClassification, RobertaForTokenClassification and bare
RobertaModel directories (`model.safetensors` or a pickled `pytorch_model.bin`); writes one that
`transformers.AutoModelForMaskedLM` (and, with a head, `AutoModelForSequenceClassification` or
`AutoModelForTokenClassification`) loads.
A directory without an LM head imports as a model marked so (`checkpoint.without_lm_head`), and
exports as the body (and classifier) alone: its seeded stand-in LM head is never written.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from roberta import checkpoint
from roberta.checkpoint import build_model, check_vocabulary, head_shapes
from roberta.config import RobertaConfig
from roberta.convert import mapping
from roberta.convert.fairseq import load_pickle
from roberta.convert.mapping import Field, WeightNames, weight_and_bias
from roberta.convert.sentence_transformers import read_embedding_head, write_modules
from roberta.errors import UserError
from roberta.io import atomic_directory, read_json, write_json
from roberta.model import EMBEDDING_HEAD, RobertaModel, TaggingHead

FIELDS = (
    Field("vocab_size", "vocab_size"),
    Field("hidden_size", "hidden_size"),
    Field("num_layers", "num_hidden_layers"),
    Field("num_heads", "num_attention_heads"),
    Field("ffn_size", "intermediate_size"),
    Field("max_positions", "max_position_embeddings"),
    Field("padding_idx", "pad_token_id", 1),
    Field("dropout", "hidden_dropout_prob", 0.1),
    Field("attention_dropout", "attention_probs_dropout_prob", 0.1),
    # HF's classifier falls back to hidden_dropout_prob.
    Field("classifier_dropout", "classifier_dropout", lambda values: values["dropout"]),
    Field("layer_norm_eps", "layer_norm_eps", 1e-12),
    Field("init_std", "initializer_range", 0.02),
)
FIXED = {"hidden_act": "gelu", "position_embedding_type": "absolute", "is_decoder": False}

NAMES = WeightNames(
    embeddings=[
        ("embed_tokens.weight", "roberta.embeddings.word_embeddings.weight"),
        ("embed_positions.weight", "roberta.embeddings.position_embeddings.weight"),
        *weight_and_bias("embed_layer_norm", "roberta.embeddings.LayerNorm"),
    ],
    layer="roberta.encoder.layer.{i}.",
    layer_renames={
        "attention.qkv": ("attention.self.query", "attention.self.key", "attention.self.value"),
        "attention.out_proj": "attention.output.dense",
        "attention_layer_norm": "attention.output.LayerNorm",
        "fc1": "intermediate.dense",
        "fc2": "output.dense",
        "ffn_layer_norm": "output.LayerNorm",
    },
    lm_head="lm_head.",
    head="classifier.",
)
TOKEN_TYPES = "roberta.embeddings.token_type_embeddings.weight"
# Tensors HF stores that we do not need: position ids are implied, RoBERTa's pooler is unused.
UNUSED = ("roberta.embeddings.position_ids", "roberta.pooler.dense.weight", "roberta.pooler.dense.bias")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")

# --- import ----------------------------------------------------------------------------------


def read_hf(
    directory: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[RobertaModel, object | None]:
    """Import an HF `save_pretrained` directory of RobertaForMaskedLM, RobertaForSequenceClassification
    or RobertaModel. Token-type row 0 is folded into the position embeddings (HF adds it to every
    token when no token types are given, which is all RoBERTa ever does)."""
    directory = Path(directory)
    hf = read_json(directory / "config.json")
    config = read_hf_config(hf, str(directory / "config.json"))
    weights = weights_file(directory)
    source = str(weights)
    state = read_state(weights, map_location)
    has_lm_head = "lm_head.dense.weight" in state
    heads = classifier_heads(state, hf.get("roberta_head_name", "classification"), source)
    for spec in heads.values():
        spec.update(head_labels(hf, spec["num_classes"], str(directory / "config.json")))
    tagging = tagging_heads(state, hf, str(directory / "config.json"))
    tokenizer = checkpoint.load_tokenizer_if_present(directory)
    if tokenizer is not None:
        check_vocabulary(tokenizer, config, str(directory))
    model = build_model(config, {**heads, **tagging}, map_location, initialise=not has_lm_head)
    expected = model.state_dict()
    pairs = NAMES.pairs(config.num_layers, heads, lm_head=has_lm_head) + tagging_pairs(tagging)
    ours = mapping.import_state(state, pairs, expected, source)
    ours["embed_positions.weight"] = ours["embed_positions.weight"] + token_type_row(state, config, source)
    if has_lm_head:
        mapping.same_tensor(
            state, "lm_head.decoder.bias", ours["lm_head.bias"], source, "it must equal lm_head.bias"
        )
    else:
        ours.update({k: v for k, v in expected.items() if k.startswith("lm_head.")})
    mapping.same_tensor(state, "lm_head.decoder.weight", ours["embed_tokens.weight"], source)
    for unused in UNUSED:
        state.pop(unused, None)
    mapping.refuse_leftovers(state, source)
    checkpoint.load_weights(model, {k: v for k, v in ours.items() if k != checkpoint.TIED_KEY}, source)
    embedding = read_embedding_head(directory, config)  # a sentence-transformers directory's pooling
    if embedding is not None:
        model.heads[EMBEDDING_HEAD] = embedding.to(map_location)
    return checkpoint.mark_without_lm_head(model, None if has_lm_head else str(directory)).eval(), tokenizer


def read_hf_config(hf: dict, source: str) -> RobertaConfig:
    if hf.get("model_type") != "roberta":
        raise UserError(f"{source}: model_type is {hf.get('model_type')!r}, expected 'roberta'")
    mapping.check_fixed(FIXED, hf, source)
    return mapping.config_from(FIELDS, hf, source)


def weights_file(directory: Path) -> Path:
    weights = next((directory / f for f in WEIGHT_FILES if (directory / f).is_file()), None)
    if weights is None:
        raise UserError(
            f"{directory}: no {' or '.join(WEIGHT_FILES)} (sharded checkpoints are not supported)"
        )
    return weights


def read_state(weights: Path, map_location: str | torch.device) -> dict[str, torch.Tensor]:
    """The state dict under RobertaFor*'s names."""
    if weights.suffix == ".safetensors":
        state = checkpoint.read_safetensors(weights, map_location)
    else:
        state = load_pickle(weights, map_location)
    # A bare RobertaModel saves its keys without the "roberta." prefix.
    bare = ("embeddings", "encoder", "pooler")
    return {("roberta." + k if k.split(".")[0] in bare else k): v for k, v in state.items()}


def classifier_heads(state: dict[str, torch.Tensor], name: str, source: str) -> dict[str, dict]:
    """`{name: spec}` for a RobertaForSequenceClassification state dict, else {}."""
    if "classifier.dense.weight" not in state:
        return {}
    if "classifier.out_proj.weight" not in state:
        raise UserError(f"{source}: missing key 'classifier.out_proj.weight'")
    return {
        name: mapping.classifier_spec(state["classifier.out_proj.weight"], state["classifier.dense.weight"])
    }


def tagging_heads(state: dict[str, torch.Tensor], hf: dict, source: str) -> dict[str, dict]:
    """`{name: spec}` for a RobertaForTokenClassification state dict (its one Linear on every
    token, `classifier.weight`), else {}."""
    if "classifier.weight" not in state:
        return {}
    labels = state["classifier.weight"].shape[0]
    spec = {"kind": TaggingHead.kind, "num_labels": labels, **head_labels(hf, labels, source)}
    return {hf.get("roberta_head_name", "tagger"): spec}


def tagging_pairs(heads) -> list[tuple[str, str]]:
    """HF's names of a tagging head's weights (RobertaForTokenClassification's `classifier`)."""
    return [pair for name in heads for pair in weight_and_bias(f"heads.{name}.out_proj", "classifier")]


def head_labels(hf: dict, num_classes: int, source: str) -> dict:
    """`{"labels": [...]}` from config.json's id2label, or {} where it holds HF's placeholders
    (LABEL_0, LABEL_1, ...) or nothing."""
    id2label = hf.get("id2label")
    if id2label is None:
        return {}
    keys = [str(i) for i in range(num_classes)]
    if not (
        isinstance(id2label, dict)
        and sorted(id2label) == sorted(keys)
        and all(isinstance(v, str) and v for v in id2label.values())
    ):
        raise UserError(
            f"{source}: id2label must map '0'..'{num_classes - 1}' (the classifier's {num_classes} "
            f"outputs) to label names, not {json.dumps(id2label)[:80]}"
        )
    labels = [id2label[k] for k in keys]
    return {} if labels == [f"LABEL_{i}" for i in range(num_classes)] else {"labels": labels}


def token_type_row(state: dict[str, torch.Tensor], config: RobertaConfig, source: str) -> torch.Tensor:
    """Pop the token-type table and return its row 0."""
    if TOKEN_TYPES not in state:
        raise UserError(f"{source}: missing key {TOKEN_TYPES!r}")
    token_types = state.pop(TOKEN_TYPES)
    if token_types.shape[1:] != (config.hidden_size,):
        raise UserError(
            f"{source}: key {TOKEN_TYPES!r} has shape {list(token_types.shape)}, "
            f"expected [1, {config.hidden_size}]"
        )
    return token_types[0]


# --- export ----------------------------------------------------------------------------------


def task_heads(model: RobertaModel) -> tuple[dict[str, dict], dict | None]:
    """The model's heads as an HF directory holds them: its classification heads (refused if of
    another kind) and, apart, its sentence-embedding head's spec (None where it has none), which
    goes to the sentence-transformers modules beside the model."""
    heads = head_shapes(model)
    embedding = heads.pop(EMBEDDING_HEAD, None)
    heads = {name: spec for name, spec in heads.items() if spec["kind"] != TaggingHead.kind}
    return mapping.classifiers_only(heads, "HF"), embedding


def tagging_shapes(model: RobertaModel) -> dict[str, dict]:
    """The model's tagging heads' specs (RobertaForTokenClassification's head)."""
    return {name: spec for name, spec in head_shapes(model).items() if spec["kind"] == TaggingHead.kind}


def hf_config(model: RobertaModel, tokenizer=None) -> dict:
    """An HF `config.json` for our model, with its classification head if it has one."""
    heads, _ = task_heads(model)
    tagging = tagging_shapes(model)
    body_only = "RobertaModel" if checkpoint.without_lm_head(model) else "RobertaForMaskedLM"
    architecture = "RobertaForSequenceClassification" if heads else body_only
    config = task_config(model, "RobertaForTokenClassification" if tagging else architecture, tokenizer)
    for name, shape in heads.items():
        config.update(classifier_fields(name, shape))
    for name, shape in tagging.items():
        config.update(tagging_fields(name, shape))
    return config


def tagging_fields(name: str, shape: dict) -> dict:
    """config.json's fields for the tagging head `name`: its labels as id2label and label2id."""
    labels = shape.get("labels") or [f"LABEL_{i}" for i in range(shape["num_labels"])]
    return {
        "roberta_head_name": name,
        "num_labels": len(labels),
        "id2label": {str(i): label for i, label in enumerate(labels)},
        "label2id": {label: i for i, label in enumerate(labels)},
    }


def task_config(model: RobertaModel, architecture: str, tokenizer=None) -> dict:
    """An HF `config.json` for our model as `architecture` (RobertaModel, RobertaForMaskedLM, ...):
    every field HF's RobertaConfig reads, spelled out."""
    return {
        "architectures": [architecture],
        "model_type": "roberta",
        **mapping.config_to(FIELDS, model.config),
        **FIXED,
        "type_vocab_size": 1,
        "bos_token_id": tokenizer.bos_id if tokenizer is not None else 0,
        "eos_token_id": tokenizer.eos_id if tokenizer is not None else 2,
        "tie_word_embeddings": True,
        "use_cache": True,
        "dtype": "float32",
    }


def classifier_fields(name: str, shape: dict) -> dict:
    """config.json's fields for the classification head `name` of `shape` (its `spec()`): its labels
    (HF's LABEL_i where it has no names), and regression for a head of one output."""
    n = shape["num_classes"]
    labels = shape.get("labels") or [f"LABEL_{i}" for i in range(n)]
    return {
        "roberta_head_name": name,
        "num_labels": n,
        "id2label": {str(i): label for i, label in enumerate(labels)},
        "label2id": {label: i for i, label in enumerate(labels)},
        "problem_type": "regression" if n == 1 else "single_label_classification",
    }


def write_hf(directory: Path, model: RobertaModel, tokenizer=None) -> None:
    """Write an HF `save_pretrained`-style directory into the (empty, temporary) `directory`."""
    heads, embedding = task_heads(model)
    tagging = tagging_shapes(model)
    if len(heads) + len(tagging) > 1:
        names = [*heads, *tagging]
        raise UserError(f"HF RoBERTa holds one task head; this model has {len(names)}: {', '.join(names)}")
    for name, shape in heads.items():
        if shape["inner_dim"] != model.config.hidden_size:
            raise UserError(
                f"head {name!r}: HF needs inner_dim == hidden_size {model.config.hidden_size}, "
                f"not {shape['inner_dim']}"
            )
    lm_head = checkpoint.without_lm_head(model) is None
    pairs = NAMES.pairs(model.config.num_layers, heads, lm_head=lm_head) + tagging_pairs(tagging)
    state = mapping.export_state(model.state_dict(), pairs)
    state[TOKEN_TYPES] = torch.zeros(1, model.config.hidden_size, dtype=model.embed_tokens.weight.dtype)
    write_json(directory / "config.json", hf_config(model, tokenizer))
    checkpoint.save_safetensors(state, directory / "model.safetensors")
    if tokenizer is not None:
        write_hf_tokenizer(directory, tokenizer, model.config.max_seq_len)
    if embedding is not None:
        head = model.heads[EMBEDDING_HEAD]
        write_modules(directory, head.pool, model.config.hidden_size, model.config.max_seq_len, head.proj)


def write_hf_tokenizer(directory: Path, tokenizer, max_length: int) -> None:
    """The tokenizer's own files, plus what `transformers.AutoTokenizer` and transformers.js need:
    vocab.json + merges.txt in model ids for byte-level BPE (a GPT-2 vocab.bpe is already a
    merges.txt), a tokenizer.json (the only file transformers.js reads, and transformers' for a
    fairseq symbol vocabulary: no class reads a dict.txt), a tokenizer_config.json naming the class
    and the special tokens, and special_tokens_map.json."""
    tokenizer.save(directory)
    if not (directory / "tokenizer.json").is_file():  # one read from a tokenizer.json keeps it
        (directory / "tokenizer.json").write_text(tokenizer.hf_tokenizer_json(), encoding="utf-8")
    ids = {role: getattr(tokenizer, f"{role}_id") for role in ("bos", "eos", "unk", "pad", "mask")}
    names = {role: tokenizer.id_to_token(i) for role, i in ids.items()}
    special = {**{f"{role}_token": name for role, name in names.items()}, "cls_token": names["bos"]}
    write_json(directory / "special_tokens_map.json", {**special, "sep_token": names["eos"]})
    config = {
        "model_max_length": max_length,
        **{f"{role}_token": name for role, name in names.items()},
        "cls_token": names["bos"],
        "sep_token": names["eos"],
        # RoBERTa's <mask> swallows the space before it, so "Hello <mask>" is two tokens as in fairseq.
        "added_tokens_decoder": {
            str(i): {
                "content": names[role],
                "lstrip": role == "mask" and tokenizer.kind in ("gpt2", "hf"),
                "rstrip": False,
                "normalized": False,
                "single_word": False,
                "special": True,
            }
            for role, i in sorted(ids.items(), key=lambda item: item[1])
        },
    }
    if tokenizer.kind == "wordpiece":
        config.update(
            tokenizer_class="BertTokenizer",
            do_lower_case=tokenizer.lowercase,
            strip_accents=tokenizer.strip_accents,
        )
    elif tokenizer.kind == "symbols":
        config.update(tokenizer_class="PreTrainedTokenizerFast")
    else:
        config.update(tokenizer_class="RobertaTokenizer", add_prefix_space=False)
        if tokenizer.kind == "gpt2":
            vocab = {tokenizer.id_to_token(i): i for i in range(tokenizer.vocab_size)}
            (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
            (directory / "merges.txt").write_bytes((directory / "vocab.bpe").read_bytes())
    (directory / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def export_hf(directory: str | Path, model: RobertaModel, tokenizer=None) -> Path:
    """Export to a directory that `transformers.AutoModelForMaskedLM.from_pretrained` loads."""
    with atomic_directory(directory) as tmp:
        write_hf(tmp, model, tokenizer)
    return Path(directory)
