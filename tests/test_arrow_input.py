"""Corpora and task data as Parquet, Arrow IPC and `datasets.save_to_disk` folders: the same corpus
as the same text given as JSONL, resumable, bad input refused in one line, and fine-tuning rows."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_fixtures import make_documents, prepare_killed_then_resumed, write_byte_tokenizer
from roberta.cli import main
from roberta.data.prepare import prepare
from roberta.errors import UserError
from roberta.inputs.arrow import record_batches
from roberta.tasks.classify import read_labelled_file
from roberta.tokenizer import train_tokenizer

SMALL = {"workers": 1, "chunk_bytes": 2048, "shard_bytes": 8000, "valid_fraction": 0.1, "progress": False}
# One shard: --shard-mb counts a JSONL file's bytes but records' text bytes, so shards close elsewhere.
ONE_SHARD = {**SMALL, "shard_bytes": 1 << 30}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    return write_byte_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """One document per record, its sentences on lines, with the blank and padded lines JSONL may hold."""
    documents = ["\n".join(d) for d in make_documents(seed=1, count=200)]
    return [*documents[:50], "  \n", f"  {documents[50]}\n\n", *documents[51:]]


def write_jsonl(path: Path, texts: list[str], field: str = "text") -> Path:
    path.write_text("".join(json.dumps({field: t, "id": i}) + "\n" for i, t in enumerate(texts)))
    return path


def write_parquet(path: Path, texts: list[str], field: str = "text", rows_per_group: int = 17) -> Path:
    pq.write_table(pa.table({"id": range(len(texts)), field: texts}), path, row_group_size=rows_per_group)
    return path


def write_dataset(directory: Path, texts: list[str], shards: int = 2) -> Path:
    """The layout `datasets.Dataset.save_to_disk` writes: data-*.arrow IPC streams of batches, state.json
    listing them, dataset_info.json."""
    directory.mkdir()
    names = [f"data-{k:05d}-of-{shards:05d}.arrow" for k in range(shards)]
    per = -(-len(texts) // shards)
    for k, name in enumerate(names):
        part = texts[k * per : (k + 1) * per]
        with pa.ipc.new_stream(directory / name, pa.schema([("text", pa.string())])) as writer:
            for i in range(0, len(part), 10):
                writer.write_batch(pa.record_batch([pa.array(part[i : i + 10])], names=["text"]))
    (directory / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names]}))
    (directory / "dataset_info.json").write_text(json.dumps({"features": {"text": {"dtype": "string"}}}))
    return directory


def files_of(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def corpus_files(directory: Path) -> dict[str, bytes]:
    """Every file of a corpus but meta.json, which names the inputs."""
    files = {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }
    meta = json.loads(files.pop("meta.json"))
    return {**files, "splits": json.dumps(meta["splits"], sort_keys=True).encode()}


def test_parquet_arrow_and_datasets_folders_prepare_byte_identical_to_jsonl(tmp_path, tokenizer_dir, texts):
    jsonl = prepare(
        [write_jsonl(tmp_path / "c.jsonl", texts)], tokenizer_dir, tmp_path / "jsonl", **ONE_SHARD
    )
    expected = corpus_files(jsonl)
    # Through the command line, with another column name.
    parquet = write_parquet(tmp_path / "c.parquet", texts, field="body")
    argv = ["prepare", str(parquet), "--tokenizer", str(tokenizer_dir), "--out", str(tmp_path / "pq")]
    argv += ["--text-field", "body", "--valid-fraction", "0.1", "--workers", "1", "--no-progress"]
    assert main(argv) == 0
    jsonl_meta = json.loads((jsonl / "meta.json").read_text())
    pq_meta = json.loads((tmp_path / "pq" / "meta.json").read_text())
    assert pq_meta["splits"]["train"]["tokens"] == jsonl_meta["splits"]["train"]["tokens"]
    small = prepare([parquet], tokenizer_dir, tmp_path / "pq-small", text_field="body", **ONE_SHARD)
    assert corpus_files(small) == expected
    folder = prepare([write_dataset(tmp_path / "ds", texts)], tokenizer_dir, tmp_path / "dsout", **ONE_SHARD)
    assert corpus_files(folder) == expected
    ipc_file = tmp_path / "c.arrow"  # the random-access IPC format (Feather v2)
    with pa.ipc.new_file(ipc_file, pa.schema([("text", pa.large_string())])) as writer:
        writer.write_batch(pa.record_batch([pa.array(texts, pa.large_string())], names=["text"]))
    assert corpus_files(prepare([ipc_file], tokenizer_dir, tmp_path / "ipc", **ONE_SHARD)) == expected
    # train-tokenizer reads the same sentences.
    for name, source in (("from-jsonl", tmp_path / "c.jsonl"), ("from-arrow", ipc_file)):
        train_tokenizer([source], tmp_path / name, vocab_size=300, progress=False)
    assert files_of(tmp_path / "from-jsonl") == files_of(tmp_path / "from-arrow")


def test_a_killed_prepare_of_parquet_resumes_after_its_finished_shards(
    tmp_path, tokenizer_dir, texts, monkeypatch
):
    parquet = write_parquet(tmp_path / "c.parquet", texts)
    clean = prepare([parquet], tokenizer_dir, tmp_path / "clean", **SMALL)
    out = tmp_path / "resumed"

    def killed_state() -> None:
        assert (tmp_path / "resumed.partial" / "progress.json").is_file()

    calls = prepare_killed_then_resumed(
        monkeypatch, lambda: prepare([parquet], tokenizer_dir, out, **SMALL), 12, killed_state
    )
    assert calls[0] > 0  # started after the finished shards, mid-file
    assert corpus_files(out) == corpus_files(clean)


def test_batches_are_bounded_and_start_at_any_row(tmp_path):
    parquet = write_parquet(tmp_path / "big.parquet", [f"row {i}" for i in range(3000)], rows_per_group=3000)
    batches = list(record_batches(parquet, ["text"], ["text"], first_row=1234))
    assert max(b.num_rows for _, b in batches) <= 256  # one row group of 3000 is not decoded at once
    assert batches[0][0] == 1234 and batches[0][1].column(0)[0].as_py() == "row 1234"
    assert sum(b.num_rows for _, b in batches) == 3000 - 1234


def bad_parquet(tmp_path: Path, kind: str) -> tuple[Path, str]:
    path = tmp_path / f"{kind}.parquet"
    if kind == "missing-column":
        pq.write_table(pa.table({"body": ["a"]}), path)
        return path, f"{path}: no column 'text' (columns: body)"
    if kind == "not-strings":
        pq.write_table(pa.table({"text": [1, 2]}), path)
        return path, f"{path}: column 'text' holds int64, expected strings"
    if kind == "null":
        pq.write_table(pa.table({"text": ["a", None]}), path)
        return path, f"{path}: row 2: column 'text' is null, expected a string"
    write_parquet(path, ["a b", "c"])
    path.write_bytes(path.read_bytes()[:-12])  # the footer cut off
    return path, f"{path}: not a readable Parquet file ("


@pytest.mark.parametrize("kind", ["missing-column", "not-strings", "null", "corrupt-footer"])
def test_bad_parquet_is_one_line_naming_file_and_column_and_nothing_is_written(
    tmp_path, tokenizer_dir, capsys, kind
):
    path, message = bad_parquet(tmp_path, kind)
    out = tmp_path / "out"
    # A file refused by its schema or footer is refused before the progress bar is drawn; a null
    # is found in the rows, streamed (the bar is off for it here).
    quiet = ["--no-progress"] if kind == "null" else []
    assert main(["prepare", str(path), "--tokenizer", str(tokenizer_dir), "--out", str(out), *quiet]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not (tmp_path / "out.partial").exists()
    tok = [
        "train-tokenizer",
        str(path),
        "--out",
        str(tmp_path / "tok"),
        "--vocab-size",
        "300",
        "--no-progress",
    ]
    assert main(tok) == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "tok").exists()


def test_a_dataset_dict_folder_asks_for_one_split(tmp_path, tokenizer_dir):
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    with pytest.raises(UserError, match=r"dd: a DatasetDict folder \(splits train, test\): give one split"):
        prepare([tmp_path / "dd"], tokenizer_dir, tmp_path / "out", **SMALL)


def test_a_datasets_folder_listing_no_data_files_is_named(tmp_path, tokenizer_dir, capsys):
    folder = tmp_path / "ds"
    write_dataset(folder, ["a", "b"])
    (folder / "state.json").write_text(json.dumps({"_data_files": []}))
    out = tmp_path / "out"
    assert main(["prepare", str(folder), "--tokenizer", str(tokenizer_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    state = folder / "state.json"
    assert err == [
        f"roberta: error: {state}: field '_data_files' lists no data files: {folder} holds no records"
    ]
    assert not out.exists()


def test_finetune_rows_read_from_parquet_as_from_jsonl(tmp_path):
    rows = [{"sentence": f"text {i}", "other": f"pair {i}", "label": i % 3} for i in range(9)]
    write = tmp_path / "t.jsonl"
    write.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    options = {"text_column": "sentence", "pair_column": "other", "label_column": "label"}
    assert read_labelled_file(tmp_path / "t.parquet", **options) == read_labelled_file(write, **options)
    pq.write_table(pa.table({"sentence": [1.5], "label": [0]}), tmp_path / "bad.parquet")
    with pytest.raises(UserError, match=r"bad.parquet: column 'sentence' holds double, expected strings"):
        read_labelled_file(tmp_path / "bad.parquet", "sentence", label_column="label")
    with pytest.raises(
        UserError, match=r"t.parquet: no column 'missing' \(columns: sentence, other, label\)"
    ):
        read_labelled_file(tmp_path / "t.parquet", "sentence", label_column="missing")
