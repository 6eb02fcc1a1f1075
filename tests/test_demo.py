"""The demo's corpus: standard-library docstrings, read without importing anything."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roberta.demo import RECIPE, SENTENCES, _paragraphs, stdlib_documents
from roberta.hub import load

ROOT = Path(__file__).resolve().parents[1]


def test_docstring_paragraphs_are_joined_lines_without_stubs():
    doc = "Return the sum.\n\nThis adds every item\n    of the iterable, left to right.\n\nArgs:\n"
    assert _paragraphs(doc) == ["Return the sum.", "This adds every item of the iterable, left to right."]


def test_stdlib_documents_are_modules_in_sorted_order():
    documents = stdlib_documents()
    assert len(documents) > 100
    text = "\n".join(p for doc in documents for p in doc)
    # json/__init__.py's module docstring opens with this sentence.
    assert "JSON (JavaScript Object Notation)" in text
    assert all(doc and all("\n" not in p for p in doc) for doc in documents)


def test_every_shipped_config_loads():
    from roberta.tasks.pretrain import load_pretrain_job

    paths = sorted((ROOT / "configs").rglob("*.toml"))
    assert RECIPE in paths
    for path in paths:
        assert load_pretrain_job(path).train.max_steps > 0, path


def test_the_cpu_recipe_keeps_the_architecture_and_measured_knobs():
    from roberta.tasks.pretrain import load_pretrain_job

    job = load_pretrain_job(RECIPE)
    config = job.model_config(vocab_size=8192)
    assert (config.num_layers, config.hidden_size, config.dropout, config.attention_dropout) == (
        2,
        128,
        0.0,
        0.0,
    )
    assert config.init_std == 0.05 and job.model.position_init == "sinusoidal" and job.optim.lr == 1.5e-3
    assert config.max_seq_len >= job.data.seq_len
    assert job.data.mask_prob > 0.15 and job.train.batch_size == 8


@pytest.mark.slow
def test_demo_runs_end_to_end_through_the_cli(tmp_path):
    """`roberta demo`, shortened: every stage runs and the checkpoint answers fill-mask."""
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "roberta.cli", "demo", "--steps", "20", "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for stage in ("[1/5]", "[2/5]", "[3/5]", "[4/5]", "[5/5]"):
        assert stage in done.stdout
    assert "pretrain-cpu-20min.toml" in done.stdout and "20 steps" in done.stdout
    assert done.stdout.count("<mask>") == len(SENTENCES)
    assert (out / "run" / "curves.png").is_file()
    roberta = load(out / "run" / "checkpoints" / f"step-{20:08d}")
    assert len(roberta.fill_mask(SENTENCES[0], topk=3)) == 3
