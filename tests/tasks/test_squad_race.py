"""SQuAD and RACE task data: windows and offsets, decoding, the official metrics, the RACE
reader and encoder, bad input, and `roberta evaluate squad`."""

import dataclasses
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

from roberta.cli import main
from roberta.errors import UserError
from roberta.qa.decode import choose_null_threshold, decode
from roberta.qa.examples import SquadExample, read_squad
from roberta.qa.metric import (
    evaluate_squad,
    exact_match,
    f1_v1,
    f1_v2,
    normalize_answer,
    squad_scores,
    write_predictions,
)
from roberta.qa.windows import make_windows
from roberta.tasks.race import accuracy_by_level, encode_choices, read_race
from roberta.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer(shared_data):
    return load_tokenizer(shared_data / "roberta_base_tokenizer")


def window_text(example, window, start, end):
    """The context characters of input positions start..end (inclusive)."""
    c0 = window.context_start
    return example.context[window.offsets[start - c0, 0] : window.offsets[end - c0, 1]]


# ---------------------------------------------------------------- windows


@pytest.mark.parametrize("version", ["1.1", "2.0"])
def test_every_dev_answer_maps_back_to_its_text(shared_data, tokenizer, version):
    examples = read_squad(shared_data / "squad" / f"dev-v{version}.json", version)
    assert len(examples) == {"1.1": 10570, "2.0": 11873}[version]
    # One example per distinct gold answer, so that each answer is the one located.
    per_answer = [dataclasses.replace(e, answers=(a,)) for e in examples for a in dict.fromkeys(e.answers)]
    features = make_windows(tokenizer, per_answer, train=True)
    assert features.mismatched == 0
    found = set()
    inexact = 0
    for window in features.windows:
        if window.start_position == 0:
            continue
        example = per_answer[window.example_index]
        ((text, start),) = example.answers
        found.add(window.example_index)
        first, last = window.start_position - window.context_start, window.end_position - window.context_start
        got_start, got_end = (int(x) for x in (window.offsets[first, 0], window.offsets[last, 1]))
        if example.context[got_start:got_end] != text:
            # The answer starts or ends inside a token ("1990" of "1990s"): a span covering it.
            inexact += 1
            assert got_start <= start and start + len(text) <= got_end
        # The smallest such span: the tokens just outside it end before / start after the answer.
        assert first == 0 or window.offsets[first - 1, 1] <= start
        assert last + 1 == len(window.offsets) or window.offsets[last + 1, 0] >= start + len(text)
    assert found == set(range(len(per_answer)))  # every answer sits whole in some window
    assert inexact < 0.015 * len(per_answer)
    contexts = {e.context for e in examples}
    # The dev files hold the hard cases: several spaces, newlines, non-ASCII text.
    assert all(
        any(case(c) for c in contexts)
        for case in (lambda c: "  " in c, lambda c: "\n" in c, lambda c: not c.isascii())
    )


def test_offsets_exact_with_spaces_newlines_and_non_ascii(tokenizer):
    context = "Intro  text.\n\nThe café  in São Paulo   opened in 1990s — “Ñandú” wins."
    answers = ["café  in São Paulo", "“Ñandú”", "São", "opened in 1990s"]
    examples = [
        SquadExample(str(k), "  Where?", context, ((a, context.index(a)),)) for k, a in enumerate(answers)
    ]
    features = make_windows(tokenizer, examples, max_length=24, stride=6, train=True)
    located = {}
    for w in features.windows:
        if w.start_position:
            located[w.example_index] = window_text(
                examples[w.example_index], w, w.start_position, w.end_position
            )
    assert located == dict(enumerate(answers))


def test_window_layout_and_stride(tokenizer):
    context = " ".join(f"word{k}" for k in range(200))
    example = SquadExample("q", "What is the last word?", context, (("word199", context.index("word199")),))
    features = make_windows(tokenizer, [example], max_length=64, stride=16, train=True)
    question = tokenizer.tokenize_ids(example.question)
    context_ids = tokenizer.tokenize_ids(context)
    windows = features.windows
    assert len(windows) > 2
    for w in windows:
        ids = w.tokens.tolist()
        assert len(ids) <= 64
        assert ids[: w.context_start] == [tokenizer.bos_id, *question, tokenizer.eos_id, tokenizer.eos_id]
        assert ids[-1] == tokenizer.eos_id and w.context_end == len(ids) - 1
    pieces = [w.tokens[w.context_start : w.context_end].tolist() for w in windows]
    for a, b in zip(pieces, pieces[1:]):
        assert a[-16:] == b[:16]  # consecutive windows share `stride` context tokens
    assert sum(len(p) for p in pieces) - 16 * (len(pieces) - 1) == len(context_ids)
    # The answer is at the very end: only the last window points at it, the others at <s>.
    assert [(w.start_position > 0) for w in windows] == [False] * (len(windows) - 1) + [True]
    # Questions are cut to max_query tokens.
    short = make_windows(tokenizer, [example], max_length=64, stride=16, max_query=3, train=False)
    assert short.windows[0].context_start == 3 + 3


