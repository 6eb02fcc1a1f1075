"""Task distillation through `roberta distill glue|classify`: the loss against a hand-computed value,
the teacher's logits cached once and reused, a student distilled end to end, and refusals in one
line with nothing written."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from data_fixtures import glue_slice, save_micro_checkpoint, write_byte_tokenizer
from roberta import RobertaConfig, RobertaModel, checkpoint
from roberta.cli import main
from roberta.tasks import distill
from roberta.tokenizer import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

QUICK = "--train.batch_size=8 --train.max_steps=2 --train.eval_every=2 --train.checkpoint_every=2".split()


def test_loss_equals_the_hand_computed_value():
    student = torch.tensor([[1.0, 2.0, 0.0], [0.5, -1.0, 1.5]])
    teacher = torch.tensor([[2.0, 0.0, 1.0], [0.0, 0.0, 3.0]])
    gold = torch.tensor([1, 2])

    def softmax(row, t):
        e = [math.exp(x / t) for x in row]
        return [x / sum(e) for x in e]

    expected = 0.0
    for s, t, y in zip(student.tolist(), teacher.tolist(), gold.tolist()):
        p, q = softmax(s, 2.0), softmax(t, 2.0)
        kl = sum(qi * math.log(qi / pi) for pi, qi in zip(p, q))
        ce = -math.log(softmax(s, 1.0)[y])
        expected += 0.5 * 4.0 * kl + 0.5 * ce
    labelled = torch.tensor([True, True])
    assert distill.distillation_loss(student, teacher, gold, labelled, 2.0, 0.5).item() == pytest.approx(
        expected, rel=1e-6
    )
    # A transfer example (not labelled) takes the soft loss alone, its gold ignored.
    soft_only = distill.distillation_loss(student[:1], teacher[:1], gold[:1], ~labelled[:1], 2.0, 0.5)
    p, q = softmax(student[0].tolist(), 2.0), softmax(teacher[0].tolist(), 2.0)
    assert soft_only.item() == pytest.approx(4.0 * sum(qi * math.log(qi / pi) for pi, qi in zip(p, q)))
    # Regression: squared error to the teacher's score and to gold, mixed by alpha.
    scores = distill.distillation_loss(
        torch.tensor([[1.0]]), torch.tensor([[3.0]]), torch.tensor([0.0]), labelled[:1], 2.0, 0.25
    )
    assert scores.item() == pytest.approx(0.25 * 4.0 + 0.75 * 1.0)


@pytest.fixture(scope="module")
def models(shared_data, tmp_path_factory) -> dict[str, Path]:
    """A teacher (the micro model with an SST-2 head), a smaller student with the same tokenizer,
    a teacher with another tokenizer and one without the head."""
    root = tmp_path_factory.mktemp("distill-models")
    tok = load_tokenizer(shared_data / "gpt2_bpe")
    torch.manual_seed(1)
    config = RobertaConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_layers=1, num_heads=2, ffn_size=64, max_positions=66
    )
    other_tok = load_tokenizer(write_byte_tokenizer(root / "other-tokenizer"))
    other = RobertaModel(RobertaConfig(**{**config.to_dict(), "vocab_size": other_tok.vocab_size}))
    other.add_classification_head("SST-2", 2)
    return {
        "teacher": save_micro_checkpoint(root / "teacher", shared_data, {"SST-2": 2}),
        "student": checkpoint.save(root / "student", RobertaModel(config), tok),
        "headless": save_micro_checkpoint(root / "headless", shared_data),
        "other-tokenizer": checkpoint.save(root / "other", other, other_tok),
    }


@pytest.fixture(scope="module")
def sst16(shared_data, tmp_path_factory) -> Path:
    return glue_slice(tmp_path_factory.mktemp("sst"), shared_data, "SST-2", 16)


def distill_glue(
    data: Path, models: dict[str, Path], out: Path, *extra: str, teacher: str = "teacher"
) -> list:
    args = ["distill", "glue", "--task", "SST-2", "--data", str(data), "--teacher", str(models[teacher])]
    return [*args, "--student", str(models["student"]), "--out", str(out), *QUICK, *extra]


@pytest.fixture
def teacher_calls(monkeypatch) -> list[int]:
    """The examples of each teacher pass, counted by wrapping the function that runs the teacher."""
    calls = []
    compute = distill.teacher_logits

    def counted(teacher, head, token_ids, pad_id, device):
        calls.append(len(token_ids))
        return compute(teacher, head, token_ids, pad_id, device)

    monkeypatch.setattr(distill, "teacher_logits", counted)
    return calls


@pytest.mark.slow
def test_distill_glue_writes_best_and_results_and_caches_the_teacher(models, sst16, tmp_path, teacher_calls):
    out = tmp_path / "run"
    assert main(distill_glue(sst16, models, out)) == 0
    assert teacher_calls == [16]
    results = json.loads((out / "results.json").read_text())
    assert results["distillation"] == {
        "teacher": str(models["teacher"]),
        "temperature": 2.0,
        "alpha": 0.5,
        "transfer_examples": 0,
    }
    assert results["best"]["metric"] == "accuracy"
    student, _ = checkpoint.load(out / "best")
    assert student.config.hidden_size == 32 and "SST-2" in student.heads
    cached = np.load(out / "teacher-logits.npy", mmap_mode="r")
    assert isinstance(cached, np.memmap) and cached.shape == (16, 2)

    # The same teacher and data again: the cache is read, the teacher never runs.
    assert main(distill_glue(sst16, models, out, "--overwrite")) == 0
    assert teacher_calls == [16]
    assert np.array_equal(np.load(out / "teacher-logits.npy"), cached)

    # Other data (a transfer file added): the teacher runs again, over both sets.
    lines = (sst16 / "train.tsv").read_text().splitlines()
    (tmp_path / "transfer.tsv").write_text(
        "sentence\n" + "".join(f"{line.split(chr(9))[0]} !\n" for line in lines[1:9])
    )
    assert (
        main(distill_glue(sst16, models, out, "--overwrite", "--transfer", str(tmp_path / "transfer.tsv")))
        == 0
    )
    assert teacher_calls == [16, 24]
    assert json.loads((out / "results.json").read_text())["distillation"]["transfer_examples"] == 8


@pytest.mark.slow
def test_a_killed_run_resumes_exactly_from_its_cache(models, sst16, tmp_path, teacher_calls):
    out, last = tmp_path / "run", "checkpoints/step-00000004"
    steps = "--train.max_steps=4 --train.eval_every=2 --train.checkpoint_every=2 --train.keep_last=2".split()
    assert main(distill_glue(sst16, models, out, *steps)) == 0
    whole = load_file(str(out / last / "model.safetensors"))
    # As if killed after its step-2 checkpoint: the later checkpoint and the results gone.
    shutil.rmtree(out / last)
    (out / "results.json").unlink()
    assert main(distill_glue(sst16, models, out, *steps, "--resume")) == 0
    assert teacher_calls == [16]
    resumed = load_file(str(out / last / "model.safetensors"))
    assert all(whole[k].equal(resumed[k]) for k in whole)
    assert json.loads((out / "results.json").read_text())["distillation"]["teacher"] == str(models["teacher"])


@pytest.mark.parametrize(
    "teacher, cause",
    [
        ("other-tokenizer", "the teacher's tokenizer is not the student's"),
        ("headless", "the teacher has no head 'SST-2'"),
    ],
)
def test_a_wrong_teacher_is_one_line_and_nothing_is_written(models, sst16, tmp_path, capsys, teacher, cause):
    out = tmp_path / "run"
    assert main(distill_glue(sst16, models, out, teacher=teacher)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("roberta: error:") and cause in lines[0], lines
    assert not out.exists()


def test_a_teacher_with_other_labels_is_refused(models, tmp_path, capsys):
    rows = "".join(
        f"this is {w} {i},{'pos' if w == 'good' else 'neg'}\n" for i in range(4) for w in ("good", "bad")
    )
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    model, tok = checkpoint.load(models["teacher"])
    model.add_classification_head("classifier", 2, labels=("no", "yes"))
    checkpoint.save(tmp_path / "teacher", model, tok)
    train = str(tmp_path / "train.csv")
    args = ["distill", "classify", "--train", train, "--dev", train, "--text-column", "text"]
    args += [
        "--label-column",
        "label",
        "--teacher",
        str(tmp_path / "teacher"),
        "--student",
        str(models["student"]),
    ]
    assert main([*args, "--out", str(tmp_path / "run")]) == 2
    assert "trained on the labels no, yes, this data has neg, pos" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_student_head_that_does_not_fit_names_distills_own_remedy(models, sst16, tmp_path, capsys):
    model, tok = checkpoint.load(models["student"])
    model.add_classification_head("SST-2", 3)
    student = checkpoint.save(tmp_path / "student", model, tok)
    out = tmp_path / "run"
    assert main(distill_glue(sst16, {**models, "student": student}, out)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"{student}: head 'SST-2' has 3 outputs but the task has 2" in lines[0], lines
    assert "give a --model without this head" in lines[0] and "--init-task" not in lines[0]
    assert not out.exists()
