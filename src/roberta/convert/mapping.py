"""How a foreign format names what we name: one table for config fields and one for weights per
format, each read in both directions (import and export).

A weight table maps our tensors to theirs; the fused `attention.qkv` maps to three foreign
modules (q, k, v stacked on dim 0), so import concatenates them and export splits them. Every
foreign key is either mapped, named by its format's reader as ignorable, or the import fails:
nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch

from roberta import checkpoint
from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.model import ClassificationHead

Theirs = str | tuple[str, ...]
Pairs = list[tuple[str, Theirs]]

# --- config fields ---------------------------------------------------------------------------

REQUIRED = object()


@dataclass(frozen=True)
class Field:
    """A RobertaConfig field and the key a foreign config keeps it under."""

    ours: str
    theirs: str
    # What a foreign config that leaves the key out (or null) means: a value, REQUIRED, or a
    # function of the fields resolved before this one.
    default: object | Callable[[dict], object] = REQUIRED


def config_from(
    fields: Iterable[Field], foreign: Mapping, source: str, label: str = "", weights: Mapping | None = None
) -> RobertaConfig:
    """Our config from a foreign one. `weights` holds the fields the tensor shapes fix: a foreign
    value for one of them must agree. `label` prefixes foreign key names in messages."""
    values = dict(weights or {})
    for field in fields:
        given = foreign.get(field.theirs)
        if field.ours in values:
            if given is not None and given != values[field.ours]:
                raise UserError(
                    f"{source}: {label}{field.theirs} is {given}, the weights say {values[field.ours]}"
                )
        elif given is not None:
            values[field.ours] = given
        elif field.default is REQUIRED:
            raise UserError(f"{source}: missing field {label}{field.theirs!r}")
        else:
            values[field.ours] = field.default(values) if callable(field.default) else field.default
    return RobertaConfig.from_dict(values, source)


def config_to(fields: Iterable[Field], config: RobertaConfig) -> dict:
    """The foreign keys and values for our config."""
    return {field.theirs: getattr(config, field.ours) for field in fields}


def check_fixed(fixed: Mapping, foreign: Mapping, source: str, label: str = "") -> None:
    """`fixed` holds the foreign settings our model always has (exported as they are); a foreign
    config may leave them out, but may not differ."""
    for key, value in fixed.items():
        if foreign.get(key, value) != value:
            raise UserError(f"{source}: {label}{key} is {foreign[key]!r}; only {value!r} is supported")


# --- weight names ----------------------------------------------------------------------------


def weight_and_bias(ours: str, theirs: Theirs) -> Pairs:
    if isinstance(theirs, tuple):
        return [(f"{ours}.{p}", tuple(f"{t}.{p}" for t in theirs)) for p in ("weight", "bias")]
    return [(f"{ours}.{p}", f"{theirs}.{p}") for p in ("weight", "bias")]


# Our modules in each encoder layer, each with a weight and a bias.
LAYER_MODULES = (
    "attention.qkv",
    "attention.out_proj",
    "attention_layer_norm",
    "fc1",
    "fc2",
    "ffn_layer_norm",
)


@dataclass(frozen=True)
class WeightNames:
    """Where a foreign format keeps each of our tensors. Our LM head (dense, layer_norm, bias)
    and classification heads (dense, out_proj) keep our module names under their prefixes."""

    embeddings: Pairs
    layer: str  # prefix of layer i, with "{i}"
    layer_renames: Mapping[str, Theirs]  # our module in a layer -> theirs, where the names differ
    lm_head: str
    head: str  # prefix of a classification head, with "{name}"

    def pairs(self, num_layers: int, heads: Iterable[str], lm_head: bool = True) -> Pairs:
        pairs = list(self.embeddings)
        for i in range(num_layers):
            prefix = self.layer.format(i=i)
            for ours in LAYER_MODULES:
                theirs = self.layer_renames.get(ours, ours)
                prefixed = tuple(prefix + t for t in theirs) if isinstance(theirs, tuple) else prefix + theirs
                pairs += weight_and_bias(f"layers.{i}.{ours}", prefixed)
        if lm_head:
            pairs += weight_and_bias("lm_head.dense", self.lm_head + "dense")
            pairs += weight_and_bias("lm_head.layer_norm", self.lm_head + "layer_norm")
            pairs.append(("lm_head.bias", self.lm_head + "bias"))
        for name in heads:
            prefix = self.head.format(name=name)
            pairs += weight_and_bias(f"heads.{name}.dense", prefix + "dense")
            pairs += weight_and_bias(f"heads.{name}.out_proj", prefix + "out_proj")
        return pairs


def classifiers_only(heads: dict[str, dict], fmt: str) -> dict[str, dict]:
    """`heads` as `checkpoint.head_shapes` gives them, if all are classification heads, the only
    kind `fmt` has names for."""
    for name, spec in heads.items():
        if spec["kind"] != ClassificationHead.kind:
            raise UserError(
                f"head {name!r} is a {spec['kind']} head; {fmt} checkpoints hold classification heads only"
            )
    return heads


def classifier_spec(out_proj: torch.Tensor, dense: torch.Tensor) -> dict:
    """A classification head's spec (as `checkpoint.build_model` takes it) from its two weights."""
    return {"kind": ClassificationHead.kind, "num_classes": out_proj.shape[0], "inner_dim": dense.shape[0]}


def import_state(
    state: dict[str, torch.Tensor], pairs: Pairs, expected: dict[str, torch.Tensor], source: str
) -> dict:
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
                raise UserError(
                    f"{source}: key {name!r} has shape {list(state[name].shape)}, expected {list(part)}"
                )
        ours[mine] = torch.cat([state.pop(n) for n in names]) if len(names) > 1 else state.pop(names[0])
    return ours


def export_state(state: dict[str, torch.Tensor], pairs: Pairs) -> dict[str, torch.Tensor]:
    """Our state dict under foreign names; each tensor its own contiguous copy."""
    out = {}
    for mine, theirs in pairs:
        tensor = state[mine].detach()
        if isinstance(theirs, tuple):
            out.update(zip(theirs, (chunk.clone() for chunk in tensor.chunk(len(theirs)))))
        else:
            out[theirs] = tensor.clone()
    return out


UNTIED = "untied LM heads are not supported"


def same_tensor(state: dict, key: str, other: torch.Tensor, source: str, why: str = UNTIED) -> None:
    """Pop `key` if present; it must equal `other` (a tied copy), since we store it once."""
    if key in state and not torch.equal(state.pop(key), other):
        raise UserError(f"{source}: {key!r} differs from its tied tensor; {why}")


def refuse_leftovers(state: dict, source: str) -> None:
    if state:
        raise UserError(f"{source}: unexpected key(s) {checkpoint.describe_keys(sorted(state))}")
