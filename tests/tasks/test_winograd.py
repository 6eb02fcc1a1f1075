"""Winograd schemas through the masked LM: the candidate scoring against a hand computation, the
two losses against hand-computed values, SuperGLUE WSC's span placement on its quirky rows, the
noun-phrase candidates, and the accuracies `evaluate winograd` prints against a count made here."""

import json
import math

import pytest
import torch

from data_fixtures import save_micro_checkpoint
from roberta import checkpoint
from roberta.cli import main
from roberta.tasks.candidate_scoring import Loss, fit_case, score_schemas
from roberta.tasks.noun_phrases import candidates_for, noun_phrases, phrase_text
from roberta.tasks.winograd_data import Schema, read_superglue_wsc, read_winogrande_schemas, read_wsc273

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def micro(shared_data, tmp_path_factory):
    """A micro model (2 x 64, GPT-2 BPE, seed 0) with its masked-LM head, loaded in eval mode."""
    path = save_micro_checkpoint(tmp_path_factory.mktemp("micro") / "ckpt", shared_data)
    model, tokenizer = checkpoint.load(path)
    return path, model.eval(), tokenizer


def hand_score(model, tokenizer, prefix: str, space: str, candidate: str, suffix: str) -> float:
    """The mean log-probability of the candidate's tokens at its masks, from the full padded
    forward over every position: written out here, independently of the scoring code."""
    cand = tokenizer.tokenize_ids(space + candidate)
    ids = [
        tokenizer.bos_id,
        *tokenizer.tokenize_ids(prefix),
        *[tokenizer.mask_id] * len(cand),
        *tokenizer.tokenize_ids(suffix),
        tokenizer.eos_id,
    ]
    start = 1 + len(tokenizer.tokenize_ids(prefix))
    with torch.no_grad():
        hidden = model(torch.tensor([ids])).last_hidden_state[0]
        logp = torch.log_softmax(model.lm_head(hidden).double(), -1)
    return sum(logp[start + k, t].item() for k, t in enumerate(cand)) / len(cand)


def test_candidate_scores_equal_a_hand_computation(micro):
    _, model, tokenizer = micro
    schemas = [
        Schema(
            "0",
            "The trophy doesn't fit into the brown suitcase because",
            " ",
            " is too large.",
            "the trophy",
            ("the brown suitcase", "the box of old toys"),
            True,
        ),
        Schema("1", "", "", " was open.", "Janie", ("Emma",), True),
    ]
    scores = score_schemas(model, tokenizer, schemas)
    for schema, got in zip(schemas, scores):
        texts = [schema.query, *schema.candidates]
        assert len(got) == len(texts)
        for text, score in zip(texts, got):
            want = hand_score(
                model, tokenizer, schema.prefix, schema.space, fit_case(text, schema.prefix), schema.suffix
            )
            assert score == pytest.approx(want, abs=1e-5)
    # At a sentence's start the candidate is capitalized; mid-sentence a leading "The" is not.
    assert (
        fit_case("janie", "") == "Janie" and fit_case("The demonstrators", "because") == "the demonstrators"
    )


def test_margin_and_cross_entropy_losses_equal_hand_values():
    q, c = torch.tensor(-1.0), torch.tensor([-0.5, -2.0])
    # Kocijan et al.: -q + alpha * sum_k max(0, c_k - q + beta) = 1 + 2 * (0.8 + 0) = 2.6
    assert Loss("margin", 2.0, 0.3)(q, c).item() == pytest.approx(2.6)
    assert Loss("margin")(q, c).item() == pytest.approx(1 + 0.5)  # fairseq's alpha 1, beta 0
    ce = math.log(math.exp(-1) + math.exp(-0.5) + math.exp(-2)) + 1
    assert Loss("cross-entropy")(q, c).item() == pytest.approx(ce)
    # No candidate mined: cross-entropy over one score is 0; the margin loss is -q alone.
    assert Loss("cross-entropy")(q, c[:0]).item() == pytest.approx(0.0)
    assert Loss("margin", 5.0, 0.4)(q, c[:0]).item() == pytest.approx(1.0)


