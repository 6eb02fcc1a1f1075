"""GLUE and own-data readers, label sets, official metrics, prediction files, `roberta evaluate glue`."""

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from roberta.cli import main
from roberta.errors import UserError
from roberta.tasks.classify import label_ids, label_set, read_labelled_file
from roberta.tasks.glue import TASKS, evaluate_predictions, metrics, read_split, write_predictions

# Every GLUE file in shared/data: (task, file, has a header, first row's (text, pair)).
SHARED_FILES = [
    (
        "CoLA",
        "CoLA/train.tsv",
        False,
        ("Our friends won't buy this analysis, let alone the next one we propose.", None),
    ),
    ("CoLA", "CoLA/dev.tsv", False, ("The sailors rode the breeze clear of the rocks.", None)),
    ("CoLA", "CoLA/cola_public_raw/in_domain_train.tsv", False, None),
    ("CoLA", "CoLA/cola_public_raw/in_domain_dev.tsv", False, None),
    ("CoLA", "CoLA/cola_public_raw/out_of_domain_dev.tsv", False, ("Somebody just left - guess who.", None)),
    ("SST-2", "SST-2/train.tsv", True, ("hide new secretions from the parental units ", None)),
    ("SST-2", "SST-2/dev.tsv", True, ("it 's a charming and often affecting journey . ", None)),
    ("SST-2", "SST-2/test.tsv", True, ("uneasy mishmash of styles and genres .", None)),
    ("MRPC", "MRPC/train.tsv", True, None),
    # The pair opens a quote it never closes: GLUE's readers do no quote processing.
    (
        "MRPC",
        "MRPC/dev.tsv",
        True,
        (
            "He said the foodservice pie business doesn't fit the company's long-term growth strategy.",
            '"The foodservice pie business does not fit our long-term growth strategy.',
        ),
    ),
    ("MRPC", "MRPC/test.tsv", True, None),
    ("STS-B", "STS-B/train.tsv", True, ("A plane is taking off.", "An air plane is taking off.")),
    (
        "STS-B",
        "STS-B/dev.tsv",
        True,
        ("A man with a hard hat is dancing.", "A man wearing a hard hat is dancing."),
    ),
    ("STS-B", "STS-B/test.tsv", True, ("A girl is styling her hair.", "A girl is brushing her hair.")),
    (
        "QNLI",
        "QNLI/dev.tsv",
        True,
        (
            "What came into force after the new constitution was herald?",
            "As of that day, the new constitution heralding the Second Republic came into force.",
        ),
    ),
    (
        "RTE",
        "RTE/train.tsv",
        True,
        ("No Weapons of Mass Destruction Found in Iraq Yet.", "Weapons of Mass Destruction Found in Iraq."),
    ),
    ("RTE", "RTE/dev.tsv", True, None),
    ("RTE", "RTE/test.tsv", True, None),
    (
        "WNLI",
        "WNLI/dev.tsv",
        True,
        ("The drain is clogged with hair. It has to be cleaned.", "The hair has to be cleaned."),
    ),
    ("WNLI", "WNLI/test.tsv", True, None),
]


def evaluate_glue(task: str, dev: Path, predictions: Path) -> int:
    """`roberta evaluate glue`: its exit status."""
    return main(["evaluate", "glue", "--task", task, "--dev", str(dev), "--predictions", str(predictions)])


def count_rows(path: Path, header: bool) -> int:
    lines = [line for line in path.read_bytes().split(b"\n") if line.strip()]
    return len(lines) - header


@pytest.mark.parametrize("task_name, name, header, first", SHARED_FILES, ids=[f[1] for f in SHARED_FILES])
def test_every_shared_glue_file_reads_every_row(shared_data, task_name, name, header, first):
    task, path = TASKS[task_name], shared_data / "glue" / name
    examples = read_split(task, path)
    assert len(examples) == count_rows(path, header)
    if first is not None:
        assert (examples[0].text, examples[0].pair) == first
    assert all((e.pair is None) == (task.pair_column is None) for e in examples)
    assert len({e.index for e in examples}) == len(examples)
    if "test" in Path(name).name:
        assert all(e.label is None for e in examples)
    elif task.regression:
        assert all(0.0 <= e.label <= 5.0 for e in examples)
    else:
        assert {e.label for e in examples} == set(task.labels)
        assert len(label_ids(examples, task.labels, path)) == len(examples)


