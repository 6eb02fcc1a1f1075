"""`distill embed --new-student LAYERSxWIDTH`: the student made from its teacher reads the teacher's
vocabulary to the teacher's ids, starts with the teacher's token vectors on their principal axes,
resumes bit for bit when killed, and its export gives the same vectors in sentence-transformers.
The teacher is a tiny sentence-transformers model built here (an uncased WordPiece BERT, mean
pooling), so the whole vocabulary runs through it in a second."""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from data_fixtures import write_byte_tokenizer
from process_fixtures import run_killed_and_resumed
from roberta.cli import main
from roberta.convert.sentence_transformers import SentenceEncoder
from roberta.hub import load
from roberta.model import EMBEDDING_HEAD
from roberta.tasks.embed_student import NewStudent, StudentShape, token_embeddings, token_texts
from roberta.train.config import JobConfig

pytestmark = pytest.mark.usefixtures("one_thread")

TEACHER_WIDTH = 32
MIXED = ["A Man is playing a GUITAR.", "Two dogs run across the grass!", "Café résumé, naïve 42%"]


def sentence_modules(body: Path, max_length: int) -> list:
    """sentence-transformers' Transformer over `body` and a mean Pooling (their module moved in 6.x)."""
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:
        from sentence_transformers.models import Pooling, Transformer
    return [Transformer(str(body), max_seq_length=max_length), Pooling(TEACHER_WIDTH, "mean")]


