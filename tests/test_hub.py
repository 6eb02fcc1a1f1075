"""The fairseq-style hub: batched equals one-by-one, fill_mask on a model that knows the answer,
the same results from our, HF and fairseq directories, clear errors, and the CLI verbs."""

import dataclasses
from copy import deepcopy as copy_module
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import roberta
from roberta import Roberta, RobertaConfig, RobertaModel, UserError, cli
from roberta.checkpoint import save
from roberta.convert import export_fairseq, export_hf
from roberta.hub.files import embed_file
from roberta.model import SpanHead
from roberta.padding import Layout
from roberta.qa.windows import answer_windows
from roberta.runtime.batching import length_batches, pad
from roberta.tokenizer import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # micro models run fastest on one thread

# GPT-2's vocabulary on a micro encoder; 64 positions so that "too long" is cheap to reach.
MICRO = RobertaConfig(
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    ffn_size=64,
    max_positions=66,
    dropout=0.0,
    attention_dropout=0.0,
)
ANSWERS = {"The capital of France is <mask>.": " Paris", "The capital of Italy is <mask>.": " Rome"}
TEXTS = [
    "Hello world!",
    "A somewhat longer sentence, with a comma and more words in it.",
    "x",
    "Short one.",
    "The quick brown fox jumps over the lazy dog and keeps on running far away.",
]


