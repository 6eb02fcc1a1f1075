"""How much of a sentence encoder its token vectors alone hold (issue #37): the teacher's vector of
every token of a vocabulary, the sentence's vector their mean (no transformer, no training), ranked
on STS-B dev by cosine. This is what `distill embed --new-student` starts the student's embeddings
from (`roberta.tasks.embed_student`), and why.

Rows: a vocabulary (the teacher's own, or the CPU recipe's 8k BPE) x the vectors (the teacher's
384 dimensions, or on their first 128 principal axes as the student gets them) x the mean (plain,
or weighted by a / (a + p(token)) with a = 1e-3 and p the token's frequency in the distillation
sentences: Arora et al. 2017's smooth inverse frequency).

    .venv/bin/python benchmarks/experiments/static_token_vectors.py --work /work/exp
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))

from sentence_embeddings import teacher_dir  # noqa: E402

from harness import DEFAULT_DATA, machine, versions  # noqa: E402
from roberta.convert.sentence_transformers import SentenceEncoder  # noqa: E402
from roberta.evaluation.sts import STS_COLUMNS, cosines  # noqa: E402
from roberta.similarity.metric import sts_figures  # noqa: E402
from roberta.similarity.pairs import read_pairs  # noqa: E402
from roberta.tasks.embed_student import token_embeddings, token_texts  # noqa: E402
from roberta.tokenizer import load_tokenizer  # noqa: E402

SIF_A = 1e-3
OUT = ROOT / "benchmarks" / "results" / f"{datetime.date.today()}-static-token-vectors.md"


def spearman(vectors: np.ndarray, weights: np.ndarray, pairs: tuple[list, list], gold: list[float]) -> float:
    """Spearman x 100 of the cosines of the pairs' weighted mean token vectors, as `evaluate sts`
    computes it."""

    def embed(sentences: list[list[int]]) -> np.ndarray:
        return np.array(
            [(vectors[ids] * weights[ids][:, None]).sum(0) / weights[ids].sum() for ids in sentences]
        )

    return 100 * sts_figures(cosines(embed(pairs[0]), embed(pairs[1])), gold)["spearman"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="sentence_embeddings.py's work directory")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    rows = read_pairs(args.data / "glue" / "STS-B" / "dev.tsv", STS_COLUMNS)
    gold = [r.score for r in rows]
    sentences = (args.work / "distill-sentences.txt").read_text().splitlines()
    teacher = SentenceEncoder.load(teacher_dir())
    table = [
        "| vocabulary | tokens | teacher's time (s) | vectors | plain mean | SIF-weighted mean |",
        "|---|---|---|---|---|---|",
    ]
    for name, tokenizer in (
        ("all-MiniLM-L6-v2's WordPiece (uncased)", teacher.tokenizer()),
        ("the CPU recipe's 8k byte-level BPE", load_tokenizer(args.work / "tok-8k")),
    ):
        started = time.monotonic()
        vectors = teacher.encode(token_texts(tokenizer), progress=False)
        seconds = time.monotonic() - started
        pairs = (
            tokenizer.tokenize_ids_batch([r.text for r in rows]),
            tokenizer.tokenize_ids_batch([r.pair for r in rows]),
        )
        counts = np.bincount(
            np.concatenate([np.asarray(x, dtype=np.int64) for x in tokenizer.tokenize_ids_batch(sentences)]),
            minlength=tokenizer.vocab_size,
        )
        sif = SIF_A / (SIF_A + counts / counts.sum())
        plain = np.ones(tokenizer.vocab_size)
        for label, table_vectors in (
            ("384, the teacher's", vectors),
            ("128, principal axes", token_embeddings(vectors, 128)),
        ):
            scores = [spearman(table_vectors, w, pairs, gold) for w in (plain, sif)]
            cells = [name, f"{tokenizer.vocab_size:,}", f"{seconds:.0f}", label, f"{scores[0]:.1f}"]
            table.append(f"| {' | '.join(cells)} | **{scores[1]:.1f}** |")
            print(table[-1], flush=True)
    OUT.write_text(
        "\n".join(
            [
                f"# Token vectors alone as a sentence encoder ({datetime.date.today()}, issue #37)",
                "",
                f"Machine: {machine()}; {versions()}. Nothing else running.",
                "Zero-shot STS-B dev (1,500 pairs), Spearman x 100 of the cosine of the two sentences' mean",
                "token vectors; the token vectors are all-MiniLM-L6-v2's sentence vector of each token alone",
                "(a WordPiece continuation without its `##`); SIF weights a / (a + p),",
                f"a = {SIF_A:g}, p from the {len(sentences):,} distillation sentences.",
                "all-MiniLM-L6-v2 itself: 86.7; a random 2 x 128 model: 55.8 (mean-pooled).",
                "",
                "```bash",
                f".venv/bin/python benchmarks/experiments/static_token_vectors.py --work {args.work}",
                "```",
                "",
                *table,
                "",
            ]
        )
    )


if __name__ == "__main__":
    main()
