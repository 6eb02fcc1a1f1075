"""A run's checkpoints: RUN/checkpoints/step-NNNNNNNN/, written atomically, the last K kept.

Each is a model checkpoint directory (`roberta.checkpoint.save`: config, weights, tokenizer)
plus `trainer_state.pt`: step, optimizer, loss scaler, every process's RNG states and the data
position. Only tensors and plain Python values go in, so it loads with `weights_only=True`.
A checkpoint is built in a hidden temporary directory and renamed into place; a process killed
half way leaves only the temporary, which the next save or resume deletes.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
from pathlib import Path

import numpy as np
import torch

from roberta.errors import UserError

STATE_FILE = "trainer_state.pt"
_NAME = re.compile(r"step-(\d{8})")


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:08d}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _NAME.fullmatch(p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict, keep_last: int) -> Path:
    """Write model + trainer state for `step`; return the final directory. Rank 0 only."""
    from roberta import checkpoint

    final = checkpoint_dir(run_dir, step)
    staging = final.parent / f".{final.name}.tmp"
    _remove_temporaries(final.parent)
    final.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.save(staging, model, tokenizer)
    fault_point(f"checkpoint-{step}:after-model")
    tmp_state = staging / (STATE_FILE + ".tmp")
    torch.save(state, tmp_state)
    _fsync(tmp_state)
    os.replace(tmp_state, staging / STATE_FILE)
    fault_point(f"checkpoint-{step}:before-rename")
    if final.exists():  # a resumed run re-reaching a step it had saved before being killed
        shutil.rmtree(final)
    os.replace(staging, final)
    _fsync(final.parent)
    for old in list_checkpoints(run_dir)[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(old)
    return final


def load_trainer_state(directory: Path) -> dict:
    path = directory / STATE_FILE
    try:
        return torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise UserError(f"{path}: no trainer state (not a checkpoint of a run in progress)") from None
    except Exception as e:  # a truncated or foreign file
        raise UserError(f"{path}: unreadable trainer state ({type(e).__name__}: {e})") from None


def rng_state() -> dict:
    """Every random stream the loop draws from, as tensors and plain values."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def fault_point(name: str) -> None:
    """Test hook: ROBERTA_FAULT=<name> kills this process here with SIGKILL, as a crash would."""
    if os.environ.get("ROBERTA_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _remove_temporaries(root: Path) -> None:
    if root.is_dir():
        for p in root.glob(".*"):  # our staging dirs and checkpoint.save's own temporaries
            shutil.rmtree(p, ignore_errors=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
