"""`roberta probe RUN`: what a pretraining run's checkpoints are worth downstream, as a curve.

Each chosen checkpoint of RUN, and first a random init of the same shape and tokenizer, is
fine-tuned on a small fixed GLUE suite with one recipe (`RECIPE`: chosen once for small models,
the same for every task and never tuned per checkpoint), over several seeds. A task's score is its official
metric at the best dev evaluation, x 100 (MRPC: F1 and accuracy averaged, STS-B: Pearson and
Spearman averaged, CoLA: Matthews correlation), the median over seeds; the average over tasks is
GLUE's. Beside them, two probes that need no training: STS-B's Spearman correlation of the cosine
of mean-pooled features, and the held-out masked-token accuracy the run logged at that step.

RUN/probe/ gets probe.json (every checkpoint x task x seed, with steps and tokens seen), probe.md
(the table) and probe.png (each task and the average against tokens seen, random init as a
line). Cells already in probe.json are read back, so a rerun trains nothing, a new checkpoint
adds a row, and a killed probe continues with the cell it was on.
"""

from __future__ import annotations

import math
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from roberta import checkpoint
from roberta.errors import UserError
from roberta.io import atomic_write, read_json, write_json
from roberta.options import ProbeOptions
from roberta.train import run_state
from roberta.validation import check_value

TASKS = ("SST-2", "MRPC", "STS-B", "RTE", "CoLA")
RANDOM = "random-init"


@dataclass(frozen=True)
class Recipe:
    lr: float
    batch_size: int
    epochs: float
    max_length: int = 128
    examples: int = 4000  # training examples read (the file's first ones)


# Small models want a larger learning rate than the paper's 1e-5..3e-5 for base and large; the
# same recipe for every task, so that a difference between checkpoints is the checkpoint's. At
# most 4,000 training examples a task: a probe of many checkpoints stays within CPU minutes, and
# with little data a random init cannot learn from the data alone what pretraining gave.
RECIPE = Recipe(lr=5e-4, batch_size=32, epochs=3)


@dataclass(frozen=True)
class Row:
    name: str  # "random-init" or the checkpoint's "step-NNNNNNNN"
    checkpoint: Path
    step: int
    tokens: int  # sequences x their length seen by this step (0 for the random init)


def probe(
    run: str | Path,
    glue: str | Path,
    tasks: tuple[str, ...] = TASKS,
    seeds: int = ProbeOptions.seeds,
    checkpoints: str = ProbeOptions.checkpoints,
    limit: int | None = ProbeOptions.limit,
    progress: bool = True,
) -> dict:
    """Probe `run`'s checkpoints (`all`, `last` or "step-N,...") on `tasks` of the GLUE directory
    `glue`; returns probe.json's content. Everything is checked before any training starts."""
    from roberta.tasks.glue import get_task

    run, glue = Path(run), Path(glue)
    chosen = [get_task(name) for name in _task_names(tasks)]
    for name, value in (("seeds", seeds), ("limit", limit)):
        check_value(ProbeOptions, name, value, "probe")
    per_step = _pretraining_tokens_per_step(run)
    found = _chosen_checkpoints(run, checkpoints)
    data = {task.name: _read_task(task, glue, min(limit or math.inf, RECIPE.examples)) for task in chosen}
    sts = _sts_dev(glue)
    out = run / "probe"
    record = _read_record(out / "probe.json")
    # Everything is checked: only now is anything written (the random init first).
    rows = _rows(run, found, per_step)
    cells = [(row, task, seed) for row in rows for task in chosen for seed in range(1, seeds + 1)]
    todo = [c for c in cells if str(c[2]) not in _cell(record, c[0], c[1].name)]
    with tqdm(total=len(cells), initial=len(cells) - len(todo), desc="probe", disable=not progress) as bar:
        for row in rows:
            _zero_shot(record, row, run, sts)
        for row, task, seed in todo:
            bar.set_postfix(row=row.name, task=task.name, seed=seed)
            figures = _fine_tune(row, task, seed, data[task.name], out / "cell")
            _cell(record, row, task.name)[str(seed)] = figures
            _summarize(record, tasks)
            write_json(out / "probe.json", record)
            bar.update(1)
    _summarize(record, tasks)
    write_json(out / "probe.json", record)
    _write_table(record, tasks, out / "probe.md")
    _plot(record, tasks, out / "probe.png")
    shutil.rmtree(out / "cell", ignore_errors=True)
    return record


