"""Task distillation: a student fine-tuned on a teacher's soft labels mixed with the gold labels
(Hinton et al. 2015), on the task's training set and, optionally, on unlabeled transfer text in
the task's format ("Well-read students learn better", Turc et al. 2019).

The student starts from any checkpoint with the teacher's tokenizer; the teacher is a fine-tuned
checkpoint holding the task's head. Its logits for every training and transfer example are
computed once, after the whole command has been checked, and cached at --out
(`teacher-logits.npy`, read memory-mapped, and `teacher-logits.json`, the teacher's and the data's
hashes): a resumed run, and a rerun of the same teacher on the same data (--overwrite keeps the
cache), read them instead of running the teacher again; a changed teacher or data recomputes them.
Everything else is fine-tuning's: classify's objective with its training loss replaced and each
training batch given its rows of teacher logits, the one trainer, RUN/best/, exact resume.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from roberta.errors import UserError
from roberta.io import atomic_write, read_json, write_json
from roberta.model import RobertaModel
from roberta.options.finetune import DistillLoss
from roberta.runtime.batching import pad, sorted_batches
from roberta.tasks.classify import (
    Example,
    LabelledSentences,
    SentenceTask,
    classify_objective,
    encode,
    encode_sentences,
    sentence_logits,
)
from roberta.tasks.finetune import Batching, Task, check_head
from roberta.train import distributed
from roberta.train.config import JobConfig
from roberta.train.run_state import RESULTS_FILE, TEACHER_LOGITS
from roberta.train.trainer import Batch, Objective, TrainResult

LOGITS_FILE, LOGITS_INFO = TEACHER_LOGITS
TEACHER_BATCH = 64  # examples per teacher forward while caching its logits
# distill has no --init-task: the student starts from --model with its heads, so the remedy is there.
STUDENT_HEAD_HINT = (
    "distill trains the student's heads as --model holds them: give a --model without this head "
    "(the pretrained checkpoint it was made from, say) or with one that fits the task"
)


@dataclass(frozen=True)
class Distillation(DistillLoss):
    """The teacher and how its soft labels mix with the gold ones: the fields, their defaults and
    their rules are `distill`'s options (`roberta.options.finetune.DistillLoss`), checked when made."""

    def record(self) -> dict:
        return {"teacher": str(self.teacher), "temperature": self.temperature, "alpha": self.alpha}


def distillation_loss(
    student: torch.Tensor,
    teacher: torch.Tensor,
    gold: torch.Tensor,
    labelled: torch.Tensor,
    temperature: float,
    alpha: float,
) -> torch.Tensor:
    """The batch's summed loss: alpha * soft + (1 - alpha) * hard on labelled examples, soft alone
    on transfer examples (`labelled` False, their `gold` a placeholder). For classes (logits
    [B, C]) soft is `soft_kl` and hard the cross-entropy to gold; for
    regression (one output) soft is the squared error to the teacher's score, hard to gold."""
    if student.shape[-1] == 1:
        soft = (student - teacher).squeeze(-1) ** 2
        hard = (student.squeeze(-1) - gold) ** 2
    else:
        soft = soft_kl(student, teacher, temperature)
        hard = F.cross_entropy(student, gold, reduction="none")
    soft_weight = torch.where(labelled, alpha, 1.0)
    hard_weight = torch.where(labelled, 1.0 - alpha, 0.0)
    return (soft_weight * soft + hard_weight * hard).sum()


