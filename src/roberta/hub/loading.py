"""Loading a hub from any checkpoint layout, onto a device this machine has."""

from __future__ import annotations

from pathlib import Path

import torch

from roberta.checkpoint import check_vocabulary
from roberta.errors import UserError
from roberta.hub.interface import Roberta


def load(
    path: str | Path, checkpoint_file: str | None = None, map_location: str | torch.device = "cpu"
) -> Roberta:
    """Our checkpoint directory, an HF directory, or a fairseq directory / `.pt` file, in eval mode.

    `checkpoint_file` names the `.pt` inside a fairseq directory (default: its model.pt).
    """
    from roberta.convert import load_any

    path = Path(path)
    if checkpoint_file is not None:
        path = path / checkpoint_file
        if not path.is_file():
            raise UserError(f"{path}: no such checkpoint file")
    map_location = check_device(map_location)
    model, tokenizer = load_any(path, map_location)
    if tokenizer is None:
        raise UserError(
            f"{path}: no tokenizer files beside the weights (vocab.json + merges.txt, tokenizer.json, "
            "encoder.json + vocab.bpe + dict.txt, or a dict.txt of symbols)"
        )
    # Our format checks this on read; HF and fairseq directories are checked here, the same way.
    check_vocabulary(tokenizer, model.config, str(path))
    return Roberta(model, tokenizer).eval()


def check_device(device: str | torch.device) -> torch.device:
    """`device` as a torch.device this machine has, else a UserError naming it."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"device {device!r} unknown (e.g. cpu, cuda, cuda:1, mps)") from None
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as e:
        # torch's messages run to a page (the list of every backend); the first sentence says it.
        reason = (str(e).strip() or type(e).__name__).splitlines()[0].split(". ")[0]
        raise UserError(f"device {str(device)!r} unavailable on this machine ({reason})") from None
    return device