def test_impossible_and_mismatched_answers(tokenizer):
    context = "Paris is the capital of France."
    examples = [
        SquadExample("ok", "Capital?", context, (("Paris", 0),)),
        SquadExample("bad", "Country?", context, (("France", 3),)),  # answer_start off
        SquadExample("none", "King?", context, (), impossible=True),
    ]
    with pytest.warns(UserWarning, match=r"1 SQuAD question\(s\) skipped.*bad"):
        features = make_windows(tokenizer, examples, train=True)
    assert features.mismatched == 1 and features.mismatched_ids == ["bad"]
    assert [(w.example_index, w.start_position > 0) for w in features.windows] == [(0, True), (2, False)]
    assert features.windows[1].end_position == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # evaluation windows locate nothing, so warn about nothing
        assert len(make_windows(tokenizer, examples, train=False).windows) == 3


# ---------------------------------------------------------------- decoding


def logits_for(windows, peaks):
    """Per-window start/end logits of -5, with {(window, position): (start, end)} overrides."""
    starts = [np.full(len(w.tokens), -5.0) for w in windows]
    ends = [np.full(len(w.tokens), -5.0) for w in windows]
    for (w, position), (s, e) in peaks.items():
        if s is not None:
            starts[w][position] = s
        if e is not None:
            ends[w][position] = e
    return starts, ends


def test_decode_picks_best_span_across_windows(tokenizer):
    context = " ".join(f"w{k}" for k in range(60)) + " the answer is here."
    example = SquadExample("q", "Where?", context, ())
    windows = make_windows(tokenizer, [example], max_length=48, stride=8, train=False).windows
    assert len(windows) >= 2
    last, first = windows[-1], windows[0]
    target = context.index("answer is here")
    k = int(np.flatnonzero(last.offsets[:, 0] == target)[0]) + last.context_start
    starts, ends = logits_for(
        windows,
        {
            (len(windows) - 1, k): (9.0, None),
            (len(windows) - 1, k + 2): (None, 8.0),  # score 17
            (0, first.context_start): (7.0, 7.0),  # one-token span in the first window, score 14
            **{(w, 0): (3.0, 4.0) for w in range(1, len(windows))},
            (0, 0): (1.0, 1.0),
        },
    )
    out = decode([example], windows, starts, ends, max_answer_length=30, version="2.0")
    assert out.best_spans == {"q": "answer is here"}
    assert out.nbest["q"][0].score == 17.0 and out.nbest["q"][0].char_start == target
    first_token = context[first.offsets[0, 0] : first.offsets[0, 1]]
    assert out.nbest["q"][1].text == first_token and out.nbest["q"][1].score == 14.0
    # Null score: the smallest <s> start + end over the windows (2), minus the best span's 17.
    assert out.null_odds == {"q": 2.0 - 17.0} and out.predictions == {"q": "answer is here"}
    assert decode([example], windows, starts, ends, null_threshold=-20.0, version="2.0").predictions == {
        "q": ""
    }
    # Three tokens are too many for max_answer_length=2: the one-token span of window 1 wins.
    short = decode([example], windows, starts, ends, max_answer_length=2, version="1.1")
    assert short.predictions == {"q": first_token}
    v1 = decode([example], windows, starts, ends, version="1.1")
    assert v1.predictions == {"q": "answer is here"} and v1.null_odds == {}


def test_choose_null_threshold():
    context = "Paris Rome"
    examples = [
        SquadExample("a", "?", context, (("Paris", 0),)),
        SquadExample("b", "?", context, (), True),
        SquadExample("c", "?", context, (("Rome", 6),)),
    ]
    spans = {"a": "Paris", "b": "Rome", "c": "Paris"}
    # Answering in order of odds: a (+1) then c (+0) then b (-1): best after a, at its odds.
    threshold, best = choose_null_threshold(examples, spans, {"a": -1.0, "c": 0.5, "b": 2.0})
    assert threshold == -1.0 and best == pytest.approx(200 / 3)


