"""Our checkpoint: a directory holding `config.json`, `model.safetensors` and tokenizer files.

`config.json` is `{"format": "roberta", "config": <RobertaConfig fields>, "heads": {name: spec}}`,
a head's spec being `{"kind": "classification", "num_classes": n, "inner_dim": d, "labels": [...]}`
(labels optional), `{"kind": "span"}`, `{"kind": "tagging", "num_labels": n, "labels": [...]}` or
`{"kind": "embedding", "pool": "cls" | "mean", "dim": d}` (a sentence encoder's pooling; dim only
with a map onto a teacher's width); a spec without
"kind" (older files) is a classifier;
`"lm_head": false` marks a model without a masked-LM head (imported from an HF RobertaModel or
classifier), whose `lm_head.*` tensors are then not stored. `model.safetensors` holds the model's
state dict with the tied `lm_head.weight` left out (it is `embed_tokens.weight`). Loading checks
every key and shape against a freshly built model before copying anything, so a bad file leaves
nothing half-loaded; saving writes a temporary directory and renames it into place.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.io import atomic_directory, publish, read_json, temporary_path, write_json
from roberta.model import (
    POOLS,
    ClassificationHead,
    EmbeddingHead,
    RobertaModel,
    SpanHead,
    TaggingHead,
    build_head,
)

FORMAT = "roberta"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
# The LM projection is the token embedding (tied); it is stored once, under embed_tokens.
TIED_KEY, TIED_TO = "lm_head.weight", "embed_tokens.weight"
LM_HEAD_PREFIX = "lm_head."
# The instance attribute naming where a model without a masked-LM head came from.
_NO_LM_HEAD = "without_lm_head"


def without_lm_head(model: RobertaModel) -> str | None:
    """Where a model whose checkpoint held no masked-LM head was read from, or None when it has
    one. Such a model's `lm_head` holds seeded stand-in weights: they must never fill a mask."""
    return getattr(model, _NO_LM_HEAD, None)


def mark_without_lm_head(model: RobertaModel, source: str | None) -> RobertaModel:
    """Record that `model` has no trained masked-LM head (`source` says whence), or with None that it has
    one."""
    setattr(model, _NO_LM_HEAD, source)
    return model


def require_lm_head(model: RobertaModel, what: str) -> None:
    """A one-line UserError for `what` (fill-mask, ...) on a model without a masked-LM head."""
    source = without_lm_head(model)
    if source is not None:
        raise UserError(
            f"{source}: holds no masked-LM head (an HF RobertaModel or classifier checkpoint, a student "
            "made by distill embed --new-student); "
            f"{what} needs a checkpoint with one"
        )


def head_shapes(model: RobertaModel) -> dict[str, dict]:
    """Every head as its `spec()`: `{name: {"kind", ...shape}}`; a head without one is refused."""
    shapes = {}
    for name, head in model.heads.items():
        if not hasattr(head, "spec"):
            raise UserError(
                f"head {name!r} is a {type(head).__name__}; "
                "checkpoints hold ClassificationHead and SpanHead heads"
            )
        shapes[name] = head.spec()
    return shapes


def build_model(
    config: RobertaConfig,
    heads: dict[str, dict[str, int]],
    device: str | torch.device = "cpu",
    initialise: bool = False,
) -> RobertaModel:
    """A model of the given shape on `device`, its weights left uninitialised for a checkpoint to fill.

    With `initialise`, weights are drawn from a fixed seed instead, so that any weight a foreign
    checkpoint lacks (an HF classifier-only export has no LM head) is reproducible.
    """
    if initialise:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = _with_heads(RobertaModel(config), heads)
        return model.to(device)
    # Random initialisation of a base model takes seconds and every value would be overwritten.
    with torch.device("meta"):
        model = _with_heads(RobertaModel(config), heads)
    model.to_empty(device=device)
    # to_empty gives every module its own storage, which unties the LM projection: tie it again.
    model.lm_head.weight = model.embed_tokens.weight
    return model


def _with_heads(model: RobertaModel, heads: dict[str, dict]) -> RobertaModel:
    for name, spec in heads.items():
        model.add_head(name, build_head(model.config, spec))
    return model