def test_glue_files_without_an_index_column_number_their_rows(shared_data):
    examples = read_split(TASKS["SST-2"], shared_data / "glue" / "SST-2" / "dev.tsv")
    assert [e.index for e in examples[:3]] == ["0", "1", "2"]
    assert examples[0].line == 2


MNLI_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t"
    "sentence2_parse\tsentence1\tsentence2"
)


def mnli_row(index: int, genre: str, s1: str, s2: str, labels: list[str]) -> str:
    parses = [f"( {s1} )", f"( {s2} )", f"(ROOT {s1})", f"(ROOT {s2})"]
    return "\t".join([str(index), "31193", f"{31193 + index}n", genre, *parses, s1, s2, *labels])


def test_mnli_reader_on_the_published_layouts(tmp_path):
    task = TASKS["MNLI"]
    train = tmp_path / "train.tsv"
    train.write_text(
        f"{MNLI_HEADER}\tlabel1\tgold_label\n"
        + mnli_row(
            0,
            "government",
            "Conceptually cream skimming has two basic dimensions.",
            "Product and geography are what make cream skimming work.",
            ["neutral", "neutral"],
        )
        + "\n"
        + mnli_row(1, "telephone", "you know during the season", "You lose the things.", ["entailment"] * 2)
        + "\n"
    )
    dev = tmp_path / "dev_matched.tsv"
    dev.write_text(
        f"{MNLI_HEADER}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
        + mnli_row(
            7,
            "fiction",
            "The new rights are nice enough",
            "Everyone really likes the newest benefits",
            ["neutral", "entailment", "neutral", "neutral", "neutral", "neutral"],
        )
        + "\n"
        + mnli_row(
            8,
            "fiction",
            "This site includes a list.",
            "The site has no list.",
            ["contradiction"] * 5 + ["contradiction"],
        )
        + "\n"
    )
    test = tmp_path / "test_matched.tsv"
    test.write_text(
        f"{MNLI_HEADER}\n" + mnli_row(0, "slate", "Hierbas, ans seco.", "Hierbas is a name.", []) + "\n"
    )

    examples = read_split(task, train)
    assert [(e.text, e.pair, e.label, e.index) for e in examples] == [
        (
            "Conceptually cream skimming has two basic dimensions.",
            "Product and geography are what make cream skimming work.",
            "neutral",
            "0",
        ),
        ("you know during the season", "You lose the things.", "entailment", "1"),
    ]
    assert [(e.label, e.index) for e in read_split(task, dev)] == [("neutral", "7"), ("contradiction", "8")]
    assert [(e.pair, e.label) for e in read_split(task, test)] == [("Hierbas is a name.", None)]
    assert dict(task.dev_sets) == {"matched": "dev_matched.tsv", "mismatched": "dev_mismatched.tsv"}
    assert task.num_classes == 3


def test_qqp_reader_on_the_published_layouts(tmp_path):
    task = TASKS["QQP"]
    train = tmp_path / "train.tsv"
    train.write_text(
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
        "133273\t213221\t213222\tHow is the life of a math student?\t"
        '"Which level of prepration is enough?\t0\n'
        "402555\t536040\t536041\tHow do I control my horny emotions?\tHow do you control your horniness?\t1\n"
    )
    test = tmp_path / "test.tsv"
    test.write_text("id\tquestion1\tquestion2\n0\tWould the idea of Trump work?\tWill it work?\n")
    examples = read_split(task, train)
    assert [(e.text, e.pair, e.label, e.index) for e in examples] == [
        ("How is the life of a math student?", '"Which level of prepration is enough?', "0", "133273"),
        ("How do I control my horny emotions?", "How do you control your horniness?", "1", "402555"),
    ]
    assert [(e.text, e.pair, e.label, e.index) for e in read_split(task, test)] == [
        ("Would the idea of Trump work?", "Will it work?", None, "0")
    ]


