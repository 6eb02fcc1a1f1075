"""Fine-tuning through `roberta finetune glue|classify`: it learns, it resumes bit for bit, it
matches HF transformers step for step, it starts from every checkpoint format, and bad input
is one line with nothing left behind."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from data_fixtures import glue_slice, save_micro_checkpoint
from process_fixtures import run_figures, run_killed_and_resumed
from roberta import RobertaConfig, RobertaModel, checkpoint
from roberta.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def micro(shared_data, tmp_path_factory) -> Path:
    """A micro model (2 x 64) with the GPT-2 tokenizer, saved as our checkpoint."""
    return save_micro_checkpoint(tmp_path_factory.mktemp("micro") / "ckpt", shared_data)


@pytest.fixture(scope="module")
def sst128(shared_data, tmp_path_factory) -> Path:
    """128 SST-2 training sentences as both train.tsv and dev.tsv."""
    return glue_slice(tmp_path_factory.mktemp("sst"), shared_data, "SST-2", 128)


SST_JOB = ["--optim.lr=1e-3", "--train.batch_size=16", "--train.epochs=8"]


def glue(task: str, data: Path, init: Path, out: Path, *extra: str) -> list[str]:
    """The arguments of `roberta finetune glue` (after "finetune")."""
    return ["glue", "--task", task, "--data", str(data), "--init", str(init), "--out", str(out), *extra]


def test_sst2_learns_and_a_killed_run_resumes_bit_identically(micro, sst128, tmp_path):
    def args(out: Path) -> list[str]:
        return glue("SST-2", sst128, micro, out, *SST_JOB)

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    run_killed_and_resumed(lambda out: ["finetune", *args(out)], whole, killed, "step-21:micro-batch-0")

    # The wiring learns: 128 sentences fitted to >= 95% accuracy on themselves.
    results = json.loads((whole / "results.json").read_text())
    assert results["best"]["metric"] == "accuracy" and results["best"]["value"] >= 0.95
    assert len(results["evaluations"]) == 8  # every epoch
    model, tokenizer = checkpoint.load(whole / "best")
    assert model.heads["SST-2"].labels == ("0", "1") and tokenizer is not None

    # Resumed: the same figures at every step and the same final weights, dropout on.
    assert run_figures(killed) == run_figures(whole)
    final = "checkpoints/step-00000064/model.safetensors"
    a, b = load_file(str(whole / final)), load_file(str(killed / final))
    assert all(a[k].equal(b[k]) for k in a)
    assert json.loads((killed / "results.json").read_text())["best"] == results["best"]


def test_the_embedding_updated_by_rows_trains_bit_identically_to_the_dense_update(
    micro, sst128, tmp_path, monkeypatch
):
    """GLUE fine-tuning updates the token embedding by the rows each batch looked up (as tagging
    and SQuAD do): the figures and weights of a run are those of the dense update, to the bit."""
    from roberta.train import optim, trainer

    calls = []
    step_rows = optim.AdamW._step_rows
    monkeypatch.setattr(optim.AdamW, "_step_rows", lambda *a: calls.append(1) or step_rows(*a))
    job = ["--optim.lr=1e-3", "--train.batch_size=16", "--train.max_steps=8", "--eval-every", "4"]
    assert main(["finetune", *glue("SST-2", sst128, micro, tmp_path / "rows", *job)]) == 0
    assert len(calls) == 8  # every update took the row path
    monkeypatch.setattr(trainer, "row_updates", lambda *args: False)
    assert main(["finetune", *glue("SST-2", sst128, micro, tmp_path / "dense", *job)]) == 0
    assert len(calls) == 8

    assert run_figures(tmp_path / "rows") == run_figures(tmp_path / "dense")
    final = "checkpoints/step-00000008/model.safetensors"
    a, b = load_file(str(tmp_path / "rows" / final)), load_file(str(tmp_path / "dense" / final))
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    assert not a["embed_tokens.weight"].equal(
        load_file(str(micro / "model.safetensors"))["embed_tokens.weight"]
    )


def test_first_twenty_losses_equal_hf_sequence_classification(micro, sst128, tmp_path):
    """Same initial weights, dropout off, the same batches: our losses are HF's within 1e-5."""
    transformers = pytest.importorskip("transformers")
    from roberta.convert import export_hf
    from roberta.tasks.classify import classify_objective, encode, label_values
    from roberta.tasks.finetune import Batching, load_finetune_job
    from roberta.tasks.glue import TASKS, read_split, sentence_task
    from roberta.train.optim import build_optimizer, learning_rate, set_learning_rate

    task = TASKS["SST-2"]
    job = load_finetune_job(
        None,
        [
            "--train.max_steps=20",
            "--train.epochs=0",
            "--schedule.warmup_steps=2",
            "--schedule.warmup_fraction=0",
            "--optim.lr=5e-4",
        ],
        task.lr,
        16,
    )
    model, tok = checkpoint.load(micro)
    model = RobertaModel(
        RobertaConfig(
            **{**model.config.to_dict(), "dropout": 0.0, "attention_dropout": 0.0, "classifier_dropout": 0.0}
        )
    )
    torch.manual_seed(3)
    model.add_classification_head("SST-2", 2)
    export_hf(tmp_path / "hf", model, tok)
    hf = transformers.RobertaForSequenceClassification.from_pretrained(tmp_path / "hf")
    hf.roberta.embeddings.token_type_embeddings.weight.requires_grad_(False)  # RoBERTa has none: kept at 0

    examples = read_split(task, sst128 / "train.tsv")
    objective = classify_objective(
        sentence_task(task),
        (encode(tok, examples, 128), label_values(sentence_task(task), examples, "train")),
        {},
        Batching(job, tok.pad_id),
    )
    batches = objective.train_batches(0)
    ours_opt, hf_opt = build_optimizer(model, job.optim), build_optimizer(hf, job.optim)
    initial = model.layers[0].fc1.weight.detach().clone()
    model.train(), hf.train()
    ours_losses, hf_losses = [], []
    for step in range(20):
        batch = next(batches)
        for opt in (ours_opt, hf_opt):
            set_learning_rate(opt, learning_rate(step, job.optim.lr, job.schedule, job.train.max_steps))
        ours = objective.loss(model, batch)["loss"] / len(batch["labels"])
        theirs = hf(
            input_ids=batch["tokens"], attention_mask=batch["tokens"].ne(tok.pad_id), labels=batch["labels"]
        ).loss
        for loss, opt in ((ours, ours_opt), (theirs, hf_opt)):
            loss.backward()
            opt.step()
            opt.zero_grad()
        ours_losses.append(ours.item())
        hf_losses.append(theirs.item())
    assert ours_losses == pytest.approx(hf_losses, rel=1e-5)
    assert not model.layers[0].fc1.weight.detach().equal(initial)  # the body trained too


