"""The trainer's parts: config overrides, schedules, weight-decay groups, loss scaling, divergence,
metrics."""

import itertools
import json
import math

import pytest
import torch

import train_fixtures
from roberta import RobertaConfig, RobertaModel, UserError
from roberta.tasks.finetune import load_finetune_job
from roberta.tasks.pretrain import load_pretrain_job
from roberta.train.config import JobConfig, ScheduleSection, apply_override
from roberta.train.optim import learning_rate, parameter_groups
from roberta.train.precision import LossScaler
from roberta.train.run_state import list_checkpoints
from roberta.train.trainer import TrainingDiverged, apply_update

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models run fastest on one thread


# --- configuration ------------------------------------------------------------------------------


def test_toml_and_overrides_set_typed_fields(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(
        '[model]\npreset = "tiny"\n[optim]\nlr = 1\nbetas = [0.9, 0.999]\n[train]\nmax_steps = 7\n'
    )
    job = load_pretrain_job(
        path,
        ["--train.max_steps=9", "--train.precision=bf16", "--data.whole_word=true", "--model.init_std=0.05"],
    )
    assert job.model.preset == "tiny"
    assert job.optim.lr == 1.0 and isinstance(job.optim.lr, float)
    assert job.optim.betas == (0.9, 0.999)
    assert job.train.max_steps == 9
    assert job.train.precision == "bf16"
    assert job.data.whole_word is True
    assert job.model_config(vocab_size=300).hidden_size == 512  # the tiny preset's width
    assert job.model_config(vocab_size=300).init_std == 0.05


@pytest.mark.parametrize(
    "override, named",
    [
        ("--train.max_step=5", "train.max_step"),
        ("--trian.max_steps=5", "trian"),
        ("--train.max_steps=five", "train.max_steps"),
        ("--train.max_steps=1.5", "train.max_steps"),
        ("--train.precision=fp8", "train.precision"),
        ("--optim.betas=[0.9]", "optim.betas"),
        ("max_steps=5", "max_steps=5"),
    ],
)
def test_bad_override_is_a_user_error_naming_the_key(override, named):
    with pytest.raises(UserError, match=named.replace(".", r"\.").replace("[", r"\[")):
        apply_override(JobConfig(), override)


def test_bad_toml_value_names_file_and_line(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[train]\nseed = 1\nmax_steps = "many"\n')
    with pytest.raises(
        UserError, match=r"job\.toml:3: field 'train\.max_steps' must be an integer, not 'many'"
    ):
        load_pretrain_job(path)


def test_forward_switches_are_model_options_that_fine_tuning_accepts():
    """`last_layer_masked_only` and `unpad` live in [model] (the old [data] keys are unknown);
    fine-tuning has nothing to apply them to and leaves its model as it is."""
    from roberta.tasks.finetune import with_model_section

    job = load_pretrain_job(None, ["--model.unpad=false", "--model.last_layer_masked_only=false"])
    assert (job.model.unpad, job.model.last_layer_masked_only) == (False, False)
    assert job.model_config(vocab_size=300) == load_pretrain_job(None).model_config(vocab_size=300)
    with pytest.raises(UserError, match=r"unknown key 'data\.unpad'"):
        load_pretrain_job(None, ["--data.unpad=false"])
    model = RobertaModel(RobertaConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, ffn_size=32))
    assert with_model_section(model, job.model, "init/") is model


def test_every_config_checks_its_fields_one_way():
    """A section built in code refuses a bad value as a file or an override does, naming the field."""
    from roberta.data.masking import MaskingConfig
    from roberta.train.config import TrainSection

    with pytest.raises(UserError, match=r"field 'train\.batch_size' must be positive, not 0"):
        TrainSection(batch_size=0)
    with pytest.raises(UserError, match=r"override --schedule\.kind: field 'schedule\.kind' must be one of"):
        apply_override(JobConfig(), "--schedule.kind=cosine")
    with pytest.raises(UserError, match=r"masking: field 'mask_prob' must be in \(0, 1\), not 1\.5"):
        MaskingConfig(mask_prob=1.5)
    with pytest.raises(UserError, match=r"config: field 'num_heads' must be an integer, not 2\.0"):
        RobertaConfig(num_heads=2.0)


def test_scale_shrinks_batch_steps_and_warmup_together():
    job = load_pretrain_job(
        "configs/ablations/table3-batch-2k.toml", ["--train.scale=0.01"]
    )  # scaled on load
    assert (job.train.batch_size, job.train.max_steps, job.schedule.warmup_steps) == (21, 1250, 13)
    assert job.train.batch_size % job.train.micro_batch_size == 0


# --- optimisation -------------------------------------------------------------------------------


def test_linear_schedule_peaks_at_warmup_end_and_reaches_end_lr():
    cfg = ScheduleSection(kind="linear", warmup_steps=10, end_lr=0.0)
    assert learning_rate(0, 1e-3, cfg, 100) == pytest.approx(1e-4)
    assert learning_rate(9, 1e-3, cfg, 100) == pytest.approx(1e-3)  # last warmup step: the peak
    assert learning_rate(10, 1e-3, cfg, 100) == pytest.approx(1e-3)
    assert learning_rate(55, 1e-3, cfg, 100) == pytest.approx(0.5e-3)
    assert learning_rate(100, 1e-3, cfg, 100) == pytest.approx(0.0)


def test_polynomial_and_warmup_stable_decay_schedules():
    poly = ScheduleSection(kind="polynomial", warmup_steps=10, power=2.0, end_lr=1e-5)
    assert learning_rate(55, 1e-3, poly, 100) == pytest.approx(1e-5 + (1e-3 - 1e-5) * 0.25)
    assert learning_rate(100, 1e-3, poly, 100) == pytest.approx(1e-5)
    wsd = ScheduleSection(kind="wsd", warmup_steps=10, decay_fraction=0.2)
    assert learning_rate(79, 1e-3, wsd, 100) == pytest.approx(1e-3)  # stable until the last 20%
    assert learning_rate(90, 1e-3, wsd, 100) == pytest.approx(0.5e-3)
    assert learning_rate(100, 1e-3, wsd, 100) == pytest.approx(0.0)


def test_weight_decay_skips_biases_and_layernorms_and_counts_the_tied_embedding_once():
    model = RobertaModel(RobertaConfig(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, ffn_size=32))
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert {names[id(p)] for p in no_decay["params"]} == {
        n for n, p in model.named_parameters() if n.endswith("bias") or "layer_norm" in n
    }
    assert "embed_tokens.weight" in {names[id(p)] for p in decay["params"]}
    total = len(decay["params"]) + len(no_decay["params"])
    assert total == len(list(model.parameters()))  # lm_head.weight is embed_tokens.weight, once


# --- precision and divergence -------------------------------------------------------------------


def test_fp16_overflow_skips_the_step_and_halves_the_scale():
    layer = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1)
    scaler = LossScaler(enabled=True, scale=1024.0, growth_interval=2)
    before = [p.detach().clone() for p in layer.parameters()]
    scaler.scaled(layer(torch.ones(1, 4)).sum()).backward()
    layer.weight.grad[0, 0] = float("inf")  # what an fp16 overflow leaves in a gradient
    assert apply_update(optimizer, list(layer.parameters()), scaler, clip_norm=0.0) is False
    assert all(p.equal(b) for p, b in zip(layer.parameters(), before))  # nothing applied
    assert optimizer.state_dict()["state"] == {}  # Adam's moments untouched
    assert (scaler.scale, scaler.skipped_steps) == (512.0, 1)
    # Clean steps apply, unscaled; growth_interval clean steps double the scale again.
    for _ in range(2):
        scaler.scaled(layer(torch.ones(1, 4)).sum()).backward()
        assert layer.weight.grad.abs().max() == 512.0  # d(sum)/dw = 1, times the scale
        assert apply_update(optimizer, list(layer.parameters()), scaler, clip_norm=0.0) is True
    assert not layer.weight.equal(before[0])
    assert (scaler.scale, scaler.skipped_steps) == (1024.0, 1)