def test_task_defaults_follow_the_paper():
    assert set(TASKS) == {"CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI"}
    assert all(t.epochs == 10 and t.warmup == 0.06 and t.weight_decay == 0.1 for t in TASKS.values())
    assert (TASKS["RTE"].lr, TASKS["RTE"].batch_size) == (2e-5, 16)
    assert (TASKS["SST-2"].lr, TASKS["SST-2"].batch_size) == (1e-5, 32)
    assert TASKS["STS-B"].regression and TASKS["STS-B"].num_classes == 1
    assert {t.name: t.metric for t in TASKS.values() if t.metric != "accuracy"} == {
        "CoLA": "mcc",
        "MRPC": "f1",
        "STS-B": "pearson",
    }


@pytest.mark.parametrize("name", list(TASKS))
def test_metrics_match_scikit_learn_and_scipy(name):
    task, rng = TASKS[name], np.random.default_rng(0)
    if task.regression:
        labels = rng.uniform(0, 5, 200)
        predictions = labels + rng.normal(0, 1, 200)
        expected = {
            "pearson": pearsonr(predictions, labels)[0],
            "spearman": spearmanr(predictions, labels)[0],
        }
    else:
        labels = rng.integers(0, task.num_classes, 200)
        predictions = np.where(rng.random(200) < 0.7, labels, rng.integers(0, task.num_classes, 200))
        expected = {
            "accuracy": accuracy_score(labels, predictions),
            "mcc": matthews_corrcoef(labels, predictions),
        }
        if task.num_classes == 2:
            expected["f1"] = f1_score(labels, predictions)
    got = metrics(task, list(predictions), list(labels))
    assert got == pytest.approx({k: expected[k] for k in task.metrics}, rel=1e-12)


def test_metrics_by_hand():
    # tp=1 fp=1 fn=1 tn=1
    assert metrics(TASKS["MRPC"], [1, 1, 0, 0], [1, 0, 1, 0]) == {"f1": 0.5, "accuracy": 0.5}
    # tp=2 fp=1 fn=0 tn=1: (2*1 - 1*0) / sqrt(3*2*1*2)
    assert metrics(TASKS["CoLA"], [1, 1, 1, 0], [1, 1, 0, 0])["mcc"] == pytest.approx(2 / 12**0.5)
    # x - mean = (-1, 0, 1), y - mean = (-4, -1, 5)/3: r = 3 / sqrt(2 * 42/9); ranks agree exactly
    assert metrics(TASKS["STS-B"], [1.0, 2.0, 3.0], [1.0, 2.0, 4.0]) == pytest.approx(
        {"pearson": 3 / (2 * 42 / 9) ** 0.5, "spearman": 1.0}
    )
    assert metrics(TASKS["MNLI"], [0, 1, 2, 2], [0, 1, 2, 0]) == {"accuracy": 0.75}


def test_prediction_file_has_the_leaderboard_layout(tmp_path):
    write_predictions(TASKS["RTE"], tmp_path / "RTE.tsv", ["0", "1"], [1, 0])
    assert (tmp_path / "RTE.tsv").read_text() == "index\tprediction\n0\tnot_entailment\n1\tentailment\n"
    write_predictions(TASKS["STS-B"], tmp_path / "STS-B.tsv", ["4", "5"], [np.float32(0.25), 4.5])
    assert (tmp_path / "STS-B.tsv").read_text() == "index\tprediction\n4\t0.25\n5\t4.5\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RTE.tsv", "STS-B.tsv"]  # no temporaries left


@pytest.mark.parametrize(
    "name, dev",
    [("RTE", "RTE/dev.tsv"), ("MRPC", "MRPC/dev.tsv"), ("STS-B", "STS-B/dev.tsv"), ("CoLA", "CoLA/dev.tsv")],
)
def test_roberta_evaluate_glue_prints_the_official_metrics(shared_data, tmp_path, capsys, name, dev):
    task, dev = TASKS[name], shared_data / "glue" / dev
    examples = read_split(task, dev)
    rng = np.random.default_rng(1)
    if task.regression:
        labels = [e.label for e in examples]
        predictions = list(np.clip(np.array(labels) + rng.normal(0, 1, len(labels)), 0, 5))
    else:
        labels = label_ids(examples, task.labels, dev)
        predictions = [int(p) for p in rng.integers(0, 2, len(labels))]
    # Rows in another order than the dev file: predictions are matched by index.
    order = rng.permutation(len(examples))
    write_predictions(
        task, tmp_path / "p.tsv", [examples[i].index for i in order], [predictions[i] for i in order]
    )
    assert evaluate_glue(name, dev, tmp_path / "p.tsv") == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == pytest.approx(metrics(task, predictions, labels), rel=1e-12)
    assert printed == pytest.approx(evaluate_predictions(task, dev, tmp_path / "p.tsv"))