def test_init_from_hf_and_fairseq_and_init_task(micro, sst128, shared_data, tmp_path):
    from roberta.convert import export_fairseq, export_hf

    model, tok = checkpoint.load(micro)
    export_hf(tmp_path / "hf", model, tok)
    export_fairseq(tmp_path / "fairseq", model, tok)
    # --train.max_steps replaces the recipe's 10 epochs (no --train.epochs=0 needed).
    steps = ["--train.max_steps=2", "--train.eval_every=2", "--train.checkpoint_every=2"]
    for init in (tmp_path / "hf", tmp_path / "fairseq" / "model.pt"):
        out = tmp_path / f"run-{init.name}"
        assert main(["finetune", *glue("SST-2", sst128, init, out, *steps)]) == 0
        assert (out / "best" / "config.json").is_file()
        assert [e["step"] for e in json.loads((out / "results.json").read_text())["evaluations"]] == [2]
    # STS-B from the SST-2 model's body with a new one-output head (regression, MSE).
    stsb = tmp_path / "STS-B"
    stsb.mkdir()
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    rows = "".join(
        f"{i}\tg\tf\t2012\t{i}\ts\ts\tA man plays {i}.\tA man sings {i % 3}.\t{i % 5}.0\n" for i in range(32)
    )
    for name in ("train.tsv", "dev.tsv"):
        (stsb / name).write_text(header + rows)
    out = tmp_path / "stsb"
    init_task = ["--init-task", str(tmp_path / "run-hf" / "best")]
    assert main(["finetune", *glue("STS-B", stsb, micro, out, *init_task, *steps)]) == 0
    best = checkpoint.load(out / "best")[0]
    assert list(best.heads) == ["STS-B"] and best.heads["STS-B"].spec()["num_classes"] == 1
    record = json.loads((out / "results.json").read_text())
    assert record["best"]["metric"] == "pearson" and {"loss", "pearson", "spearman"} <= set(
        record["evaluations"][0]
    )

    # The GLUE leaderboard file from RUN/best for a test TSV.
    test = tmp_path / "test.tsv"
    test.write_text(
        "".join((shared_data / "glue" / "SST-2" / "test.tsv").read_text().splitlines(keepends=True)[:21])
    )
    best_hf, predictions = tmp_path / "run-hf" / "best", tmp_path / "SST-2.tsv"
    predict = ["predict", str(best_hf), "--task", "SST-2", "--input", str(test)]
    assert main([*predict, "--out", str(predictions)]) == 0
    rows = [r.split("\t") for r in (tmp_path / "SST-2.tsv").read_text().splitlines()]
    assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == [str(i) for i in range(20)]
    assert {r[1] for r in rows[1:]} <= {"0", "1"}


