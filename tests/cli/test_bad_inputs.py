"""Bad input, table-driven: every row is one refused command or API call.

Each row asserts a `UserError` (API) or exit status 2 with exactly one stderr line
`roberta: error: ...` (CLI), that the message names the cause, and that nothing was left
behind: no new, removed or changed file in the case's working directory or in the shared
assets. To add a verb's cases, append `Case` rows to CASES (a row's `argv` or `call` builds its
bad input under `env.work` first; a `call` returns the call to make).
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import refusals
from data_fixtures import make_documents, write_byte_tokenizer, write_text
from refusals import Case
from roberta import RobertaConfig, RobertaModel
from roberta.checkpoint import save
from roberta.data.corpus import Corpus
from roberta.data.prepare import prepare
from roberta.hub import Roberta
from roberta.hub import load as load_hub
from roberta.tokenizer import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models run fastest on one thread

MICRO = RobertaConfig(hidden_size=32, num_layers=2, num_heads=2, ffn_size=64, max_positions=66)


@dataclass
class Assets:
    """Built once per module: a GPT-2-vocabulary checkpoint with a head, a tiny tokenizer, a corpus."""

    root: Path
    checkpoint: Path
    small_tokenizer: Path
    corpus: Path
    hub: Roberta


@dataclass
class Env(refusals.Env):
    assets: Assets

    def checkpoint_copy(
        self, edit_config: Callable[[dict], object] | None = None, raw: bytes | None = None
    ) -> str:
        """A copy of the checkpoint, its config.json edited (or replaced by `raw` bytes)."""
        copy = self.work / "ckpt"
        shutil.copytree(self.assets.checkpoint, copy)
        if raw is not None:
            (copy / "config.json").write_bytes(raw)
        elif edit_config is not None:
            meta = json.loads((copy / "config.json").read_text())
            edit_config(meta)
            (copy / "config.json").write_text(json.dumps(meta))
        return str(copy)

    def corpus_copy(self, damage: Callable[[Path], object]) -> Path:
        copy = self.work / "corpus"
        shutil.copytree(self.assets.corpus, copy)
        damage(copy)
        return copy

    def texts(self) -> str:
        return self.file("texts.txt", "Hello world!\nA second line.\n")

    def prepare_args(self, *inputs: str) -> list[str]:
        options = ["--tokenizer", str(self.assets.small_tokenizer), "--out", str(self.work / "out")]
        return ["prepare", *inputs, *options, *"--workers 1 --no-progress".split()]


def gz_truncated() -> bytes:
    data = gzip.compress(b"Hello world.\nAnother sentence here.\n" * 200)
    return data[: len(data) // 2]


def gz_corrupt() -> bytes:
    data = bytearray(gzip.compress(b"Hello world.\nAnother sentence here.\n" * 200))
    data[-8:-4] = b"\0\0\0\0"  # the CRC
    return bytes(data)


def fail_writes(env: Env, target: str, err: int, where: Path) -> None:
    """Make `target` (a function writing files) fail as the OS would with errno `err`."""

    def fail(*args, **kwargs):
        raise OSError(err, os.strerror(err), str(where))

    env.monkeypatch.setattr(target, fail)


def deny_mkdir_under(env: Env, directory: Path) -> None:
    """A read-only `directory` (tests run as root here, where chmod does not deny)."""
    real = os.mkdir

    def mkdir(path, *args, **kwargs):
        if Path(path).parent == directory:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, *args, **kwargs)

    env.monkeypatch.setattr(os, "mkdir", mkdir)


def hub_cli(verb: str, *extra: str) -> Callable[[Env], list[str]]:
    def argv(env: Env) -> list[str]:
        return [verb, str(env.assets.checkpoint), *extra]

    return argv


def fill_mask_on(edit_config: Callable[[dict], object] | None = None, raw: bytes | None = None):
    def argv(env: Env) -> list[str]:
        return ["fill-mask", env.checkpoint_copy(edit_config, raw), "Hello <mask>."]

    return argv


def set_config(field: str, value) -> Callable[[dict], None]:
    return lambda meta: meta["config"].__setitem__(field, value)


def embed(env: Env, input: str, out: str | None = None, *extra: str) -> list[str]:
    out = out or str(env.work / "v.npy")
    return ["embed", str(env.assets.checkpoint), "--input", input, "--out", out, "--no-progress", *extra]


def predict(env: Env, rows: str, *extra: str, head: str = "sentiment") -> list[str]:
    rows_file, out = env.file("rows.tsv", rows), str(env.work / "p.tsv")
    options = ["--head", head, "--input", rows_file, "--out", out, "--no-progress"]
    return ["predict", str(env.assets.checkpoint), *options, *extra]


def train_tokenizer(env: Env, *inputs: str, vocab: str = "300") -> list[str]:
    return [
        "train-tokenizer",
        *inputs,
        "--out",
        str(env.work / "tok"),
        "--vocab-size",
        vocab,
        "--no-progress",
    ]


def parquet_without_text(env: Env) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = env.work / "rows.parquet"
    pq.write_table(pa.table({"body": ["a sentence"]}), path)
    return str(path)


def config(**values) -> Callable[[Env], Callable[[], object]]:
    return lambda env: lambda: RobertaConfig.from_dict({**MICRO.to_dict(), **values}, source="job.json")


def corpus_with(damage: Callable[[Path], object]) -> Callable[[Env], Callable[[], object]]:
    def call(env: Env) -> Callable[[], object]:
        directory = env.corpus_copy(damage)
        return lambda: Corpus(directory).train

    return call


def shorten_bin(corpus: Path) -> None:
    path = corpus / "train-00000.bin"
    path.write_bytes(path.read_bytes()[:-2])


def hub_call(method: str, *args, **kwargs) -> Callable[[Env], Callable[[], object]]:
    return lambda env: lambda: getattr(env.assets.hub, method)(*args, **kwargs)


def other_tokenizer_checkpoint(env: Env) -> list[str]:
    """Model with GPT-2's 50265 rows, saved with the 266-token test tokenizer."""
    ckpt = save(env.work / "mixed", env.assets.hub.model, load_tokenizer(env.assets.small_tokenizer))
    return ["fill-mask", str(ckpt), "Hello <mask>."]


