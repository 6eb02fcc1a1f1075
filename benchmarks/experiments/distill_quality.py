"""Task distillation measured: a small student distilled from a larger fine-tuned teacher, against
the same student fine-tuned on the gold labels alone, and the two models' prediction speed.

Per task (SST-2 and MRPC by default), through the real CLI in subprocesses, every run with
`roberta probe`'s fixed small-model recipe (probe.RECIPE: LR, batch, epochs, the first
`--examples` training rows):
  teacher           `roberta finetune glue --init TEACHER` (1 seed)
  gold              `roberta finetune glue --init STUDENT --seeds N`
  distilled         `roberta distill glue --teacher teacher/best --student STUDENT --seeds N`
  distilled+transfer the same with `--transfer`: the next `--transfer` training rows, labels unread
A run already complete in WORK is read back, not run again. Each task's score is its GLUE metric
at the best dev evaluation, x 100 (MRPC: F1 and accuracy averaged), median over seeds.

Speed: the teacher's and a distilled student's best checkpoints classify SST-2's dev sentences
through the hub (`Roberta.predict`, batched as `roberta predict` batches), alternating in slices;
sentences per second, median of the slices.

    .venv/bin/python benchmarks/experiments/distill_quality.py --teacher RUN/checkpoints/step-N \
        --student SMALL/checkpoints/step-M --work /tmp/distill
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

# harness.py, shared with the `make bench` scripts, lives one level up in benchmarks/.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import DEFAULT_DATA, machine, versions  # noqa: E402
from roberta.evaluation.probe import RECIPE, task_score
from roberta.tasks.glue import get_task

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "roberta.cli"]


def task_data(glue: Path, task: str, examples: int, transfer: int, work: Path) -> tuple[Path, Path | None]:
    """WORK/data/TASK: train.tsv with the first `examples` rows, the dev file(s), and transfer.tsv
    with the `transfer` rows after them (None if the task has none left)."""
    out = work / "data" / task
    out.mkdir(parents=True, exist_ok=True)
    header, *rows = (glue / task / "train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "train.tsv").write_text(header + "".join(rows[:examples]), encoding="utf-8")
    for dev in (glue / task).glob("dev*.tsv"):
        (out / dev.name).write_bytes(dev.read_bytes())
    rest = rows[examples : examples + transfer]
    if not rest:
        return out, None
    (out / "transfer.tsv").write_text(header + "".join(rest), encoding="utf-8")
    return out, out / "transfer.tsv"


def recipe_file(work: Path) -> Path:
    path = work / "recipe.toml"
    path.write_text(
        f"[optim]\nlr = {RECIPE.lr}\n\n"
        f"[train]\nbatch_size = {RECIPE.batch_size}\nepochs = {RECIPE.epochs}\n\n"
        f"[data]\nmax_length = {RECIPE.max_length}\n"
    )
    return path


def run_once(command: list[str], out: Path, seeds: int) -> None:
    """Run `command` unless every seed's results.json is already in `out`."""
    done = (
        [out / "results.json"]
        if seeds == 1
        else [out / f"seed{k}" / "results.json" for k in range(1, seeds + 1)]
    )
    if all(p.is_file() for p in done):
        return
    extra = ["--resume"] if out.exists() else []
    print("$", " ".join(command + extra), flush=True)
    subprocess.run(command + extra, check=True, cwd=ROOT)


def scores(out: Path, task: str, seeds: int) -> list[float]:
    """Each seed's score at its best dev evaluation."""
    metrics = get_task(task).metrics
    found = []
    for k in range(1, seeds + 1):
        results = json.loads(((out if seeds == 1 else out / f"seed{k}") / "results.json").read_text())
        step = results["best"]["step"]
        at_best = next(e for e in results["evaluations"] if e["step"] == step)
        found.append(task_score({name: at_best.get(name) for name in metrics}))
    return found


