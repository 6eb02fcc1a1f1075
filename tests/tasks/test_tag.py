"""Token tagging: words encoded and labels aligned as HF's tokenizers align them (byte-level BPE and
WordPiece), entity scores equal to the seqeval library's, long sentences tagged whole across
windows, and `roberta finetune tag` end to end: it learns, scores dev and test, predicts a file
that `evaluate tag` scores as training did, and a killed run resumes bit for bit."""

import json
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from data_fixtures import save_micro_checkpoint
from process_fixtures import run_figures, run_killed_and_resumed
from roberta import checkpoint
from roberta.cli import main
from roberta.convert.hf import write_hf_tokenizer
from roberta.tagging.encoding import IGNORE, encode_words, make_windows, sentence_rows, token_labels
from roberta.tagging.metric import entities, entity_scores
from roberta.tagging.predict import default_stride, piece_logits, tag_words, window_logits
from roberta.tasks.tag import continuing_labels
from roberta.tasks.tag_data import read_tagged
from roberta.tokenizer import load_tokenizer
from roberta.tokenizer.training import train_wordpiece
from tag_fixtures import LABELS, conll_files, tagger_hub

pytestmark = pytest.mark.usefixtures("one_thread")

ODD_WORDS = [
    ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
    ["Zürich", "naïve", "1996-08-22", "don't", "U.S.", "😀", "東京", "(", "Peter", ")", "'s"],
    ["A"],
]


def hf_alignment(word_ids: list, labels: list[int], label_all: bool, continuing: list[int]) -> list[int]:
    """HF run_ner.py's alignment of word labels to tokens, from the tokenizer's word_ids()."""
    out, previous = [], None
    for word in word_ids:
        if word is None:
            out.append(IGNORE)
        elif word != previous:
            out.append(labels[word])
        else:
            out.append(continuing[labels[word]] if label_all else IGNORE)
        previous = word
    return out


def check_alignment(ours, hf_ids: list[int], hf_words: list, labels: list[int]) -> None:
    assert [0, *ours.ids.tolist(), 2] == hf_ids or ours.ids.tolist() == hf_ids[1:-1]
    assert ours.word.tolist() == hf_words[1:-1]
    continuing = continuing_labels(LABELS)
    for label_all in (False, True):
        expected = hf_alignment(hf_words, labels, label_all, continuing)[1:-1]
        assert token_labels(ours, labels, label_all, continuing).tolist() == expected


