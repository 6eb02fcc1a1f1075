"""Shared fixtures: where the public data lives, and how tests behave when it is absent."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    return Path(os.environ.get("ROBERTA_DATA", ROOT.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (or $ROBERTA_DATA). In CI its absence is a failure, elsewhere a skip."""
    path = shared_data_dir()
    if not path.is_dir():
        message = f"shared data not found at {path} (set ROBERTA_DATA)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
