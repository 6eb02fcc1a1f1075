"""`roberta finetune wsc|commonsenseqa|winogrande|choice` end to end on slices: the multiple-choice
path learns each dataset's slice (RACE's own test is in test_squad_race_train.py), `predict
--task` writes each leaderboard file whose count of right answers is the run's reported dev
accuracy, and a killed WSC run resumes bit for bit."""

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from data_fixtures import save_micro_checkpoint
from process_fixtures import run_killed_and_resumed
from roberta.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

# Overfitting a slice: no dropout (the micro model's options score alike at first, and dropout's
# noise drowns their differences), no weight decay, a high LR, many epochs.
OVERFIT = [
    "--optim.lr=1e-3",
    "--optim.weight_decay=0",
    "--model.dropout=0",
    "--model.attention_dropout=0",
    "--model.classifier_dropout=0",
    "--train.device=cpu",
    "--train.log_every=1000",
]


@pytest.fixture(scope="module")
def micro(shared_data, tmp_path_factory) -> Path:
    return save_micro_checkpoint(tmp_path_factory.mktemp("micro") / "ckpt", shared_data)


def head(path: Path, lines: int, out: Path) -> Path:
    out.write_text("".join(path.read_text().splitlines(keepends=True)[:lines]))
    return out


def best(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())["best"]


def test_commonsenseqa_learns_its_slice_and_predicts_the_leaderboard_file(
    micro, shared_data, tmp_path, capsys
):
    data = head(shared_data / "commonsenseqa" / "train_rand_split.jsonl", 24, tmp_path / "train.jsonl")
    run = tmp_path / "run"
    argv = ["finetune", "commonsenseqa", "--train", str(data), "--dev", str(data), "--init", str(micro)]
    assert main([*argv, "--out", str(run), *OVERFIT, "--train.epochs=25", "--train.batch_size=8"]) == 0
    assert best(run)["metric"] == "accuracy" and best(run)["value"] > 90
    assert json.loads((run / "job.json").read_text())["layout"] == "commonsenseqa"
    # The test file's predictions (here the slice, its answers ignored), counted right here.
    out = tmp_path / "predictions.csv"
    assert (
        main(
            ["predict", str(run / "best"), "--task", "CommonsenseQA", "--input", str(data), "--out", str(out)]
        )
        == 0
    )
    answers = {r["id"]: r["answerKey"] for r in map(json.loads, data.read_text().splitlines())}
    rows = [line.split(",") for line in out.read_text().splitlines()]
    assert [i for i, _ in rows] == list(answers)
    assert 100.0 * sum(answers[i] == letter for i, letter in rows) / len(rows) == pytest.approx(
        best(run)["value"]
    )
    capsys.readouterr()


