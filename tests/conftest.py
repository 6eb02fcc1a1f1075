"""Shared fixtures: where the public data lives (and how tests behave when it is absent), one
thread for micro models, and a micro corpus prepared the way a user prepares one."""

import os
import random
from pathlib import Path

# Under `make test`'s two workers (pytest-xdist), each worker and every process it starts computes on
# one thread: two processes of two threads on two cores spin at each other's barriers.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"

# The suite compares numbers to the last digit (HF parity, served answers equal to one-by-one calls,
# golden losses), which bf16 does not keep: here `auto` means fp32 on every machine, AMX or not.
# The bf16 tests ask for it by name; tests/test_precision.py runs `auto` with this unset.
os.environ.setdefault("ROBERTA_PRECISION", "fp32")

import pytest  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items) -> None:
    """`gpu` tests run where CUDA is visible (the GPU checks), and are skipped, with the reason, elsewhere."""
    if torch.cuda.is_available():
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


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


@pytest.fixture(scope="module")
def one_thread():
    """Micro models run faster on one thread: hand-offs between threads cost more than they share.
    Module-scoped, so a module's shared fixtures (models built once) run on one thread too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


MICRO_WORDS = (
    "the a cat dog sat ran on under mat tree big small red blue quickly slowly and then it was".split()
)


@pytest.fixture(scope="session")
def micro_corpus(tmp_path_factory) -> Path:
    """A 300-token byte-level BPE (ROOT/tokenizer) and a corpus prepared with it (ROOT/corpus)."""
    from roberta.data.prepare import prepare
    from roberta.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("micro-corpus")
    rng = random.Random(0)
    docs = [
        "\n".join(
            " ".join(rng.choice(MICRO_WORDS) for _ in range(rng.randint(4, 12))).capitalize() + "."
            for _ in range(rng.randint(3, 8))
        )
        for _ in range(120)
    ]
    text = root / "text.txt"
    text.write_text("\n\n".join(docs) + "\n")
    train_tokenizer([text], root / "tokenizer", vocab_size=300, progress=False)
    prepare([text], root / "tokenizer", root / "corpus", workers=1, valid_fraction=0.1, progress=False)
    return root