def load_weights(
    model: RobertaModel, state: dict[str, torch.Tensor], source: str, lm_head: bool = True
) -> RobertaModel:
    """Copy `state` (without the tied key; without `lm_head.*` unless `lm_head`) into `model` after
    checking every key and shape.

    Nothing is copied unless the whole state dict fits, so a failure leaves `model` untouched.
    """
    expected = {
        k: v
        for k, v in model.state_dict().items()
        if k != TIED_KEY and (lm_head or not k.startswith(LM_HEAD_PREFIX))
    }
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing:
        raise UserError(f"{source}: missing key(s) {describe_keys(missing)}")
    if unexpected:
        raise UserError(f"{source}: unexpected key(s) {describe_keys(unexpected)}")
    for key, tensor in state.items():
        if tensor.shape != expected[key].shape:
            raise UserError(
                f"{source}: key {key!r} has shape {list(tensor.shape)}, "
                f"the config expects {list(expected[key].shape)}"
            )
        if not tensor.is_floating_point():
            raise UserError(
                f"{source}: key {key!r} has dtype {tensor.dtype}, expected a floating-point tensor"
            )
    model.load_state_dict({**state, TIED_KEY: state[TIED_TO]}, strict=lm_head)
    return model


def check_vocabulary(tokenizer, config: RobertaConfig, source: str) -> None:
    """The tokenizer must only produce ids the embedding has, and pad with the model's padding row."""
    if tokenizer.vocab_size > config.vocab_size:
        raise UserError(
            f"{source}: tokenizer has {tokenizer.vocab_size} tokens but the embedding has "
            f"{config.vocab_size} rows (shape [{config.vocab_size}, {config.hidden_size}])"
        )
    if tokenizer.pad_id != config.padding_idx:
        raise UserError(
            f"{source}: tokenizer pads with id {tokenizer.pad_id}, the model with {config.padding_idx}"
        )


def write(directory: Path, model: RobertaModel, tokenizer=None) -> None:
    """Write the checkpoint files into an existing (empty) directory; `save` is the atomic form."""
    heads = head_shapes(model)
    if tokenizer is not None:
        check_vocabulary(tokenizer, model.config, str(directory))
    lm_head = without_lm_head(model) is None
    state = {
        k: v.detach().contiguous()
        for k, v in model.state_dict().items()
        if k != TIED_KEY and (lm_head or not k.startswith(LM_HEAD_PREFIX))
    }
    meta = {"format": FORMAT, "config": model.config.to_dict(), "heads": heads}
    if not lm_head:
        meta["lm_head"] = False
    if tokenizer is not None:
        # Recorded so that tokenizer files swapped or edited later are refused on load, not decoded wrongly.
        meta["tokenizer"] = {"fingerprint": tokenizer.fingerprint()}
    write_json(directory / CONFIG_FILE, meta)
    save_safetensors(state, directory / WEIGHTS_FILE)
    if tokenizer is not None:
        tokenizer.save(directory)