def test_winogrande_learns_its_slice_and_predicts_the_leaderboard_file(micro, shared_data, tmp_path, capsys):
    data = tmp_path / "wg"
    data.mkdir()
    # One sentence of each twin pair (the twins differ by a word and have opposite answers: a micro
    # model does not learn to tell them apart in a few seconds).
    rows, twins = [], set()
    for line in (shared_data / "winogrande" / "train_xs.jsonl").read_text().splitlines():
        if json.loads(line)["qID"].rsplit("-", 1)[0] not in twins and len(rows) < 32:
            twins.add(json.loads(line)["qID"].rsplit("-", 1)[0])
            rows.append(line + "\n")
    for name in ("train_xs.jsonl", "dev.jsonl"):
        (data / name).write_text("".join(rows))
    run = tmp_path / "run"
    argv = [
        "finetune",
        "winogrande",
        "--data",
        str(data),
        "--size",
        "xs",
        "--init",
        str(micro),
        "--out",
        str(run),
    ]
    assert main([*argv, *OVERFIT, "--train.epochs=40", "--train.batch_size=8"]) == 0
    assert best(run)["value"] > 90
    out = tmp_path / "predictions.lst"
    assert (
        main(
            [
                "predict",
                str(run / "best"),
                "--task",
                "WinoGrande",
                "--input",
                str(data / "dev.jsonl"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    answers = [r["answer"] for r in map(json.loads, (data / "dev.jsonl").read_text().splitlines())]
    predicted = out.read_text().split()
    assert set(predicted) <= {"1", "2"} and len(predicted) == 32
    assert 100.0 * sum(a == p for a, p in zip(answers, predicted)) / 32 == pytest.approx(best(run)["value"])
    capsys.readouterr()


def test_winogrande_by_the_masked_lm_and_its_leaderboard_file(micro, shared_data, tmp_path, capsys):
    """fairseq's way (--method lm): the margin loss on the LM's scores at the blank; the file
    predict writes without a `winogrande` head counts as the run's last dev accuracy."""
    data = tmp_path / "wg"
    data.mkdir()
    head(shared_data / "winogrande" / "train_xs.jsonl", 24, data / "train_xs.jsonl")
    head(shared_data / "winogrande" / "dev.jsonl", 24, data / "dev.jsonl")
    run = tmp_path / "run"
    argv = ["finetune", "winogrande", "--method", "lm", "--data", str(data), "--init", str(micro)]
    assert (
        main([*argv, "--out", str(run), "--train.max_steps=6", "--train.batch_size=8", "--train.epochs=0"])
        == 0
    )
    results = json.loads((run / "results.json").read_text())
    assert json.loads((run / "job.json").read_text())["loss"] == "margin"
    out = tmp_path / "predictions.lst"
    last = run / "checkpoints" / "step-00000006"
    assert (
        main(
            [
                "predict",
                str(last),
                "--task",
                "WinoGrande",
                "--input",
                str(data / "dev.jsonl"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    answers = [r["answer"] for r in map(json.loads, (data / "dev.jsonl").read_text().splitlines())]
    predicted = out.read_text().split()
    right = sum(a == p for a, p in zip(answers, predicted))
    # Strictly higher wins in the run's count, option 1 on a tie in the file: ties are not expected.
    assert 100.0 * right / 24 == pytest.approx(results["evaluations"][-1]["accuracy"])
    capsys.readouterr()


OWN_ROWS = [
    {"question": f"Which colour is the {thing}?", "options": options, "answer": answer}
    for thing, options, answer in [
        ("sky", ["blue", "green", "red"], "blue"),
        ("grass", ["blue", "green", "red"], "B"),
        ("blood", ["blue", "green", "red"], 2),
        ("sea", ["red", "blue", "green"], "1"),
        ("leaf", ["green", "red", "blue"], "green"),
        ("cherry", ["green", "blue", "red"], "C"),
    ]
]


def test_own_multiple_choice_rows_read_alike_from_jsonl_csv_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from roberta.tasks.choice import read_choice_file

    jsonl, csv, parquet = tmp_path / "d.jsonl", tmp_path / "d.csv", tmp_path / "d.parquet"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in OWN_ROWS))
    lines = [
        "question,a,b,c,answer",
        *(f"{r['question']},{','.join(r['options'])},{r['answer']}" for r in OWN_ROWS),
    ]
    csv.write_text("\n".join(lines) + "\n")
    pq.write_table(pa.Table.from_pylist([{**r, "answer": str(r["answer"])} for r in OWN_ROWS]), parquet)
    read = [
        read_choice_file(jsonl, "question", ["options"], "answer"),
        read_choice_file(csv, "question", ["a", "b", "c"], "answer"),
        read_choice_file(parquet, "question", ["options"], "answer"),
    ]
    # The answer as the option's text, its letter or its 0-based index: the same label.
    assert [e.label for e in read[0]] == [0, 1, 2, 1, 0, 2]
    assert all(
        [(e.question, e.options, e.label) for e in examples]
        == [(e.question, e.options, e.label) for e in read[0]]
        for examples in read
    )


def test_own_multiple_choice_file_learns(micro, shared_data, tmp_path, capsys):
    """CommonsenseQA questions rewritten as a user's rows: question, a list of options, the answer's text."""
    rows = []
    for line in (shared_data / "commonsenseqa" / "train_rand_split.jsonl").read_text().splitlines()[:24]:
        record = json.loads(line)
        options = [c["text"] for c in record["question"]["choices"]]
        answer = options["ABCDE".index(record["answerKey"])]
        rows.append({"question": record["question"]["stem"], "options": options, "answer": answer})
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    argv = ["finetune", "choice", "--train", str(path), "--dev", str(path), "--init", str(micro)]
    assert main([*argv, "--out", str(run), *OVERFIT, "--train.epochs=25", "--train.batch_size=8"]) == 0
    assert best(run)["value"] > 90
    capsys.readouterr()


def wsc_slice(shared_data: Path, root: Path) -> Path:
    root.mkdir()
    source = shared_data / "wsc" / "superglue"
    head(source / "train.jsonl", 40, root / "train.jsonl")
    head(source / "train.jsonl", 40, root / "val.jsonl")
    return root


def test_wsc_learns_and_a_killed_run_resumes_bit_identically(micro, shared_data, tmp_path, capsys):
    data = wsc_slice(shared_data, tmp_path / "wsc")

    def argv(out: Path) -> list[str]:
        job = ["--train.batch_size=4", "--train.max_steps=30", "--optim.lr=5e-4", "--optim.weight_decay=0"]
        return ["finetune", "wsc", "--data", str(data), "--init", str(micro), "--out", str(out), *job]

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    run_killed_and_resumed(argv, whole, killed, "step-9:micro-batch-0")

    def figures(run):
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "mfu", "data_wait")} for r in rows]

    assert figures(killed) == figures(whole)
    final = "checkpoints/step-00000030/model.safetensors"
    a, b = load_file(str(whole / final)), load_file(str(killed / final))
    assert all(a[k].equal(b[k]) for k in a)
    # It learns the slice's referents: val (= the training rows) well above its 50% majority.
    evaluations = json.loads((whole / "results.json").read_text())["evaluations"]
    assert evaluations[-1]["accuracy"] > evaluations[0]["accuracy"]
    # The SuperGLUE file of the best checkpoint agrees with the run's count on the same rows.
    out = tmp_path / "WSC.jsonl"
    assert (
        main(
            [
                "predict",
                str(whole / "best"),
                "--task",
                "WSC",
                "--input",
                str(data / "val.jsonl"),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    labels = [r["label"] for r in map(json.loads, (data / "val.jsonl").read_text().splitlines())]
    predicted = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["idx"] for p in predicted] == list(range(40)) and {p["label"] for p in predicted} <= {
        "True",
        "False",
    }
    right = sum((p["label"] == "True") == label for p, label in zip(predicted, labels))
    assert 100.0 * right / 40 == pytest.approx(best(whole)["value"])
    capsys.readouterr()


def test_first_twenty_commonsenseqa_losses_equal_hf_multiple_choice(micro, shared_data, tmp_path):
    """The same weights (our ranking head's dense and out_proj as HF's pooler and classifier),
    dropout off, the same batches and optimizer: our losses are RobertaForMultipleChoice's."""
    transformers = pytest.importorskip("transformers")
    import torch

    from roberta import RobertaConfig, RobertaModel, checkpoint
    from roberta.convert import export_hf
    from roberta.tasks.choice import COMMONSENSEQA, choice_objective, encode_all, read_commonsenseqa
    from roberta.tasks.finetune import Batching, load_finetune_job
    from roberta.train.optim import build_optimizer, learning_rate, set_learning_rate

    overrides = ["--train.max_steps=20", "--train.epochs=0", "--schedule.warmup_steps=2"]
    job = load_finetune_job(None, [*overrides, "--schedule.warmup_fraction=0"], 5e-4, 8)
    loaded, tok = checkpoint.load(micro)
    no_dropout = {"dropout": 0.0, "attention_dropout": 0.0, "classifier_dropout": 0.0}
    model = RobertaModel(RobertaConfig(**{**loaded.config.to_dict(), **no_dropout}))
    export_hf(tmp_path / "hf", model, tok)
    torch.manual_seed(3)
    model.add_classification_head("commonsenseqa", 1)
    hf = transformers.RobertaForMultipleChoice.from_pretrained(tmp_path / "hf")
    ranking = model.heads["commonsenseqa"]
    with torch.no_grad():
        for ours, theirs in ((ranking.dense, hf.roberta.pooler.dense), (ranking.out_proj, hf.classifier)):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
    hf.roberta.embeddings.token_type_embeddings.weight.requires_grad_(False)  # RoBERTa has none

    data = head(shared_data / "commonsenseqa" / "train_rand_split.jsonl", 160, tmp_path / "t.jsonl")
    encoded = encode_all(tok, read_commonsenseqa(data), COMMONSENSEQA, 128)
    objective = choice_objective("commonsenseqa", encoded, {}, Batching(job, tok.pad_id))
    batches = objective.train_batches(0)
    ours_opt, hf_opt = build_optimizer(model, job.optim), build_optimizer(hf, job.optim)
    model.train(), hf.train()
    ours_losses, hf_losses = [], []
    for step in range(20):
        batch = next(batches)
        for opt in (ours_opt, hf_opt):
            set_learning_rate(opt, learning_rate(step, job.optim.lr, job.schedule, job.train.max_steps))
        ours = objective.loss(model, batch)["loss"] / len(batch["labels"])
        ids = batch["tokens"].view(len(batch["labels"]), 5, -1)
        theirs = hf(input_ids=ids, attention_mask=ids.ne(tok.pad_id), labels=batch["labels"]).loss
        for loss, opt in ((ours, ours_opt), (theirs, hf_opt)):
            loss.backward()
            opt.step()
            opt.zero_grad()
        ours_losses.append(ours.item())
        hf_losses.append(theirs.item())
    assert ours_losses == pytest.approx(hf_losses, rel=1e-5)
    assert ours_losses[-1] < ours_losses[0]  # it moves, so equal losses mean equal updates
