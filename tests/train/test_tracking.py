"""`train.report_to`: TensorBoard by default, W&B in offline mode on request (no server contacted),
both with the records of metrics.jsonl and the job as the W&B run's config."""

import json
import time

import pytest

from roberta.cli import main

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]

MICRO = (
    "--model.preset=tiny --model.hidden_size=64 --model.num_layers=2 --model.num_heads=4 "
    "--model.ffn_size=128 --data.seq_len=32 --train.batch_size=8 --train.micro_batch_size=4 "
    "--train.log_every=1 --train.eval_every=3 --train.eval_batches=2 --train.checkpoint_every=3 "
    "--train.device=cpu --train.peak_tflops=0.1 --schedule.warmup_steps=2 --optim.lr=1e-3 "
    "--train.max_steps=3 --train.progress=false"
).split()


def pretrain(micro_corpus, run, *extra) -> int:
    data = ["--data", str(micro_corpus / "corpus"), "--tokenizer", str(micro_corpus / "tokenizer")]
    return main(["pretrain", *data, "--out", str(run), *MICRO, *extra])


def test_wandb_offline_run_holds_the_records_and_the_job(micro_corpus, tmp_path, monkeypatch):
    # No WANDB_MODE and no API key: offline by default, files under WANDB_DIR.
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    run = tmp_path / "run"
    assert pretrain(micro_corpus, run, "--train.report_to=tensorboard,wandb") == 0
    assert (run / "tensorboard").is_dir()
    [offline] = (tmp_path / "wandb-dir" / "wandb").glob("offline-run-*")
    [log] = offline.glob("run-*.wandb")
    # W&B's record log (protobuf records: keys and strings as written). Its writer process may flush
    # the last records a moment after `finish()` returns (the interpreter's exit waits for it).
    for _ in range(100):
        data = log.read_bytes()
        if b'"report_to"' in data and b"valid/loss" in data:
            break
        time.sleep(0.1)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    keys = {
        f"{r['split']}/{k}"
        for r in records
        for k, v in r.items()
        if k not in ("step", "split") and type(v) is float
    }
    assert {"train/loss", "train/lr", "train/tokens_per_s", "train/mfu", "valid/loss"} <= keys
    for key in keys:
        assert key.encode() in data, key
    # The job is the run's config (W&B writes config.yaml when the run is synced).
    assert b'"report_to":"tensorboard,wandb"' in data and b'"hidden_size":64' in data


def test_report_to_chooses_the_trackers(micro_corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    assert pretrain(micro_corpus, tmp_path / "tb") == 0
    assert (tmp_path / "tb" / "tensorboard").is_dir() and not (tmp_path / "wandb-dir").exists()
    assert pretrain(micro_corpus, tmp_path / "none", "--train.report_to=none") == 0
    assert (
        not (tmp_path / "none" / "tensorboard").exists() and (tmp_path / "none" / "metrics.jsonl").is_file()
    )
    assert pretrain(micro_corpus, tmp_path / "bad", "--train.report_to=mlflow") == 2
    assert "field 'train.report_to' must be one of tensorboard, wandb" in capsys.readouterr().err
