"""Foreign RoBERTa checkpoints ⇄ ours: HF transformers (`hf`) and fairseq (`fairseq`), each an
adapter built on one config table and one weight-name table (`mapping`), read both ways; and the
checked conversion (`convert`), which runs both models on a probe batch (`verify`) before it
publishes anything.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from roberta import checkpoint
from roberta.convert import verify
from roberta.convert.fairseq import export_fairseq, read_fairseq, write_fairseq
from roberta.convert.hf import export_hf, read_hf, write_hf
from roberta.errors import UserError
from roberta.io import atomic_directory, read_json
from roberta.model import RobertaModel
from roberta.options import ConvertOptions
from roberta.validation import check_value

__all__ = ["convert", "detect_format", "export_fairseq", "export_hf", "load_any", "read_fairseq", "read_hf"]

WRITERS: dict[str, Callable[[Path, RobertaModel, object], None]] = {
    "roberta": checkpoint.write,
    "hf": write_hf,
    "fairseq": write_fairseq,
}


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
    others = sorted(p.name for p in path.glob("*.pt"))
    if others:  # fairseq names its files freely: sapiens ships checkpoint_vh.pt and checkpoint_vl.pt
        raise UserError(
            f"{path}: no model.pt, but {', '.join(others)}: give the .pt file itself "
            "(or --checkpoint-file NAME)"
        )
    raise UserError(
        f"{path}: not a roberta, HF transformers or fairseq checkpoint (no config.json or model.pt)"
    )


def load_any(
    path: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[RobertaModel, object | None]:
    """Our checkpoint, an HF directory or a fairseq `model.pt`/directory → (model in eval mode, tokenizer)."""
    fmt = detect_format(path)
    if fmt == "roberta":
        return checkpoint.load(path, map_location)
    return (read_hf if fmt == "hf" else read_fairseq)(path, map_location)


def convert(
    src: str | Path, dst: str | Path, to: str = ConvertOptions.to, tolerance: float = ConvertOptions.tolerance
) -> float:
    """Convert a checkpoint of any known format to `to`, verify it, and return the largest difference.

    Both the source model and the written one (run by HF transformers itself for `to="hf"`, when
    it is installed) score a probe batch in fp32 eval mode; a non-finite output, or a difference
    above `tolerance`, leaves `dst` as it was and raises a UserError. A source without a masked-LM
    head is written without one (refused by fairseq, whose RoBERTa always has one), with a warning.
    """
    if to not in WRITERS:
        raise UserError(f"unknown target format {to!r}; choose one of {', '.join(WRITERS)}")
    check_value(ConvertOptions, "tolerance", tolerance, "convert")
    model, tokenizer = load_any(src)
    model = model.float().eval()
    tokens = verify.probe_batch(model.config)
    reference = verify.model_outputs(model, tokens)
    # Before anything is written: a broken source cannot pass.
    verify.require_finite(reference, "the source model's")
    with atomic_directory(dst) as tmp:
        WRITERS[to](tmp, model, tokenizer)
        checker = "roberta"
        if to == "hf" and _transformers_available():
            candidate = verify.transformers_outputs(
                tmp,
                tokens,
                model.config.padding_idx,
                list(model.heads),
                lm_head=checkpoint.without_lm_head(model) is None,
            )
            checker = "transformers"
        else:
            candidate = verify.model_outputs(load_any(tmp)[0].float(), tokens)
        difference = verify.max_difference(reference, candidate)
        print(
            f"{src} -> {dst} ({to}): largest difference on a probe batch of {len(tokens)} padded sequences, "
            f"{len(reference)} outputs, read back by {checker}: {difference:.3g}"
        )
        if not difference <= tolerance:
            raise UserError(
                f"conversion check failed: largest difference {difference:.3g} exceeds {tolerance:g}; "
                f"nothing written to {dst}"
            )
    if checkpoint.without_lm_head(model) is not None:
        # Only once DST is complete: no warning may precede a refusal.
        warnings.warn(
            f"{src} holds no masked-LM head: "
            f"{dst} holds the encoder{' and its heads' if model.heads else ''} "
            "only (fill-mask refuses it; transformers' AutoModelForMaskedLM would add a random head)",
            stacklevel=2,
        )
    return difference


def _transformers_available() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True