# ---------------------------------------------------------------- metrics


def test_normalization_and_token_scores():
    assert normalize_answer("The  Quick, brown-fox!\tAn apple a day") == "quick brownfox apple day"
    assert normalize_answer("theatre") == "theatre"  # an article only as a whole word
    assert exact_match("the Denver Broncos", "Denver Broncos.") == 1
    assert exact_match("Broncos", "Denver Broncos") == 0
    assert f1_v1("Denver Broncos won", "the Denver Broncos") == pytest.approx(0.8)
    assert f1_v1("a a b", "a b b") == pytest.approx(2 / 3)  # "b" against "b b": articles go first
    assert f1_v1("x x y", "x y y") == pytest.approx(2 / 3)  # counts of repeated tokens
    # Both sides empty after normalization: v1.1 scores F1 0, v2.0 scores 1.
    assert f1_v1("", "the") == 0.0 and f1_v2("", "the") == 1.0 and f1_v2("", "Paris") == 0.0


def test_v11_several_golds_and_missing_prediction():
    context = "Denver Broncos beat Carolina."
    examples = [
        SquadExample("q1", "?", context, (("Broncos", 7), ("Denver Broncos", 0))),
        SquadExample("q2", "?", context, (("Carolina", 20),)),
    ]
    scores = squad_scores(examples, {"q1": "Denver"}, "1.1")
    # q1: EM 0; F1 max(0, P=1 R=1/2 -> 2/3); q2 missing: 0.
    assert scores == {"exact_match": 0.0, "f1": pytest.approx(100 / 3), "total": 2, "missing": 1}
    assert squad_scores(examples, {"q1": "the denver broncos!", "q2": ""}, "1.1")["exact_match"] == 50.0


def test_v20_no_answer_breakdown_and_best_thresholds():
    context = "Paris Rome London"
    examples = [
        SquadExample("q1", "?", context, (("Paris", 0),)),
        SquadExample("q2", "?", context, (), True),
        SquadExample("q3", "?", context, (("Rome", 6),)),
        SquadExample("q4", "?", context, (), True),
        SquadExample("q5", "?", context, (("London", 11),)),
    ]
    predictions = {"q1": "Paris", "q2": "London", "q3": "Milan", "q4": ""}  # q5 missing
    plain = squad_scores(examples, predictions, "2.0")
    assert plain["exact_match"] == 40.0 and plain["missing"] == 1 and plain["total"] == 5
    assert (plain["HasAns_exact"], plain["HasAns_total"], plain["NoAns_exact"], plain["NoAns_total"]) == (
        100 / 3,
        3,
        50.0,
        2,
    )
    assert "best_f1" not in plain
    odds = {"q1": -2.0, "q2": 3.0, "q3": 1.0, "q4": 0.5}
    scored = squad_scores(examples, predictions, "2.0", odds)
    # The official default threshold 1.0 turns q2 (odds 3) into "no answer": right, +1.
    assert scored["exact_match"] == 60.0 and scored["NoAns_exact"] == 100.0
    # Start with q1..q4 all null (q2, q4 right: 2); answer q1 (+1: 3), q4 (pred "": 3), q3 (+0), q2 (-1).
    assert (scored["best_exact"], scored["best_exact_thresh"]) == (60.0, -2.0)
    assert (scored["best_f1"], scored["best_f1_thresh"]) == (60.0, -2.0)
    # Equal odds are answered in the odds file's order, as the official search does.
    tied = [SquadExample("r", "?", context, (("Rome", 6),)), SquadExample("n", "?", context, (), True)]
    guesses = {"r": "Rome", "n": "Paris"}
    assert squad_scores(tied, guesses, "2.0", {"r": 1.0, "n": 1.0})["best_exact"] == 100.0
    assert squad_scores(tied, guesses, "2.0", {"n": 1.0, "r": 1.0})["best_exact"] == 50.0


# ---------------------------------------------------------------- files and the command line