def soft_kl(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """Per row of logits [N, C]: T² KL(softmax(teacher/T) || softmax(student/T)), scaled by T² so
    its gradients keep their size as T changes (Hinton et al. 2015)."""
    log_p = F.log_softmax(student / temperature, dim=-1)
    log_q = F.log_softmax(teacher / temperature, dim=-1)
    return temperature**2 * F.kl_div(log_p, log_q, reduction="none", log_target=True).sum(-1)


def distilled_objective(
    base: Objective,
    task: SentenceTask,
    logits: Callable[[], np.ndarray],
    labelled: int,
    settings: Distillation,
) -> Objective:
    """`base` (classify's objective over the labelled examples then the transfer ones) with each
    training batch given its teacher logits (rows of `logits()`, by example index) and trained on
    `distillation_loss`; held-out sets keep the gold loss fine-tuning reports."""

    def with_teacher(batch: Batch) -> Batch:
        rows = logits()[batch["index"].numpy()]
        return {**batch, "teacher": torch.from_numpy(np.asarray(rows)), "labelled": batch["index"] < labelled}

    def loss(model: RobertaModel, batch: Batch) -> dict:
        if "teacher" not in batch:
            return base.loss(model, batch)
        student, gold, known = sentence_logits(task, model, batch), batch["labels"], batch["labelled"]
        total = distillation_loss(
            student, batch["teacher"].float(), gold, known, settings.temperature, settings.alpha
        )
        if task.regression:
            return {"loss": total}
        return {"loss": total, "correct": ((student.argmax(-1) == gold) & known).sum()}

    return dataclasses.replace(
        base, train_batches=lambda start: (with_teacher(b) for b in base.train_batches(start)), loss=loss
    )


def load_teacher(settings: Distillation, task: SentenceTask, tokenizer) -> RobertaModel:
    """The teacher, refused unless it holds the student's tokenizer and the task's head (its kind,
    outputs and, where it names them, labels)."""
    from roberta.convert import load_any

    source = settings.teacher
    teacher, teacher_tokenizer = load_any(source)
    if teacher_tokenizer is None or teacher_tokenizer.fingerprint() != tokenizer.fingerprint():
        raise UserError(
            f"{source}: the teacher's tokenizer is not the student's; distillation matches their outputs "
            "example by example, so both must read the same ids"
        )
    spec = task.heads[task.name]
    if task.name not in teacher.heads:
        have = ", ".join(teacher.heads) or "none"
        raise UserError(f"{source}: the teacher has no head {task.name!r} (its heads: {have})")
    head = teacher.heads[task.name].spec()
    labels = tuple(head.get("labels", ()))
    if head["kind"] != spec["kind"] or head.get("num_classes") != spec["num_classes"]:
        raise UserError(
            f"{source}: the teacher's head {task.name!r} has {head.get('num_classes')} output(s), "
            f"the task {spec['num_classes']}"
        )
    if labels and labels != task.labels:
        raise UserError(
            f"{source}: the teacher's head {task.name!r} was trained on the labels {', '.join(labels)}, "
            f"this data has {', '.join(task.labels)}"
        )
    return teacher.eval()


def fingerprint(model: RobertaModel) -> str:
    """sha256 of the model's config and every weight: what decides its logits."""
    digest = hashlib.sha256(repr(sorted(model.config.to_dict().items())).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def data_hash(token_ids: Sequence[Sequence[int]], head: str) -> str:
    """sha256 of the examples the teacher reads (their ids, in order) and the head it reads them with."""
    lengths = np.array([len(ids) for ids in token_ids], dtype=np.int64)
    ids = np.fromiter((i for row in token_ids for i in row), dtype=np.int64, count=int(lengths.sum()))
    digest = hashlib.sha256(head.encode())
    digest.update(lengths.tobytes())
    digest.update(ids.tobytes())
    return digest.hexdigest()


@torch.no_grad()
def teacher_logits(
    teacher: RobertaModel,
    task: SentenceTask,
    token_ids: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device,
) -> np.ndarray:
    """The teacher's head outputs for every example, [N, outputs] float32, in example order."""
    teacher.to(device)
    out = None
    for indices in sorted_batches([len(ids) for ids in token_ids], TEACHER_BATCH):
        tokens = pad([token_ids[i] for i in indices], pad_id).to(device)
        logits = sentence_logits(task, teacher, {"tokens": tokens}).cpu()
        if out is None:
            out = np.empty((len(token_ids), logits.shape[-1]), dtype=np.float32)
        out[indices] = logits.numpy()
    teacher.to("cpu")
    return out


def cached_array(
    out: Path, files: tuple[str, str], want: dict, compute: Callable[[], np.ndarray], placement
) -> np.ndarray:
    """An array a teacher computes once per command, kept at --out (`files`: the .npy and the JSON
    of what made it, `want`: the teacher's and the data's hashes): read, memory-mapped, where
    --out holds one made from the same teacher and data, else computed by the main process and
    written. Every rank calls it once the plan has passed. The JSON is written after the array, so
    a cache whose writer was killed between them is computed again."""
    array_file, info_file = files
    if placement.is_main and not _holds(out / array_file, out / info_file, want):
        array = compute()
        out.mkdir(parents=True, exist_ok=True)
        with atomic_write(out / array_file, "wb") as f:
            np.save(f, array)
        write_json(out / info_file, {**want, "examples": len(array)})
    distributed.barrier()
    return np.load(out / array_file, mmap_mode="r")


def _holds(array: Path, info: Path, want: dict) -> bool:
    if not info.is_file() or not array.is_file():
        return False
    recorded = read_json(info)
    return all(recorded.get(key) == value for key, value in want.items())


@dataclass
class TeacherCache:
    """The teacher's logits for the training then transfer examples, cached at --out: `prepare`
    (a `Task.prepare`) reads or computes them (`cached_array`); `logits()` is then the array."""

    teacher: RobertaModel | None
    task: SentenceTask
    token_ids: list[list[int]]
    pad_id: int
    array: np.ndarray | None = None

    def prepare(self, out: Path, placement: distributed.Placement) -> None:
        teacher = self.teacher
        want = (
            {"teacher": fingerprint(teacher), "data": data_hash(self.token_ids, self.task.name)}
            if placement.is_main
            else {}
        )
        self.array = cached_array(
            out,
            TEACHER_LOGITS,
            want,
            lambda: teacher_logits(teacher, self.task, self.token_ids, self.pad_id, placement.device),
            placement,
        )
        self.teacher = None  # its logits are all a run needs of it

    def logits(self) -> np.ndarray:
        return self.array


def plan_distillation(
    sentences: LabelledSentences,
    transfer: Sequence[Example],
    settings: Distillation,
    job: JobConfig,
    model: RobertaModel,
    tokenizer,
    source: str | Path,
) -> Task:
    """The student `model` (from `source`) distilled from `settings.teacher` on the labelled
    examples and the unlabeled `transfer` ones, checked and encoded at a length both models hold;
    RUN/best/ holds the best dev checkpoint, RUN/results.json the distillation's settings."""
    task = sentences.task
    for name, spec in task.heads.items():  # before the teacher's minutes of loading
        check_head(model, name, spec, source, STUDENT_HEAD_HINT)
    teacher = load_teacher(settings, task, tokenizer)
    cap = min(job.data.max_length, teacher.config.max_seq_len)
    job = dataclasses.replace(job, data=dataclasses.replace(job.data, max_length=cap))
    data = encode_sentences(sentences, job, model, tokenizer, source)
    placeholder = 0.0 if task.regression else 0  # a transfer example's gold label, weighted 0
    transfer_ids = encode(tokenizer, transfer, data.max_length) if transfer else []
    train = (data.train[0] + transfer_ids, data.train[1] + [placeholder] * len(transfer_ids))
    cache = TeacherCache(teacher, task, train[0], tokenizer.pad_id)
    labelled = len(sentences.train)

    def objective(member: JobConfig, rank: int, world: int) -> Objective:
        base = classify_objective(task, train, data.dev, Batching(member, tokenizer.pad_id, rank, world))
        return distilled_objective(base, task, cache.logits, labelled, settings)

    return Task(
        objective=objective,
        max_length=data.max_length,
        run_info={"task": task.name, "labels": list(task.labels), "distillation": settings.record()},
        finish=functools.partial(record_distillation, settings=settings, transfer=len(transfer_ids)),
        prepare=cache.prepare,
        keep=TEACHER_LOGITS,
    )


def record_distillation(
    run_dir: Path,
    job: JobConfig,
    result: TrainResult,
    placement: distributed.Placement,
    *,
    settings: Distillation,
    transfer: int,
) -> None:
    """After a run (a `Task.finish`): RUN/results.json with the teacher, T, alpha and the count of
    transfer examples."""
    if placement.is_main:
        results = read_json(run_dir / RESULTS_FILE)
        record = {**settings.record(), "transfer_examples": transfer}
        write_json(run_dir / RESULTS_FILE, {**results, "distillation": record})
