"""`prepare`: exact content, worker-independent bytes, resumption, input formats and bad input."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from data_fixtures import make_documents, prepare_killed_then_resumed, write_byte_tokenizer, write_text
from roberta.cli import main
from roberta.data import Corpus, check_tokenizer
from roberta.data.prepare import held_out, prepare, word_start_table
from roberta.errors import UserError
from roberta.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    return write_byte_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def documents():
    return make_documents(seed=0, count=300)


def files_of(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def no_output(out: Path) -> bool:
    return not out.exists() and not out.with_name(out.name + ".partial").exists()


def test_output_is_byte_identical_with_one_and_two_workers(tmp_path, tokenizer_dir, documents):
    text = write_text(tmp_path / "a.txt", documents)
    small = {"chunk_bytes": 2048, "shard_bytes": 16_000, "valid_fraction": 0.1, "progress": False}
    one = prepare([text], tokenizer_dir, tmp_path / "one", workers=1, **small)
    two = prepare([text], tokenizer_dir, tmp_path / "two", workers=2, **small)
    assert Corpus(one).meta["num_shards"] > 2
    assert files_of(one) == files_of(two)


def test_corpus_holds_every_document_whole_in_one_split(tmp_path, tokenizer_dir, documents):
    text = write_text(tmp_path / "a.txt", documents)
    out = prepare(
        [text],
        tokenizer_dir,
        tmp_path / "c",
        workers=1,
        valid_fraction=0.2,
        seed=5,
        chunk_bytes=4096,
        shard_bytes=30_000,
        progress=False,
    )
    tokenizer = load_tokenizer(tokenizer_dir)
    expected = [[tokenizer.tokenize_ids(s) for s in doc] for doc in documents]
    valid = held_out(5, np.arange(len(documents)), 0.2)
    corpus = Corpus(out)
    for split, docs in (
        ("train", [d for d, v in zip(expected, valid) if not v]),
        ("valid", [d for d, v in zip(expected, valid) if v]),
    ):
        got = corpus.split(split)
        assert got.num_documents == len(docs) > 0
        assert [[s.tolist() for s in got.document(i)] for i in range(got.num_documents)] == docs
    assert corpus.meta["dtype"] == "uint16" and corpus.specials.mask_id == tokenizer.mask_id


def test_gzip_jsonl_and_plain_text_give_the_same_tokens(tmp_path, tokenizer_dir, documents):
    plain = write_text(tmp_path / "a.txt", documents)
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    records = tmp_path / "a.jsonl"
    records.write_text(
        "".join(json.dumps({"body": "\n".join(d)}) + "\n" for d in documents), encoding="utf-8"
    )
    outs = [
        prepare([plain], tokenizer_dir, tmp_path / "p", workers=1, progress=False),
        prepare([packed], tokenizer_dir, tmp_path / "g", workers=1, chunk_bytes=1000, progress=False),
        prepare([records], tokenizer_dir, tmp_path / "j", workers=1, text_field="body", progress=False),
    ]
    shard_files = [{k: v for k, v in files_of(o).items() if k.endswith((".bin", ".npy"))} for o in outs]
    assert shard_files[0] == shard_files[1] == shard_files[2]


def test_line_is_document_makes_every_line_a_document(tmp_path, tokenizer_dir, documents):
    text = write_text(tmp_path / "a.txt", documents)
    out = prepare(
        [text],
        tokenizer_dir,
        tmp_path / "c",
        workers=1,
        line_is_document=True,
        valid_fraction=0.0,
        progress=False,
    )
    lines = sum(len(d) for d in documents)
    assert Corpus(out).train.num_documents == Corpus(out).train.num_sentences == lines


def test_a_killed_prepare_resumes_from_its_finished_shards(tmp_path, tokenizer_dir, documents, monkeypatch):
    text = write_text(tmp_path / "a.txt", documents)
    small = {"workers": 1, "chunk_bytes": 2048, "shard_bytes": 8000, "progress": False}
    clean = prepare([text], tokenizer_dir, tmp_path / "clean", **small)
    total_chunks = -(-text.stat().st_size // 2048)

    out = tmp_path / "resumed"

    def killed_state() -> None:
        assert not out.exists() and (tmp_path / "resumed.partial" / "progress.json").is_file()

    calls = prepare_killed_then_resumed(
        monkeypatch, lambda: prepare([text], tokenizer_dir, out, **small), 10, killed_state
    )
    assert calls[0] > 0 and len(calls) < total_chunks  # started after the finished shards
    assert files_of(out) == files_of(clean)


def test_invalid_utf8_is_an_error_naming_file_line_and_byte_offset(tmp_path, tokenizer_dir, documents):
    good = write_text(tmp_path / "good.txt", documents).read_bytes()
    offset = good.index(b"\n", 5000) + 3
    bad = tmp_path / "bad.txt"
    bad.write_bytes(good[:offset] + b"\xff" + good[offset:])
    out = tmp_path / "c"
    with pytest.raises(UserError) as error:
        prepare([bad], tokenizer_dir, out, workers=2, chunk_bytes=1024, progress=False)
    line = good[:offset].count(b"\n") + 1
    assert f"{bad}: line {line}: invalid UTF-8 at byte offset {offset}" in str(error.value)
    assert no_output(out)

    prepare([bad], tokenizer_dir, out, workers=1, errors="replace", progress=False)
    tokenizer = load_tokenizer(tokenizer_dir)
    train = Corpus(out).train
    decoded = tokenizer.decode(train.tokens(0, train.num_tokens))
    assert "\ufffd" in decoded


def test_empty_corpus_and_missing_file_are_errors_without_output(tmp_path, tokenizer_dir):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n", encoding="utf-8")
    out = tmp_path / "c"
    with pytest.raises(UserError, match="empty corpus"):
        prepare([blank], tokenizer_dir, out, workers=1, progress=False)
    assert no_output(out)
    with pytest.raises(UserError, match="missing.txt: input file not found"):
        prepare([tmp_path / "missing.txt"], tokenizer_dir, out, workers=1, progress=False)
    assert no_output(out)


def test_check_tokenizer_rejects_a_corpus_of_another_tokenizer(
    tmp_path, tokenizer_dir, documents, shared_data
):
    out = prepare(
        [write_text(tmp_path / "a.txt", documents)], tokenizer_dir, tmp_path / "c", workers=1, progress=False
    )
    check_tokenizer(out, load_tokenizer(tokenizer_dir))
    with pytest.raises(UserError, match="prepared with another tokenizer"):
        check_tokenizer(out, load_tokenizer(shared_data / "gpt2_bpe"))


def test_cli_reports_bad_input_in_one_line_with_exit_status_2(tmp_path, tokenizer_dir, capsys):
    status = main(
        [
            "prepare",
            str(tmp_path / "nope.txt"),
            "--tokenizer",
            str(tokenizer_dir),
            "--out",
            str(tmp_path / "c"),
        ]
    )
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("roberta: error: ") and err.count("\n") == 1
    assert no_output(tmp_path / "c")


def test_gpt2_corpus_matches_the_reference_encoding(tmp_path, shared_data):
    source = min((shared_data / "corpus" / "wiki").glob("*.txt"), key=lambda p: p.stat().st_size)
    excerpt = tmp_path / "wiki.txt"
    excerpt.write_bytes(source.read_bytes()[:300_000].rsplit(b"\n", 1)[0] + b"\n")
    out = prepare(
        [excerpt],
        shared_data / "gpt2_bpe",
        tmp_path / "c",
        workers=2,
        valid_fraction=0.0,
        chunk_bytes=50_000,
        progress=False,
    )
    tokenizer = load_tokenizer(shared_data / "gpt2_bpe")
    lines = [s.strip() for s in excerpt.read_text(encoding="utf-8").split("\n") if s.strip()]
    reference, lengths = tokenizer.tokenize_ids_flat(lines, engine="tokenizers")
    train = Corpus(out).train
    assert np.array_equal(train.tokens(0, train.num_tokens), reference)
    assert np.array_equal(np.diff(train.sentence_offsets), lengths)
    assert word_start_table(tokenizer)[tokenizer.token_to_id("Ġworld")]
    assert not word_start_table(tokenizer)[tokenizer.token_to_id("ing")]