def test_byte_level_words_are_encoded_and_labelled_as_hf_aligns_them(shared_data, tmp_path):
    """Every word but the first carries a space (HF's is_split_into_words with add_prefix_space),
    the first none, as running text has it: the ids are those of the words joined by spaces."""
    from transformers import RobertaTokenizerFast

    tokenizer = load_tokenizer(shared_data / "gpt2_bpe")
    write_hf_tokenizer(tmp_path, tokenizer, 128)
    spaced = RobertaTokenizerFast(
        str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"), add_prefix_space=True
    )
    plain = RobertaTokenizerFast(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    conll = read_tagged(conll_files(shared_data, tmp_path / "conll", 40)["train"])
    sentences = ODD_WORDS + [list(s.words) for s in conll]
    rng = random.Random(0)
    for words, ours in zip(sentences, encode_words(tokenizer, sentences)):
        first = plain(words[:1], is_split_into_words=True)
        rest = spaced(words[1:], is_split_into_words=True) if len(words) > 1 else None
        ids = first["input_ids"][:-1] + (rest["input_ids"][1:] if rest else [2])
        word_ids = first.word_ids()[:-1] + (
            [None if w is None else w + 1 for w in rest.word_ids()[1:]] if rest else [None]
        )
        labels = [rng.randrange(len(LABELS)) for _ in words]
        check_alignment(ours, ids, word_ids, labels)
        assert ours.ids.tolist() == tokenizer.tokenize_ids(" ".join(words))  # running text's ids


def test_wordpiece_words_are_encoded_and_labelled_as_hf_aligns_them(shared_data, tmp_path):
    from transformers import AutoTokenizer

    text = tmp_path / "text.txt"
    conll = read_tagged(conll_files(shared_data, tmp_path / "conll", 200)["train"])
    text.write_text("\n".join(" ".join(s.words) for s in conll) + "\nZürich naïve don't U.S.\n")
    tokenizer = train_wordpiece([text], tmp_path / "wp", 400, lowercase=True, progress=False)
    write_hf_tokenizer(tmp_path / "hf", tokenizer, 128)
    hf = AutoTokenizer.from_pretrained(tmp_path / "hf")
    sentences = ODD_WORDS + [list(s.words) for s in conll[:60]]
    rng = random.Random(1)
    for words, ours in zip(sentences, encode_words(tokenizer, sentences)):
        encoded = hf(words, is_split_into_words=True)
        pieces = [tokenizer.bos_id, *ours.ids.tolist(), tokenizer.eos_id]
        assert pieces == encoded["input_ids"], words
        labels = [rng.randrange(len(LABELS)) for _ in words]
        check_alignment(ours, encoded["input_ids"], encoded.word_ids(), labels)


# Gold and predicted tags of the cases conlleval's reading decides: an I- after O starts a chunk,
# a type change inside a chunk ends one and starts another, B- after B- splits, IOB1 and IOBES.
EDGE_CASES = [
    (["B-PER", "I-PER", "O", "B-LOC"], ["O", "I-PER", "O", "I-LOC"]),
    (["B-PER", "I-PER", "I-PER"], ["B-PER", "I-LOC", "I-PER"]),
    (["B-ORG", "B-ORG", "I-ORG"], ["B-ORG", "I-ORG", "I-ORG"]),
    (["I-MISC", "I-MISC", "O", "I-PER"], ["I-MISC", "B-MISC", "O", "I-PER"]),
    (["S-PER", "O", "B-LOC", "E-LOC"], ["S-PER", "O", "B-LOC", "I-LOC"]),
    (["B-LOC", "E-LOC", "E-LOC", "I-LOC"], ["B-LOC", "E-LOC", "S-LOC", "O"]),
    (["O", "O"], ["B-PER", "I-ORG"]),
    (["B-PER"], ["I-PER"]),
    (["I-PER", "B-PER"], ["I-PER", "I-PER"]),
]


def test_entity_scores_equal_seqeval_on_iob_edge_cases_and_random_tags():
    from seqeval.metrics import accuracy_score, classification_report, f1_score, precision_score, recall_score
    from seqeval.metrics.sequence_labeling import get_entities

    assert entities(["O", "I-PER", "I-PER", "O"]) == [("PER", 1, 2)]  # I- after O starts a chunk
    assert entities(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 2)]  # a type change splits
    rng = random.Random(0)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-MISC", "E-PER", "S-LOC"]
    random_cases = [
        ([rng.choice(tags) for _ in range(n)], [rng.choice(tags) for _ in range(n)])
        for n in (rng.randint(1, 9) for _ in range(400))
    ]
    for cases in (EDGE_CASES, random_cases, random_cases[:3]):
        gold, predicted = [g for g, _ in cases], [p for _, p in cases]
        ours = entity_scores(gold, predicted)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seqeval warns of a type never predicted
            report = classification_report(gold, predicted, output_dict=True, zero_division=0)
            assert ours["f1"] == pytest.approx(100 * f1_score(gold, predicted), abs=1e-9)
            assert ours["precision"] == pytest.approx(100 * precision_score(gold, predicted), abs=1e-9)
            assert ours["recall"] == pytest.approx(100 * recall_score(gold, predicted), abs=1e-9)
        assert ours["accuracy"] == pytest.approx(100 * accuracy_score(gold, predicted), abs=1e-9)
        for type_, row in report.items():
            if type_.endswith("avg"):
                continue
            assert ours[f"f1_{type_}"] == pytest.approx(100 * row["f1-score"], abs=1e-9), type_
            assert ours[f"precision_{type_}"] == pytest.approx(100 * row["precision"], abs=1e-9), type_
            assert ours[f"recall_{type_}"] == pytest.approx(100 * row["recall"], abs=1e-9), type_
        for g, p in cases:
            assert sorted(entities(g)) == sorted(get_entities(g)) and sorted(entities(p)) == sorted(
                get_entities(p)
            )


def context(window, k: int) -> int:
    """Sub-tokens of context on piece k's shorter side in `window`."""
    return min(k - window.begin, window.begin + len(window.tokens) - 3 - k)


