"""int8 for CPU serving: `Roberta.quantize()` swaps every Linear for its int8 version and keeps
vectors, labels, fillings and answers close to fp32; `--int8` on embed, predict and fill-mask,
through the real `roberta` command, writes the output and prints the agreement; off the CPU, or
on weights that are not float32, it is refused in one line."""

import dataclasses
import os
import random
import subprocess
import sys
from copy import deepcopy
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

from roberta import Roberta, RobertaConfig, UserError, cli
from roberta.checkpoint import save
from roberta.hub.files import predict_test_file
from roberta.model import RobertaModel, SpanHead
from roberta.runtime.int8 import first_batch, quantize_linears
from roberta.tasks.glue import get_task
from test_hub import ANSWERS, predict_cli, trained_hub
from test_hub import MICRO as HUB_MICRO

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models run fastest on one thread

# Weights drawn 10x wider than BERT's N(0, 0.02): at 0.02 a random micro model's output is nearly
# all embedding, so int8 could do anything to the Linear layers unseen (cosine 1.00000 with fp32);
# at 0.2 they carry much of it (here: cosine 0.9991 at the least, vectors up to 0.14 apart, head
# logits up to 0.07 apart). 256 positions leave `answer` room for its windows.
MICRO = dataclasses.replace(HUB_MICRO, max_positions=258, init_std=0.2)  # the hub's micro shape
WORDS = "the a cat dog sat ran on under mat tree big small red blue quickly slowly and then it was".split()
TEXTS = [" ".join(random.Random(k).choices(WORDS, k=3 + k % 17)) for k in range(64)]
QUESTIONS = ["Where is Paris?", "What is red?", "Who sat on the mat?"]
CONTEXTS = [
    "Paris is the capital of France, a country in Europe.",
    "The big red dog sat under a tree.",
    "The cat sat on the mat and then it ran.",
]
ROBERTA = Path(sys.executable).with_name("roberta")


@pytest.fixture(scope="module")
def fp32(shared_data) -> Roberta:
    """test_hub's micro model that knows the two fill-mask answers, with a 3-class head and a span head."""
    hub = trained_hub(shared_data, MICRO, steps=30)
    hub.model.add_head("squad", SpanHead(MICRO))
    return hub.eval()


@pytest.fixture(scope="module")
def int8(fp32) -> Roberta:
    return Roberta(deepcopy(fp32.model), fp32.tokenizer).quantize()


