"""The model's shape and its presets, and how a config travels as JSON inside a checkpoint."""

from __future__ import annotations

import dataclasses
import json
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
        if self.hidden_size % self.num_heads:
            raise UserError(
                f"config: hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        if self.max_positions <= self.padding_idx + 1:
            raise UserError(
                f"config: max_positions {self.max_positions} leaves no room after padding_idx {self.padding_idx}"
            )

    @property
    def max_tokens(self) -> int:
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
        return cls(**values)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> RobertaConfig:
        return cls.from_dict(read_json(Path(path)), source=str(path))


PRESETS: dict[str, RobertaConfig] = {
    "tiny": RobertaConfig(hidden_size=512, num_layers=4, num_heads=8, ffn_size=2048),
    "medium": RobertaConfig(hidden_size=512, num_layers=8, num_heads=8, ffn_size=2048),
    "base": RobertaConfig(),
    "large": RobertaConfig(hidden_size=1024, num_layers=24, num_heads=16, ffn_size=4096),
}
