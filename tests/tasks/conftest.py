"""What the sentence-embedding tests (test_embed.py, test_embed_student.py) train on."""

from pathlib import Path

import pytest

from data_fixtures import glue_slice, save_micro_checkpoint


@pytest.fixture(scope="module")
def data(shared_data, tmp_path_factory) -> dict[str, Path]:
    """A micro checkpoint (2 x 64, GPT-2 BPE), 48 STS-B training pairs as train.tsv and 32 as dev,
    and the pairs' first sentences as a text file."""
    root = tmp_path_factory.mktemp("embed")
    sts = glue_slice(root, shared_data, "STS-B", 48)
    dev = root / "dev.tsv"
    dev.write_text("".join((sts / "dev.tsv").read_text().splitlines(keepends=True)[:33]))
    header, *rows = (sts / "train.tsv").read_text().splitlines()
    column = header.split("\t").index("sentence1")
    sentences = root / "sentences.txt"
    sentences.write_text("".join(row.split("\t")[column] + "\n" for row in rows))
    ckpt = save_micro_checkpoint(root / "ckpt", shared_data)
    return {"ckpt": ckpt, "train": sts / "train.tsv", "dev": dev, "sentences": sentences}