def test_quantize_swaps_every_linear_and_keeps_the_tied_projection_fp32(fp32, int8):
    linears = [name for name, m in fp32.model.named_modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 4 * MICRO.num_layers + 1 + 2 + 1  # qkv, out_proj, fc1, fc2; LM dense; head; span
    quantized = dict(int8.model.named_modules())
    assert all(type(quantized[name]) is Int8Linear for name in linears)
    assert not any(type(m) is nn.Linear for m in int8.model.modules())
    assert int8.model.lm_head.weight is int8.model.embed_tokens.weight
    assert int8.model.lm_head.weight.dtype == torch.float32 and not int8.training
    assert int8.device == torch.device("cpu")


@pytest.mark.parametrize("layer,pool", [(-1, "cls"), (-1, "mean"), (1, "cls")])
def test_int8_vectors_stay_close_to_fp32(fp32, int8, layer, pool):
    ids = fp32.encode_batch(TEXTS)
    a, b = fp32.embed(ids, layer, pool), int8.embed(ids, layer, pool)
    cosine = F.cosine_similarity(a, b, dim=-1)
    assert cosine.min() > 0.99  # observed 0.9991 at the least
    assert (a - b).abs().max() > 1e-3  # and int8 did run: the vectors moved


def test_int8_labels_fillings_and_answers_mostly_agree(fp32, int8):
    ids = fp32.encode_batch(TEXTS)
    a, b = (
        fp32.predict("sentiment", ids, return_logits=True),
        int8.predict("sentiment", ids, return_logits=True),
    )
    assert a.argmax(-1).eq(b.argmax(-1)).float().mean() >= 0.9  # observed 64 of 64 (untrained models: 62-63)
    assert 1e-3 < (a - b).abs().max() < 0.5
    for text, answer in ANSWERS.items():
        ((_, score, token),) = int8.fill_mask(text, topk=1)
        assert token == answer and score == pytest.approx(fp32.fill_mask(text, topk=1)[0][1], abs=0.01)
    masked = [t.replace("mat", "<mask>", 1) for t in TEXTS if "mat" in t]
    assert (
        fp32.mask_logits(masked).argmax(-1).eq(int8.mask_logits(masked).argmax(-1)).float().mean() >= 0.8
    )  # 23 of 23
    # An untrained span head ranks spans a few hundredths apart: int8 may reorder them, not move them far.
    for fp32_spans, int8_spans in zip(
        fp32.answer(QUESTIONS, CONTEXTS, topk=3), int8.answer(QUESTIONS, CONTEXTS, topk=3)
    ):
        best, score, start = fp32_spans[0]
        near = {(text, at): s for text, s, at in int8_spans}
        assert abs(near[best, start] - score) < 0.2  # observed 0.074 at most


def test_quantize_refuses_other_devices_and_dtypes(fp32):
    on_meta = Roberta(deepcopy(fp32.model), fp32.tokenizer).to("meta")
    with pytest.raises(UserError, match=r"^int8 runs on the CPU only .* not on device 'meta'") as refused:
        on_meta.quantize()
    assert "\n" not in str(refused.value)
    half = Roberta(deepcopy(fp32.model), fp32.tokenizer).bfloat16()
    with pytest.raises(UserError, match="starts from float32 weights, not torch.bfloat16"):
        half.quantize()
    assert not any(isinstance(m, Int8Linear) for hub in (on_meta, half) for m in hub.model.modules())


def test_first_batch_is_the_leading_inputs_that_fit_one_batch():
    seqs = [[0] * n for n in (5, 9, 3, 20, 2)]
    assert [len(s) for s in first_batch(seqs, batch_tokens=30)] == [5, 9, 3]  # 3 x 9 fits, 4 x 20 does not
    assert [len(s) for s in first_batch(seqs, batch_tokens=4)] == [5]  # always at least one
    assert len(first_batch(seqs, batch_tokens=10_000)) == 5


@pytest.fixture(scope="module")
def checkpoint_dir(fp32, tmp_path_factory) -> Path:
    model = deepcopy(fp32.model)
    model.remove_head("squad")
    return save(tmp_path_factory.mktemp("int8") / "micro", model, fp32.tokenizer)


def test_cli_int8_off_the_cpu_is_one_line_before_loading(checkpoint_dir, tmp_path, capsys):
    texts, out = tmp_path / "texts.txt", tmp_path / "v.npy"
    texts.write_text("\n".join(TEXTS) + "\n")
    argv = ["embed", str(checkpoint_dir), "--input", str(texts), "--out", str(out)]
    argv += "--no-progress --int8 --device meta".split()
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        "roberta: error: int8 runs on the CPU only (torch's x86/fbgemm dynamic quantization), not on device "
        "'meta': load the model on cpu"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["texts.txt"]


@pytest.mark.slow
def test_cli_int8_embed_through_the_roberta_command(fp32, checkpoint_dir, tmp_path):
    texts, out = tmp_path / "texts.txt", tmp_path / "v.npy"
    texts.write_text("\n".join(TEXTS) + "\n")
    ids = fp32.encode_batch(TEXTS)
    sample = len(first_batch(ids, 128))
    assert 1 < sample < len(TEXTS)  # the agreement is measured on one batch, not the whole input
    argv = [str(ROBERTA), "embed", str(checkpoint_dir), "--input", str(texts), "--out", str(out)]
    done = subprocess.run(
        argv + "--int8 --batch-tokens 128 --no-progress".split(),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path / 'v.npy'}: {len(TEXTS)} vectors"
    # The agreement, then what ran, and nothing else (no notice from torch.ao).
    line, chosen = done.stderr.splitlines()
    assert chosen == "precision: int8"
    assert line.startswith(f"int8 vs fp32 on the first {sample} input(s): cosine min 0.99")
    vectors, expected = torch.from_numpy(np.load(tmp_path / "v.npy")), fp32.embed(ids)
    assert (
        F.cosine_similarity(vectors, expected, dim=-1).min() > 0.99
        and (vectors - expected).abs().max() > 1e-3
    )


def test_cli_int8_predict_and_fill_mask(fp32, checkpoint_dir, tmp_path, capsys):
    rows = tmp_path / "rows.tsv"
    rows.write_text("sentence\n" + "\n".join(TEXTS) + "\n")
    assert (
        predict_cli(
            str(checkpoint_dir), "sentiment", rows, tmp_path / "p.tsv", "--columns", "sentence", "--int8"
        )
        == 0
    )
    line, chosen = capsys.readouterr().err.splitlines()
    assert chosen == "precision: int8"
    expected = fp32.predict("sentiment", fp32.encode_batch(TEXTS)).argmax(-1).numpy()
    labels = np.array([int(r.split("\t")[0]) for r in (tmp_path / "p.tsv").read_text().splitlines()[1:]])
    same = int(np.sum(labels == expected))
    assert len(labels) == len(TEXTS) and same >= 0.9 * len(TEXTS)
    assert line.startswith(
        f"int8 vs fp32 on the first {len(TEXTS)} input(s): top-1 agrees on {same}/{len(TEXTS)} "
    )
    assert 1e-3 < float(line.split("max |logit difference| ")[1]) < 0.5  # int8 ran, and stayed close

    assert (
        cli.main(
            ["fill-mask", str(checkpoint_dir), "The capital of France is <mask>.", "--topk", "2", "--int8"]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].endswith("\t' Paris'\tThe capital of France is Paris.")
    line, chosen = captured.err.splitlines()
    assert chosen == "precision: int8"
    assert line.startswith(
        "int8 vs fp32 on the first 1 input(s): top-1 agrees on 1/1 (100.0%), max |logit difference| "
    )
    assert float(line.split("max |logit difference| ")[1]) > 1e-3


def test_glue_test_file_with_int8(fp32, tmp_path, capsys):
    hub = Roberta(deepcopy(fp32.model), fp32.tokenizer).eval()
    hub.register_classification_head("SST-2", 2)
    expected = hub.predict("SST-2", hub.encode_batch(TEXTS)).argmax(-1).tolist()
    (tmp_path / "test.tsv").write_text(
        "index\tsentence\n" + "".join(f"{k}\t{t}\n" for k, t in enumerate(TEXTS))
    )
    assert (
        predict_test_file(hub, get_task("SST-2"), tmp_path / "test.tsv", tmp_path / "SST-2.tsv", int8=True)
        == 64
    )
    assert any(type(m) is Int8Linear for m in hub.model.modules())
    labels = [int(r.split("\t")[1]) for r in (tmp_path / "SST-2.tsv").read_text().splitlines()[1:]]
    # The first batch is the whole file here, so the line counts exactly the labels written that fp32 shares.
    same = sum(a == b for a, b in zip(labels, expected, strict=True))
    assert capsys.readouterr().err.startswith(
        f"int8 vs fp32 on the first 64 input(s): top-1 agrees on {same}/64 "
    )
    assert same >= 0.9 * 64


def test_a_quantized_model_is_not_saved(tmp_path):
    """Saving int8 weights would write a checkpoint nothing can load: one clear error, nothing written."""
    model = RobertaModel(
        RobertaConfig.preset("tiny", num_layers=1, hidden_size=64, num_heads=1, ffn_size=128, vocab_size=100)
    )
    quantize_linears(model)
    with pytest.raises(UserError, match="int8-quantized model is for serving only"):
        save(tmp_path / "ckpt", model)
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize("amx_int8, engine", [(True, "onednn"), (False, None)])
def test_int8_runs_on_onednn_where_the_cpu_has_amx_int8_units(monkeypatch, amx_int8, engine):
    from roberta.runtime import int8
    from roberta.runtime.precision import CpuUnits

    if "onednn" not in torch.backends.quantized.supported_engines:
        pytest.skip("this torch has no oneDNN quantized engine")
    monkeypatch.setattr(int8, "cpu_units", lambda: CpuUnits(amx_int8=amx_int8, avx512_vnni=True))
    default = torch.backends.quantized.engine
    assert int8.quantize_engine() == (engine or default)
    torch.manual_seed(0)
    linear = nn.Sequential(nn.Linear(64, 32))
    x = torch.randn(5, 64)
    packed_on, quantize = [], int8.quantize_dynamic
    monkeypatch.setattr(
        int8,
        "quantize_dynamic",
        lambda *a, **k: packed_on.append(torch.backends.quantized.engine) or quantize(*a, **k),
    )
    quantized = quantize_linears(deepcopy(linear))
    assert packed_on == [engine or default]  # the weights packed on that engine's kernels
    assert torch.backends.quantized.engine == default  # the process' engine is left as it was
    # The weights were packed for the engine: the oneDNN ones give the same quantization's numbers.
    assert isinstance(quantized[0], Int8Linear)
    assert torch.allclose(quantized(x), linear(x), atol=0.05)
