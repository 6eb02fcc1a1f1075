"""A WordPiece vocabulary trained on the books+wiki corpus, checked against transformers'
BertTokenizerFast on every line of that corpus: the same ids, line by line.

    .venv/bin/python benchmarks/experiments/wordpiece_equality.py [--vocab-size 28996] [--uncased] [--out DIR]

Trains with `roberta.tokenizer.training.train_wordpiece` (what `roberta train-tokenizer --kind wordpiece`
runs), then encodes each file's lines with our tokenizer and with
`BertTokenizerFast(vocab=DIR/vocab.txt, do_lower_case=...)` (no special tokens) and compares the ids
of every line. Prints the counts and the first differing lines, if any; exits 1 on a difference.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import transformers

from roberta.tokenizer.training import train_wordpiece

DATA = Path(os.environ.get("ROBERTA_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))


def hf_ids(hf, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """BertTokenizerFast's ids of each line, back to back, and each line's count."""
    pieces = hf(lines, add_special_tokens=False)["input_ids"]
    lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
    return np.fromiter((i for p in pieces for i in p), dtype=np.int64, count=int(lengths.sum())), lengths


def differing_lines(ours, theirs) -> list[int]:
    (ids, lengths), (hf, hf_lengths) = ours, theirs
    if np.array_equal(lengths, hf_lengths) and np.array_equal(ids, hf):
        return []
    ends, hf_ends = np.cumsum(lengths), np.cumsum(hf_lengths)
    return [
        k
        for k in range(len(lengths))
        if not np.array_equal(
            ids[ends[k] - lengths[k] : ends[k]], hf[hf_ends[k] - hf_lengths[k] : hf_ends[k]]
        )
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=28996, help="ids (default 28996, BERT-cased's)")
    parser.add_argument(
        "--uncased", action="store_true", help="lowercase (and strip accents), as BERT-uncased"
    )
    parser.add_argument("--out", help="where to write the vocabulary (default: a temporary directory)")
    options = parser.parse_args()

    files = sorted((DATA / "corpus").glob("*/*.txt"))
    out = Path(options.out or tempfile.mkdtemp(prefix="wordpiece-")) / "tok"
    start = time.perf_counter()
    tok = train_wordpiece(files, out, options.vocab_size, lowercase=options.uncased, progress=False)
    trained = time.perf_counter() - start
    hf = transformers.BertTokenizerFast(vocab=str(out / "vocab.txt"), do_lower_case=options.uncased)
    lines = tokens = 0
    bad: list[tuple[Path, int, str]] = []
    start = time.perf_counter()
    for path in files:
        text = path.read_text(encoding="utf-8").split("\n")
        ours = tok.tokenize_ids_flat(text)
        bad += [(path, k + 1, text[k]) for k in differing_lines(ours, hf_ids(hf, text))]
        lines += len(text)
        tokens += int(ours[1].sum())
    compared = time.perf_counter() - start
    case = "uncased" if options.uncased else "cased"
    print(f"{case} WordPiece, {tok.vocab_size} ids, trained on {len(files)} files in {trained:.1f} s")
    equal = lines - len(bad)
    print(f"{lines} lines, {tokens} tokens compared in {compared:.1f} s: {equal} equal, {len(bad)} differ")
    for path, number, line in bad[:5]:
        print(f"  {path}:{number}: {line[:80]!r}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