def squad_file(tmp_path, data, name="dev.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"version": "v2.0", "data": data}))
    return path


def evaluate_argv(version, dev, predictions, *extra):
    """The arguments of `roberta evaluate squad`."""
    command = ["evaluate", "squad", "--version", version, "--dev", str(dev)]
    return [*command, "--predictions", str(predictions), *extra]


ARTICLE = [
    {
        "title": "t",
        "paragraphs": [
            {
                "context": "Paris is in France.",
                "qas": [
                    {
                        "id": "a",
                        "question": "Where is Paris?",
                        "answers": [{"text": "France", "answer_start": 12}],
                        "is_impossible": False,
                    },
                    {"id": "b", "question": "Where is Rome?", "answers": [], "is_impossible": True},
                ],
            }
        ],
    }
]


def test_read_squad_bad_input(tmp_path):
    examples = read_squad(squad_file(tmp_path, ARTICLE), "2.0")
    assert examples[0] == SquadExample(
        "a", "Where is Paris?", "Paris is in France.", (("France", 12),), False
    )
    assert examples[1].impossible and examples[1].answers == ()
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n')
    with pytest.raises(UserError, match=r"broken.json:2: invalid JSON"):
        read_squad(broken, "1.1")
    missing = json.loads(json.dumps(ARTICLE))
    del missing[0]["paragraphs"][0]["qas"][1]["question"]
    with pytest.raises(
        UserError, match=r"dev.json: data\[0\].paragraphs\[0\].qas\[1\]: missing field 'question'"
    ):
        read_squad(squad_file(tmp_path, missing), "2.0")
    wrong_type = json.loads(json.dumps(ARTICLE))
    wrong_type[0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = "12"
    with pytest.raises(UserError, match=r"qas\[0\].answers\[0\].answer_start: expected int"):
        read_squad(squad_file(tmp_path, wrong_type), "2.0")
    with pytest.raises(UserError, match=r"question 'b' has no answer \(a SQuAD v2.0 file"):
        read_squad(squad_file(tmp_path, ARTICLE), "1.1")


def test_evaluate_squad_command(tmp_path, capsys):
    dev = squad_file(tmp_path, ARTICLE)
    predictions, odds = tmp_path / "predictions.json", tmp_path / "null_odds.json"
    write_predictions(predictions, {"a": "france", "b": "Paris"})
    write_predictions(odds, {"a": -3.0, "b": 0.5})
    assert main(evaluate_argv("2.0", dev, predictions, "--null-odds", str(odds))) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["exact_match"] == 50.0 and out["HasAns_f1"] == 100.0 and out["NoAns_exact"] == 0.0
    assert (out["best_exact"], out["best_exact_thresh"], out["missing"]) == (100.0, -3.0, 0)
    assert evaluate_squad(dev, predictions, "2.0")["f1"] == 50.0

    write_predictions(predictions, {"a": "France"})
    assert main(evaluate_argv("2.0", dev, predictions)) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["missing"] == 1 and "1 question(s) have no prediction" in captured.err

    (tmp_path / "bad.json").write_text('{"a": 3}')
    assert main(evaluate_argv("1.1", dev, tmp_path / "bad.json")) == 2
    assert capsys.readouterr().err.startswith("roberta: error: ")
    assert main(evaluate_argv("2.0", dev, tmp_path / "bad.json")) == 2
    assert "bad.json: 'a': expected a string, got int" in capsys.readouterr().err


def test_evaluate_squad_and_the_squad_data_import_no_torch(tmp_path):
    # Scoring predictions needs no deep-learning stack: `roberta evaluate squad` starts fast, and
    # hub.answer() reads the windows and decoding without the training code.
    dev = squad_file(tmp_path, ARTICLE)
    predictions = tmp_path / "predictions.json"
    write_predictions(predictions, {"a": "France", "b": ""})
    argv = evaluate_argv("2.0", dev, predictions)
    script = (
        f"import sys; from roberta.cli import main; rc = main({argv!r}); "
        "import roberta.tasks.squad_data; assert rc == 0, rc; "
        "assert 'torch' not in sys.modules and 'roberta.train' not in sys.modules, 'torch imported'"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_evaluate_squad_prints_valid_json_for_infinite_odds(tmp_path, capsys):
    # `decode` gives a context of only spaces infinite null odds; the best threshold may be one.
    dev = squad_file(tmp_path, ARTICLE)
    predictions, odds = tmp_path / "predictions.json", tmp_path / "null_odds.json"
    write_predictions(predictions, {"a": "France", "b": ""})
    write_predictions(odds, {"a": float("inf"), "b": 0.5})
    assert main(evaluate_argv("2.0", dev, predictions, "--null-odds", str(odds))) == 0

    def no_constant(name: str):
        raise AssertionError(f"{name} is not JSON")

    out = json.loads(capsys.readouterr().out, parse_constant=no_constant)
    assert (out["best_exact"], out["best_exact_thresh"]) == (100.0, None)


# ---------------------------------------------------------------- RACE


def test_read_race_every_shared_file(shared_data):
    for split in ("dev", "test"):
        directory = shared_data / "race" / split
        examples = read_race(directory)
        for level in ("middle", "high"):
            records = [json.loads(p.read_text()) for p in sorted((directory / level).glob("*.txt"))]
            mine = [e for e in examples if e.level == level]
            assert len(mine) == sum(len(r["questions"]) for r in records)
            assert sum(len(o) for r in records for o in r["options"]) == 4 * len(mine)
            assert [e.label for e in mine] == ["ABCD".index(a) for r in records for a in r["answers"]]
        assert all(len(e.options) == 4 for e in examples)
    dev = read_race(shared_data / "race" / "dev")
    assert (sum(e.level == "high" for e in dev), sum(e.level == "middle" for e in dev)) == (3451, 1436)


def test_encode_choices(shared_data, tokenizer):
    examples = read_race(shared_data / "race" / "dev")[:40]
    for example in examples:
        choices = encode_choices(tokenizer, example)
        assert len(choices) == 4
        for ids in choices:
            assert len(ids) <= 512 and ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id
    long = max(examples, key=lambda e: len(e.article))
    assert max(map(len, encode_choices(tokenizer, long, max_length=128))) == 128
    blank = dataclasses.replace(
        examples[0],
        article="A short text.",
        question="He went to _ .",
        options=("school", "x", "y", "z " * 300),
    )
    choices = encode_choices(tokenizer, blank, max_length=512, max_qa=128)
    eos = tokenizer.eos_id
    assert choices[0] == [
        tokenizer.bos_id,
        *tokenizer.tokenize_ids("A short text."),
        eos,
        eos,
        *tokenizer.tokenize_ids("He went to school ."),
        eos,
    ]
    assert len(choices[3]) == 1 + len(tokenizer.tokenize_ids("A short text.")) + 2 + 128 + 1
    joined = encode_choices(tokenizer, dataclasses.replace(blank, question="Who?"))
    qa = tokenizer.tokenize_ids("Who? school")
    assert joined[0][-len(qa) - 1 :] == [*qa, eos]
    assert accuracy_by_level(examples[:3], [e.label for e in examples[:3]])["accuracy"] == 100.0


def test_accuracy_by_level():
    from roberta.tasks.race import RaceExample

    def ex(level, label):
        return RaceExample("x", "a", "q", ("1", "2", "3", "4"), label, level)

    examples = [ex("middle", 0), ex("middle", 1), ex("high", 2), ex("high", 3), ex("high", 0)]
    assert accuracy_by_level(examples, [0, 0, 2, 3, 1]) == {
        "accuracy": 60.0,
        "middle": 50.0,
        "high": pytest.approx(200 / 3),
    }
    assert accuracy_by_level(examples[:2], [0, 1]) == {"accuracy": 100.0, "middle": 100.0}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r["answers"].__setitem__(0, "E"), r"answers\[0\]: expected a letter A-D, got 'E'"),
        (lambda r: r.pop("article"), r"missing field 'article'"),
        (lambda r: r["options"][0].pop(), r"options\[0\]: expected 4 strings"),
    ],
)
def test_read_race_bad_input(tmp_path, change, message):
    record = {
        "id": "x.txt",
        "article": "A.",
        "questions": ["Q?"],
        "options": [["a", "b", "c", "d"]],
        "answers": ["A"],
    }
    (tmp_path / "high").mkdir()
    change(record)
    (tmp_path / "high" / "x.txt").write_text(json.dumps(record))
    with pytest.raises(UserError, match=r"high/x.txt: " + message):
        read_race(tmp_path)


def test_read_race_malformed_json(tmp_path):
    (tmp_path / "middle").mkdir()
    (tmp_path / "middle" / "1.txt").write_text('{"id": ')
    with pytest.raises(UserError, match=r"middle/1.txt:1: invalid JSON"):
        read_race(tmp_path)
    with pytest.raises(UserError, match="no middle/ or high/"):
        read_race(tmp_path / "middle")
