"""`roberta predict` and `roberta embed` on Parquet and Arrow files: the same output, byte for byte,
as the same texts given as TSV or text lines, and bad input refused in one line with nothing written."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_fixtures import save_micro_checkpoint
from roberta.cli import main
from roberta.hub import load
from roberta.hub.files import embed_file, predict_file

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models run fastest on one thread

PAIRS = [
    ("Hello world!", "A greeting."),
    ("A somewhat longer sentence, with a comma and more words in it.", "x"),
    ("Short one.", "The quick brown fox jumps over the lazy dog."),
    ("x", "y"),
    ("Another row", "to cross a row group"),
    ("and the last one", "ends it."),
]


@pytest.fixture(scope="module")
def checkpoint_dir(shared_data, tmp_path_factory) -> Path:
    return save_micro_checkpoint(tmp_path_factory.mktemp("ckpt") / "micro", shared_data, {"sentiment": 3})


def table(**columns: list) -> pa.Table:
    return pa.table({"id": list(range(len(next(iter(columns.values()))))), **columns})


def write_records(path: Path, data: pa.Table) -> Path:
    """A .parquet file of several row groups, or an Arrow IPC file of several record batches."""
    if path.suffix == ".parquet":
        pq.write_table(data, path, row_group_size=4)
    else:
        with pa.ipc.new_file(path, data.schema) as writer:
            writer.write_table(data, max_chunksize=4)
    return path


def predict(ckpt: Path, input: Path, out: Path, *extra: str) -> int:
    argv = ["predict", str(ckpt), "--head", "sentiment", "--input", str(input), "--out", str(out)]
    return main([*argv, *extra, "--no-progress"])


def embed(ckpt: Path, input: Path, out: Path, *extra: str) -> int:
    return main(["embed", str(ckpt), "--input", str(input), "--out", str(out), *extra, "--no-progress"])


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_predict_on_records_writes_what_the_tsv_gives(checkpoint_dir, tmp_path, suffix):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text(
        "id\tsentence1\tsentence2\n" + "".join(f"{k}\t{a}\t{b}\n" for k, (a, b) in enumerate(PAIRS))
    )
    first, second = [a for a, _ in PAIRS], [b for _, b in PAIRS]
    records = write_records(tmp_path / f"pairs{suffix}", table(sentence1=first, sentence2=second))
    pair = ("--columns", "sentence1,sentence2")
    assert predict(checkpoint_dir, tsv, tmp_path / "tsv.out", *pair) == 0
    assert predict(checkpoint_dir, records, tmp_path / "records.out", *pair) == 0
    expected = (tmp_path / "tsv.out").read_bytes()
    assert expected.startswith(b"label\tp0\tp1\tp2\n") and expected.count(b"\n") == len(PAIRS) + 1
    assert (tmp_path / "records.out").read_bytes() == expected

    # Chunks that end inside a row group or batch: the rows of the TSV read in the same chunks.
    hub = load(checkpoint_dir)
    for input in (tsv, records):
        predict_file(
            hub, "sentiment", input, tmp_path / f"{input.name}.3", "sentence1,sentence2", chunk_lines=3
        )
    assert (tmp_path / f"{records.name}.3").read_bytes() == (tmp_path / f"{tsv.name}.3").read_bytes()

    # One text per row: the column `text` unless --columns names another, as column 0 of a TSV.
    (tmp_path / "texts.tsv").write_text("".join(f"{a}\n" for a in first))
    single = write_records(tmp_path / f"texts{suffix}", table(text=first))
    assert predict(checkpoint_dir, tmp_path / "texts.tsv", tmp_path / "one.tsv.out") == 0
    assert predict(checkpoint_dir, single, tmp_path / "one.records.out") == 0
    assert (tmp_path / "one.records.out").read_bytes() == (tmp_path / "one.tsv.out").read_bytes()


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_embed_on_records_writes_the_npy_the_lines_give(checkpoint_dir, tmp_path, suffix):
    texts = [a for pair in PAIRS for a in pair]
    lines = tmp_path / "texts.txt"
    lines.write_text("".join(f"{t}\n" for t in texts))
    records = write_records(tmp_path / f"texts{suffix}", table(text=texts, other=texts[::-1]))
    assert embed(checkpoint_dir, lines, tmp_path / "lines.npy", "--pool", "mean") == 0
    assert embed(checkpoint_dir, records, tmp_path / "records.npy", "--pool", "mean") == 0
    expected = (tmp_path / "lines.npy").read_bytes()
    assert (tmp_path / "records.npy").read_bytes() == expected

    # Chunks that end inside a row group or batch: the lines read in the same chunks (other chunks
    # batch other texts together, so their vectors may differ in the last bits).
    hub = load(checkpoint_dir)
    for input in (lines, records):
        embed_file(hub, input, tmp_path / f"{input.name}.npy", pool="mean", chunk_lines=5, progress=False)
    assert (tmp_path / f"{records.name}.npy").read_bytes() == (tmp_path / f"{lines.name}.npy").read_bytes()
    assert embed(checkpoint_dir, records, tmp_path / "other.npy", "--pool", "mean", "--columns", "other") == 0
    assert (tmp_path / "other.npy").read_bytes() != expected


def corrupt(path: Path) -> Path:
    """A Parquet file whose footer is cut off, or an Arrow file cut in half."""
    write_records(path, table(text=["a", "b"]))
    data = path.read_bytes()
    path.write_bytes(data[:-12] if path.suffix == ".parquet" else data[: len(data) // 2])
    return path


BAD_INPUTS = {
    "missing column": (lambda p: write_records(p, table(sentence=["a", "b"])), "no column 'text'"),
    "column of numbers": (lambda p: write_records(p, table(text=[1, 2])), "column 'text' holds int64"),
    "null text": (lambda p: write_records(p, table(text=["a", None])), "row 2: column 'text' is null"),
    "corrupt file": (corrupt, "not a readable"),
}


@pytest.mark.parametrize("verb", [predict, embed])
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_records_are_one_line_naming_the_file_and_nothing_is_written(
    checkpoint_dir, tmp_path, capsys, case, suffix, verb
):
    write, cause = BAD_INPUTS[case]
    records = write(tmp_path / f"bad{suffix}")
    assert verb(checkpoint_dir, records, tmp_path / "out") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"roberta: error: {records}: ") and cause in lines[0], lines
    assert [p.name for p in tmp_path.iterdir()] == [records.name]


def test_options_that_mean_nothing_for_the_input_are_refused(checkpoint_dir, tmp_path, capsys):
    records = write_records(tmp_path / "texts.parquet", table(text=["a", "b"]))
    (tmp_path / "texts.txt").write_text("a\nb\n")
    assert predict(checkpoint_dir, records, tmp_path / "out", "--header") == 2
    assert "names its columns itself" in capsys.readouterr().err
    assert embed(checkpoint_dir, records, tmp_path / "out", "--columns", "text,text") == 2
    assert "give one column name" in capsys.readouterr().err
    assert embed(checkpoint_dir, tmp_path / "texts.txt", tmp_path / "out", "--columns", "text") == 2
    assert "read as one text per line" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["texts.parquet", "texts.txt"]