def test_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(tmp_path):
    from roberta import checkpoint

    # Micro-batch positions 10 and 11 make step 6 (2 micro-batches a step); checkpoints every 4.
    with pytest.raises(TrainingDiverged, match=r"non-finite loss at step 6 .*step-00000004"):
        train_fixtures.run(tmp_path, ["--train.max_steps=8"], poison_at=10)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000004"]
    model, _ = checkpoint.load(tmp_path / "checkpoints" / "step-00000004")
    assert all(torch.isfinite(p).all() for p in model.parameters())
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert max(steps) == 5  # nothing was logged for the diverged step


# --- outputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("later", "expected"), [(1e15, "below 100%"), (1e3, "none")])
def test_mfu_never_passes_100_percent_when_the_start_up_peak_was_too_low(
    tmp_path, monkeypatch, later, expected
):
    """The CPU peak timed at start-up while a neighbour held the cores reads far too low: the first
    window that would pass 100% remeasures it; a peak still below what the run achieves is not
    trusted, and MFU is not reported (null) rather than reported above 100%."""
    from roberta.train import metrics

    # The start-up measurement, under load (1 kFLOP/s), then every remeasurement: `later`.
    peaks = itertools.chain([1e3], itertools.repeat(later))
    monkeypatch.setattr(metrics, "measured_matmul_flops", lambda dtype: next(peaks))
    train_fixtures.run(tmp_path, ["--train.max_steps=3", "--train.peak_tflops=0"])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    mfu = [r["mfu"] for r in records if r["split"] == "train"]
    if expected == "none":
        assert mfu == [None, None, None]
    else:
        assert len(mfu) == 3 and all(0 < m < 1 for m in mfu)