def test_a_long_sentence_is_tagged_whole_across_windows(shared_data):
    """A sentence of ~3 windows: every sub-token's logits are those of the window that gives it the
    most context, each computed on its own; every word gets a tag."""
    hub = tagger_hub(shared_data)
    rng = random.Random(2)
    words = [
        rng.choice(["Peter", "went", "to", "Brussels", "for", "the", "European", "Union", "."])
        for _ in range(260)
    ]
    (sentence,) = encode_words(hub.tokenizer, [words])
    stride = default_stride(hub.max_seq_len)  # tag() and predict's
    windows = make_windows([sentence], 0, 2, 128, stride)
    assert len(windows) >= 3
    owned = [range(*w.owned) for w in windows]
    assert [i for part in owned for i in part] == list(range(len(sentence.ids)))  # each piece once
    for w in windows:  # the window reads most context on the piece's shorter side
        for k in range(*w.owned):
            holding = [v for v in windows if v.begin <= k < v.begin + len(v.tokens) - 2]
            assert context(w, k) == max(context(v, k) for v in holding)
    (rows,) = piece_logits(hub.model, "ner", [sentence], hub.tokenizer, stride, 2048)
    for w in windows:
        with torch.inference_mode():
            alone = hub.model.head_outputs("ner", torch.from_numpy(w.tokens).long()[None])[0].numpy()
        lo, hi = w.owned
        np.testing.assert_allclose(rows[lo:hi], alone[1 + lo - w.begin : 1 + hi - w.begin], atol=1e-5)
    (tags,) = tag_words(hub.model, hub.tokenizer, "ner", [words])
    assert len(tags) == len(words) and set(tags) <= set(LABELS)
    assert tags == [LABELS[i] for i in rows[sentence.first].argmax(-1)]
    # tag() on the same text as running text: entities past the first window, offsets into the text.
    text = " ".join(words)
    found = hub.tag(text)
    assert max(e["end"] for e in found) > len(text) * 0.9
    assert all(text[e["start"] : e["end"]] == e["text"] and e["text"].strip() == e["text"] for e in found)
    assert sentence_rows([sentence], windows, window_logits(hub.model, "ner", windows, 1))[
        0
    ] == pytest.approx(rows)


# ---- roberta finetune tag, end to end


