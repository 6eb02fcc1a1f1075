"""Helpers for the tests: a tiny byte-level tokenizer, generated text corpora, a micro checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from roberta.tokenizer import BYTE_TO_CHAR, load_tokenizer

WORDS = (
    "the a of and to in is was for on that with as by at from it his an were are which this be "
    "river city king music energy north history game team film album station village school "
    "café naïve über Zürich 東京 日本語 Ελλάδα москва 😀 well-known 1998 3.14 don't"
).split()


def write_byte_tokenizer(directory: Path) -> Path:
    """An HF byte-level BPE tokenizer (vocab.json + merges.txt): specials, the 256 bytes, a few merges."""
    directory.mkdir(parents=True, exist_ok=True)
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "a"), ("i", "n")]
    tokens = ["<s>", "<pad>", "</s>", "<unk>", *BYTE_TO_CHAR.values(), *(a + b for a, b in merges), "<mask>"]
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}), encoding="utf-8")
    (directory / "merges.txt").write_text(
        "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8"
    )
    return directory


def make_documents(seed: int, count: int, long_every: int = 0) -> list[list[str]]:
    """Documents of 1-8 sentences of 1-25 words; every `long_every`-th document has a 300-word sentence."""
    rng = np.random.default_rng(seed)
    documents = []
    for d in range(count):
        sentences = [" ".join(rng.choice(WORDS, rng.integers(1, 26))) for _ in range(rng.integers(1, 9))]
        if long_every and d % long_every == 0:
            sentences.append(" ".join(rng.choice(WORDS, 300)))
        documents.append(sentences)
    return documents


def write_text(path: Path, documents: list[list[str]]) -> Path:
    """Lines are sentences, a blank line ends a document (with some untidy whitespace kept in)."""
    path.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    return path


def save_micro_checkpoint(directory: Path, shared_data: Path, heads: dict[str, int] | None = None) -> Path:
    """A micro model (2 x 64, 130 positions, seed 0) with the GPT-2 tokenizer and `heads` (name:
    classes), saved as our checkpoint."""
    import torch

    from roberta import RobertaConfig, RobertaModel, checkpoint

    tok = load_tokenizer(shared_data / "gpt2_bpe")
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=tok.vocab_size, hidden_size=64, num_layers=2, num_heads=4, ffn_size=128, max_positions=130
    )
    model = RobertaModel(config)
    for name, classes in (heads or {}).items():
        model.add_classification_head(name, classes)
    return checkpoint.save(directory, model, tok)


def glue_slice(directory: Path, shared_data: Path, task: str, rows: int) -> Path:
    """directory/TASK with the first `rows` training rows of a GLUE task as both train.tsv and dev.tsv."""
    root = directory / task
    root.mkdir(parents=True)
    lines = (shared_data / "glue" / task / "train.tsv").read_text().splitlines(keepends=True)[: rows + 1]
    for name in ("train.tsv", "dev.tsv"):
        (root / name).write_text("".join(lines))
    return root


def prepare_killed_then_resumed(monkeypatch, prepare_call, killed_after: int, between) -> list[int]:
    """Run `prepare_call` with the encoder raising KeyboardInterrupt (a Ctrl-C) in its chunk
    `killed_after + 1`, call `between()` (the test's look at what the kill left), then run it again
    whole; returns the chunk indices the second run encoded."""
    import pytest

    from roberta.data.prepare import ChunkEncoder

    calls: list[int] = []
    encode = ChunkEncoder.__call__

    def counted(self, chunk, limit: int | None = killed_after):
        calls.append(chunk.index)
        if limit is not None and len(calls) > limit:
            raise KeyboardInterrupt
        return encode(self, chunk)

    monkeypatch.setattr(ChunkEncoder, "__call__", counted)
    with pytest.raises(KeyboardInterrupt):
        prepare_call()
    between()
    calls.clear()
    monkeypatch.setattr(ChunkEncoder, "__call__", lambda self, chunk: counted(self, chunk, None))
    prepare_call()
    return calls