def save_safetensors(state: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors creates its file private (0600): written aside, then published with the umask."""
    weights = temporary_path(path)
    save_file(state, str(weights), metadata={"format": "pt"})
    publish(weights, path)


def save(directory: str | Path, model: RobertaModel, tokenizer=None) -> Path:
    """Write `model` (and `tokenizer`, if given) as a checkpoint directory, atomically."""
    if any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
        raise UserError(
            f"{directory}: an int8-quantized model is for serving only; save the fp32 model "
            "(load the checkpoint again) and quantize after loading"
        )
    with atomic_directory(directory) as tmp:
        write(tmp, model, tokenizer)
    return Path(directory)


def is_checkpoint(directory: str | Path) -> bool:
    path = Path(directory) / CONFIG_FILE
    try:
        return path.is_file() and json.loads(path.read_text()).get("format") == FORMAT
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
        return False


def read_config(directory: str | Path) -> tuple[RobertaConfig, dict[str, dict], str | None]:
    """config.json → (model config, head specs, the fingerprint of the tokenizer it was saved with or
    None)."""
    config, heads, fingerprint, _ = _read_meta(directory)
    return config, heads, fingerprint


def _read_meta(directory: str | Path) -> tuple[RobertaConfig, dict[str, dict], str | None, bool]:
    """`read_config`'s three, and whether the checkpoint holds a masked-LM head."""
    path = Path(directory) / CONFIG_FILE
    meta = read_json(path)
    if meta.get("format") != FORMAT:
        raise UserError(f"{path}: not a roberta checkpoint config (field 'format' is {meta.get('format')!r})")
    for field in ("config", "heads"):
        if not isinstance(meta.get(field), dict):
            raise UserError(f"{path}: field {field!r} must be a JSON object")
    heads = {name: _head_spec(spec, f"{path}: heads.{name}") for name, spec in meta["heads"].items()}
    recorded = meta.get("tokenizer")  # absent in checkpoints written before it was recorded
    if recorded is not None and not (
        isinstance(recorded, dict) and isinstance(recorded.get("fingerprint"), str)
    ):
        raise UserError(f"{path}: field 'tokenizer.fingerprint' must be a string")
    lm_head = meta.get("lm_head", True)
    if type(lm_head) is not bool:
        raise UserError(f"{path}: field 'lm_head' must be true or false, not {lm_head!r}")
    config = RobertaConfig.from_dict(meta["config"], source=f"{path}: config")
    return config, heads, recorded["fingerprint"] if recorded else None, lm_head


def check_fingerprint(tokenizer, recorded: str | None, directory: Path) -> None:
    """Refuse tokenizer files that are not the ones the checkpoint was saved with (same size or not)."""
    if recorded is not None and tokenizer.fingerprint() != recorded:
        raise UserError(
            f"{directory / CONFIG_FILE}: field 'tokenizer.fingerprint' is {recorded[:12]}..., "
            f"but the tokenizer files in {directory} have fingerprint {tokenizer.fingerprint()[:12]}...: "
            "they were replaced or edited after the model was saved "
            "(put back the tokenizer it was trained with)"
        )


def _is_positive_int(value) -> bool:
    return type(value) is int and value > 0  # not bool: JSON true is no class count


def _head_spec(spec, where: str) -> dict:
    """A head's description from config.json, checked; files without "kind" hold classification heads."""
    if not isinstance(spec, dict):
        raise UserError(f"{where} must be a JSON object, not {spec!r}")
    kind = spec.get("kind", ClassificationHead.kind)
    if kind == SpanHead.kind:
        return {"kind": kind}
    if kind == EmbeddingHead.kind:
        return _embedding_spec(spec, where)
    if kind == TaggingHead.kind:
        return _tagging_spec(spec, where)
    if kind != ClassificationHead.kind:
        known = ", ".join((ClassificationHead.kind, SpanHead.kind, EmbeddingHead.kind, TaggingHead.kind))
        raise UserError(f"{where}: unknown head kind {kind!r} (known: {known})")
    if not all(_is_positive_int(spec.get(k)) for k in ("num_classes", "inner_dim")):
        raise UserError(f"{where} must give positive integer 'num_classes' and 'inner_dim', not {spec!r}")
    return {
        "kind": kind,
        "num_classes": spec["num_classes"],
        "inner_dim": spec["inner_dim"],
        **_labels(spec, spec["num_classes"], where),
    }


def _embedding_spec(spec: dict, where: str) -> dict:
    if spec.get("pool") not in POOLS:
        raise UserError(f"{where}: 'pool' must be one of {', '.join(POOLS)}, not {spec.get('pool')!r}")
    if "dim" in spec and not _is_positive_int(spec["dim"]):
        raise UserError(f"{where}: 'dim' must be a positive integer, not {spec['dim']!r}")
    return {
        "kind": EmbeddingHead.kind,
        "pool": spec["pool"],
        **({"dim": spec["dim"]} if "dim" in spec else {}),
    }


def _tagging_spec(spec: dict, where: str) -> dict:
    if not _is_positive_int(spec.get("num_labels")):
        raise UserError(f"{where} must give a positive integer 'num_labels', not {spec!r}")
    return {
        "kind": TaggingHead.kind,
        "num_labels": spec["num_labels"],
        **_labels(spec, spec["num_labels"], where),
    }


def _labels(spec: dict, count: int, where: str) -> dict:
    """A head's optional label names: {"labels": [...]} with one string per output, or {}."""
    labels = spec.get("labels", [])
    if not (
        isinstance(labels, list) and all(isinstance(x, str) for x in labels) and len(labels) in (0, count)
    ):
        raise UserError(f"{where}: 'labels' must be a list of {count} strings, not {labels!r}")
    return {"labels": labels} if labels else {}


def read_safetensors(path: Path, map_location: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        return load_file(str(path), device=str(map_location))
    except (SafetensorError, OSError) as e:
        raise UserError(f"{path}: unreadable safetensors file, truncated or corrupt ({e})") from None


def load(
    directory: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[RobertaModel, object | None]:
    """Read a checkpoint directory → (model in eval mode, tokenizer or None if it holds none)."""
    directory = Path(directory)
    config, heads, fingerprint, lm_head = _read_meta(directory)
    tokenizer = load_tokenizer_if_present(directory)
    if tokenizer is not None:
        check_vocabulary(tokenizer, config, str(directory))
        check_fingerprint(tokenizer, fingerprint, directory)
    state = read_safetensors(directory / WEIGHTS_FILE, map_location)
    model = build_model(config, heads, map_location, initialise=not lm_head)
    load_weights(model, state, str(directory / WEIGHTS_FILE), lm_head)
    return mark_without_lm_head(model, None if lm_head else str(directory)).eval(), tokenizer


def load_tokenizer_if_present(directory: Path):
    """The directory's tokenizer, or None when it has no tokenizer files at all."""
    from roberta.tokenizer import TOKENIZER_FILES, load_tokenizer

    if not any((directory / name).exists() for name in TOKENIZER_FILES):
        return None
    return load_tokenizer(directory)


def describe_keys(keys: list[str], shown: int = 5) -> str:
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return ", ".join(repr(k) for k in keys[:shown]) + more