def _task_names(tasks: tuple[str, ...]) -> tuple[str, ...]:
    if not tasks:
        raise UserError("--tasks names no task")
    twice = sorted({t for t in tasks if tasks.count(t) > 1})
    if twice:
        raise UserError(f"--tasks names {twice[0]} twice")
    return tasks


def _pretraining_tokens_per_step(run: Path) -> int:
    """Sequences x their length per step of the pretraining run `run` (UserError: not one)."""
    path = run / "job.json"
    if not path.is_file():
        raise UserError(f"{run}: no job.json: not a run directory of `roberta pretrain`")
    recorded = read_json(path)
    if "task" in recorded:
        raise UserError(f"{run}: a fine-tuning run ({recorded['task']}), not a pretraining run")
    job = recorded.get("job")
    try:
        per_step = job["train"]["batch_size"] * job["data"]["seq_len"]
    except (KeyError, TypeError):
        per_step = None
    if type(per_step) is not int or "data" not in recorded:
        raise UserError(f"{path}: not the job of a pretraining run (no train.batch_size and data.seq_len)")
    return per_step


def _chosen_checkpoints(run: Path, which: str) -> list[Path]:
    found = run_state.list_checkpoints(run)
    if not found:
        raise UserError(f"{run}: no checkpoints under {run / 'checkpoints'} (a pretraining run directory?)")
    if which == "last":
        return found[-1:]
    if which == "all":
        return found
    names = {name.strip() for name in which.split(",")}
    missing = sorted(names - {p.name for p in found})
    if missing:
        raise UserError(
            f"--checkpoints: {run} has no {missing[0]} (it has {', '.join(p.name for p in found)})"
        )
    return [p for p in found if p.name in names]


def _rows(run: Path, found: list[Path], per_step: int) -> list[Row]:
    """The random init (written now, if it is not yet), then the checkpoints in step order."""
    random_dir = _random_init(run, found[0])
    steps = [int(p.name.removeprefix("step-")) for p in found]
    return [Row(RANDOM, random_dir, 0, 0), *(Row(p.name, p, s, s * per_step) for p, s in zip(found, steps))]


def _read_record(path: Path) -> dict:
    """probe.json's cells so far (none if it is absent), checked: a file of another shape is
    refused, naming the field, rather than failing after hours of training."""
    if not path.is_file():
        return {"rows": {}}
    record = read_json(path)
    if not isinstance(record.get("rows"), dict):
        raise UserError(f"{path}: field 'rows' must be an object (move the file away to start afresh)")
    for name, entry in record["rows"].items():
        where = f"{path}: field 'rows.{name}'"
        if not isinstance(entry, dict) or not all(type(entry.get(k)) is int for k in ("step", "tokens")):
            raise UserError(f"{where} must be an object with integer 'step' and 'tokens'")
        tasks = entry.get("tasks")
        if not isinstance(tasks, dict) or not all(
            isinstance(seeds, dict) and all(isinstance(cell, dict) for cell in seeds.values())
            for seeds in tasks.values()
        ):
            raise UserError(f"{where}.tasks must map each task to an object of seeds' figures")
        if not isinstance(entry.get("zero_shot", {}), dict):
            raise UserError(f"{where}.zero_shot must be an object")
    return record