def edited_tokenizer_checkpoint(env: Env) -> list[str]:
    """The checkpoint with two dict.txt lines swapped: the same 50265 ids, another fingerprint."""
    ckpt = Path(env.checkpoint_copy())
    lines = (ckpt / "dict.txt").read_text().splitlines(keepends=True)
    lines[100], lines[101] = lines[101], lines[100]
    (ckpt / "dict.txt").write_text("".join(lines))
    return ["fill-mask", str(ckpt), "Hello <mask>."]


def fill_mask_case(name: str, cause: str, *options: str) -> Case:
    """`roberta fill-mask CKPT "Hi <mask>." OPTIONS` on the assets' checkpoint."""
    return Case(f"fill-mask/{name}", cause, argv=hub_cli("fill-mask", "Hi <mask>.", *options))


def columns_case(name: str, cause: str, rows: str, columns: str) -> Case:
    """`roberta predict --columns COLUMNS` of a file holding `rows`."""
    return Case(f"predict/{name}", cause, argv=lambda e: predict(e, rows, "--columns", columns))


def config_case(name: str, cause: str, field: str, value) -> Case:
    """fill-mask on a copy of the checkpoint whose config sets `field` to `value`."""
    return Case(f"fill-mask/{name}", cause, argv=fill_mask_on(set_config(field, value)))


