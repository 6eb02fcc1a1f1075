"""Precision: what `auto` picks from the units a CPU reports (each case), and bf16 running end to
end on this machine's CPU (fast with AMX, slow but correct without): the hub, `embed`, `serve`,
pretraining (losses that track fp32's, exact resume, checkpoints in fp32) and fine-tuning."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from data_fixtures import glue_slice, save_micro_checkpoint
from process_fixtures import run_figures, run_killed_and_resumed
from roberta import load
from roberta.errors import UserError
from roberta.runtime.precision import CpuUnits, choose_precision, cpu_units, inference_precision
from roberta.serve.server import ServeOptions, load_hub
from serve_fixtures import Running, call

NONE = CpuUnits()
AMX = CpuUnits(amx_bf16=True, avx512_bf16=True, amx_int8=True, avx512_vnni=True)
AVX512_BF16 = CpuUnits(avx512_bf16=True, avx512_vnni=True)  # Cooper Lake, Zen 4: no AMX
VNNI_ONLY = CpuUnits(avx512_vnni=True)  # Cascade Lake: int8 units, bf16 emulated


@pytest.mark.parametrize(
    ("requested", "device", "units", "cuda_bf16", "environment", "expected"),
    [
        ("auto", "cpu", NONE, False, None, "fp32"),  # an AMD EPYC without bf16: 17-25x slower in bf16
        ("auto", "cpu", VNNI_ONLY, False, None, "fp32"),
        ("auto", "cpu", AVX512_BF16, False, None, "bf16"),
        ("auto", "cpu", AMX, False, None, "bf16"),
        ("auto", "cuda", NONE, True, None, "bf16"),
        ("auto", "cuda", AMX, False, None, "fp32"),  # a GPU without bf16: the CPU's units do not matter
        ("auto", "mps", AMX, False, None, "fp32"),
        ("auto", "cpu", AMX, False, "fp32", "fp32"),  # ROBERTA_PRECISION says what auto means
        ("auto", "cpu", NONE, False, "bf16", "bf16"),
        ("fp32", "cpu", AMX, False, "bf16", "fp32"),  # an explicit choice wins over both
        ("bf16", "cpu", NONE, False, None, "bf16"),
        ("int8", "cpu", AMX, False, None, "int8"),
        ("fp16", "cuda", NONE, True, None, "fp16"),
    ],
)
def test_auto_picks_by_the_units_the_cpu_reports(requested, device, units, cuda_bf16, environment, expected):
    assert choose_precision(requested, device, units, cuda_bf16, environment) == expected


@pytest.mark.parametrize(
    ("device", "units", "width", "serving", "expected"),
    [
        ("cpu", AMX, 128, False, "fp32"),  # the CPU recipe's width: 2.5x slower in bf16 on AMX
        ("cpu", AMX, 511, True, "fp32"),
        ("cpu", AMX, 512, False, "bf16"),
        ("cpu", AMX, 768, True, "int8"),
        ("cpu", AVX512_BF16, 1024, False, "bf16"),
        ("cuda", NONE, 128, False, "bf16"),  # a GPU's bf16 pays at any width
    ],
)
def test_auto_on_a_cpu_leaves_narrow_models_in_fp32(device, units, width, serving, expected):
    assert choose_precision("auto", device, units, device == "cuda", None, serving, width) == expected
    assert choose_precision("bf16", device, units, device == "cuda", None, serving, width) == "bf16"


@pytest.mark.parametrize(
    ("units", "environment", "expected"),
    [(AMX, None, "int8"), (AVX512_BF16, None, "bf16"), (NONE, None, "fp32"), (AMX, "fp32", "fp32")],
)
def test_auto_for_serving_follows_what_answered_requests_fastest(units, environment, expected):
    """On the AMX host int8 (oneDNN's kernels) served more requests than bf16 at 1 and 32 clients
    (docs/precision.md); a CPU without AMX's int8 units keeps the general choice."""
    assert choose_precision("auto", "cpu", units, environment=environment, serving=True) == expected
    assert choose_precision("bf16", "cpu", units, environment=environment, serving=True) == "bf16"


def test_serve_loads_on_one_thread_and_runs_int8_on_auto_on_an_amx_cpu(tmp_path, monkeypatch):
    """`roberta serve`'s auto on the AMX host is int8 (it answered requests fastest there), bf16
    when asked for by name (the products' weights held in bf16)."""
    from data_fixtures import write_byte_tokenizer
    from roberta import RobertaConfig, RobertaModel
    from roberta.checkpoint import save
    from roberta.runtime import precision
    from roberta.tokenizer import load_tokenizer

    monkeypatch.delenv("ROBERTA_PRECISION", raising=False)
    monkeypatch.setattr(precision, "cpu_units", lambda: AMX)
    tokenizer = load_tokenizer(write_byte_tokenizer(tmp_path / "tok"))
    config = RobertaConfig(vocab_size=tokenizer.vocab_size, hidden_size=512, num_layers=1, num_heads=8,
                           ffn_size=1024, max_positions=66)  # fmt: skip
    wide = save(tmp_path / "wide", RobertaModel(config), tokenizer)
    from roberta.serve import server

    threads, seen, load_torch = torch.get_num_threads(), [], server._load_torch
    monkeypatch.setattr(
        server, "_load_torch", lambda *a: seen.append(torch.get_num_threads()) or load_torch(*a)
    )
    torch.set_num_threads(2)
    try:
        hub = load_hub(ServeOptions(str(wide), precision="bf16"))
        # Loaded on one thread (no OpenMP team but the batcher's), then the threads back for it.
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert hub.precision == "bf16" and hub.model.layers[0].fc1.weight.dtype == torch.bfloat16
    assert load_hub(ServeOptions(str(wide))).precision == "int8"


def test_a_wrong_environment_value_is_refused_in_one_line():
    with pytest.raises(UserError, match="ROBERTA_PRECISION='half': give fp32 or bf16"):
        choose_precision("auto", "cpu", AMX, environment="half")


def test_the_units_read_are_those_proc_cpuinfo_lists():
    text = Path("/proc/cpuinfo").read_text()
    flags = set(next(line for line in text.splitlines() if line.startswith("flags")).split(":")[1].split())
    units = cpu_units()
    assert units.amx_bf16 == ("amx_bf16" in flags)
    assert units.avx512_bf16 == ("avx512_bf16" in flags)
    assert units.native_bf16 == bool({"amx_bf16", "avx512_bf16"} & flags)


def test_inference_choices_that_cannot_run_are_refused():
    cpu = torch.device("cpu")
    assert inference_precision("auto", True, cpu) == "int8"  # --int8 is --precision int8
    with pytest.raises(UserError, match="--int8 and --precision bf16 ask for two precisions"):
        inference_precision("bf16", True, cpu)
    with pytest.raises(UserError, match="ONNX export runs its fp32 graphs"):
        inference_precision("bf16", False, cpu, "onnx")
    assert inference_precision("auto", False, cpu, "onnx") == "fp32"
    assert inference_precision("int8", False, cpu, "onnx") == "int8"


# --- inference in bf16


@pytest.fixture(scope="module")
def micro_checkpoint(shared_data, tmp_path_factory) -> Path:
    return save_micro_checkpoint(tmp_path_factory.mktemp("micro") / "ckpt", shared_data, {"sentiment": 3})


TEXTS = ["Hello world!", "A longer sentence, with a comma and more words in it.", "x", "Short one."]


def test_the_hub_in_bf16_answers_fp32_tensors_close_to_fp32s(micro_checkpoint):
    fp32 = load(micro_checkpoint)
    bf16 = load(micro_checkpoint).use_precision("bf16")
    assert (fp32.precision, bf16.precision) == ("fp32", "bf16")
    ids = fp32.encode_batch(TEXTS)
    vectors = {p: hub.embed(ids, pool="mean") for p, hub in (("fp32", fp32), ("bf16", bf16))}
    assert vectors["bf16"].dtype == torch.float32
    assert not vectors["bf16"].equal(vectors["fp32"])  # it did run in bf16
    assert F.cosine_similarity(vectors["bf16"], vectors["fp32"]).min() > 0.999
    logits = bf16.predict("sentiment", ids, return_logits=True)
    assert logits.dtype == torch.float32
    assert torch.allclose(logits, fp32.predict("sentiment", ids, return_logits=True), atol=0.05)
    features = bf16.extract_features(ids[0])
    assert features.dtype == torch.float32
    # The products' weights held in bf16 (not cast at each call); LayerNorm and the embeddings fp32.
    layer = bf16.model.layers[0]
    assert layer.fc1.weight.dtype == layer.attention.qkv.bias.dtype == torch.bfloat16
    assert layer.ffn_layer_norm.weight.dtype == bf16.model.embed_tokens.weight.dtype == torch.float32


def test_bf16_weights_held_once_compute_what_autocast_computes_and_fp32_comes_back_exact(
    micro_checkpoint, tmp_path
):
    from roberta.checkpoint import save

    fp32, hub = load(micro_checkpoint), load(micro_checkpoint).use_precision("bf16")
    ids = fp32.encode_batch(TEXTS)
    masked = ["Hello <mask>!", "A longer sentence, with a <mask> and more words in it."]
    # Autocast over the fp32 weights, cast at each call as before: the same numbers, to the bit.
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        batch = torch.nn.utils.rnn.pad_sequence(ids, batch_first=True, padding_value=fp32.tokenizer.pad_id)
        autocast_first = fp32.model(batch).last_hidden_state[:, 0].float()
        autocast_logits = fp32.model.mask_logits(
            torch.stack([fp32.encode_masked(masked[0])]), fp32.tokenizer.mask_id
        )
    assert hub.extract_features(batch)[:, 0].equal(autocast_first)
    assert hub.mask_logits(masked[0]).equal(autocast_logits[0].float())  # the tied projection too
    assert hub.fill_mask(masked, topk=3)[0][0][2] == fp32.fill_mask(masked, topk=3)[0][0][2]
    # A call that runs the model itself (disambiguate's scoring) runs under the hub's autocast too.
    sentence = "The trophy would not fit in the suitcase because [it] was too big."
    scores = [hub.disambiguate(sentence, ["trophy", "suitcase"], return_scores=True) for hub in (hub, fp32)]
    assert [name for name, _ in scores[0]] == ["trophy", "suitcase"]
    assert max(abs(a[1] - b[1]) for a, b in zip(*scores)) < 0.05
    # state_dict() and a checkpoint saved meanwhile are the exact fp32 weights.
    reference = fp32.model.state_dict()
    assert all(
        v.dtype == reference[k].dtype and v.equal(reference[k]) for k, v in hub.model.state_dict().items()
    )
    saved = load_file(save(tmp_path / "saved", hub.model, hub.tokenizer) / "model.safetensors")
    copied = copy.deepcopy(hub).model.state_dict()  # a copy of a held hub saves fp32 too
    assert all(v.dtype == torch.float32 and v.equal(reference[k]) for k, v in copied.items())
    assert saved and all(v.dtype == torch.float32 and v.equal(reference[k]) for k, v in saved.items())
    # Train mode gives the fp32 weights back (a trainer's autocast casts them), eval holds them again.
    assert all(p.dtype == torch.float32 for p in hub.train().model.parameters())
    assert hub.eval().model.layers[1].fc2.weight.dtype == torch.bfloat16
    # fp32 again: the very weights, and fp32's vectors to the last digit.
    hub.use_precision("fp32")
    assert all(p.dtype == torch.float32 for p in hub.model.parameters())
    assert hub.model.lm_head.weight is hub.model.embed_tokens.weight  # tied again
    assert hub.embed(ids, pool="mean").equal(fp32.embed(ids, pool="mean"))


def test_answer_runs_in_bf16_with_scores_close_to_fp32s(micro_checkpoint):
    from roberta.model import SpanHead

    hubs = {p: load(micro_checkpoint) for p in ("fp32", "bf16")}
    for hub in hubs.values():
        torch.manual_seed(3)
        hub.model.add_head("squad", SpanHead(hub.model.config))
        hub.eval()
    hubs["bf16"].use_precision("bf16")
    context = "Hamlet is a tragedy written by William Shakespeare around 1600, set in Denmark."
    found = {p: hub.answer("Who wrote Hamlet?", context, topk=5) for p, hub in hubs.items()}
    scores = {p: sorted(score for _, score, _ in spans) for p, spans in found.items()}
    assert len(scores["bf16"]) == len(scores["fp32"]) == 5
    assert max(abs(a - b) for a, b in zip(scores["bf16"], scores["fp32"])) < 0.1


def test_a_quantized_hub_cannot_be_switched_to_bf16(micro_checkpoint):
    hub = load(micro_checkpoint).quantize()
    assert hub.precision == "int8"
    with pytest.raises(UserError, match="quantized to int8; load it again"):
        hub.use_precision("bf16")


def roberta_cli(*args: str, environment: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(environment or {})}
    env = {k: v for k, v in env.items() if v is not None}
    return subprocess.run(
        [sys.executable, "-m", "roberta.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_embed_in_bf16_through_the_cli_and_what_auto_picks_here(micro_checkpoint, tmp_path):
    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(TEXTS) + "\n")
    out = {}
    for precision in ("fp32", "bf16"):
        vectors = str(tmp_path / f"{precision}.npy")
        proc = roberta_cli(
            "embed", str(micro_checkpoint), "--input", str(lines), "--out", vectors,
            "--precision", precision, "--pool", "mean", "--no-progress",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert f"precision: {precision}\n" in proc.stderr
        out[precision] = torch.from_numpy(np.load(tmp_path / f"{precision}.npy"))
    assert out["bf16"].dtype == torch.float32
    assert F.cosine_similarity(out["bf16"], out["fp32"]).min() > 0.999
    # `auto` with ROBERTA_PRECISION unset: the hardware decides, and the log says why.
    proc = roberta_cli(
        "embed", str(micro_checkpoint), "--input", str(lines), "--out", str(tmp_path / "auto.npy"),
        "--pool", "mean", "--no-progress", environment={"ROBERTA_PRECISION": None},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # The micro model is 64 wide: fp32 on every CPU, and the line says why.
    why = (
        "a 64-wide model runs fastest in fp32, even with" if cpu_units().native_bf16 else "this CPU's units:"
    )
    assert f"precision: fp32 (auto: {why} " in proc.stderr
    auto = torch.from_numpy(np.load(tmp_path / "auto.npy"))
    assert auto.equal(out["fp32"])


def test_the_hub_on_auto_runs_bf16_on_this_cpu_for_a_wide_model(tmp_path, monkeypatch):
    from data_fixtures import write_byte_tokenizer
    from roberta import Roberta, RobertaConfig, RobertaModel
    from roberta.tokenizer import load_tokenizer

    monkeypatch.delenv("ROBERTA_PRECISION", raising=False)
    tokenizer = load_tokenizer(write_byte_tokenizer(tmp_path / "tok"))
    config = RobertaConfig(vocab_size=tokenizer.vocab_size, hidden_size=512, num_layers=1, num_heads=8,
                           ffn_size=1024, max_positions=66)  # fmt: skip
    hub = Roberta(RobertaModel(config), tokenizer).eval().use_precision("auto")
    assert hub.precision == ("bf16" if cpu_units().native_bf16 else "fp32")
    vectors = hub.embed(hub.encode_batch(TEXTS))
    assert vectors.dtype == torch.float32 and vectors.shape == (len(TEXTS), 512)


def test_embed_refuses_two_precisions_in_one_line(micro_checkpoint, tmp_path):
    lines = tmp_path / "texts.txt"
    lines.write_text("one\n")
    proc = roberta_cli(
        "embed", str(micro_checkpoint), "--input", str(lines), "--out", str(tmp_path / "v.npy"),
        "--precision", "bf16", "--int8",
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("roberta: error: --int8 and --precision bf16")
    assert not (tmp_path / "v.npy").exists()


def test_serve_in_bf16_answers_vectors_close_to_fp32s(micro_checkpoint):
    # The hub as `roberta serve --precision P` builds it (serve.server.load_hub), then served.
    hubs = {p: load_hub(ServeOptions(str(micro_checkpoint), precision=p)) for p in ("fp32", "bf16")}
    servers = {p: Running(hub, precision=p) for p, hub in hubs.items()}
    try:
        answers = {}
        for precision, server in servers.items():
            status, info = call(server.url + "/info")
            assert status == 200 and info["precision"] == precision
            status, answer = call(server.url + "/embed", {"text": TEXTS, "pool": "mean"})
            assert status == 200, answer
            answers[precision] = torch.tensor(answer["embeddings"])
        assert F.cosine_similarity(answers["bf16"], answers["fp32"]).min() > 0.999
        assert hubs["bf16"].model.layers[0].fc1.weight.dtype == torch.bfloat16  # held, not cast per request
    finally:
        for server in servers.values():
            server.stop()


# --- training in bf16

MICRO = (
    "--model.preset=tiny --model.hidden_size=64 --model.num_layers=2 --model.num_heads=4 "
    "--model.ffn_size=128 --model.dropout=0.1 --model.attention_dropout=0.1 --data.seq_len=32 "
    "--train.batch_size=8 --train.micro_batch_size=4 --train.max_steps=12 --train.log_every=1 "
    "--train.eval_every=6 --train.eval_batches=2 --train.checkpoint_every=3 --train.device=cpu "
    "--schedule.warmup_steps=2 --optim.lr=1e-3"
).split()


def pretrain_argv(corpus: Path, precision: str):
    data = ["--data", str(corpus / "corpus"), "--tokenizer", str(corpus / "tokenizer")]
    return lambda run: ["pretrain", *data, "--out", str(run), *MICRO, f"--train.precision={precision}"]


@pytest.mark.slow
def test_bf16_pretraining_tracks_fp32_resumes_exactly_and_saves_fp32(micro_corpus, tmp_path):
    bf16 = pretrain_argv(micro_corpus, "bf16")
    run_killed_and_resumed(bf16, tmp_path / "whole", tmp_path / "killed", "step-5:micro-batch-0")
    final = "checkpoints/step-00000012/model.safetensors"
    whole, killed = (load_file(str(tmp_path / run / final)) for run in ("whole", "killed"))
    assert all(killed[k].equal(v) for k, v in whole.items())  # exact resume, in bf16 too
    assert run_figures(tmp_path / "killed") == run_figures(tmp_path / "whole")
    assert {v.dtype for v in whole.values()} == {torch.float32}  # the checkpoint is fp32 whatever ran
    assert json.loads((tmp_path / "whole" / "job.json").read_text())["precision"] == "bf16"

    proc = roberta_cli(*pretrain_argv(micro_corpus, "fp32")(tmp_path / "fp32"))
    assert proc.returncode == 0, proc.stderr
    losses = {
        name: [r["loss"] for r in run_figures(tmp_path / name) if r["split"] == "train"]
        for name in ("whole", "fp32")
    }
    assert len(losses["whole"]) == len(losses["fp32"]) == 12
    assert losses["whole"] != losses["fp32"]  # bf16 did compute in bf16
    assert max(abs(a - b) / b for a, b in zip(losses["whole"], losses["fp32"])) < 0.02


@pytest.mark.slow
def test_bf16_fine_tuning_tracks_fp32(shared_data, tmp_path):
    data = glue_slice(tmp_path / "RTE", shared_data, "RTE", 32)
    init = save_micro_checkpoint(tmp_path / "init", shared_data)
    results = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / precision
        proc = roberta_cli(
            "finetune", "glue", "--task", "RTE", "--data", str(data), "--init", str(init), "--out", str(out),
            "--train.max_steps=6", "--train.batch_size=8", "--train.log_every=1", "--train.eval_every=6",
            f"--train.precision={precision}", "--train.progress=false",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert f"precision: {precision}\n" in proc.stderr
        results[precision] = [
            r["loss"]
            for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if r["split"] == "train"
        ]
    assert len(results["bf16"]) == len(results["fp32"]) == 6
    assert max(abs(a - b) / b for a, b in zip(results["bf16"], results["fp32"])) < 0.02


def test_serve_auto_keeps_a_narrow_model_in_fp32(micro_checkpoint, monkeypatch):
    monkeypatch.delenv("ROBERTA_PRECISION", raising=False)
    hub = load_hub(ServeOptions(str(micro_checkpoint)))
    assert hub.precision == "fp32"  # 64 wide: below what bf16 or int8 pay for on a CPU