def _random_init(run: Path, like: Path) -> Path:
    """A model of `like`'s shape and tokenizer at its initialisation, seed 0, saved once."""
    import torch

    from roberta.model import RobertaModel

    target = run / "probe" / RANDOM
    if not checkpoint.is_checkpoint(target):
        model, tokenizer = checkpoint.load(like)
        torch.manual_seed(0)
        checkpoint.save(target, RobertaModel(model.config), tokenizer)
    return target


def _read_task(task, glue: Path, limit: float | None) -> tuple[list, Path, dict]:
    """The task's training examples (the first `limit`), their file, and its dev sets, read and
    checked as fine-tuning will check them (labels the task knows), before anything trains."""
    from roberta.tasks.classify import check_labels
    from roberta.tasks.glue import read_task_dir, sentence_task

    if not (glue / task.name).is_dir():
        raise UserError(f"{glue}: no {task.name}/ directory (give --glue the folder holding the GLUE tasks)")
    train, train_path, dev = read_task_dir(task, glue / task.name)
    train = train[: int(limit)] if limit is not None else train
    check_labels(sentence_task(task), train, train_path, dev)
    return train, train_path, dev


def _sts_dev(glue: Path) -> list | None:
    """STS-B's dev pairs for the zero-shot cosine probe, where the folder has them (its training
    file is not needed)."""
    from roberta.tasks.glue import get_task, read_split

    task = get_task("STS-B")
    path = glue / task.name / task.dev_sets[0][1]
    return read_split(task, path, labelled=True) if path.is_file() else None


def _cell(record: dict, row: Row, task: str) -> dict:
    entry = record["rows"].setdefault(row.name, {"step": row.step, "tokens": row.tokens, "tasks": {}})
    return entry["tasks"].setdefault(task, {})


def _fine_tune(
    row: Row, task, seed: int, data: tuple[list, Path, dict], out: Path
) -> dict[str, float | None]:
    """One fine-tuning run of `row` on `task` with the task's recipe; its official figures at
    the best dev evaluation (None where undefined, or where no evaluation had a number)."""
    from roberta.tasks.classify import LabelledSentences, plan_sentences
    from roberta.tasks.finetune import Start, finetune, load_finetune_job
    from roberta.tasks.glue import sentence_task

    recipe = RECIPE
    overrides = [f"--train.seed={seed}", "--train.progress=false", f"--data.max_length={recipe.max_length}"]
    job = load_finetune_job(None, overrides, recipe.lr, recipe.batch_size, recipe.epochs)
    train, train_path, dev = data

    def plan(job, model, tokenizer, source):
        return plan_sentences(
            LabelledSentences(sentence_task(task), train, train_path, dev), job, model, tokenizer, source
        )

    finetune(job, out, Start(row.checkpoint), plan, overwrite=True)
    results = read_json(out / "results.json")
    best = results["best"]
    at_best = next((e for e in results["evaluations"] if best and e["step"] == best["step"]), {})
    return {name: _number(at_best.get(name)) for name in task.metrics}


def _number(value) -> float | None:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _zero_shot(record: dict, row: Row, run: Path, sts: list | None) -> None:
    """The probes without training, once per row: STS-B from feature cosines, and the held-out
    masked-token accuracy the run logged at the row's step."""
    entry = record["rows"].setdefault(row.name, {"step": row.step, "tokens": row.tokens, "tasks": {}})
    if "zero_shot" in entry:
        return
    from roberta.train.metrics import read_metrics

    logged = [
        r for r in read_metrics(run / "metrics.jsonl") if r.get("split") == "valid" and r["step"] == row.step
    ]
    accuracy = _number(logged[-1].get("accuracy")) if logged else None
    entry["zero_shot"] = {
        "sts_b_cosine_spearman": _sts_cosine(row.checkpoint, sts) if sts else None,
        "masked_accuracy": 100 * accuracy if accuracy is not None else None,
    }