CASES = [
    # ---- prepare
    Case(
        "prepare/truncated-gz",
        "truncated gzip",
        argv=lambda e: e.prepare_args(e.file("a.txt.gz", gz_truncated())),
    ),
    Case(
        "prepare/not-gzip",
        "not valid gzip",
        argv=lambda e: e.prepare_args(e.file("a.txt.gz", "plain text\n")),
    ),
    Case(
        "prepare/gz-bad-crc",
        "not valid gzip",
        argv=lambda e: e.prepare_args(e.file("a.txt.gz", gz_corrupt())),
    ),
    Case(
        "prepare/out-is-a-file-with-overwrite",
        "exists and is not a directory",
        argv=lambda e: [*e.prepare_args(e.texts()), "--overwrite"] if e.file("out", "x") else [],
    ),
    Case(
        "prepare/out-exists",
        "already exists (pass --overwrite",
        argv=lambda e: e.prepare_args(e.texts()) if (e.work / "out").mkdir() is None else [],
    ),
    Case(
        "prepare/read-only-place",
        "Permission denied",
        argv=lambda e: e.prepare_args(e.texts()) if deny_mkdir_under(e, e.work) is None else [],
    ),
    Case(
        "prepare/disk-full",
        "No space left on device",
        argv=lambda e: (
            e.prepare_args(e.texts())
            if fail_writes(
                e,
                "roberta.data.prepare.ShardWriter.append",
                errno.ENOSPC,
                e.work / "out.partial" / "train-00000.bin",
            )
            is None
            else []
        ),
    ),
    Case(
        "prepare/empty-corpus", "empty corpus", argv=lambda e: e.prepare_args(e.file("blank.txt", "\n  \n"))
    ),
    Case(
        "prepare/missing-input",
        "input file not found",
        argv=lambda e: e.prepare_args(str(e.work / "nope.txt")),
    ),
    Case(
        "prepare/dir-without-text",
        "holds no text files",
        argv=lambda e: e.prepare_args(str(Path(e.file("d/x.csv", "a")).parent)),
    ),
    Case(
        "prepare/invalid-utf8",
        "invalid UTF-8",
        argv=lambda e: e.prepare_args(e.file("a.txt", b"ok\n\xff\xfe\n")),
    ),
    Case(
        "prepare/jsonl-not-json",
        "not valid JSON",
        argv=lambda e: e.prepare_args(e.file("a.jsonl", "{oops\n")),
    ),
    Case(
        "prepare/jsonl-no-field",
        "has no field 'text'",
        argv=lambda e: e.prepare_args(e.file("a.jsonl", '{"t": "x"}\n')),
    ),
    Case(
        "prepare/valid-fraction-1",
        "prepare: field 'valid_fraction' must be in [0, 1), not 1.0",
        argv=lambda e: [*e.prepare_args(e.texts()), "--valid-fraction", "1"],
    ),
    Case(
        "prepare/zero-workers",
        "prepare: field 'workers' must be at least 1, not 0",
        argv=lambda e: [*e.prepare_args(e.texts()), "--workers", "0"],
    ),
    Case(
        "prepare/zero-shard-mb",
        "prepare: field 'shard_mb' must be at least 1, not 0",
        argv=lambda e: [*e.prepare_args(e.texts()), "--shard-mb", "0"],
    ),
    Case(
        "prepare/no-tokenizer",
        "no tokenizer files",
        argv=lambda e: [*e.prepare_args(e.texts()), "--tokenizer", str(Path(e.file("t/readme", "x")).parent)],
    ),
    Case(
        "prepare/tokenizer-not-utf8",
        "not valid UTF-8",
        argv=lambda e: [
            *e.prepare_args(e.texts()),
            "--tokenizer",
            str(Path(e.file("t/vocab.json", b'{"\xff": 0}')).parent) if e.file("t/merges.txt", "") else "",
        ],
    ),
    # ---- usage mistakes: argparse's own errors, one line too
    Case("usage/unknown-verb", "invalid choice: 'bogus'", argv=lambda e: ["bogus"]),
    Case(
        "usage/missing-required",
        "required: inputs, --out, --tokenizer (see 'roberta prepare --help')",
        argv=lambda e: ["prepare"],
    ),
    Case(
        "usage/bad-int",
        "argument --workers: invalid int value: 'two'",
        argv=lambda e: [*e.prepare_args(e.texts()), "--workers", "two"],
    ),
    Case(
        "usage/unknown-option",
        "unrecognized arguments: --colour",
        argv=lambda e: [*e.prepare_args(e.texts()), "--colour"],
    ),
    # ---- train-tokenizer
    Case(
        "train-tokenizer/empty-corpus",
        "empty corpus",
        argv=lambda e: train_tokenizer(e, e.file("blank.txt", "\n\n")),
    ),
    # With the progress bar on (no --no-progress): refused before it is drawn, so one line.
    Case(
        "train-tokenizer/empty-corpus-bar",
        "empty corpus",
        argv=lambda e: (
            ["train-tokenizer", e.file("blank.txt", "\n\n"), "--out", str(e.work / "tok")]
            + ["--vocab-size", "300"]
        ),
    ),
    Case(
        "train-tokenizer/wordpiece-empty-corpus-bar",
        "empty corpus",
        argv=lambda e: (
            ["train-tokenizer", e.file("blank.txt", " \n"), "--out", str(e.work / "tok")]
            + ["--vocab-size", "300", "--kind", "wordpiece"]
        ),
    ),
    Case(
        "train-tokenizer/parquet-no-text-column-bar",
        "no column 'text' (columns: body)",
        argv=lambda e: (
            ["train-tokenizer", parquet_without_text(e), "--out", str(e.work / "tok")]
            + ["--vocab-size", "300"]
        ),
    ),
    Case(
        "train-tokenizer/vocab-too-small",
        "too small",
        argv=lambda e: train_tokenizer(e, e.texts(), vocab="100"),
    ),
    # The two lines' characters and '##' pieces with the specials take more ids than 12.
    Case(
        "train-tokenizer/wordpiece-vocab-too-small",
        "--vocab-size 12 is too small: the specials and the text's",
        argv=lambda e: [*train_tokenizer(e, e.texts(), vocab="12"), "--kind", "wordpiece"],
    ),
    Case(
        "train-tokenizer/negative-min-frequency",
        "--min-frequency -1 is negative",
        argv=lambda e: [*train_tokenizer(e, e.texts()), "--min-frequency", "-1"],
    ),
    Case(
        "train-tokenizer/wordpiece-negative-min-frequency",
        "--min-frequency -1 is negative",
        argv=lambda e: [*train_tokenizer(e, e.texts()), "--min-frequency", "-1", "--kind", "wordpiece"],
    ),
    Case(
        "train-tokenizer/out-not-empty",
        "already exists and is not empty",
        argv=lambda e: train_tokenizer(e, e.texts()) if e.file("tok/x", "x") else [],
    ),
    Case(
        "train-tokenizer/truncated-gz",
        "truncated gzip",
        argv=lambda e: train_tokenizer(e, e.file("a.gz", gz_truncated())),
    ),
    Case(
        "train-tokenizer/missing-input",
        "input file not found",
        argv=lambda e: train_tokenizer(e, str(e.work / "no.txt")),
    ),
    # ---- convert (its reading of our config.json)
    Case(
        "convert/missing-source",
        "no such checkpoint",
        argv=lambda e: ["convert", str(e.work / "none"), str(e.work / "o")],
    ),
    Case(
        "convert/negative-num-layers",
        "'num_layers' must be at least 1",
        argv=lambda e: ["convert", e.checkpoint_copy(set_config("num_layers", -1)), str(e.work / "o")],
    ),
    Case(
        "convert/string-hidden-size",
        "'hidden_size' must be an integer, not '32'",
        argv=lambda e: ["convert", e.checkpoint_copy(set_config("hidden_size", "32")), str(e.work / "o")],
    ),
    # ---- fill-mask
    fill_mask_case("topk-0", "topk 0 out of range: give 1..50265", "--topk", "0"),
    fill_mask_case("topk-past-vocab", "topk 50266 out of range", "--topk", "50266"),
    fill_mask_case("unknown-device", "device 'foo' unknown", "--device", "foo"),
    fill_mask_case("unavailable-device", "device 'cuda:99' unavailable", "--device", "cuda:99"),
    Case(
        "fill-mask/tokenizer-files-edited", "they were replaced or edited", argv=edited_tokenizer_checkpoint
    ),
    Case("fill-mask/no-mask", "exactly one <mask>", argv=hub_cli("fill-mask", "no mask here")),
    fill_mask_case("zero-batch-tokens", "field 'batch_tokens' must be at least 1", "--batch-tokens", "0"),
    Case(
        "fill-mask/missing-checkpoint",
        "no such",
        argv=lambda e: ["fill-mask", str(e.work / "none"), "Hi <mask>."],
    ),
    config_case("negative-num-layers", "'num_layers' must be at least 1", "num_layers", -1),
    config_case("float-num-heads", "'num_heads' must be an integer, not 2.0", "num_heads", 2.0),
    config_case("bool-ffn-size", "'ffn_size' must be an integer, not True", "ffn_size", True),
    config_case("negative-dropout", "'dropout' must be in [0, 1), not -0.1", "dropout", -0.1),
    config_case("zero-vocab", "'vocab_size' must be at least 1", "vocab_size", 0),
    Case("fill-mask/config-not-utf8", "not UTF-8", argv=fill_mask_on(raw=b'{"format": "roberta\xff"}')),
    Case(
        "fill-mask/head-bool-classes",
        "positive integer 'num_classes'",
        argv=fill_mask_on(lambda m: m["heads"]["sentiment"].__setitem__("num_classes", True)),
    ),
    Case(
        "fill-mask/head-negative-classes",
        "positive integer 'num_classes'",
        argv=fill_mask_on(lambda m: m["heads"]["sentiment"].__setitem__("num_classes", -3)),
    ),
    Case(
        "fill-mask/truncated-weights",
        "unreadable safetensors",
        argv=lambda e: (
            ["fill-mask", ckpt, "Hi <mask>."]
            if (ckpt := e.checkpoint_copy())
            and (
                Path(ckpt, "model.safetensors").write_bytes(
                    Path(ckpt, "model.safetensors").read_bytes()[:1000]
                )
            )
            else []
        ),
    ),
    Case(
        "fill-mask/tokenizer-of-another-size",
        "tokenizer has 266 tokens but the model's output layer 50265",
        argv=other_tokenizer_checkpoint,
    ),
    # ---- embed
    Case("embed/missing-input", "no such file", argv=lambda e: embed(e, str(e.work / "none.txt"))),
    Case(
        "embed/input-not-utf8", ":2: not valid UTF-8", argv=lambda e: embed(e, e.file("t.txt", b"ok\n\xff\n"))
    ),
    Case("embed/empty-input", "no lines to embed", argv=lambda e: embed(e, e.file("t.txt", ""))),
    Case(
        "embed/out-is-a-directory",
        "Is a directory",
        argv=lambda e: (
            embed(e, e.texts(), str(e.work / "dir.npy")) if (e.work / "dir.npy").mkdir() is None else []
        ),
    ),
    Case(
        "embed/out-under-a-file",
        "texts.txt is a file, not a directory",
        argv=lambda e: embed(e, e.texts(), str(Path(e.texts()) / "v.npy")),
    ),
    Case(
        "embed/disk-full",
        "No space left on device",
        argv=lambda e: (
            embed(e, e.texts())
            if fail_writes(e, "roberta.hub.files.open_memmap", errno.ENOSPC, e.work / "v.npy") is None
            else []
        ),
    ),
    Case(
        "embed/layer-out-of-range",
        "layer 9 out of range",
        argv=lambda e: embed(e, e.texts(), None, "--layer", "9"),
    ),
    Case(
        "embed/unknown-device",
        "device 'gpu' unknown",
        argv=lambda e: embed(e, e.texts(), None, "--device", "gpu"),
    ),
    # ---- predict
    Case("predict/unknown-head", "unknown head 'nope'", argv=lambda e: predict(e, "a\n", head="nope")),
    columns_case("three-columns", "give one or two columns", "a\tb\n", "0,1,2"),
    columns_case("short-row", ":2: 1 column(s), but column 1", "a\tb\nc\n", "0,1"),
    columns_case("no-such-header", "no column named 'text'", "a\tb\nc\td\n", "text"),
    Case("predict/no-rows", "no rows to predict", argv=lambda e: predict(e, "a\tb\n", "--header")),
    # ---- Python API: tokenizer, hub, config, corpus
    Case(
        "api/decode-negative-id",
        "id -1 is outside the vocabulary of 50265",
        call=lambda e: lambda: e.assets.hub.tokenizer.decode([5, -1]),
    ),
    Case(
        "api/decode-id-past-end",
        "id 50265 is outside the vocabulary",
        call=lambda e: lambda: e.assets.hub.tokenizer.decode([50265]),
    ),
    Case(
        "api/features-3d",
        "not 3-D (shape [1, 1, 3])",
        call=hub_call("extract_features", torch.tensor([[[0, 5, 2]]])),
    ),
    Case("api/features-0d", "not 0-D", call=hub_call("extract_features", torch.tensor(5))),
    Case(
        "api/features-id-past-vocab",
        "token id 50265 is outside the model's vocabulary of 50265",
        call=hub_call("extract_features", torch.tensor([0, 50265, 2])),
    ),
    Case(
        "api/features-negative-id-list",
        "input 1: token id -4 is outside the model's vocabulary of 50265",
        call=hub_call("extract_features", [[0, 5, 2], [0, -4, 2]]),
    ),
    Case("api/features-string", "got text 'Hello'", call=hub_call("extract_features", "Hello")),
    Case(
        "api/features-float-ids",
        "must be integers, not torch.float32",
        call=hub_call("extract_features", torch.tensor([0.0, 5.0])),
    ),
    Case(
        "api/predict-strings",
        "input 0: token ids expected, got text",
        call=hub_call("predict", "sentiment", ["a", "b"]),
    ),
    Case(
        "api/predict-id-past-vocab",
        "outside the model's vocabulary of 50265",
        call=hub_call("predict", "sentiment", torch.tensor([[0, 60000, 2]])),
    ),
    Case(
        "api/embed-negative-id", "token id -1 is outside", call=hub_call("embed", [torch.tensor([0, -1, 2])])
    ),
    Case(
        "api/embed-2d-in-list",
        "must be 1-D, not shape [1, 3]",
        call=hub_call("embed", [torch.tensor([[0, 5, 2]])]),
    ),
    Case("api/fill-mask-topk-0", "topk 0 out of range", call=hub_call("fill_mask", "Hi <mask>.", topk=0)),
    Case(
        "api/load-unknown-device",
        "device 'foo' unknown",
        call=lambda e: lambda: load_hub(e.assets.checkpoint, map_location="foo"),
    ),
    Case(
        "api/config-negative-layers",
        "job.json: field 'num_layers' must be at least 1, not -2",
        call=config(num_layers=-2),
    ),
    Case(
        "api/config-string-int", "field 'ffn_size' must be an integer, not '64'", call=config(ffn_size="64")
    ),
    Case(
        "api/config-float-int",
        "field 'max_positions' must be an integer, not 66.0",
        call=config(max_positions=66.0),
    ),
    Case(
        "api/config-bool-int", "field 'num_layers' must be an integer, not True", call=config(num_layers=True)
    ),
    Case(
        "api/config-dropout-1",
        "field 'attention_dropout' must be in [0, 1), not 1.0",
        call=config(attention_dropout=1.0),
    ),
    Case(
        "api/config-string-dropout",
        "field 'dropout' must be a finite number, not '0.1'",
        call=config(dropout="0.1"),
    ),
    Case(
        "api/config-nan-eps",
        "field 'layer_norm_eps' must be a finite number",
        call=config(layer_norm_eps=float("nan")),
    ),
    Case("api/config-zero-init-std", "field 'init_std' must be positive, not 0", call=config(init_std=0)),
    Case(
        "api/config-heads-indivisible",
        "hidden_size 32 is not divisible by num_heads 3",
        call=config(num_heads=3),
    ),
    Case("api/config-unknown-field", "unknown field(s) layers", call=config(layers=2)),
    Case(
        "api/config-padding-past-vocab",
        "padding_idx 7 is not an id of the 5-token vocabulary",
        call=config(vocab_size=5, padding_idx=7, max_positions=66),
    ),
    Case("api/corpus-short-bin", "train-00000.bin: has", call=corpus_with(shorten_bin)),
    Case(
        "api/corpus-missing-bin",
        "train-00000.bin: is missing",
        call=corpus_with(lambda c: (c / "train-00000.bin").unlink()),
    ),
    Case(
        "api/corpus-short-offsets",
        "train-00000.sentences.npy: offsets of shape",
        call=corpus_with(
            lambda c: __import__("numpy").save(
                c / "train-00000.sentences.npy", __import__("numpy").zeros(2, dtype="int64")
            )
        ),
    ),
    Case(
        "api/corpus-meta-not-utf8",
        "not valid JSON",
        call=corpus_with(lambda c: (c / "meta.json").write_bytes(b"\xff")),
    ),
]


@pytest.fixture(scope="module")
def assets(shared_data, tmp_path_factory) -> Assets:
    root = tmp_path_factory.mktemp("assets")
    torch.manual_seed(0)
    hub = Roberta(RobertaModel(MICRO), load_tokenizer(shared_data / "gpt2_bpe")).eval()
    hub.register_classification_head("sentiment", 3)
    checkpoint = save(root / "checkpoint", hub.model, hub.tokenizer)
    small = write_byte_tokenizer(root / "small-tokenizer")
    text = write_text(root / "text.txt", make_documents(0, 20))
    corpus = prepare([text], small, root / "corpus", workers=1, valid_fraction=0.1, progress=False)
    return Assets(root, checkpoint, small, corpus, hub)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_in_one_line_and_leaves_nothing(
    case: Case, assets, tmp_path, monkeypatch, capsys
):
    refusals.check(case, Env(tmp_path, assets, monkeypatch), capsys, tmp_path, assets.root)


def test_cases_cover_every_verb_and_the_api():
    refusals.check_table(
        CASES, {"prepare", "train-tokenizer", "convert", "fill-mask", "embed", "predict", "api"}, 50
    )
