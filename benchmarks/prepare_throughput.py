"""`roberta prepare` throughput (MB/s of input text) and peak memory, beside plain encoders.

    python benchmarks/prepare_throughput.py [--big-gb 2] [--workers 2]

On $ROBERTA_DATA/corpus (books + wiki, ~79 MB) it times, on the same cores:
  1. `prepare` (GPT-2 BPE + RoBERTa's dict.txt, all workers), in a fresh process, with its peak RSS
     and its workers' peak RSS;
  2. a plain `tokenizers` byte-level BPE `encode_batch` over the corpus' lines (Rust threads);
  3. a plain `tiktoken` `encode_ordinary_batch` built from the same GPT-2 merges (threads);
and checks that the prepared tokens equal both plain encodings id for id (GPT-2 ids mapped through
dict.txt). Then it repeats the corpus to about --big-gb GB in a temporary directory (deleted
afterwards) and runs `prepare` on that, to show the peak RSS does not grow with the corpus.
Prints a Markdown table; figures depend on the machine's load (others may share it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ROBERTA_DATA", ROOT.parent / "shared" / "data"))
BPE = DATA / "gpt2_bpe"


def run_prepare_in_fresh_process(inputs: list[Path], out: Path, workers: int) -> dict:
    """Time `prepare` in its own interpreter so that its peak RSS is its own."""
    code = (
        "import json, resource, sys, time\n"
        "from roberta.data.prepare import prepare\n"
        "t = time.perf_counter()\n"
        f"prepare({[str(p) for p in inputs]!r}, {str(BPE)!r}, {str(out)!r}, workers={workers}, "
        "valid_fraction=0.0, progress=False)\n"
        "wall = time.perf_counter() - t\n"
        "me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so it would report the
        # benchmark parent's own peak at the moment it forked this interpreter.
        "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
        "print(json.dumps({'wall': wall, 'cpu': me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,\n"
        "                  'cpu_main': me.ru_utime + me.ru_stime,\n"
        "                  'rss_main_mb': hwm / 1024, 'rss_worker_mb': kids.ru_maxrss / 1024}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def corpus_lines(files: list[Path]) -> list[str]:
    lines = []
    for path in files:
        lines.extend(s for s in (line.strip() for line in path.read_text(encoding="utf-8").split("\n")) if s)
    return lines


def gpt2_to_model_ids() -> np.ndarray:
    """GPT-2 id -> fairseq/RoBERTa id: 4 + the line of dict.txt that names it."""
    mapping = np.full(50257, 3, dtype=np.int64)
    for line_number, line in enumerate((BPE / "dict.txt").read_text(encoding="utf-8").splitlines()):
        symbol = line.split(" ")[0]
        if symbol.isdigit():
            mapping[int(symbol)] = 4 + line_number
    return mapping


def plain_tokenizers(lines: list[str]) -> tuple[float, float, np.ndarray]:
    import tokenizers
    from tokenizers import models, pre_tokenizers

    vocab, merges = models.BPE.read_file(str(BPE / "encoder.json"), str(BPE / "vocab.bpe"))
    engine = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
    engine.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    cpu, t = time.process_time(), time.perf_counter()
    encodings = engine.encode_batch_fast(lines, add_special_tokens=False)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    return wall, cpu, np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in encodings])


def plain_tiktoken(lines: list[str]) -> tuple[float, float, np.ndarray]:
    import tiktoken

    from roberta.tokenizer import CHAR_TO_BYTE, GPT2_PATTERN

    encoder = json.loads((BPE / "encoder.json").read_text(encoding="utf-8"))
    ranks = {
        bytes(CHAR_TO_BYTE[c] for c in token): i for token, i in encoder.items() if token != "<|endoftext|>"
    }
    engine = tiktoken.Encoding("gpt2-plain", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    cpu, t = time.process_time(), time.perf_counter()
    pieces = engine.encode_ordinary_batch(lines, num_threads=os.cpu_count() or 1)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    return wall, cpu, np.concatenate([np.asarray(p, dtype=np.int64) for p in pieces])


def prepared_tokens(out: Path) -> np.ndarray:
    from roberta.data import Corpus

    train = Corpus(out).train
    return np.asarray(train.tokens(0, train.num_tokens), dtype=np.int64)


def repeat_corpus(files: list[Path], directory: Path, target_bytes: int) -> list[Path]:
    """Copies of the corpus, one concatenated file per copy, until target_bytes."""
    one = b"\n".join(p.read_bytes() for p in files)  # files end with a newline: a blank line between
    copies = []
    while len(copies) * len(one) < target_bytes:
        path = directory / f"copy-{len(copies):03d}.txt"
        path.write_bytes(one)
        copies.append(path)
    return copies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--big-gb", type=float, default=2.0, help="size of the repeated corpus (0: skip)")
    args = parser.parse_args()

    from roberta.inputs.text import expand_inputs

    files = expand_inputs([DATA / "corpus"])
    size = sum(p.stat().st_size for p in files)
    mb = size / 1e6
    rows = []
    with tempfile.TemporaryDirectory(prefix="prepare-bench-") as tmp:
        tmp = Path(tmp)
        stats = run_prepare_in_fresh_process(files, tmp / "corpus", args.workers)
        rows.append(("`prepare`", args.workers, mb, stats))
        if args.big_gb > 0:  # before the baselines, while this process is small
            big = repeat_corpus(files, tmp, int(args.big_gb * 1e9))
            big_mb = sum(p.stat().st_size for p in big) / 1e6
            stats = run_prepare_in_fresh_process(big, tmp / "big", args.workers)
            rows.append((f"`prepare`, corpus repeated {len(big)}x", args.workers, big_mb, stats))
            for path in big:
                path.unlink()
            shutil.rmtree(tmp / "big")
        lines = corpus_lines(files)
        mapping = gpt2_to_model_ids()
        ours = prepared_tokens(tmp / "corpus")
        for name, encode in (
            ("plain `tokenizers` encode_batch", plain_tokenizers),
            ("plain `tiktoken` encode_ordinary_batch", plain_tiktoken),
        ):
            wall, cpu, ids = encode(lines)
            same = np.array_equal(mapping[ids], ours)
            rows.append((name, os.cpu_count(), mb, {"wall": wall, "cpu": cpu, "same_ids": same}))
            del ids
        del lines, ours

    print(f"load average at the end: {os.getloadavg()[0]:.1f} (on {os.cpu_count()} cores)")
    for name, _, _, s in rows:
        if "cpu_main" in s:
            print(f"{name}: main process {s['cpu_main']:.1f} CPU-s of {s['cpu']:.1f}")
    print(
        "| run | procs/threads | input MB | wall s | MB/s | MB per CPU-s | peak RSS main / worker MB "
        "| ids equal to prepare |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, procs, size_mb, s in rows:
        rss = f"{s['rss_main_mb']:.0f} / {s['rss_worker_mb']:.0f}" if "rss_main_mb" in s else "—"
        same = {True: "yes", False: "NO"}.get(s.get("same_ids"), "—")
        print(
            f"| {name} | {procs} | {size_mb:.1f} | {s['wall']:.1f} | {size_mb / s['wall']:.1f} | "
            f"{size_mb / s['cpu']:.1f} | {rss} | {same} |"
        )


if __name__ == "__main__":
    main()