@pytest.fixture(scope="module")
def teacher(data, tmp_path_factory) -> Path:
    """A sentence-transformers model: a 1 x 32 BERT, random, with an uncased WordPiece vocabulary
    of about 175 tokens learnt from the test sentences, mean-pooled."""
    transformers = pytest.importorskip("transformers")
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from tokenizers import BertWordPieceTokenizer

    root = tmp_path_factory.mktemp("teacher")
    bert = root / "bert"
    bert.mkdir()
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(data["sentences"].read_text().splitlines() + MIXED, vocab_size=300)
    wordpiece.save_model(str(bert))
    transformers.BertTokenizerFast(vocab=str(bert / "vocab.txt"), do_lower_case=True).save_pretrained(bert)
    config = transformers.BertConfig(
        vocab_size=wordpiece.get_vocab_size(),
        hidden_size=TEACHER_WIDTH,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(bert)
    encoder = sentence_transformers.SentenceTransformer(modules=sentence_modules(bert, 60), device="cpu")
    encoder.save(str(root / "st"))
    return root / "st"


def test_token_embeddings_are_the_vectors_on_their_principal_axes():
    from sklearn.decomposition import PCA

    vectors = np.random.default_rng(0).normal(size=(200, 12)) * np.linspace(3, 0.1, 12)
    ours = token_embeddings(vectors.astype(np.float32), 4)
    theirs = PCA(n_components=4).fit_transform(vectors)
    assert ours.shape == (200, 4) and np.sqrt((ours**2).mean()) == pytest.approx(1, rel=1e-5)
    scale = np.sqrt((theirs**2).mean())
    for axis in range(4):  # the same axes, each up to its sign, at one common scale
        assert np.allclose(np.abs(ours[:, axis]), np.abs(theirs[:, axis]) / scale, atol=1e-4)


def test_a_new_student_reads_the_teachers_vocabulary_and_starts_from_its_token_vectors(teacher):
    from sentence_transformers import SentenceTransformer

    job = JobConfig()
    model, tokenizer = NewStudent(teacher, StudentShape.parse("2x16")).load(job)
    library = SentenceTransformer(str(teacher), device="cpu", local_files_only=True)
    assert tokenizer.lowercase and tokenizer.vocab_size == library.tokenizer.vocab_size
    theirs = library.tokenizer(MIXED, add_special_tokens=False)["input_ids"]
    assert tokenizer.tokenize_ids_batch(MIXED) == theirs
    config = model.config
    assert (config.num_layers, config.hidden_size, config.num_heads, config.ffn_size) == (2, 16, 1, 64)
    assert config.max_positions == 60 + tokenizer.pad_id + 1 and config.dropout == 0.0

    vectors = library.encode(token_texts(tokenizer), convert_to_numpy=True)
    expected = token_embeddings(vectors, 16)
    expected[tokenizer.pad_id] = 0
    assert np.allclose(model.embed_tokens.weight.detach().numpy(), expected, atol=1e-5)
    texts = token_texts(tokenizer)
    pieces = [i for i in range(tokenizer.vocab_size) if tokenizer.id_to_token(i).startswith("##")]
    assert pieces and not any(texts[i].startswith("##") for i in pieces)  # a piece reads as its letters

    reseeded, _ = NewStudent(teacher, StudentShape(2, 16)).load(
        dataclasses.replace(job, train=dataclasses.replace(job.train, seed=job.train.seed + 1))
    )
    # The token embeddings are the teacher's, the layers the seed's.
    assert torch.equal(reseeded.embed_tokens.weight, model.embed_tokens.weight)
    assert not torch.equal(reseeded.layers[0].fc1.weight, model.layers[0].fc1.weight)


def test_a_byte_level_bpe_teacher_gives_its_student_its_vocabulary(tmp_path):
    """A RoBERTa-based teacher (all-distilroberta-v1's kind): byte-level BPE, each token read as text."""
    transformers = pytest.importorskip("transformers")
    sentence_transformers = pytest.importorskip("sentence_transformers")
    body = write_byte_tokenizer(tmp_path / "roberta")
    (body / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer"}))
    size = len(json.loads((body / "vocab.json").read_text()))
    config = transformers.RobertaConfig(
        vocab_size=size, hidden_size=TEACHER_WIDTH, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=66, pad_token_id=1,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.RobertaModel(config).save_pretrained(body)
    encoder = sentence_transformers.SentenceTransformer(modules=sentence_modules(body, 64), device="cpu")
    encoder.save(str(tmp_path / "st"))
    model, tokenizer = NewStudent(tmp_path / "st", StudentShape(1, 16)).load(JobConfig())
    assert tokenizer.kind == "hf" and tokenizer.vocab_size == size
    theirs = encoder.tokenizer(MIXED, add_special_tokens=False)["input_ids"]
    assert tokenizer.tokenize_ids_batch(MIXED) == theirs
    texts = token_texts(tokenizer)
    assert texts[tokenizer.token_to_id("Ġthe")] == "the" and texts[tokenizer.token_to_id("in")] == "in"
    assert model.embed_tokens.weight.shape == (size, 16) and model.config.max_positions == 64 + 1 + 1


@pytest.mark.slow
def test_new_student_run_resumes_bit_identically_and_exports_what_it_embeds(data, teacher, tmp_path):
    from sentence_transformers import SentenceTransformer

    def args(out: Path) -> list[str]:
        return [
            "distill", "embed", "--new-student", "2x16", "--teacher", str(teacher),
            "--text", str(data["sentences"]), "--dev", str(data["dev"]), "--out", str(out),
            "--train.batch_size=8", "--train.epochs=3", "--optim.lr=1e-3",
        ]  # fmt: skip

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    run_killed_and_resumed(args, whole, killed, "step-9:micro-batch-0")
    final = "checkpoints/step-00000018/model.safetensors"
    a, b = load_file(str(whole / final)), load_file(str(killed / final))
    assert all(a[k].equal(b[k]) for k in a)
    job = json.loads((whole / "job.json").read_text())
    assert job["objective"] == "distillation" and job["init"].startswith("a new 2x16 student of")

    student = load(whole / "best")
    assert "lm_head.dense.weight" not in a  # never trained, so never saved: fill-mask refuses it
    assert main(["fill-mask", str(whole / "best"), "a [MASK] dog"]) == 2
    assert student.model.heads[EMBEDDING_HEAD].spec() == {"kind": "embedding", "pool": "mean", "dim": 32}
    vectors = student.embed(student.encode_batch(MIXED))
    teacher_tokenizer = SentenceEncoder.load(teacher).model.tokenizer
    assert student.encode_batch(MIXED)[0][1:-1].tolist() == teacher_tokenizer(MIXED[0])["input_ids"][1:-1]
    assert 0 == main(["convert", str(whole / "best"), str(tmp_path / "hf"), "--to", "hf"])
    exported = SentenceTransformer(str(tmp_path / "hf"), device="cpu", local_files_only=True)
    assert np.allclose(exported.encode(MIXED), vectors.numpy(), atol=1e-5)  # lowercased there too


def test_a_teacher_whose_tokenizer_roberta_cannot_read_is_refused_before_anything_is_written(
    data, teacher, tmp_path, capsys
):
    # WordPiece behind another normalizer: the library reads it, roberta reads BERT's alone.
    unreadable = tmp_path / "teacher"
    shutil.copytree(teacher, unreadable)
    spec = json.loads((unreadable / "tokenizer.json").read_text())
    spec["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]}
    (unreadable / "tokenizer.json").write_text(json.dumps(spec))
    out = tmp_path / "run"
    argv = ["distill", "embed", "--new-student", "2x16", "--teacher", str(unreadable)]
    argv += ["--text", str(data["sentences"]), "--dev", str(data["dev"]), "--out", str(out)]
    assert main(argv) == 2 and not out.exists()
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "roberta cannot read the teacher's tokenizer" in message
    assert 'normalizer.type is "Sequence", not "BertNormalizer"' in message
