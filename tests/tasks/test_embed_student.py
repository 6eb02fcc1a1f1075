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
            "--train.batch_size=8", "--train.epochs=3", "--optim.lr=1e-3", "--topic-batches", "3",
        ]  # fmt: skip

    # Batches on one topic too: the topics, made from the teacher's cache, are the same at resumption.
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    run_killed_and_resumed(args, whole, killed, "step-9:micro-batch-0")
    final = "checkpoints/step-00000018/model.safetensors"
    a, b = load_file(str(whole / final)), load_file(str(killed / final))
    assert all(a[k].equal(b[k]) for k in a)
    job = json.loads((whole / "job.json").read_text())
    assert job["objective"] == "distillation" and job["init"].startswith("a new 2x16 student of")
    assert job["similarity"]["topics"] == 3

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


def write_teacher(root: Path, kind: str, layers: int, ffn: int, like: Path) -> Path:
    """A sentence-transformers teacher with a random `kind` body ("bert": `like`'s WordPiece
    vocabulary; "roberta": a byte-level BPE one), TEACHER_WIDTH wide in 2 heads, mean-pooled."""
    import transformers
    from sentence_transformers import SentenceTransformer

    body = root / kind
    if kind == "bert":
        shutil.copytree(like.parent / "bert", body)
        config = transformers.BertConfig(
            vocab_size=len((body / "vocab.txt").read_text().splitlines()), hidden_size=TEACHER_WIDTH,
            num_hidden_layers=layers, num_attention_heads=2, intermediate_size=ffn,
            max_position_embeddings=64,
        )  # fmt: skip
        model = transformers.BertModel
    else:
        write_byte_tokenizer(body)
        (body / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer"}))
        config = transformers.RobertaConfig(
            vocab_size=len(json.loads((body / "vocab.json").read_text())), hidden_size=TEACHER_WIDTH,
            num_hidden_layers=layers, num_attention_heads=2, intermediate_size=ffn,
            max_position_embeddings=66, pad_token_id=1,
        )  # fmt: skip
        model = transformers.RobertaModel
    torch.manual_seed(0)
    model(config).save_pretrained(body)
    SentenceTransformer(modules=sentence_modules(body, 60), device="cpu").save(str(root / "st"))
    return root / "st"


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_a_student_pruned_keeping_everything_is_its_teacher(kind, teacher, tmp_path):
    from sentence_transformers import SentenceTransformer

    from roberta.hub import Roberta
    from roberta.tasks.embed_student_pruned import PrunedStudent

    path = write_teacher(tmp_path, kind, layers=2, ffn=4 * TEACHER_WIDTH, like=teacher)
    read = []  # the teacher is cut once per command, however many members load the start
    start = PrunedStudent(
        path, StudentShape(2, TEACHER_WIDTH), texts=lambda: read.append(1) or MIXED, progress=False
    )
    model, tokenizer = start.load(JobConfig())
    again, _ = start.load(JobConfig())
    assert read == [1] and all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values())
    )
    assert model.config.num_heads == 2 and start.source.startswith(f"a 2x{TEACHER_WIDTH} student pruned from")
    hub = Roberta(model, tokenizer).eval()
    theirs = SentenceTransformer(str(path), device="cpu", local_files_only=True).encode(MIXED)
    # The same vectors to LayerNorm's epsilon (the student's 1e-5 against BERT's 1e-12).
    assert np.allclose(hub.embed(hub.encode_batch(MIXED)).numpy(), theirs, atol=1e-4)


def test_pruning_keeps_the_most_active_channels_of_the_teachers_last_layers(teacher, tmp_path):
    from sentence_transformers import SentenceTransformer

    from roberta.tasks.embed_student_pruned import PrunedStudent, importance, top

    path = write_teacher(tmp_path, "bert", layers=2, ffn=4 * TEACHER_WIDTH, like=teacher)
    library = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    body = library[0].auto_model
    loud = [1, 5, 9, 13, 17, 21, 25, 29]
    with torch.no_grad():  # these channels come out of every LayerNorm 50x louder than the rest
        for name, p in body.named_parameters():
            if name.endswith("LayerNorm.weight"):
                p[loud] *= 50
    library.save(str(path))
    found = importance(body, library.tokenizer, MIXED, 60)
    channels = top(found.channels, 16)
    assert set(loud) <= set(channels.tolist())
    student, _ = PrunedStudent(path, StudentShape(1, 16), texts=lambda: MIXED, progress=False).load(
        JobConfig()
    )
    last = body.encoder.layer[1]  # one layer kept: the teacher's last
    assert torch.equal(student.layers[0].fc2.bias, last.output.dense.bias[channels].detach())
    assert torch.equal(
        student.embed_tokens.weight, body.embeddings.word_embeddings.weight[:, channels].detach()
    )
    proj = student.heads[EMBEDDING_HEAD].proj.weight  # each kept channel back at its own place
    assert torch.equal(proj[channels].diagonal(), torch.ones(16)) and proj.abs().sum() == 16


def test_auto_falls_back_to_the_static_start_where_the_teacher_cannot_be_pruned(
    data, teacher, tmp_path, capsys
):
    from roberta.tasks.embed_student_pruned import PrunedStudent

    # The 1-layer teacher: a 2-layer student cannot be cut from it.
    auto = PrunedStudent(teacher, StudentShape(2, 16), texts=lambda: MIXED, progress=False, fallback=True)
    model, _ = auto.load(JobConfig())
    static, _ = NewStudent(teacher, StudentShape(2, 16), progress=False).load(JobConfig())
    static_source = lambda t, shape: f"a new {shape} student of {t}"  # noqa: E731
    assert "student: the static start (2 layers are more than the teacher's 1)" in capsys.readouterr().out
    assert auto.source == static_source(teacher, "2x16") and auto.load(JobConfig())  # said once
    assert "static start" not in capsys.readouterr().out
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), static.state_dict().values()))

    out = tmp_path / "run"
    argv = [
        "distill",
        "embed",
        "--new-student",
        "2x16",
        "--student-init",
        "pruned",
        "--teacher",
        str(teacher),
    ]
    argv += ["--text", str(data["sentences"]), "--dev", str(data["dev"]), "--out", str(out)]
    assert main(argv) == 2 and not out.exists()
    message = capsys.readouterr().err.strip()
    assert (
        "\n" not in message
        and "2 layers are more than the teacher's 1; give --student-init static" in message
    )


def test_distill_embed_makes_a_pruned_student_from_the_command_line(data, teacher, tmp_path):
    path = write_teacher(tmp_path, "bert", layers=2, ffn=4 * TEACHER_WIDTH, like=teacher)
    out = tmp_path / "run"
    argv = [
        "distill",
        "embed",
        "--new-student",
        "1x16",
        "--teacher",
        str(path),
        "--text",
        str(data["sentences"]),
    ]
    argv += ["--dev", str(data["dev"]), "--out", str(out), "--train.batch_size=8", "--train.epochs=1"]
    assert main(argv) == 0
    assert json.loads((out / "job.json").read_text())["init"].startswith("a 1x16 student pruned from")
    assert load(out / "best").model.config.num_heads == 1  # the teacher's heads, 16 wide
