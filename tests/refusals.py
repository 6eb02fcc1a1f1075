"""The harness of the table-driven refusal tests (test_bad_inputs*.py).

A `Case` is one refused command (`argv`: exit status 2, exactly one stderr line
`roberta: error: ...`) or API call (`call`: raises `UserError`, a one-line message). `check`
runs it and asserts that the message names the cause and that nothing under the watched
directories is new, removed or changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from roberta import UserError, cli


@dataclass
class Env:
    work: Path  # the case's own directory: its bad inputs and outputs go here
    assets: object  # the module's shared, read-only assets
    monkeypatch: pytest.MonkeyPatch

    def file(self, name: str, content: str | bytes) -> str:
        path = self.work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return str(path)


@dataclass(frozen=True)
class Case:
    name: str
    cause: str  # a substring of the one-line message
    argv: Callable[[Env], list[str]] | None = None  # a CLI command, exit status 2
    # An API call: prepares, returns the call that raises UserError.
    call: Callable[[Env], Callable[[], object]] | None = None


def snapshot(*directories: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and directory under `directories`: size, modification time, mode."""
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_mode)
        for d in directories
        for p in sorted(d.rglob("*"))
    }


def check(case: Case, env: Env, capsys: pytest.CaptureFixture, *watched: Path) -> None:
    """Run `case` in `env`: refused in one line naming its cause, nothing under `watched` touched."""
    argv = case.argv(env) if case.argv else None
    call = case.call(env) if case.call else None
    capsys.readouterr()  # whatever building the case printed
    before = snapshot(*watched)
    if argv is not None:
        assert cli.main(argv) == 2
        captured = capsys.readouterr()
        lines = captured.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("roberta: error: "), captured.err
        assert captured.out == "", captured.out
        message = lines[0]
    else:
        with pytest.raises(UserError) as raised:
            call()
        message = str(raised.value)
        assert "\n" not in message
    assert case.cause in message, message
    assert snapshot(*watched) == before


def check_table(cases: list[Case], prefixes: set[str], at_least: int) -> None:
    """The table covers `prefixes`, holds `at_least` cases, and names each once."""
    assert prefixes <= {c.name.split("/")[0] for c in cases}
    assert len(cases) >= at_least and len({c.name for c in cases}) == len(cases)
