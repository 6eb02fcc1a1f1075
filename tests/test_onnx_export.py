"""`roberta export --to onnx`: every graph's outputs within the printed tolerance of ours, a failed
check writes nothing, int8 graphs with their agreement, and the export served through the same
batcher and endpoints as the checkpoint."""

import contextlib
import io
import re

import pytest
import torch

from roberta import Roberta, UserError, cli
from roberta.checkpoint import save
from roberta.onnx_export import export_onnx, outputs, sample_batch
from roberta.onnx_model import load_onnx
from serve_fixtures import Running, call, serving_hub

pytestmark = pytest.mark.usefixtures("one_thread")
FILL = "The capital of France is <mask>."


@pytest.fixture(scope="module")
def hub(shared_data):
    return serving_hub(shared_data)


@pytest.fixture(scope="module")
def exported(hub, tmp_path_factory):
    """The checkpoint, exported through the command line with --int8: (directory, what it printed)."""
    root = tmp_path_factory.mktemp("onnx")
    ckpt = save(root / "ckpt", hub.model, hub.tokenizer)
    out = root / "onnx"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["export", str(ckpt), "--to", "onnx", str(out), "--int8"]) == 0
    return out, printed.getvalue()


def test_every_graph_is_within_the_printed_tolerance_of_ours(hub, exported):
    out, printed = exported
    found = re.search(r"largest \|difference\| (\S+) \(tolerance (\S+)\): (.*)", printed)
    assert found, printed
    largest, tolerance = float(found[1]), float(found[2])
    assert largest <= tolerance == 1e-4
    # Every output was compared: each layer's hidden states, the masked LM and each head.
    for name in ("hidden_0", "hidden_2", "lm_logits", "head.sentiment", "head.topic", "head.squad"):
        assert f"{name} " in found[3]
    model, tokenizer = load_onnx(out)
    tokens = sample_batch(hub.model, hub.tokenizer)
    assert tokens.eq(tokenizer.pad_id).any()  # the check ran on a padded batch
    ours, theirs = outputs(hub.model, tokens), outputs(model, tokens)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert (ours[name] - theirs[name]).abs().max() <= tolerance, name
    # Dynamic axes: another batch size and length than the traced one.
    other = torch.tensor(
        [hub.encode("A different length of text, longer than most of the sample.").tolist()] * 7
    )
    assert (
        outputs(hub.model, other)["lm_logits"] - outputs(model, other)["lm_logits"]
    ).abs().max() <= tolerance


def test_int8_graphs_print_their_agreement_and_stay_close(hub, exported):
    out, printed = exported
    assert re.search(r"int8 vs fp32 on the sample text: embeddings: cosine min 0\.9\d+", printed), printed
    assert "masked LM: top-1 agrees on" in printed and "topic: top-1 agrees on" in printed
    int8 = Roberta(*load_onnx(out, int8=True)).eval()
    assert int8.fill_mask(FILL, topk=1)[0][2] == " Paris"


def test_a_failed_check_writes_nothing(hub, tmp_path):
    ckpt = save(tmp_path / "ckpt", hub.model, hub.tokenizer)
    with pytest.raises(UserError, match="ONNX outputs differ from ours by up to .* over the tolerance 1e-12"):
        export_onnx(ckpt, tmp_path / "out", tolerance=1e-12)
    assert not (tmp_path / "out").exists()
    with pytest.raises(UserError, match="not an ONNX export"):
        load_onnx(ckpt)


def test_the_export_is_served_as_the_checkpoint_is(hub, exported):
    out, _ = exported
    onnx_hub = Roberta(*load_onnx(out)).eval()
    running = Running(onnx_hub, runtime="onnx")
    try:
        status, answer = call(running.url + "/fill-mask", {"text": FILL, "topk": 3})
        expected = hub.fill_mask(FILL, topk=3)
        assert status == 200 and [f["token"] for f in answer["fillings"][0]] == [t for _, _, t in expected]
        status, answer = call(running.url + "/predict", {"head": "topic", "text": ["a b c", "Hello"]})
        probabilities = hub.predict("topic", hub.encode_batch(["a b c", "Hello"])).exp()
        rows = [list(p["probabilities"].values()) for p in answer["predictions"]]
        assert status == 200 and torch.tensor(rows) == pytest.approx(probabilities, abs=1e-5)
        status, answer = call(
            running.url + "/embed", {"text": ["Hello", "A longer one here."], "pool": "mean"}
        )
        expected = hub.embed(hub.encode_batch(["Hello", "A longer one here."]), pool="mean")
        assert status == 200 and torch.tensor(answer["embeddings"]) == pytest.approx(expected, abs=1e-4)
        question, context = "Who?", "Bob went home after the game."
        status, answer = call(running.url + "/answer", {"question": question, "context": context})
        assert status == 200 and answer["answers"][0]["text"] == hub.answer(question, context)[0][0]
        assert call(running.url + "/info")[1]["runtime"] == "onnx"
    finally:
        running.stop()


def test_a_sentence_encoders_head_is_exported_and_gives_its_vectors(hub, tmp_path):
    """The embedding head (pooling, and a map onto another width) is a graph of its own: the
    export's default vectors are the checkpoint's."""
    import copy

    from roberta.model import EmbeddingHead

    model = copy.deepcopy(hub.model)
    torch.manual_seed(0)
    model.add_head("embedding", EmbeddingHead(model.config, "mean", 48))
    ckpt = save(tmp_path / "ckpt", model, hub.tokenizer)
    assert cli.main(["export", str(ckpt), "--to", "onnx", str(tmp_path / "onnx")]) == 0
    ours, exported = Roberta(model, hub.tokenizer).eval(), Roberta(*load_onnx(tmp_path / "onnx")).eval()
    ids = ours.encode_batch(["Hello", "A longer sentence than the first one."])
    vectors = ours.embed(ids)
    assert vectors.shape == (2, 48)
    assert exported.embed(ids) == pytest.approx(vectors, abs=1e-4)
