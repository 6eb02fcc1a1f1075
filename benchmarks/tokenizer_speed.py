"""Tokenization speed on the books+wiki corpus: our fast path against plain tiktoken and `tokenizers`.

    .venv/bin/python benchmarks/tokenizer_speed.py [--mb 20] [--repeats 3]

Reports, per engine, wall time and process CPU time (all threads) for the same lines, best of
`--repeats`. CPU time is the fairer figure on a shared machine: it does not grow when other
processes take the cores. Every engine's ids are checked equal before anything is printed.
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from pathlib import Path

import numpy as np

from roberta.tokenizer import load_tokenizer

DATA = Path(os.environ.get("ROBERTA_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def corpus_sample(megabytes: float) -> list[str]:
    """Whole files of the corpus, every 4th file in name order, until `megabytes` of text."""
    lines: list[str] = []
    size = 0
    for path in sorted((DATA / "corpus").glob("*/*.txt"))[::4]:
        text = path.read_text(encoding="utf-8")
        lines += text.split("\n")
        size += len(text.encode())
        if size >= megabytes * 1e6:
            break
    return lines


def measure(run, repeats: int) -> tuple[float, float, np.ndarray]:
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        ids = run()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=20, help="megabytes of corpus text (default 20)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per engine; the best counts (default 3)")
    options = parser.parse_args()

    tok = load_tokenizer(DATA / "gpt2_bpe")
    lines = corpus_sample(options.mb)
    megabytes = sum(len(line.encode()) for line in lines) / 1e6
    threads = len(os.sched_getaffinity(0))
    encoding = tok._tiktoken  # the same tiktoken.Encoding, called the usual way

    def plain_tiktoken() -> np.ndarray:
        ranks = encoding.encode_ordinary_batch(lines, num_threads=threads)
        return tok._rank_to_model[np.fromiter(itertools.chain.from_iterable(ranks), np.int64)]

    engines = {
        "tiktoken encode_ordinary_batch (+ id lookup)": plain_tiktoken,
        "roberta tokenize_ids_flat (tiktoken engine)": lambda: tok.tokenize_ids_flat(lines)[0],
        "roberta tokenize_ids_flat (tokenizers engine)": lambda: tok.tokenize_ids_flat(
            lines, engine="tokenizers"
        )[0],
    }
    results = {name: measure(run, options.repeats) for name, run in engines.items()}
    reference = next(iter(results.values()))[2]
    assert all(np.array_equal(ids, reference) for _, _, ids in results.values()), "engines disagree"

    print(
        f"{megabytes:.1f} MB, {len(lines)} lines, {len(reference)} tokens, {threads} threads, "
        f"best of {options.repeats}"
    )
    print("| engine | wall s | MB/s wall | CPU s | MB/s per CPU-second |")
    print("|---|---|---|---|---|")
    for name, (wall, cpu, _) in results.items():
        print(f"| {name} | {wall:.2f} | {megabytes / wall:.1f} | {cpu:.2f} | {megabytes / cpu:.1f} |")


if __name__ == "__main__":
    main()