def measure_task(args: argparse.Namespace, task: str, recipe: Path) -> dict[str, list[float]]:
    data, transfer = task_data(args.glue, task, args.examples, args.transfer, args.work)
    work = args.work / task
    common = ["--task", task, "--data", str(data), "--config", str(recipe)]
    teacher = work / "teacher"
    run_once(
        [*CLI, "finetune", "glue", *common, "--init", str(args.teacher), "--out", str(teacher)], teacher, 1
    )
    runs = {
        "gold": ["finetune", "glue", *common, "--init", str(args.student)],
        "distilled": [
            "distill",
            "glue",
            *common,
            "--teacher",
            str(teacher / "best"),
            "--student",
            str(args.student),
        ],
    }
    if transfer is not None:
        runs["distilled+transfer"] = [*runs["distilled"], "--transfer", str(transfer)]
    found = {"teacher": scores(teacher, task, 1)}
    for name, command in runs.items():
        out = work / name
        run_once([*CLI, *command, "--seeds", str(args.seeds), "--out", str(out)], out, args.seeds)
        found[name] = scores(out, task, args.seeds)
    return found


def speed(teacher: Path, student: Path, sentences: list[str], rounds: int) -> dict[str, list[float]]:
    """Sentences per second of each model's `predict` over `sentences`, alternating, `rounds` each."""
    import roberta

    models = {"teacher": roberta.load(teacher), "student": roberta.load(student)}  # in eval mode
    rates: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds + 1):  # the first round warms up and is dropped
        for name, hub in models.items():
            tokens = [hub.encode(s) for s in sentences]
            started = time.perf_counter()
            with torch.inference_mode():
                hub.predict("SST-2", tokens)
            rates[name].append(len(sentences) / (time.perf_counter() - started))
    return {name: values[1:] for name, values in rates.items()}


def _cell(values: list[float]) -> str:
    """The median of the seeds' scores, their range beside it when there are several."""
    if not values:
        return "—"
    median = f"{statistics.median(values):.1f}"
    return median if len(values) == 1 else f"{median} ({min(values):.1f}–{max(values):.1f})"


def report(found: dict[str, dict[str, list[float]]], rates: dict[str, list[float]], args) -> str:
    names = ["teacher", "gold", "distilled", "distilled+transfer"]
    lines = ["| task | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for task, by_name in found.items():
        cells = [_cell(by_name.get(name, [])) for name in names]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    t, s = statistics.median(rates["teacher"]), statistics.median(rates["student"])
    lines += [
        "",
        f"`predict` on SST-2 dev ({args.speed_sentences} sentences, {args.rounds} alternating rounds, "
        f"{torch.get_num_threads()} threads): teacher {t:,.0f} sentences/s, student {s:,.0f}: "
        f"**{s / t:.2f}x**.",
    ]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", type=Path, required=True, help="pretrained checkpoint of the teacher")
    p.add_argument("--student", type=Path, required=True, help="pretrained checkpoint of the student")
    p.add_argument("--glue", type=Path, default=DEFAULT_DATA / "glue")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--tasks", default="SST-2,MRPC")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--examples", type=int, default=RECIPE.examples, help="labelled training rows")
    p.add_argument(
        "--transfer", type=int, default=16000, help="unlabelled rows after them, if the task has them"
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--speed-sentences", type=int, default=872)
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    recipe = recipe_file(args.work)
    found = {task: measure_task(args, task, recipe) for task in args.tasks.split(",")}
    (args.work / "distill.json").write_text(json.dumps(found, indent=1))
    from roberta.tasks.glue import read_split

    dev = read_split(get_task("SST-2"), args.glue / "SST-2" / "dev.tsv")
    sentences = [e.text for e in dev][: args.speed_sentences]
    student = args.work / "SST-2" / "distilled" / "seed1" / "best"
    rates = speed(args.work / "SST-2" / "teacher" / "best", student, sentences, args.rounds)
    text = f"{report(found, rates, args)}\n\nMachine: {machine()}; {versions()}\n"
    (args.work / "distill.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
