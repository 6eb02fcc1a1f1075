"""`roberta pretrain` end to end on a small prepared corpus: outputs, resume, init-from, NSP, errors."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from roberta import checkpoint
from roberta.cli import main
from roberta.padding import Selected, Unpadded
from roberta.tasks.pretrain import sinusoidal_positions

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("one_thread")  # micro models run fastest on one thread

MICRO = (
    "--model.preset=tiny --model.hidden_size=64 --model.num_layers=2 --model.num_heads=4 "
    "--model.ffn_size=128 --data.seq_len=32 --train.batch_size=8 --train.micro_batch_size=4 "
    "--train.log_every=1 --train.eval_every=3 --train.eval_batches=2 --train.checkpoint_every=3 "
    "--train.device=cpu --train.peak_tflops=0.1 --schedule.warmup_steps=2 --optim.lr=1e-3"
).split()


@pytest.fixture
def corpus(micro_corpus):
    return micro_corpus


def pretrain(corpus, out, *extra) -> int:
    tokenizer = ["--tokenizer", str(corpus / "tokenizer")]
    return main(["pretrain", "--data", str(corpus / "corpus"), *tokenizer, "--out", str(out), *MICRO, *extra])


def pretrain_without_tokenizer(data, out, *extra) -> int:
    return main(["pretrain", "--data", str(data), "--out", str(out), *MICRO, *extra])


def test_pretrain_resume_and_init_from(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert pretrain(corpus, run, "--train.max_steps=3") == 0
    first = checkpoint.load(run / "checkpoints" / "step-00000003")
    assert first[1] is not None and first[1].vocab_size == 300  # the tokenizer travels with it
    assert "checkpoint:" in capsys.readouterr().out

    # --resume continues the same run to a longer schedule's end.
    assert pretrain(corpus, run, "--train.max_steps=6", "--resume") == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 3, 4, 5, 6, 6]  # train + valid rows, none repeated
    assert json.loads((run / "job.json").read_text())["job"]["train"]["max_steps"] == 6

    # --init-from starts a new run from those weights, not from a random initialisation.
    other = tmp_path / "continued"
    assert (
        pretrain(
            corpus, other, "--train.max_steps=1", "--init-from", str(run / "checkpoints" / "step-00000006")
        )
        == 0
    )
    records = [json.loads(line) for line in (other / "metrics.jsonl").read_text().splitlines()]
    fresh = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["loss"] < fresh[0]["loss"] - 0.2


def test_sinusoidal_position_init_reaches_the_model_through_the_cli(corpus, tmp_path):
    """`--model.position_init=sinusoidal` (configs/pretrain-cpu-20min.toml's): the position table
    starts as sinusoids; one step at a tiny learning rate leaves it there. The default is normal."""
    tables = {}
    for value in ("sinusoidal", "normal"):
        run = tmp_path / value
        assert (
            pretrain(corpus, run, "--train.max_steps=1", "--optim.lr=1e-9", f"--model.position_init={value}")
            == 0
        )
        model = checkpoint.load(run / "checkpoints" / "step-00000001")[0]
        tables[value] = model.embed_positions.weight.detach().clone()
    expected = torch.empty_like(tables["sinusoidal"])
    sinusoidal_positions(expected, padding_idx=1, std=0.02)
    assert torch.allclose(tables["sinusoidal"], expected, atol=1e-6)
    assert not torch.allclose(tables["normal"], expected, atol=1e-3)
    assert (
        main(["pretrain", "--data", "x", "--out", str(tmp_path / "bad"), "--model.position_init=rotary"]) != 0
    )


def test_overwrite_replaces_a_finished_run_and_only_after_the_command_is_checked(corpus, tmp_path):
    run = tmp_path / "run"
    assert pretrain(corpus, run, "--train.max_steps=3") == 0
    (run / "stray.txt").write_text("x")
    assert pretrain(corpus, run, "--train.max_steps=2", "--overwrite", "--data.seq_len=100000") == 2
    assert (run / "stray.txt").exists() and (run / "checkpoints" / "step-00000003").is_dir()
    assert pretrain(corpus, run, "--train.max_steps=2", "--overwrite") == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 2 and max(steps) == 2  # the old run's records are gone, not appended to
    assert not (run / "stray.txt").exists() and not (run / "checkpoints" / "step-00000003").exists()


def test_pair_format_trains_an_nsp_head(corpus, tmp_path):
    run = tmp_path / "nsp"
    assert pretrain(corpus, run, "--train.max_steps=3", "--data.format=segment-pair") == 0
    valid = [
        json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"valid"' in line
    ]
    assert {"nsp_loss", "nsp_accuracy"} <= valid[-1].keys()
    model, _ = checkpoint.load(run / "checkpoints" / "step-00000003")
    assert model.heads["nsp"].out_proj.out_features == 2


def test_the_overlap_recipe_trains_an_overlap_head_and_exports(corpus, tmp_path):
    run = tmp_path / "overlap"
    recipe = str(ROOT / "configs" / "pretrain-cpu-overlap.toml")  # its format; MICRO shrinks the rest
    assert pretrain(corpus, run, "--config", recipe, "--train.max_steps=3", "--train.keep_last=1") == 0
    assert json.loads((run / "job.json").read_text())["job"]["data"]["format"] == "overlap-pair"
    valid = [
        json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"valid"' in line
    ]
    assert 0 < valid[-1]["overlap_error"] < 1 and valid[-1]["overlap_loss"] > 0
    assert 0 < valid[-1]["shared_accuracy"] < 1 and valid[-1]["shared_loss"] > 0
    model, _ = checkpoint.load(run / "checkpoints" / "step-00000003")
    assert model.heads["overlap"].out_proj.out_features == 1 and "nsp" not in model.heads
    # The objective is ours, the architecture RoBERTa's: the checkpoint exports both ways, checked.
    for to in ("hf", "fairseq"):
        assert (
            main(["convert", str(run / "checkpoints" / "step-00000003"), str(tmp_path / to), "--to", to]) == 0
        )


def test_pretrain_errors_are_one_line_user_errors(corpus, tmp_path, capsys):
    assert pretrain(corpus, tmp_path / "a", "--train.max_stepz=3") == 2
    assert "train.max_stepz" in capsys.readouterr().err
    assert pretrain(corpus, tmp_path / "b", "--resume") == 2
    assert "--resume given but there is no run to continue" in capsys.readouterr().err
    assert main(["pretrain", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "c")]) == 2
    assert "missing" in capsys.readouterr().err


def test_a_refused_command_leaves_the_run_as_it_was(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    assert pretrain(corpus, run, "--train.max_steps=3") == 0
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    refused = [
        (["--train.max_steps=6", "--resume", "--model.hidden_size=32", "--model.num_heads=2"], "hidden_size"),
        (["--train.max_steps=6", "--resume", "--optim.lr=-1"], "optim.lr"),
        (["--train.max_steps=0", "--resume"], "train.max_steps"),
        (["--train.micro_batch_size=-4", "--resume"], "train.micro_batch_size"),
        (["--model.num_layers=-1"], "model.num_layers"),
    ]
    for extra, named in refused:
        assert pretrain(corpus, run, *extra) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and named in err[0], (extra, err)
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before, extra
    # --resume where nothing was ever saved writes nothing at all.
    assert pretrain(corpus, tmp_path / "empty", "--resume") == 2
    assert not (tmp_path / "empty").exists()

    # A used --out without --resume or --overwrite: refused, the run as it was (no second run appended).
    capsys.readouterr()
    assert pretrain(corpus, run, "--train.max_steps=3") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a finished run; pass --resume" in err[0], err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    assert pretrain(corpus, tmp_path / "notes", "--train.max_steps=1") == 2
    assert "not empty (it holds 'todo.txt')" in capsys.readouterr().err
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"

    # A kill while appending to metrics.jsonl leaves a torn last line: resume drops it.
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "split": "tra')
    assert pretrain(corpus, run, "--train.max_steps=4", "--resume") == 0
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 3, 4, 4]


def test_the_corpus_carries_its_tokenizer_into_checkpoints(corpus, tmp_path, capsys):
    """`prepare` keeps the tokenizer in the corpus, so `pretrain` without --tokenizer saves usable
    checkpoints; a corpus without one still trains, with a one-line warning."""
    assert (corpus / "corpus" / "tokenizer").is_dir()
    assert pretrain_without_tokenizer(corpus / "corpus", tmp_path / "run", "--train.max_steps=3") == 0
    _, saved = checkpoint.load(tmp_path / "run" / "checkpoints" / "step-00000003")
    assert (
        saved is not None
        and saved.fingerprint()
        == json.loads((corpus / "corpus" / "meta.json").read_text())["tokenizer"]["fingerprint"]
    )
    capsys.readouterr()

    bare = tmp_path / "bare"
    shutil.copytree(corpus / "corpus", bare, ignore=shutil.ignore_patterns("tokenizer"))
    assert pretrain_without_tokenizer(bare, tmp_path / "bare-run", "--train.max_steps=3") == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("roberta: warning:")]
    assert len(warnings) == 1 and "no tokenizer in or beside the corpus" in warnings[0]
    assert checkpoint.load(tmp_path / "bare-run" / "checkpoints" / "step-00000003")[1] is None


SPEED_SWITCHES = {  # switch: its two values, and the model-side step that only the first value takes
    "--optim.implementation": (("fused", "foreach"), None),
    "--model.last_layer_masked_only": (("true", "false"), Selected),
    "--model.unpad": (("true", "false"), Unpadded),
}


@pytest.mark.parametrize("switch", SPEED_SWITCHES)
def test_speed_switches_give_the_same_run_through_the_cli(corpus, tmp_path, switch, monkeypatch):
    """Each speed switch through `roberta pretrain` on a prepared corpus (fused vs foreach AdamW;
    the last layer at the masked positions only vs everywhere; the real tokens only vs the padded
    batch): equal losses to 1e-5, and every logged training record says how long the step waited
    for the loader."""
    values, step = SPEED_SWITCHES[switch]
    calls = []
    if step is not None:
        of = step.of
        monkeypatch.setattr(step, "of", lambda *args, **kwargs: calls.append(1) or of(*args, **kwargs))
    losses = {}
    for value in values:
        run = tmp_path / value
        calls.clear()
        assert pretrain(corpus, run, "--train.max_steps=6", f"{switch}={value}") == 0
        if step is not None:
            assert bool(calls) == (value == values[0])  # the switch reaches the model through the CLI
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        train = [r for r in records if r["split"] == "train"]
        assert all(0 <= r["data_wait"] < 1 for r in train)
        losses[value] = [r["loss"] for r in records]
    on, off = losses.values()
    assert len(on) == 8  # 6 training steps, 2 evaluations
    assert off == pytest.approx(on, rel=1e-5)


def test_the_overlap_terms_score_the_pair_on_s_and_only_the_labelled_tokens():
    import torch.nn.functional as F

    from roberta.model import RobertaConfig, RobertaModel
    from roberta.tasks.pretrain import MaskedLM, mlm_loss, mlm_objective

    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig(vocab_size=40, hidden_size=32, num_layers=2, num_heads=2, ffn_size=64))
    mlm_objective(None, None, padding_idx=1, seq_len=8, mask_prob=0.4, terms=MaskedLM("overlap")).add_heads(
        model
    )
    tokens = torch.tensor([[0, 5, 6, 2, 2, 6, 7, 2], [0, 8, 3, 2, 2, 9, 2, 1]])  # 3 = <mask>, 1 = padding
    labels = torch.full_like(tokens, -100)
    labels[1, 2] = 4
    shared = torch.tensor([[-1, 0, 1, -1, -1, 1, 0, -1], [-1, 0, -1, -1, -1, 0, -1, -1]], dtype=torch.float32)
    batch = {"tokens": tokens, "labels": labels, "overlap": torch.tensor([0.5, 0.0]), "shared": shared}
    out = mlm_loss(model.eval(), batch, MaskedLM("overlap"))
    hidden = model(tokens).last_hidden_state
    logits = model.classify("overlap", hidden).squeeze(-1)
    assert torch.allclose(
        out["overlap"], F.binary_cross_entropy_with_logits(logits, batch["overlap"], reduction="sum")
    )
    # each labelled token read as the `<s>` of a one-token sequence; specials, <mask>, padding ignored
    rows, cols = torch.nonzero(shared >= 0, as_tuple=True)
    per_token = torch.stack(
        [model.classify("overlap", hidden[r, c][None, None]).squeeze() for r, c in zip(rows, cols)]
    )
    expected = F.binary_cross_entropy_with_logits(per_token, shared[rows, cols], reduction="sum")
    assert len(rows) == 6 and torch.allclose(out["shared"], expected, atol=1e-6)
    assert out["shared_correct"] == (per_token.gt(0) == shared[rows, cols].bool()).sum()