def test_run_writes_metrics_curves_tensorboard_and_learns(tmp_path):
    result = train_fixtures.run(tmp_path, ["--train.max_steps=12", "--optim.lr=3e-3"])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    valid = [r for r in records if r["split"] == "valid"]
    assert [r["step"] for r in train] == list(range(1, 13))
    assert [r["step"] for r in valid] == [4, 8, 12]
    assert {"loss", "perplexity", "accuracy", "lr", "tokens_per_s", "mfu", "data_wait"} <= train[0].keys()
    assert all(0 <= r["data_wait"] < 1 for r in train)  # a share of the step time
    assert math.exp(valid[-1]["loss"]) == pytest.approx(valid[-1]["perplexity"])
    assert valid[-1]["loss"] < valid[0]["loss"] - 0.2  # the arithmetic-progression data is learnable
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("*.tmp"))
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000008", "step-00000012"]  # keep_last=2
    assert result.checkpoint == tmp_path / "checkpoints" / "step-00000012"
    assert result.valid["loss"] == valid[-1]["loss"]


def test_a_step_budget_given_replaces_the_recipes_epochs(tmp_path):
    assert load_finetune_job(None, [], lr=1e-5, batch_size=16).train.epochs == 10
    steps = load_finetune_job(None, ["--train.max_steps=40"], lr=1e-5, batch_size=16).train
    assert (steps.epochs, steps.max_steps) == (0, 40)
    both = load_finetune_job(None, ["--train.max_steps=40", "--train.epochs=2"], lr=1e-5, batch_size=16).train
    assert both.epochs == 2
    (tmp_path / "job.toml").write_text("[train]\nmax_steps = 7\n")
    assert load_finetune_job(tmp_path / "job.toml", [], lr=1e-5, batch_size=16).train.epochs == 0