def test_superglue_spans_are_placed_on_the_quirky_rows(shared_data):
    root = shared_data / "wsc" / "superglue"
    train, placed = read_superglue_wsc(root / "train.jsonl", labelled=True)
    assert len(train) == 554 and sum(s.label for s in train) == 259
    assert placed.moved == [] and placed.unplaced == [] and placed.inexact == 90
    # 'him,"': the pronoun without what is attached to it, which stays in the text.
    row = next(s for s in train if s.line == 138)
    assert row.query == "pony" and row.suffix.startswith(',"') and row.prefix.endswith('"Good for')
    # A newline inside span1: placed by its words; the candidate is scored as one line.
    row = next(s for s in train if s.line == 235)
    assert row.query == "willow-towered Canopy Huntertropic wrestles"
    val, placed = read_superglue_wsc(root / "val.jsonl", labelled=True)
    assert placed.moved == ["line 43: span2 'it' index 30 -> 31"] and placed.unplaced == []
    row = next(s for s in val if s.line == 43)
    assert row.prefix.endswith("might want to use") and row.suffix.startswith(", but really")
    test, placed = read_superglue_wsc(root / "test.jsonl", labelled=False)
    assert len(test) == 146 and all(s.label is None for s in test)
    # Three test rows name people the text never writes together: counted, scored by their text.
    assert [u.split(":")[0] for u in placed.unplaced] == ["line 81", "line 82", "line 83"]
    assert placed.moved == []


def test_noun_phrase_candidates():
    words = "Mark told Pete many lies about himself, which Pete included in his book. He should".split(" ")
    spans = noun_phrases(words)
    assert [phrase_text(words, a, b) for a, b in spans] == ["Mark", "Pete", "many lies", "Pete", "his book"]
    # Pronouns, the query and what overlaps the pronoun are never candidates; each text once.
    assert candidates_for(words, 14, "Mark", (0, 1)) == ["Pete", "many lies", "his book"]
    words = "Emma's mother had died long ago, and her place had been taken by an excellent woman".split()
    found = [phrase_text(words, a, b) for a, b in noun_phrases(words)]
    assert "Emma's mother" in found and "Emma" in found and "an excellent woman" in found
    words = "Mark was close to Mr. Singer 's heels .".split()
    assert [phrase_text(words, a, b) for a, b in noun_phrases(words)] == [
        "Mark",
        "Mr. Singer",
        "Mr. Singer's heels",
    ]


def test_extractor_on_the_554_training_rows(shared_data):
    """What the rules find on SuperGLUE WSC train (docs/winograd.md quotes these figures)."""
    train, _ = read_superglue_wsc(shared_data / "wsc" / "superglue" / "train.jsonl", labelled=True)
    counts = [len(s.candidates) for s in train]
    assert sum(counts) == 1576 and counts.count(0) == 14 and max(counts) == 13
    found = 0
    for line in (shared_data / "wsc" / "superglue" / "train.jsonl").read_text().splitlines():
        record = json.loads(line)
        words = record["text"].split(" ")
        phrases = {phrase_text(words, a, b).lower() for a, b in noun_phrases(words)}
        found += " ".join(record["target"]["span1_text"].split()).lower() in phrases
    assert found == 327  # rows whose labelled candidate (span1) is one of the phrases found


def test_wsc273_and_winogrande_readers(shared_data):
    wsc = read_wsc273(shared_data / "wsc" / "wsc273" / "WSCollection.xml")
    assert len(wsc) == 273 and all(len(s.candidates) == 1 for s in wsc)
    first = wsc[0]
    assert (first.prefix, first.query, first.candidates, first.suffix) == (
        "The city councilmen refused the demonstrators a permit because",
        "The city councilmen",
        ("The demonstrators",),
        " feared violence.",
    )
    dev = read_winogrande_schemas(shared_data / "winogrande" / "dev.jsonl")
    assert len(dev) == 1267
    assert (dev[0].prefix, dev[0].query, dev[0].candidates, dev[0].suffix) == (
        "Sarah was a much better surgeon than Maria so",
        "Maria",
        ("Sarah",),
        " always got the easier cases.",
    )


def test_evaluate_winograd_accuracies_equal_an_independent_count(micro, shared_data, tmp_path, capsys):
    path, model, tokenizer = micro
    wsc = shared_data / "wsc" / "wsc273" / "WSCollection.xml"
    winogrande = tmp_path / "dev.jsonl"
    winogrande.write_text(
        "".join((shared_data / "winogrande" / "dev.jsonl").read_text().splitlines(True)[:40])
    )
    val = tmp_path / "val.jsonl"
    val.write_text(
        "".join((shared_data / "wsc" / "superglue" / "val.jsonl").read_text().splitlines(True)[:30])
    )
    argv = ["evaluate", "winograd", "--model", str(path), "--wsc273", str(wsc)]
    assert main([*argv, "--winogrande", str(winogrande), "--superglue", str(val)]) == 0
    printed = json.loads(capsys.readouterr().out)

    def count(schemas, strict):
        right = 0
        for s in schemas:
            scores = [
                hand_score(model, tokenizer, s.prefix, s.space, fit_case(t, s.prefix), s.suffix)
                for t in (s.query, *s.candidates)
            ]
            query, others = scores[0], scores[1:]
            right += (
                (query > max(others)) if strict else ((query >= max(others, default=-math.inf)) == s.label)
            )
        return 100.0 * right / len(schemas)

    assert printed["wsc273"] == {"accuracy": pytest.approx(count(read_wsc273(wsc), True)), "count": 273}
    assert printed["winogrande"]["accuracy"] == pytest.approx(
        count(read_winogrande_schemas(winogrande), True)
    )
    superglue, _ = read_superglue_wsc(val, labelled=True)
    assert printed["superglue"] == {"accuracy": pytest.approx(count(superglue, False)), "count": 30}