def test_own_data_in_csv_tsv_and_jsonl(tmp_path):
    (tmp_path / "a.csv").write_text(
        'id,question,answer,verdict\n7,"Is it red, or blue?","Red,\nmostly.",yes\n8,Why?,Because.,no\n'
    )
    (tmp_path / "a.tsv").write_text(
        "verdict\tquestion\tanswer\nyes\tIs it red, or blue?\tRed,\\nmostly.\nno\tWhy?\tBecause.\n"
    )
    (tmp_path / "a.jsonl").write_text(
        '{"question": "Is it red, or blue?", "answer": "Red", "verdict": "yes"}\n\n'
        '{"question": "Why?", "answer": "Because.", "verdict": "no", "extra": 1}\n'
    )
    expected_answers = {".csv": "Red,\nmostly.", ".tsv": "Red,\\nmostly.", ".jsonl": "Red"}
    for suffix, answer in expected_answers.items():
        path = tmp_path / f"a{suffix}"
        examples = read_labelled_file(path, "question", "answer", "verdict")
        assert [(e.text, e.pair, e.label, e.index) for e in examples] == [
            ("Is it red, or blue?", answer, "yes", "0"),
            ("Why?", "Because.", "no", "1"),
        ]
        assert label_set(examples, path) == ("no", "yes")
        assert label_ids(examples, ("no", "yes"), path) == [1, 0]
    assert [e.line for e in read_labelled_file(tmp_path / "a.csv", "question")] == [2, 4]
    assert [e.line for e in read_labelled_file(tmp_path / "a.jsonl", "question")] == [1, 3]


def test_label_set_sorts_numbers_numerically_and_regression_reads_floats(tmp_path):
    (tmp_path / "t.jsonl").write_text(
        '{"t": "a", "y": "10"}\n{"t": "b", "y": 2}\n{"t": "c", "y": "2"}\n{"t": "d", "y": "-1"}\n'
    )
    examples = read_labelled_file(tmp_path / "t.jsonl", "t", label_column="y")
    assert label_set(examples, tmp_path / "t.jsonl") == ("-1", "2", "10")
    assert [
        e.label for e in read_labelled_file(tmp_path / "t.jsonl", "t", label_column="y", regression=True)
    ] == [10.0, 2.0, 2.0, -1.0]


STS_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
STS_ROW = "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane.\tAn air plane.\t"


def labelled(**options):
    """A reader of a labelled file's "text" column."""
    return lambda p: read_labelled_file(p, "text", **options)


def split(task: str, **options):
    """A reader of a GLUE split of `task`."""
    return lambda p: read_split(TASKS[task], p, **options)


RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"
BY_LABEL, BY_Y, RTE = labelled(label_column="label"), labelled(label_column="y"), split("RTE")


