"""What the tagging tests share: slices of CoNLL-2003 as files, and a micro model with a tagging
head whose predictions vary from token to token (its projection scaled up), so that grouping,
windows and exports are exercised by many entities, not by one label everywhere."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from roberta import Roberta, RobertaConfig, RobertaModel
from roberta.model import TaggingHead
from roberta.tokenizer import load_tokenizer

LABELS = ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER")
MICRO = dict(hidden_size=64, num_layers=2, num_heads=4, ffn_size=128, max_positions=130)


def conll_slice(source: Path, target: Path, count: int) -> Path:
    """The first `count` sentences of a CoNLL file (its -DOCSTART- lines kept), as `target`."""
    lines, sentences = [], 0
    for line in source.read_text(encoding="utf-8").splitlines(keepends=True):
        lines.append(line)
        if not line.strip() and lines[-2:-1] and lines[-2].strip() and not lines[-2].startswith("-DOCSTART-"):
            sentences += 1
            if sentences == count:
                break
    target.write_text("".join(lines), encoding="utf-8")
    return target


def conll_files(shared_data: Path, root: Path, train: int = 96, held_out: int = 32) -> dict[str, Path]:
    """train.txt, valid.txt and test.txt: the first sentences of CoNLL-2003's splits."""
    source = shared_data / "conll2003"
    root.mkdir(parents=True, exist_ok=True)
    counts = {"train": train, "valid": held_out, "test": held_out}
    return {name: conll_slice(source / f"{name}.txt", root / f"{name}.txt", n) for name, n in counts.items()}


@functools.cache
def tagger_hub(shared_data: Path) -> Roberta:
    """A micro model (2 x 64, GPT-2's vocabulary, 128 positions) with the tagging head "ner" of
    CoNLL's labels, in eval mode. Built once per session: the tests only read it."""
    tokenizer = load_tokenizer(shared_data / "gpt2_bpe")
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig(vocab_size=tokenizer.vocab_size, **MICRO))
    model.add_head("ner", TaggingHead(model.config, len(LABELS), LABELS))
    with torch.no_grad():
        model.heads["ner"].out_proj.weight.mul_(40)
    return Roberta(model, tokenizer).eval()
