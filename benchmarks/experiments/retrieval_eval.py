"""The figures of benchmarks/results/2026-11-27-retrieval.md for one model: SQuAD v1.1 dev retrieval
(`evaluate_retrieval`, what `roberta evaluate retrieval` prints), STS-B dev (`evaluate_sts`, what
`roberta evaluate sts` prints) and, for a student, its in-process embedding speed against the teacher's
(the hub's `embed()` against sentence-transformers' `encode`, batch 64, on STS-B dev's 3,000 sentences,
alternating in rounds; the median of each). One JSON line per model appended to --out.

    retrieval_eval.py MODEL [MODEL ...] --beir runs/retrieval/squad-v1.1-dev \
        --out runs/retrieval/figures.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def speed(student: str, teacher: str, sentences: list[str], rounds: int) -> dict:
    from roberta.convert.sentence_transformers import SentenceEncoder
    from roberta.hub import load

    hub, st = load(student), SentenceEncoder.load(teacher).model
    ours, theirs = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        hub.embed(hub.encode_batch(sentences, truncate=True))
        ours.append(len(sentences) / (time.perf_counter() - start))
        start = time.perf_counter()
        st.encode(sentences, batch_size=64, show_progress_bar=False)
        theirs.append(len(sentences) / (time.perf_counter() - start))
    a, b = statistics.median(ours), statistics.median(theirs)
    return {"student_sentences_per_s": a, "teacher_sentences_per_s": b, "ratio": a / b, "rounds": rounds}


def sts_sentences(path: Path) -> list[str]:
    from roberta.evaluation.sts import STS_COLUMNS
    from roberta.similarity.pairs import read_pairs

    pairs = read_pairs(path, STS_COLUMNS)
    return [p.text for p in pairs] + [p.pair for p in pairs]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--beir", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--teacher", help="measure each model's speed against this teacher")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--speed-only", action="store_true", help="only the speed against --teacher")
    args = p.parse_args()
    from roberta.evaluation.retrieval import evaluate_retrieval
    from roberta.evaluation.sts import evaluate_sts

    sts_dev = args.data / "glue" / "STS-B" / "dev.tsv"
    for model in args.models:
        if args.speed_only:
            row = {"model": model, "speed": speed(model, args.teacher, sts_sentences(sts_dev), args.rounds)}
            print(json.dumps(row))
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            continue
        started = time.time()
        row = {"model": model, "retrieval": evaluate_retrieval(
            model, args.beir / "corpus.jsonl", args.beir / "queries.jsonl", args.beir / "qrels" / "dev.tsv"
        )}  # fmt: skip
        row["retrieval_s"] = time.time() - started
        row["sts"] = evaluate_sts(model, sts_dev)
        if args.teacher:
            row["speed"] = speed(model, args.teacher, sts_sentences(sts_dev), args.rounds)
        row["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(json.dumps(row))
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