@pytest.fixture(scope="module")
def conll(shared_data, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("conll")
    files = conll_files(shared_data, root, 96, 32)
    return {**files, "ckpt": save_micro_checkpoint(root / "ckpt", shared_data)}


def finetune(conll: dict, out: Path, *extra: str, dev: str = "valid", epochs: int = 3) -> list[str]:
    data = ["--train", str(conll["train"]), "--dev", str(conll[dev]), "--test", str(conll["test"])]
    job = ["--lr", "1e-3", "--batch-size", "16", "--epochs", str(epochs), "--model.dropout=0.1"]
    return ["finetune", "tag", *data, "--init", str(conll["ckpt"]), "--out", str(out), *job, *extra]


@pytest.mark.slow
def test_finetune_tag_learns_and_predict_then_evaluate_scores_as_training_did(conll, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(finetune(conll, out, dev="train", epochs=20)) == 0
    results = json.loads((out / "results.json").read_text())
    # The wiring learns: a random micro model fits its 96 training sentences' entities (O alone: F1 0).
    assert results["best"]["metric"] == "dev/f1" and results["best"]["value"] >= 40
    at_best = [e for e in results["evaluations"] if e["step"] == results["best"]["step"]]
    best = next(e for e in at_best if e["split"] == "test")
    model, _ = checkpoint.load(out / "best")
    assert model.heads["tagger"].kind == "tagging" and model.heads["tagger"].labels == LABELS
    job = json.loads((out / "job.json").read_text())
    assert job["task"] == "tag" and job["labels"] == list(LABELS)
    # RUN/best/ through predict, scored by evaluate: the figures training reported for it.
    predicted = tmp_path / "test.pred.txt"
    assert (
        main(
            [
                "predict",
                str(out / "best"),
                "--head",
                "tagger",
                "--input",
                str(conll["test"]),
                "--out",
                str(predicted),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", "tag", "--gold", str(conll["test"]), "--predictions", str(predicted)]) == 0
    figures = json.loads(capsys.readouterr().out)
    for name in ("f1", "precision", "recall", "accuracy"):
        assert figures[name] == pytest.approx(best[name], abs=1e-9), name
    assert {"f1_PER", "precision_PER", "recall_PER"} <= figures.keys()

    # The same data as JSONL rows of numeric tags (the `datasets` convention) trains the same run.
    for name in ("train", "valid", "test"):
        rows = read_tagged(conll[name])
        lines = [
            json.dumps({"tokens": list(s.words), "ner_tags": [LABELS.index(t) for t in s.tags]}) for s in rows
        ]
        (tmp_path / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    jsonl = {**conll, **{n: tmp_path / f"{n}.jsonl" for n in ("train", "valid", "test")}}
    short = ["--tags-field", "ner_tags", "--labels", ",".join(LABELS), "--train.max_steps=6"]
    assert main(finetune(jsonl, tmp_path / "jsonl", *short)) == 0
    assert main(finetune(conll, tmp_path / "conll", "--train.max_steps=6")) == 0

    def evaluations(run: Path) -> list:
        return json.loads((run / "results.json").read_text())["evaluations"]

    assert evaluations(tmp_path / "jsonl") == evaluations(tmp_path / "conll")


@pytest.mark.slow
def test_a_killed_tagging_run_resumes_bit_identically(conll, tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    run_killed_and_resumed(
        lambda out: finetune(conll, out, "--label-all-tokens"), whole, killed, "step-8:micro-batch-0"
    )

    assert run_figures(killed) == run_figures(whole)
    final = "checkpoints/step-00000018/model.safetensors"
    a, b = load_file(whole / final), load_file(killed / final)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def test_the_embedding_updated_by_rows_trains_bit_identically_to_the_dense_update(
    conll, tmp_path, monkeypatch
):
    """Fine-tuning updates the token embedding by the rows each batch looked up (`optim.AdamW`,
    the embedding's sparse gradient): the losses, dev figures and weights of a run are those of
    the dense gradient and update, to the last bit."""
    from roberta.train import optim, trainer

    calls = []
    step_rows = optim.AdamW._step_rows
    monkeypatch.setattr(optim.AdamW, "_step_rows", lambda *a: calls.append(1) or step_rows(*a))
    assert main(finetune(conll, tmp_path / "rows", "--train.max_steps=8", "--eval-every", "4")) == 0
    assert len(calls) == 8  # every update took the row path
    monkeypatch.setattr(trainer, "row_updates", lambda *args: False)
    assert main(finetune(conll, tmp_path / "dense", "--train.max_steps=8", "--eval-every", "4")) == 0
    assert len(calls) == 8

    assert run_figures(tmp_path / "rows") == run_figures(tmp_path / "dense")
    final = "checkpoints/step-00000008/model.safetensors"
    a, b = load_file(tmp_path / "rows" / final), load_file(tmp_path / "dense" / final)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    assert not a["embed_tokens.weight"].equal(
        load_file(conll["ckpt"] / "model.safetensors")["embed_tokens.weight"]
    )


def test_bf16_rows_in_few_sizes_give_the_exact_rows_loss_to_rounding(shared_data, monkeypatch):
    """Under CPU autocast the layers compute the real rows plus padding rows, and the last layer
    the labelled rows plus unlabelled real ones, in few sizes (oneDNN builds a kernel per shape):
    the loss and gradients are those of the exact rows, to bf16's rounding."""
    import roberta.padding
    import roberta.tasks.tag as tag
    from roberta.padding import Unpadded, bucket_rows
    from roberta.runtime.batching import pad

    hub = tagger_hub(shared_data)
    model = training_copy(hub.model)
    tokenizer = hub.tokenizer
    conll = read_tagged(shared_data / "conll2003" / "train.txt")[:24]
    encoded = encode_words(tokenizer, [s.words for s in conll])
    labels = [token_labels(e, [k % len(LABELS) for k in range(len(e.first))]) for e in encoded]
    windows = make_windows(encoded, tokenizer.bos_id, tokenizer.eos_id, 128, 32, labels)
    batch = {
        "tokens": pad([w.tokens for w in windows], tokenizer.pad_id),
        "labels": pad([w.labels for w in windows], IGNORE),
    }
    real, chosen = batch["tokens"].ne(tokenizer.pad_id), batch["labels"].ne(IGNORE)
    select = tag._bucketed(chosen, real)
    assert (select & chosen).equal(chosen) and not (select & ~real).any()
    assert int(select.sum()) == min(bucket_rows(int(chosen.sum())), int(real.sum())) > int(chosen.sum())
    unpadded = Unpadded.of(~real, bucketed=True)
    assert len(unpadded.index) == bucket_rows(int(real.sum())) > int(real.sum())
    assert unpadded.index.diff().gt(0).all() and real.flatten()[unpadded.index].sum() == real.sum()

    def loss_and_grads():
        model.zero_grad()
        torch.manual_seed(0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = tag._loss("ner", tokenizer.pad_id, model, batch)["loss"]
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    bucketed, bucketed_grads = loss_and_grads()
    monkeypatch.setattr(roberta.padding, "bucket_rows", lambda n: n)
    monkeypatch.setattr(tag, "bucket_rows", lambda n: n)
    exact, exact_grads = loss_and_grads()
    assert bucketed.item() == pytest.approx(exact.item(), rel=1e-2)
    for a, b in zip(bucketed_grads, exact_grads):
        assert torch.allclose(a, b, rtol=0.05, atol=0.05 * b.abs().max().item())


def training_copy(model):
    """A training copy of a hub's model (dropout 0.1), the hub's own left in eval mode."""
    import copy
    import dataclasses

    from roberta.model import RobertaModel

    config = dataclasses.replace(model.config, dropout=0.1, attention_dropout=0.1)
    trained = RobertaModel(config)
    trained.heads["ner"] = copy.deepcopy(model.heads["ner"])
    trained.load_state_dict(model.state_dict())
    return trained.train()
