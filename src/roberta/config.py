"""The model's shape and its presets, and how a config travels as JSON inside a checkpoint."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from roberta.errors import UserError
from roberta.io import read_json
from roberta.validation import check_value


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

    RANGES: ClassVar = {
        "vocab_size": ">=1",
        "hidden_size": ">=1",
        "num_layers": ">=1",
        "num_heads": ">=1",
        "ffn_size": ">=1",
        "max_positions": ">=1",
        "padding_idx": ">=0",
        "layer_norm_eps": ">0",
        "init_std": ">0",
        "dropout": "[0,1)",
        "attention_dropout": "[0,1)",
        "activation_dropout": "[0,1)",
        "classifier_dropout": "[0,1)",
    }

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
    """Every field of its type and within `RobertaConfig.RANGES` (`roberta.validation`), and the
    fields consistent with each other; else a UserError naming `source` and the field."""
    for field in dataclasses.fields(RobertaConfig):
        check_value(RobertaConfig, field.name, values[field.name], source)
    if values["hidden_size"] % values["num_heads"]:
        raise UserError(
            f"{source}: hidden_size {values['hidden_size']} is not divisible by num_heads "
            f"{values['num_heads']}"
        )
    if values["max_positions"] <= values["padding_idx"] + 1:
        raise UserError(
            f"{source}: max_positions {values['max_positions']} leaves no room after padding_idx "
            f"{values['padding_idx']}"
        )
    if values["padding_idx"] >= values["vocab_size"]:
        raise UserError(
            f"{source}: padding_idx {values['padding_idx']} is not an id of the "
            f"{values['vocab_size']}-token vocabulary"
        )


PRESETS: dict[str, RobertaConfig] = {
    "tiny": RobertaConfig(hidden_size=512, num_layers=4, num_heads=8, ffn_size=2048),
    "medium": RobertaConfig(hidden_size=512, num_layers=8, num_heads=8, ffn_size=2048),
    "base": RobertaConfig(),
    "large": RobertaConfig(hidden_size=1024, num_layers=24, num_heads=16, ffn_size=4096),
}