def test_own_data_with_string_labels_and_seeds(micro, tmp_path, capsys):
    words = ["good", "great", "fine", "bad", "awful", "poor"]
    rows = [(f"this is {w} {i}", "pos" if w in words[:3] else "neg") for i in range(8) for w in words]
    (tmp_path / "train.csv").write_text("text,sentiment\n" + "".join(f"{t},{y}\n" for t, y in rows))
    train = str(tmp_path / "train.csv")
    args = ["finetune", "classify", "--train", train, "--dev", train]
    args += [*"--text-column text --label-column sentiment".split(), "--init", str(micro)]
    args += ["--out", str(tmp_path / "run")]
    args += "--seeds 2 --train.max_steps=3 --train.eval_every=3 --train.checkpoint_every=3".split()
    assert main(args) == 0
    summary = json.loads((tmp_path / "run" / "results.json").read_text())
    cell = next(iter(summary["cells"].values()))
    assert [r["seed"] for r in cell["runs"]] == [1, 2] and "median" in cell
    assert checkpoint.load(tmp_path / "run" / "seed1" / "best")[0].heads["classifier"].labels == (
        "neg",
        "pos",
    )
    # `roberta predict` prints the label names the head keeps.
    (tmp_path / "new.tsv").write_text("text\nthis is good\nthis is awful\n")
    best = str(tmp_path / "run" / "seed1" / "best")
    args = ["predict", best, *"--head classifier --columns text --input".split(), str(tmp_path / "new.tsv")]
    assert main([*args, "--out", str(tmp_path / "out.tsv")]) == 0
    rows = [r.split("\t") for r in (tmp_path / "out.tsv").read_text().splitlines()]
    assert len(rows) == 3 and {r[0] for r in rows[1:]} <= {"neg", "pos"}


def test_bad_fine_tuning_input_is_one_line_and_leaves_no_run(micro, sst128, tmp_path, capsys):
    (tmp_path / "train.csv").write_text("text,label\nfine,a\nbad,b\n")
    (tmp_path / "dev.csv").write_text("text,label\nok,c\n")
    classify = ["classify", "--train", str(tmp_path / "train.csv"), "--dev", str(tmp_path / "dev.csv")]
    cases = [
        ([*classify, *"--text-column text --label-column label".split()], "dev.csv:2: label 'c'"),
        ([*classify, *"--text-column sentence --label-column label".split()], "sentence"),
        (["glue", "--task", "SST-3", "--data", str(sst128)], "SST-3"),
        (["glue", "--task", "SST-2", "--data", str(tmp_path)], "train.tsv"),
        (["glue", "--task", "SST-2", "--data", str(sst128), "--optim.lr=-1"], "optim.lr"),
        (["glue", "--task", "SST-2", "--data", str(sst128), "--train.batch_size=0"], "train.batch_size"),
    ]
    for args, named in cases:
        out = tmp_path / "run"
        assert main(["finetune", *args, "--init", str(micro), "--out", str(out)]) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("roberta: error:") and named in lines[0], (args, lines)
        assert not out.exists(), args
    # A head of the wrong size in --init is named, and nothing is written.
    model, tok = checkpoint.load(micro)
    model.add_classification_head("SST-2", 3)
    checkpoint.save(tmp_path / "three", model, tok)
    assert main(["finetune", *glue("SST-2", sst128, tmp_path / "three", tmp_path / "run")]) == 2
    assert "head 'SST-2' has 3 outputs" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