def test_hub_disambiguate_picks_the_best_scored_candidate(micro):
    import roberta
    from roberta.errors import UserError

    path, model, tokenizer = micro
    hub = roberta.load(path)
    sentence = "The trophy would not fit in the brown suitcase because [it] was too big."
    prefix, suffix = "The trophy would not fit in the brown suitcase because", " was too big."
    candidates = ["the trophy", "the brown suitcase", "the box"]
    scored = hub.disambiguate(sentence, candidates, return_scores=True)
    want = [hand_score(model, tokenizer, prefix, " ", c, suffix) for c in candidates]
    assert [c for c, _ in scored] == candidates
    assert [s for _, s in scored] == pytest.approx(want, abs=1e-5)
    assert hub.disambiguate(sentence, candidates) == candidates[max(range(3), key=want.__getitem__)]
    # Without candidates: the sentence's noun phrases; with a _query_: whether it wins (fairseq).
    mined = hub.disambiguate(sentence, return_scores=True)
    assert [c for c, _ in mined] == ["The trophy", "the brown suitcase"]
    query = hub.disambiguate("The _trophy_ would not fit in the brown suitcase because [it] was too big.")
    others = dict(
        hub.disambiguate(
            "The _trophy_ would not fit in the brown suitcase because [it] was too big.", return_scores=True
        )
    )
    assert query == all(others["trophy"] >= s for c, s in others.items() if c != "trophy")
    for bad in ("No pronoun marked.", "Two [it] and [it].", "An [] empty mark."):
        with pytest.raises(UserError, match="disambiguate"):
            hub.disambiguate(bad, ["x"])


def test_wnli_pairs_read_as_schemas(shared_data):
    from roberta.tasks.winograd_data import align_wnli, read_wnli

    root = shared_data / "glue" / "WNLI"
    counts = {}
    for name, labelled in (("train", True), ("dev", True), ("test", False)):
        schemas, unaligned = read_wnli(root / f"{name}.tsv", labelled)
        counts[name] = (len(schemas), len(unaligned))
    # The pairs whose sentence2 paraphrases more than the pronoun ("cursing it" -> "He cursed it").
    assert counts == {"train": (628, 7), "dev": (71, 0), "test": (139, 7)}
    test, unaligned = read_wnli(root / "test.tsv", False)
    assert [i for i, _ in unaligned] == ["95", "96", "97", "98", "99", "100", "101"]
    first = test[0]
    assert (first.query, first.prefix[-20:], first.suffix) == (
        "Maude and Dora",
        "Horses ran away when",
        " came in sight.",
    )
    assert "the trains" in first.candidates and "Maude and Dora" not in first.candidates
    # The candidate may stand right before the pronoun: "... Mat Grice, he is probably based on ...".
    s1 = "Dickens helped Collins develop the character of Mat Grice, he is probably based on Leatherstocking."
    words, index, candidate = align_wnli(s1, "Mat Grice is probably based on Leatherstocking.")
    assert (words[index], candidate) == ("he", "Mat Grice")


def test_wnli_file_from_a_wsc_model_agrees_with_evaluate(micro, shared_data, tmp_path, capsys):
    path, _, _ = micro
    dev = shared_data / "glue" / "WNLI" / "dev.tsv"
    assert main(["evaluate", "winograd", "--model", str(path), "--wnli", str(dev)]) == 0
    printed = json.loads(capsys.readouterr().out)["wnli"]
    out = tmp_path / "WNLI.tsv"
    assert main(["predict", str(path), "--task", "WNLI-WSC", "--input", str(dev), "--out", str(out)]) == 0
    header, *rows = out.read_text().splitlines()
    gold = [line.split("\t")[-1] for line in dev.read_text().splitlines()[1:]]
    assert header == "index\tprediction" and len(rows) == len(gold) == printed["count"] == 71
    right = sum(row.split("\t")[1] == label for row, label in zip(rows, gold))
    assert 100.0 * right / 71 == pytest.approx(printed["accuracy"])
    capsys.readouterr()