def _sts_cosine(path: Path, examples: list) -> float | None:
    """Spearman (x 100) of STS-B's gold scores and the cosine of the two sentences' vectors: a
    sentence encoder's own (its embedding head), else the mean-pooled features."""
    from roberta.evaluation.sts import cosines, hub_vectors
    from roberta.hub import load
    from roberta.similarity.metric import sts_figures

    hub = load(path)
    texts = [e.text for e in examples] + [e.pair for e in examples]
    vectors = hub_vectors(hub, texts, None if hub.embedding_pool() else "mean")
    n = len(examples)
    return _number(
        100 * sts_figures(cosines(vectors[:n], vectors[n:]), [e.label for e in examples])["spearman"]
    )


def task_score(figures: dict[str, float | None]) -> float | None:
    """GLUE's one number for a task, x 100: the mean of its official metrics (MRPC's F1 and
    accuracy, STS-B's Pearson and Spearman), None if any is undefined."""
    values = list(figures.values())
    return None if any(v is None for v in values) else 100 * statistics.fmean(values)


def _summarize(record: dict, tasks: tuple[str, ...]) -> None:
    """Each row's per-task median over seeds and, with every task scored, their average."""
    for entry in record["rows"].values():
        medians = {}
        for task in tasks:
            scores = [task_score(f) for f in entry["tasks"].get(task, {}).values()]
            scores = [s for s in scores if s is not None]
            medians[task] = statistics.median(scores) if scores else None
        entry["median"] = medians
        known = list(medians.values())
        entry["average"] = statistics.fmean(known) if known and None not in known else None


def _write_table(record: dict, tasks: tuple[str, ...], path: Path) -> None:
    def cell(value: float | None) -> str:
        return "—" if value is None else f"{value:.1f}"

    lines = [
        "| checkpoint | step | tokens seen | "
        + " | ".join(tasks)
        + " | average | STS-B zero-shot | masked acc. |",
        "|---" * (len(tasks) + 6) + "|",
    ]
    for name, entry in _ordered(record):
        zero = entry.get("zero_shot", {})
        scores = [cell(entry["median"].get(t)) for t in tasks]
        lines.append(
            f"| {name} | {entry['step']:,} | {entry['tokens']:,} | "
            + " | ".join(scores)
            + f" | {cell(entry['average'])} | "
            f"{cell(zero.get('sts_b_cosine_spearman'))} | {cell(zero.get('masked_accuracy'))} |"
        )
    with atomic_write(path) as f:
        f.write("\n".join(lines) + "\n")


def _ordered(record: dict) -> list[tuple[str, dict]]:
    return sorted(record["rows"].items(), key=lambda item: (item[0] != RANDOM, item[1]["step"]))


def _plot(record: dict, tasks: tuple[str, ...], path: Path) -> None:
    """Each task's median and the average against tokens seen; the random init as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(name, entry) for name, entry in _ordered(record) if name != RANDOM]
    baseline = record["rows"].get(RANDOM, {}).get("median", {})
    fig, ax = plt.subplots(figsize=(8, 5))
    for key in (*tasks, "average"):
        points = [(e["tokens"], e["average"] if key == "average" else e["median"].get(key)) for _, e in rows]
        points = [(x, y) for x, y in points if y is not None]
        if points:
            line = ax.plot(*zip(*points), marker="o", label=key, linewidth=2.5 if key == "average" else 1.2)[
                0
            ]
            base = record["rows"].get(RANDOM, {}).get("average") if key == "average" else baseline.get(key)
            if base is not None:
                ax.axhline(base, color=line.get_color(), linestyle="--", linewidth=0.8)
    ax.xaxis.set_major_formatter(lambda x, _: f"{x / 1e6:g}M")
    ax.set_xlabel("tokens seen in pretraining")
    ax.set_ylabel("dev score x 100 (median over seeds); dashed: random init")
    ax.legend(fontsize=8)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=80)
    plt.close(fig)
    tmp.replace(path)
