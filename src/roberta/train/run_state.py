"""A run's checkpoints: RUN/checkpoints/step-NNNNNNNN/, written atomically, the last K kept.

Each is a model checkpoint directory (`roberta.checkpoint.save`: config, weights, tokenizer)
plus `trainer_state.pt`: step, optimizer, loss scaler, every process's RNG states and the data
position. Only tensors and plain Python values go in, so it loads with `weights_only=True`.
A checkpoint is built in a hidden temporary directory and renamed into place; a process killed
half way leaves only the temporary, which the next save or resume deletes.

`RUN_FILES` names what a run writes in its directory, so that a command can tell a run (its
own temporaries included) from a directory holding anything else.
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

from roberta import checkpoint
from roberta.errors import UserError

STATE_FILE = "trainer_state.pt"
RESULTS_FILE = "results.json"  # a finished run's record
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


def load_trainer_state(directory: Path, mmap: bool = False) -> dict:
    """`trainer_state.pt`; with `mmap`, its tensors are mapped rather than read (a check that
    only looks at its plain values costs nothing even for a large optimizer state)."""
    path = directory / STATE_FILE
    try:
        return torch.load(path, weights_only=True, mmap=mmap)
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


# A distillation command's cache of its teacher's logits, at --out (beside its members with --seeds):
# the array and what it was computed from.
TEACHER_LOGITS = ("teacher-logits.npy", "teacher-logits.json")
TEACHER_VECTORS = ("teacher-vectors.npy", "teacher-vectors.json")  # a sentence encoder's, by `distill embed`
# What a run writes into its directory (the trainer, metrics, SQuAD's answers, `roberta probe`'s
# results, which a pretraining run may be resumed beside): anything else is someone else's.
RUN_FILES = (
    "job.json",
    "metrics.jsonl",
    "curves.png",
    "tensorboard",
    "wandb",
    "checkpoints",
    "best",
    "results.json",
    "predictions.json",
    "null_odds.json",
    "probe",
    *TEACHER_LOGITS,
    *TEACHER_VECTORS,
)
# The temporaries `roberta.io` writes beside a file or directory it publishes: `.NAME.tmp-*`, `.NAME.old-*`.
_TEMPORARY = re.compile(r"\.(.+)\.(tmp|old)-.*")


def is_temporary(path: Path) -> bool:
    """One of our own temporaries for a run file (left by a process killed while publishing it)."""
    match = _TEMPORARY.fullmatch(path.name)
    return bool(match) and match[1] in RUN_FILES


def remove_run_temporaries(run_dir: Path) -> None:
    """What a killed run left half-written: `best/` or `results.json` temporaries beside them,
    checkpoint staging under checkpoints/. Published files are never touched."""
    if run_dir.is_dir():
        for p in run_dir.iterdir():
            if is_temporary(p):
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    _remove_temporaries(run_dir / "checkpoints")


def foreign_entries(run_dir: Path) -> list[str]:
    """Names in `run_dir` that no run writes (sorted)."""
    return sorted(p.name for p in run_dir.iterdir() if p.name not in RUN_FILES and not is_temporary(p))


def directory_modes(out: Path, run_dirs: list[Path], resume: bool, overwrite: bool) -> list[str]:
    """How a command uses each of its runs' directories (`run_dirs`: `out` itself, or members
    under it): "start", "resume", "restart" (killed before its first checkpoint: begun again) or
    "done" (finished). A missing or empty `out` starts; one that holds a run, finished or not, or
    anything else, is refused unless `resume` (continue what this command plans) or `overwrite`
    (its contents replaced, by the caller, once everything else is checked)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory")
    entries = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if not entries:
        if resume:
            raise UserError(f"{out}: --resume given but there is no run to continue")
        return ["start"] * len(run_dirs)
    if overwrite:
        return ["start"] * len(run_dirs)
    members = {d.name for d in run_dirs if d != out}  # when --out holds several runs
    if resume:  # only what this command writes there
        ours = members | {RESULTS_FILE, *TEACHER_LOGITS, *TEACHER_VECTORS} if members else set(RUN_FILES)
    else:  # a run of either shape, which --resume or --overwrite deals with
        ours = {*RUN_FILES, *members}
    stray = [name for name in entries if name not in ours and not is_temporary(out / name)]
    if not resume:
        if stray:
            raise UserError(
                f"{out}: not empty (it holds {stray[0]!r}); choose another --out, or pass --overwrite "
                "to replace its contents"
            )
        held = "a finished run" if (out / RESULTS_FILE).exists() else "an unfinished run"
        raise UserError(
            f"{out}: already holds {held}; pass --resume to continue it or --overwrite to replace it"
        )
    if stray:
        what = "a run" if run_dirs == [out] else "a member of this command's --seeds/--sweep"
        raise UserError(
            f"{out}: holds {stray[0]!r}, which is not {what}; --resume continues only the runs this "
            "command plans (or pass --overwrite to replace its contents)"
        )
    return [_resume_mode(run_dir) for run_dir in run_dirs]


def resumes(mode: str) -> bool:
    """Whether a run of this `directory_modes` mode continues from its latest checkpoint (a
    finished one too: its budget may have grown)."""
    return mode in ("resume", "done")


def _resume_mode(run_dir: Path) -> str:
    if not run_dir.exists() or (run_dir.is_dir() and not any(run_dir.iterdir())):
        return "start"
    if not run_dir.is_dir():
        raise UserError(f"{run_dir}: exists and is not a run directory")
    foreign = foreign_entries(run_dir)
    if foreign:
        raise UserError(
            f"{run_dir}: holds {foreign[0]!r}, which no run writes; --resume continues only a run "
            "(or pass --overwrite to replace it)"
        )
    if (run_dir / RESULTS_FILE).exists():
        return "done"
    return "resume" if latest_checkpoint(run_dir) else "restart"


def clear_directory(directory: Path, keep: tuple[str, ...] = ()) -> None:
    """Remove what `directory` holds (validated as ours to replace), keeping the directory and
    the entries named in `keep`."""
    if directory.is_dir():
        for path in directory.iterdir():
            if path.name in keep:
                continue
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_resumable(model, directory: Path, tokenizer) -> None:
    """The checkpoint to resume holds this job's model: the same config, the same heads (names,
    kinds, shapes, labels) and the same tokenizer; read from its config.json, no weights loaded."""
    config, heads, fingerprint = checkpoint.read_config(directory)
    if config != model.config:
        changed = [k for k, v in config.to_dict().items() if model.config.to_dict()[k] != v]
        raise UserError(
            f"--resume: {directory} holds a model with other {', '.join(changed)} than this job's "
            "(resume with the job the run was started with)"
        )
    wanted = checkpoint.head_shapes(model)
    if heads != wanted:

        def describe(specs: dict) -> str:
            return (
                ", ".join(f"{name} ({spec.get('num_classes', spec['kind'])})" for name, spec in specs.items())
                or "none"
            )

        raise UserError(
            f"--resume: {directory} holds the heads {describe(heads)}, this job trains {describe(wanted)} "
            "(resume with the task and head the run was started with)"
        )
    if tokenizer is not None and fingerprint is not None and fingerprint != tokenizer.fingerprint():
        raise UserError(f"--resume: {directory} was trained with another tokenizer than this job's data")