def train_to_fill(hub: Roberta, steps: int = 60) -> None:
    """Teach the masked LM the two answers; each needs the country, so the encoder must be used."""
    t = hub.tokenizer
    inputs, targets = [], []
    for text, answer in ANSWERS.items():
        ids = t.encode(text.replace(" <mask>", answer))
        (target,) = t.tokenize_ids(answer)
        inputs.append([t.mask_id if i == target else i for i in ids])
        targets.append(target)
    inputs, targets = torch.tensor(inputs), torch.tensor(targets)
    optimizer = torch.optim.Adam(hub.model.parameters(), lr=1e-2)
    hub.train()
    for _ in range(steps):
        hidden = hub.model(inputs).last_hidden_state
        loss = F.cross_entropy(hub.model.lm_logits(hidden, inputs.eq(t.mask_id)), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    hub.eval()


def trained_hub(shared_data: Path, config: RobertaConfig, steps: int = 60) -> Roberta:
    """A micro model (seed 0, GPT-2's vocabulary) that knows the two answers, with a 3-class head
    "sentiment", in eval mode."""
    torch.manual_seed(0)
    hub = Roberta(RobertaModel(config), load_tokenizer(shared_data / "gpt2_bpe"))
    train_to_fill(hub, steps)
    hub.register_classification_head("sentiment", 3)
    return hub


@pytest.fixture(scope="module")
def hub(shared_data) -> Roberta:
    return trained_hub(shared_data, MICRO)


@pytest.fixture(scope="module")
def checkpoint_dir(hub, tmp_path_factory):
    return save(tmp_path_factory.mktemp("ckpt") / "micro", hub.model, hub.tokenizer)


def test_length_batches_sort_fit_the_budget_and_cover_every_index():
    lengths = [5, 40, 7, 40, 12, 3, 90, 6]
    batches = length_batches(lengths, batch_tokens=80)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches[0] == [6]  # longer than the budget: alone, and first
    for b in batches[1:]:
        assert len(b) * max(lengths[i] for i in b) <= 80
    widths = [lengths[b[0]] for b in batches]
    assert widths == sorted(widths, reverse=True)
    assert pad([[0, 5, 2], [0, 2]], pad_id=1).tolist() == [[0, 5, 2], [0, 2, 1]]


def test_encode_and_decode_follow_fairseq(hub):
    assert hub.encode("Hello world!").tolist() == [0, 31414, 232, 328, 2]
    pair = hub.encode("Hello", "world")
    assert pair.tolist() == [0, 31414, 2, 2, 8331, 2]
    assert hub.encode("Hello", "world", no_separator=True).tolist() == [0, 31414, 2, 8331, 2]
    assert hub.decode(hub.encode("Hello world!")) == "Hello world!"
    assert hub.decode(pair) == ["Hello", "world"]
    assert hub.decode(pad(hub.encode_batch(["a b", "Hello world!"]), 1)) == ["a b", "Hello world!"]
    assert [s.tolist() for s in hub.encode_batch(["Hello"], ["world"])] == [pair.tolist()]


def test_batched_features_equal_one_by_one(hub):
    seqs = hub.encode_batch(TEXTS)
    hub.batch_tokens = 40  # several batches of unequal widths, with padding inside some
    try:
        batched = hub.extract_features(seqs)
        layers = hub.extract_features(seqs, return_all_hiddens=True)
    finally:
        hub.batch_tokens = roberta.hub.DEFAULT_BATCH_TOKENS
    for seq, features, all_layers in zip(seqs, batched, layers):
        alone = hub.extract_features(seq)
        assert alone.shape == (1, len(seq), MICRO.hidden_size)
        assert (features - alone[0]).abs().max() <= 1e-5
        for one, many in zip(hub.extract_features(seq, return_all_hiddens=True), all_layers, strict=True):
            assert (one[0] - many).abs().max() <= 1e-5
    # A padded 2-D tensor runs as given, as in fairseq.
    padded = hub.extract_features(pad(seqs, 1))
    assert (padded[1, : len(seqs[1])] - batched[1]).abs().max() <= 1e-5


def test_return_all_hiddens_is_embeddings_then_every_layer(hub):
    tokens = hub.encode("Hello world!")
    hiddens = hub.extract_features(tokens, return_all_hiddens=True)
    assert len(hiddens) == MICRO.num_layers + 1
    assert all(h.shape == (1, 5, MICRO.hidden_size) for h in hiddens)
    assert torch.equal(hiddens[-1], hub.extract_features(tokens))
    with torch.no_grad():
        m = hub.model
        x = hiddens[0]
        assert torch.allclose(hiddens[1], m.layers[0](x, Layout(attn_mask=None, unpadded=None)), atol=1e-6)
        positions = torch.arange(2, 7)[None]
        embedded = m.embed_layer_norm(m.embed_tokens(tokens[None]) + m.embed_positions(positions))
        assert torch.allclose(x, embedded, atol=1e-6)


def test_batched_predictions_equal_one_by_one(hub):
    seqs = hub.encode_batch(TEXTS)
    hub.batch_tokens = 40
    try:
        batched = hub.predict("sentiment", seqs)
        logits = hub.predict("sentiment", seqs, return_logits=True)
    finally:
        hub.batch_tokens = roberta.hub.DEFAULT_BATCH_TOKENS
    assert batched.shape == (len(TEXTS), 3)
    assert torch.allclose(batched.exp().sum(-1), torch.ones(len(TEXTS)), atol=1e-6)
    assert torch.allclose(batched, F.log_softmax(logits, -1), atol=1e-6)
    singles = torch.cat([hub.predict("sentiment", s) for s in seqs])
    assert (batched - singles).abs().max() <= 1e-5
    # The same model, the same answer twice: no dropout in eval mode, even in a head added later.
    assert torch.equal(hub.predict("sentiment", seqs[0]), hub.predict("sentiment", seqs[0]))


def test_embed_pools_the_chosen_layer(hub):
    seqs = hub.encode_batch(TEXTS)
    features = hub.extract_features(seqs, return_all_hiddens=True)
    cls = hub.embed(seqs)
    mean = hub.embed(seqs, layer=1, pool="mean")
    for k, layers in enumerate(features):
        assert (cls[k] - layers[-1][0]).abs().max() <= 1e-5
        assert (mean[k] - layers[1].mean(0)).abs().max() <= 1e-5


def test_fill_mask_returns_the_trained_answer_first(hub):
    for text, answer in ANSWERS.items():
        (filled, score, token), *rest = hub.fill_mask(text, topk=3)
        assert token == answer
        assert filled == text.replace(" <mask>", answer)
        assert score > 0.5 and len(rest) == 2 and all(s <= score for _, s, _ in rest)
    batched = hub.fill_mask(list(ANSWERS), topk=3)
    for text, results in zip(ANSWERS, batched):
        singles = hub.fill_mask(text, topk=3)
        assert [r[0] for r in results] == [r[0] for r in singles]
        assert max(abs(a[1] - b[1]) for a, b in zip(results, singles)) <= 1e-5


def test_fill_mask_keeps_fairseq_spacing(hub):
    # No space before <mask>: the text around it is kept and the token (with its own space) inserted.
    for filled, _, token in hub.fill_mask("The capital of France is<mask>.", topk=2):
        assert filled == "The capital of France is" + token + "."
    # fairseq right-strips each side, so trailing spaces before <mask> do not change the tokens.
    assert hub.fill_mask("The capital of France is   <mask>.")[0][1] == pytest.approx(
        hub.fill_mask("The capital of France is <mask>.")[0][1], abs=1e-6
    )
    starts = hub.fill_mask("<mask> is the capital of France.", topk=1)
    assert starts[0][0] == starts[0][2] + " is the capital of France."


def test_same_results_from_our_hf_and_fairseq_directories(hub, checkpoint_dir, tmp_path):
    model = hub.model
    # HF holds one head, with inner_dim == hidden_size: our "sentiment" head qualifies.
    hf_dir = export_hf(tmp_path / "hf", model, hub.tokenizer)
    fairseq_dir = export_fairseq(tmp_path / "fairseq", model, hub.tokenizer)
    seqs = hub.encode_batch(TEXTS)
    expected = hub.extract_features(seqs)
    for path, head in ((checkpoint_dir, "sentiment"), (hf_dir, "sentiment"), (fairseq_dir, "sentiment")):
        loaded = roberta.load(path)
        assert not loaded.training
        assert [s.tolist() for s in loaded.encode_batch(TEXTS)] == [s.tolist() for s in seqs]
        for a, b in zip(loaded.extract_features(seqs), expected):
            assert (a - b).abs().max() <= 1e-5
        assert (loaded.predict(head, seqs) - hub.predict("sentiment", seqs)).abs().max() <= 1e-5
        assert loaded.fill_mask("The capital of Italy is <mask>.", topk=1)[0][2] == " Rome"
    from_dir = Roberta.from_pretrained(fairseq_dir, checkpoint_file="model.pt")
    assert (from_dir.extract_features(seqs[0])[0] - expected[0]).abs().max() <= 1e-5
    assert (
        Roberta.from_pretrained(checkpoint_dir).fill_mask("The capital of France is <mask>.")[0][2]
        == " Paris"
    )


def test_bad_inputs_are_clear_user_errors(hub, checkpoint_dir):
    with pytest.raises(UserError, match="exactly one <mask>.*found 0"):
        hub.fill_mask("no mask here")
    with pytest.raises(UserError, match="exactly one <mask>.*found 2"):
        hub.fill_mask(["fine <mask>.", "<mask> and <mask>"])
    seq = hub.encode("Hello")
    with pytest.raises(UserError, match="unknown head 'nope'.*sentiment"):
        hub.predict("nope", seq)
    with pytest.raises(UserError, match="unknown head 'nope'"):
        hub.predict("nope", [seq, seq])
    long = "word " * 100
    with pytest.raises(UserError, match="103 tokens is longer than the model's 64 positions"):
        hub.encode(long)
    with pytest.raises(UserError, match="longer than the model's 64"):
        hub.encode_batch(["short", long])
    with pytest.raises(UserError, match="longer than the model's 64"):
        hub.fill_mask(long + "<mask>")
    with pytest.warns(UserWarning, match="truncated 1 text"):
        cut = hub.encode(long, truncate=True)
    assert len(cut) == 64 and cut[-1] == hub.tokenizer.eos_id
    with pytest.warns(UserWarning):
        pair = hub.encode(long, "world", truncate=True)
    assert len(pair) == 64 and pair[-3:].tolist() == [
        2,
        8331,
        2,
    ]  # the short text survives, the long one is cut
    with pytest.raises(UserError, match="layer 5 out of range"):
        hub.embed([seq], layer=5)
    with pytest.raises(UserError, match="pool 'max' unknown"):
        hub.embed([seq], pool="max")
    with pytest.raises(UserError, match="no such checkpoint file"):
        roberta.load(checkpoint_dir, checkpoint_file="checkpoint_best.pt")


def test_device_dtype_and_mode_switches(hub):
    assert hub.device == torch.device("cpu")
    copy = Roberta(copy_module(hub.model), hub.tokenizer)
    assert copy.train().training and not copy.eval().training
    assert copy.to("cpu") is copy
    features = copy.bfloat16().extract_features(hub.encode("Hello world!"))
    assert features.dtype == torch.bfloat16
    assert (features.float() - hub.extract_features(hub.encode("Hello world!"))).abs().max() < 0.1


def test_embed_file_streams_in_chunks(hub, tmp_path):
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    embed_file(hub, tmp_path / "texts.txt", tmp_path / "one.npy", pool="mean", progress=False)
    embed_file(
        hub, tmp_path / "texts.txt", tmp_path / "chunked.npy", pool="mean", chunk_lines=2, progress=False
    )
    one, chunked = np.load(tmp_path / "one.npy"), np.load(tmp_path / "chunked.npy")
    assert one.shape == (len(TEXTS), MICRO.hidden_size) and one.dtype == np.float32
    np.testing.assert_allclose(one, chunked, atol=1e-5)
    np.testing.assert_allclose(one, hub.embed(hub.encode_batch(TEXTS), pool="mean").numpy(), atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chunked.npy", "one.npy", "texts.txt"]


def embed_cli(ckpt: str, texts: Path, out: Path, *extra: str) -> int:
    return cli.main(["embed", ckpt, "--input", str(texts), "--out", str(out), *extra, "--no-progress"])


def predict_cli(ckpt: str, head: str, tsv: Path, preds: Path, *extra: str) -> int:
    return cli.main(
        ["predict", ckpt, "--head", head, "--input", str(tsv), "--out", str(preds), *extra, "--no-progress"]
    )


def test_cli_fill_mask_embed_predict_end_to_end(hub, checkpoint_dir, tmp_path, capsys):
    ckpt = str(checkpoint_dir)
    assert cli.main(["fill-mask", ckpt, "The capital of France is <mask>.", "--topk", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].endswith("\t' Paris'\tThe capital of France is Paris.")

    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "vectors.npy"
    assert embed_cli(ckpt, texts, out, "--layer", "-1", "--pool", "cls", "--batch-tokens", "64") == 0
    np.testing.assert_allclose(np.load(out), hub.embed(hub.encode_batch(TEXTS)).numpy(), atol=1e-5)

    rows = [("id", "sentence1", "sentence2"), ("a", "Hello", "world"), ("b", TEXTS[1], TEXTS[4])]
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join("\t".join(r) + "\n" for r in rows))
    preds = tmp_path / "preds.tsv"
    assert predict_cli(ckpt, "sentiment", tsv, preds, "--columns", "sentence1,sentence2") == 0
    header, *body = [line.split("\t") for line in preds.read_text().splitlines()]
    assert header == ["label", "p0", "p1", "p2"] and len(body) == 2
    expected = hub.predict(
        "sentiment", hub.encode_batch([r[1] for r in rows[1:]], [r[2] for r in rows[1:]])
    ).exp()
    for row, probs in zip(body, expected):
        assert int(row[0]) == int(probs.argmax())
        np.testing.assert_allclose([float(p) for p in row[1:]], probs.numpy(), atol=1e-5)
    capsys.readouterr()


def test_cli_errors_name_file_and_line_and_write_nothing(checkpoint_dir, tmp_path, capsys):
    ckpt = str(checkpoint_dir)
    texts = tmp_path / "texts.txt"
    texts.write_text("fine\nalso fine\n" + "word " * 100 + "\n")
    out = tmp_path / "vectors.npy"
    assert embed_cli(ckpt, texts, out) == 2
    assert f"{texts}:3: text of 103 tokens is longer" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["texts.txt"]
    assert embed_cli(ckpt, texts, out, "--truncate") == 0
    assert "roberta: warning: truncated 1 text(s) to the model's" in capsys.readouterr().err
    assert np.load(out).shape == (3, MICRO.hidden_size)

    tsv = tmp_path / "rows.tsv"
    tsv.write_text("a\tb\nonly-one-column\n")
    preds = tmp_path / "preds.tsv"
    assert predict_cli(ckpt, "sentiment", tsv, preds, "--columns", "0,1") == 2
    assert f"{tsv}:2: 1 column(s), but column 1 holds text" in capsys.readouterr().err
    assert predict_cli(ckpt, "nope", tsv, preds) == 2
    assert "unknown head 'nope'" in capsys.readouterr().err
    assert cli.main(["fill-mask", ckpt, "no mask"]) == 2
    assert "exactly one <mask>" in capsys.readouterr().err
    assert not preds.exists()


@pytest.fixture(scope="module")
def qa_hub(shared_data) -> Roberta:
    """130 positions, so a 128-token window, and an untrained span head: its spans are arbitrary, well
    formed."""
    torch.manual_seed(0)
    config = dataclasses.replace(MICRO, max_positions=130)
    hub = Roberta(RobertaModel(config), load_tokenizer(shared_data / "gpt2_bpe")).eval()
    hub.model.add_head("squad", SpanHead(config))
    return hub


def test_answer_windows_follow_the_model():
    assert answer_windows(512) == (384, 128, 64)  # the paper's window, HF's stride and question length
    assert answer_windows(128) == (128, 42, 32)
    assert answer_windows(10) == (10, 3, 2)
    with pytest.raises(UserError, match="the model's 9 positions are too few"):
        answer_windows(9)


def test_answer_reads_a_long_context_on_a_130_position_model(qa_hub):
    context = " ".join(f"Item {k} is in box {k % 7}." for k in range(60))  # ~480 tokens: several windows
    spans = qa_hub.answer("Which box holds item 41?", context, topk=25)
    assert len(spans) == 25  # more than decoding's default 20 candidates
    assert [s for _, s, _ in spans] == sorted((s for _, s, _ in spans), reverse=True)
    assert all(text and context[start : start + len(text)] == text for text, _, start in spans)
    assert {start for _, _, start in spans if start > len(context) // 2}  # later windows are read too


def test_answer_takes_one_question_or_a_list(qa_hub):
    questions, context = (
        ("Who went home?", "Where did Bob go?", "When?"),
        "Bob went home after the game on Sunday.",
    )
    alone = [qa_hub.answer(q, context, topk=2) for q in questions]
    for together in (
        qa_hub.answer(list(questions), context, topk=2),
        qa_hub.answer(questions, [context] * 3, topk=2),
    ):
        assert len(together) == 3
        for got, expected in zip(together, alone):
            assert [(t, at) for t, _, at in got] == [(t, at) for t, _, at in expected]
            assert [s for _, s, _ in got] == pytest.approx([s for _, s, _ in expected], abs=1e-4)
    # A context of only whitespace has no span, alone or among others.
    assert qa_hub.answer("Who?", " \n\t ") == []
    blank, full = qa_hub.answer(["Who?", "Who?"], [" ", context])
    ((text, _, start),) = qa_hub.answer("Who?", context)
    assert blank == [] and [(t, at) for t, _, at in full] == [(text, start)]
