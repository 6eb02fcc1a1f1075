"""Publishing files whole, and reading JSON with errors that name the file.

Everything the toolkit writes for a user (checkpoints, corpora, tokenizers, predictions, run
state) is written under a temporary name beside its destination and renamed into place, so a
crash or a refused command never leaves a half-written file where a complete one is expected.
Files get the user's umask, as `open` would give them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from roberta.errors import UserError

# Files that mark a directory as one we may replace wholesale (ours, HF's or fairseq's).
CHECKPOINT_MARKERS = ("config.json", "model.safetensors", "model.pt", "pytorch_model.bin")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_directory(dst: str | Path, replace_if: tuple[str, ...] = CHECKPOINT_MARKERS) -> Iterator[Path]:
    """Yield an empty temporary directory beside `dst`; on success it replaces `dst` at once.

    An existing `dst` is replaced only if it is empty or holds one of `replace_if`, so a typo
    cannot wipe an unrelated directory. On any error the temporary directory is removed and
    `dst` is left as it was.
    """
    dst = Path(dst)
    if dst.exists() and not dst.is_dir():
        raise UserError(f"{dst}: exists and is not a directory")
    if dst.is_dir() and any(dst.iterdir()) and not any((dst / m).exists() for m in replace_if):
        raise UserError(f"{dst}: refusing to replace a non-empty directory that holds no checkpoint")
    tmp = make_temporary_directory(dst)
    try:
        yield tmp
        publish_directory(tmp, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def publish_directory(tmp: Path, dst: Path) -> None:
    """Rename the finished directory `tmp` onto `dst`, replacing an existing `dst` directory whole.
    On failure `dst` is as it was, nothing is left beside it, and the error names `dst`."""
    if not dst.exists():
        _rename(tmp, dst, dst)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{dst.name}.old-", dir=dst.parent))
    try:
        _rename(dst, old / dst.name, dst)
    except OSError:
        old.rmdir()
        raise
    try:
        _rename(tmp, dst, dst)
    except OSError:
        os.replace(old / dst.name, dst)  # the old directory back where it was
        old.rmdir()
        raise
    shutil.rmtree(old)


def _rename(src: Path, dst: Path, named: Path) -> None:
    """os.replace, its error naming `named` (the user's path), not a temporary name."""
    try:
        os.replace(src, dst)
    except OSError as e:
        raise OSError(e.errno, e.strerror, str(named)) from None


def make_temporary_directory(dst: Path) -> Path:
    """A hidden, empty directory beside `dst` with the permissions `mkdir` would give it."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.tmp-", dir=dst.parent))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it private (0700)
    return tmp


@contextmanager
def atomic_write(dst: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator:
    """An open file under a temporary name beside `dst`, renamed onto `dst` when the block ends
    without error (and removed when it raises)."""
    dst = Path(dst)
    tmp = temporary_path(dst)
    try:
        with open(tmp, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
        publish(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def make_parent(dst: Path) -> None:
    """Create `dst`'s directory if needed; a file standing where it belongs is a UserError."""
    for parent in (dst.parent, *dst.parent.parents):
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"{dst}: cannot be written, {parent} is a file, not a directory")
            break
    dst.parent.mkdir(parents=True, exist_ok=True)


def temporary_path(dst: Path) -> Path:
    """A hidden name beside `dst`, unique to this process, keeping its suffix (numpy and
    safetensors writers look at it)."""
    return dst.with_name(f".{dst.name}.tmp-{os.getpid()}{dst.suffix}")


def publish(tmp: Path, dst: Path) -> None:
    """Rename a finished temporary file onto `dst` with the user's umask (writers such as
    safetensors create files private)."""
    tmp.chmod(0o666 & ~_umask())
    os.replace(tmp, dst)


def to_json(value, indent: int | None = None) -> str:
    """JSON that every reader parses: a non-finite float (an undefined correlation, a diverged
    loss) becomes null, where Python's json module would write the bare NaN that JSON forbids."""
    return json.dumps(_finite(value), indent=indent, allow_nan=False)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write_json(dst: str | Path, value) -> None:
    with atomic_write(dst) as f:
        f.write(to_json(value, indent=2) + "\n")


def open_input(path: str | Path) -> BinaryIO:
    """`path` opened for binary reading, or a one-line UserError saying why it cannot be."""
    path = Path(path)
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None


def read_json(path: str | Path) -> dict:
    """A JSON object from a file, or a one-line UserError naming the file (and line)."""
    path = Path(path)
    with open_input(path) as f:
        data = f.read()
    try:
        values = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(values, dict):
        raise UserError(f"{path}: expected a JSON object")
    return values