@pytest.mark.parametrize(
    "name, content, read, message",
    [
        (
            "a.csv",
            "text,verdict\nhi,yes\n",
            BY_LABEL,
            "a.csv:1: no column 'label' in the header (columns: text, verdict)",
        ),
        ("a.tsv", "text\tlabel\nhi\tyes\nno label here\n", BY_LABEL, "a.tsv:3: 1 fields, expected 2"),
        ("a.jsonl", '{"text": "hi", "y": 1}\n{"text": "ho"}\n', BY_Y, "a.jsonl:2: no field 'y'"),
        ("a.jsonl", '{"text": "hi", "y": 1}\n{"text": "ho", y: 2}\n', BY_Y, "a.jsonl:2: invalid JSON"),
        (
            "a.csv",
            "text,score\nhi,0.5\nho,high\n",
            labelled(label_column="score", regression=True),
            'a.csv:3: score "high" is not a number',
        ),
        ("a.csv", "text,label\n", BY_LABEL, "a.csv: no examples"),
        ("a.tsv", "", labelled(), "a.tsv: empty file"),
        ("a.txt", "text\n", labelled(), "a.txt: unknown format '.txt'"),
        (
            "dev.tsv",
            STS_HEADER + STS_ROW + "4.2\n" + STS_ROW + "n/a\n",
            split("STS-B"),
            'dev.tsv:3: score "n/a" is not a number',
        ),
        ("dev.tsv", RTE_HEADER + "0\ta\tb\tentailment\n1\ta\tb\n", RTE, "dev.tsv:3: 3 fields, expected 4"),
        (
            "dev.tsv",
            RTE_HEADER + "0\ta\tb\tentailment\n1\ta\tb\tmaybe\n",
            lambda p: label_ids(read_split(TASKS["RTE"], p), TASKS["RTE"].labels, p),
            "dev.tsv:3: label 'maybe' is not one of the training labels (entailment, not_entailment)",
        ),
        ("dev.tsv", "index\tsentence1\tlabel\n0\ta\tentailment\n", RTE, "dev.tsv:1: no column 'sentence2'"),
        (
            "dev.tsv",
            "index\tsentence1\tsentence2\n0\ta\tb\n",
            split("RTE", labelled=True),
            "dev.tsv:1: no column 'label'",
        ),
        ("dev.tsv", RTE_HEADER, RTE, "dev.tsv: no examples"),
    ],
)
def test_bad_input_is_one_line_naming_file_and_line(tmp_path, name, content, read, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(UserError) as e:
        read(path)
    assert str(e.value).startswith(f"{tmp_path}/{message}")
    assert "\n" not in str(e.value)


def test_invalid_utf8_names_the_line(tmp_path):
    (tmp_path / "a.tsv").write_bytes(b"text\nfine\nbad \xff byte\n")
    with pytest.raises(UserError, match=r"a\.tsv:3: not valid UTF-8"):
        read_labelled_file(tmp_path / "a.tsv", "text")


def test_evaluate_glue_errors_exit_2_with_one_line(tmp_path, capsys):
    dev = tmp_path / "dev.tsv"
    dev.write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n5\tc\td\tnot_entailment\n")
    cases = [
        ("index\tprediction\n0\tentailment\n", f"{tmp_path}/p.tsv: no prediction for index 5 ({dev}:3)"),
        (
            "index\tprediction\n0\tentailment\n5\tyes\n",
            f"{tmp_path}/p.tsv:3: prediction 'yes' is not a RTE label",
        ),
        ("index\tprediction\n0\tentailment\n0\tentailment\n", f"{tmp_path}/p.tsv:3: index 0 repeats line 2"),
        (
            "index\tprediction\n0\tentailment\n5\tentailment\n9\tentailment\n",
            f"{tmp_path}/p.tsv:4: index 9 is not in {dev}",
        ),
    ]
    for content, message in cases:
        (tmp_path / "p.tsv").write_text(content)
        assert evaluate_glue("RTE", dev, tmp_path / "p.tsv") == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith(f"roberta: error: {message}") and captured.err.count("\n") == 1


def test_evaluate_glue_reports_an_undefined_correlation_as_null_in_valid_json(tmp_path, capsys):
    dev = tmp_path / "dev.tsv"
    dev.write_text("index\tsentence1\tsentence2\tscore\n0\ta\tb\t1.0\n1\tc\td\t4.0\n2\te\tf\t2.5\n")
    write_predictions(TASKS["STS-B"], tmp_path / "p.tsv", ["0", "1", "2"], [3.0, 3.0, 3.0])
    assert evaluate_glue("STS-B", dev, tmp_path / "p.tsv") == 0
    captured = capsys.readouterr()

    def no_nan(constant: str):
        raise AssertionError(f"{constant} is not JSON")

    assert json.loads(captured.out, parse_constant=no_nan) == {"pearson": None, "spearman": None}
    why = f"{tmp_path}/p.tsv predicts the same value everywhere"
    assert captured.err == f"roberta: warning: pearson, spearman undefined: {why}\n"
    # MCC of constant predictions and F1 without positives are 0, as scikit-learn (GLUE's scorer) makes
    # them; during training a correlation is NaN (never the best checkpoint); all without warnings.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert metrics(TASKS["CoLA"], [1, 1, 1], [1, 0, 1]) == {"mcc": 0.0}
        assert metrics(TASKS["MRPC"], [0, 0], [0, 0]) == {"f1": 0.0, "accuracy": 1.0}
        assert all(math.isnan(v) for v in metrics(TASKS["STS-B"], [3.0], [1.0]).values())
