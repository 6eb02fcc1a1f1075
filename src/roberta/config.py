"""The model's shape and its presets, and how a config travels as JSON inside a checkpoint."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

from roberta.errors import UserError
from roberta.io import read_json


@dataclass(frozen=True)
class RobertaConfig:
    vocab_size: int = 50265
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    ffn_size: int = 3072
    # 512 tokens + the padding row + the row fairseq skips (positions start at padding_idx + 1).
    max_positions: int = 514
    padding_idx: int = 1
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation_dropout: float = 0.0
    classifier_dropout: float = 0.1
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self) -> None:
        check_values(dataclasses.asdict(self), "config")

    @property
    def max_seq_len(self) -> int:
        """The longest sequence the position table can address."""
        return self.max_positions - self.padding_idx - 1

    @classmethod
    def preset(cls, name: str, **overrides) -> RobertaConfig:
        if name not in PRESETS:
            raise UserError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
        return dataclasses.replace(PRESETS[name], **overrides)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict, source: str = "config") -> RobertaConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UserError(f"{source}: unknown field(s) {', '.join(unknown)}")
        # Checked here too, so that the message names the file the values came from.
        check_values({**dataclasses.asdict(cls()), **values}, source)
        return cls(**values)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> RobertaConfig:
        return cls.from_dict(read_json(Path(path)), source=str(path))


def check_values(values: dict, source: str) -> None:
    """Every field of the right type and in range, else a UserError naming the field and value.

    A bool is refused where an int is wanted (JSON `true` would pass as 1), and so is a float
    with an integer value: a config that says 12.0 layers was not written for this model.
    """
    for field in dataclasses.fields(RobertaConfig):
        name, value = field.name, values[field.name]
        if field.type == "int":
            if type(value) is not int:
                raise UserError(f"{source}: field {name!r} must be an integer, not {value!r}")
            smallest = 0 if name == "padding_idx" else 1
            if value < smallest:
                raise UserError(f"{source}: field {name!r} must be at least {smallest}, not {value}")
        elif type(value) not in (int, float) or not math.isfinite(value):
            raise UserError(f"{source}: field {name!r} must be a finite number, not {value!r}")
        elif name.endswith("dropout"):
            if not 0.0 <= value < 1.0:
                raise UserError(f"{source}: field {name!r} must be in [0, 1), not {value}")
        elif value <= 0:
            raise UserError(f"{source}: field {name!r} must be positive, not {value}")
    if values["hidden_size"] % values["num_heads"]:
        raise UserError(f"{source}: hidden_size {values['hidden_size']} is not divisible by num_heads {values['num_heads']}")
    if values["max_positions"] <= values["padding_idx"] + 1:
        raise UserError(f"{source}: max_positions {values['max_positions']} leaves no room after padding_idx {values['padding_idx']}")
    if values["padding_idx"] >= values["vocab_size"]:
        raise UserError(f"{source}: padding_idx {values['padding_idx']} is not an id of the {values['vocab_size']}-token vocabulary")


PRESETS: dict[str, RobertaConfig] = {
    "tiny": RobertaConfig(hidden_size=512, num_layers=4, num_heads=8, ffn_size=2048),
    "medium": RobertaConfig(hidden_size=512, num_layers=8, num_heads=8, ffn_size=2048),
    "base": RobertaConfig(),
    "large": RobertaConfig(hidden_size=1024, num_layers=24, num_heads=16, ffn_size=4096),
}
