"""`roberta export --to onnx`: a directory per task in HF's ONNX layout, every graph's outputs within
the printed tolerance of ours (and of HF transformers' on a right-padded batch), a failed check
writes nothing, int8 graphs with their agreement, an export in the old layout refused in one line,
and the export served through the same batcher and endpoints as the checkpoint."""

import contextlib
import copy
import io
import json
import re

import pytest
import torch

from roberta import Roberta, UserError, cli
from roberta.checkpoint import save
from roberta.convert import export_hf
from roberta.convert.onnx import export_onnx, exported, ours, sample_batch
from roberta.runtime.onnx_model import (
    PADDING_SLACK,
    graph_inputs,
    length_groups,
    load_onnx,
    run_graph,
    session,
)
from roberta.serve.server import ServeOptions, load_hub
from serve_fixtures import Running, call, serving_hub

pytestmark = pytest.mark.usefixtures("one_thread")
FILL = "The capital of France is <mask>."
TASKS = {
    "feature-extraction": "RobertaModel",
    "fill-mask": "RobertaForMaskedLM",
    "sentiment": "RobertaForSequenceClassification",
    "topic": "RobertaForSequenceClassification",
    "squad": "RobertaForQuestionAnswering",
}


@pytest.fixture(scope="module")
def hub(shared_data):
    return serving_hub(shared_data)


@pytest.fixture(scope="module")
def exported_dir(hub, tmp_path_factory):
    """The checkpoint, exported through the command line with --int8: (directory, what it printed)."""
    root = tmp_path_factory.mktemp("onnx")
    ckpt = save(root / "ckpt", hub.model, hub.tokenizer)
    out = root / "onnx"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["export", str(ckpt), "--to", "onnx", str(out), "--int8"]) == 0
    return out, printed.getvalue()


def test_each_task_is_a_directory_in_hfs_onnx_layout(exported_dir):
    out, printed = exported_dir
    assert sorted(p.name for p in out.iterdir()) == sorted([*TASKS, "onnx.json"])
    for task, architecture in TASKS.items():
        config = json.loads((out / task / "config.json").read_text())
        assert config["architectures"] == [architecture] and config["model_type"] == "roberta"
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json"):
            assert (out / task / name).is_file(), (task, name)
        graph = session(out / task / "onnx" / "model.onnx", 1)
        assert [(i.name, i.type, i.shape) for i in graph.get_inputs()] == [
            (name, "tensor(int64)", ["batch", "sequence"]) for name in ("input_ids", "attention_mask")
        ]
        assert (out / task / "onnx" / "model_quantized.onnx").is_file()
    topic = json.loads((out / "topic" / "config.json").read_text())
    assert topic["id2label"] == {"0": "sport", "1": "politics"} and topic["label2id"]["politics"] == 1
    outputs = [o.name for o in session(out / "squad" / "onnx" / "model.onnx", 1).get_outputs()]
    assert outputs == ["start_logits", "end_logits"]
    assert (
        "sentiment (text-classification), topic (text-classification), squad (question-answering)" in printed
    )


def test_every_graph_is_within_the_printed_tolerance_of_ours(hub, exported_dir):
    out, printed = exported_dir
    found = re.search(r"largest \|difference\| (\S+) \(tolerance (\S+)\): (.*)", printed)
    assert found, printed
    largest, tolerance = float(found[1]), float(found[2])
    assert largest <= tolerance == 1e-4
    # Every output of every graph was compared.
    for name in (
        "feature-extraction.last_hidden_state",
        "fill-mask.logits",
        "topic.logits",
        "squad.end_logits",
    ):
        assert f"{name} " in found[3]
    tokens = sample_batch(hub.model, hub.tokenizer)
    assert tokens.eq(hub.tokenizer.pad_id).any()  # the check ran on a padded batch
    # Dynamic axes: another batch size and length than the traced one.
    other = torch.tensor(
        [hub.encode("A different length of text, longer than most of the sample.").tolist()] * 7
    )
    for batch in (tokens, other):
        theirs, mine = exported(hub.model, out, batch), ours(hub.model, batch)
        assert theirs.keys() == mine.keys()
        for name in mine:
            assert (mine[name] - theirs[name]).abs().max() <= tolerance, name


def test_a_right_padded_batch_gives_hfs_outputs(hub, exported_dir, tmp_path):
    """Position ids from the non-pad ids and attention from attention_mask, as HF's RobertaModel: the
    graphs agree with transformers on the same padded batch."""
    transformers = pytest.importorskip("transformers")
    out, _ = exported_dir
    model = copy.deepcopy(hub.model)
    model.heads.clear()  # HF holds one classification head at most: the masked LM is compared
    export_hf(tmp_path / "hf", model, hub.tokenizer)
    tokens = sample_batch(hub.model, hub.tokenizer)
    inputs = graph_inputs(tokens, hub.tokenizer.pad_id)
    real = inputs["attention_mask"].bool()
    hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        expected = hf(**inputs, output_hidden_states=True)
    logits, hidden = run_graph(session(out / "fill-mask" / "onnx" / "model.onnx", 1), inputs)
    assert (logits[real] - expected.logits[real]).abs().max() <= 1e-4
    assert (hidden[real] - expected.hidden_states[-1][real]).abs().max() <= 1e-4


def test_int8_graphs_print_their_agreement_and_stay_close(hub, exported_dir):
    out, printed = exported_dir
    assert re.search(r"int8 vs fp32 on the sample text: feature-extraction: cosine min 0\.9\d+", printed), (
        printed
    )
    assert "fill-mask: top-1 agrees on" in printed and "topic: top-1 agrees on" in printed
    int8 = Roberta(*load_onnx(out, int8=True)).eval()
    assert int8.fill_mask(FILL, topk=1)[0][2] == " Paris"


def test_a_failed_check_writes_nothing(hub, tmp_path):
    ckpt = save(tmp_path / "ckpt", hub.model, hub.tokenizer)
    with pytest.raises(UserError, match="ONNX outputs differ from ours by up to .* over the tolerance 1e-12"):
        export_onnx(ckpt, tmp_path / "out", tolerance=1e-12)
    assert not (tmp_path / "out").exists()
    with pytest.raises(UserError, match="not an ONNX export"):
        load_onnx(ckpt)


def test_an_export_in_the_old_layout_is_refused_in_one_line(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "onnx.json").write_text(json.dumps({"format": "roberta-onnx-1", "config": {}}))
    with pytest.raises(UserError, match="old layout .* export the checkpoint again") as refused:
        load_onnx(tmp_path / "old")
    assert "\n" not in str(refused.value)


def test_the_export_is_served_as_the_checkpoint_is(hub, exported_dir):
    out, _ = exported_dir
    onnx_hub = load_hub(ServeOptions(str(out), runtime="onnx"))  # as `roberta serve` loads it
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
    ids = hub.encode_batch(["Hello", "A longer one here."])
    assert onnx_hub.mask_logits([FILL, "Paris is <mask>."]) == pytest.approx(
        hub.mask_logits([FILL, "Paris is <mask>."]), abs=1e-4
    )
    with pytest.raises(UserError, match="last layer's hidden states only .* run the checkpoint"):
        onnx_hub.embed(ids, layer=1)


def test_a_batch_of_mixed_lengths_runs_in_groups_of_like_length_with_the_checkpoints_outputs(
    hub, exported_dir
):
    """onnxruntime computes every padded position, so a batch runs in groups of rows of like length;
    put back in order, the outputs are the checkpoint's."""
    out, _ = exported_dir
    onnx_hub = Roberta(*load_onnx(out)).eval()
    texts = [" ".join(["word"] * n) + "." for n in (1, 40, 3, 17, 2, 60, 5, 33, 4)]
    ids = hub.encode_batch(texts)
    lengths = [len(row) for row in ids]
    groups = length_groups(lengths)
    assert sorted(row for group in groups for row in group) == list(range(len(texts))) and len(groups) > 2
    for group in groups:
        longest, real = max(lengths[row] for row in group), sum(lengths[row] for row in group)
        assert len(group) == 1 or len(group) * longest <= (1 + PADDING_SLACK) * real
    for pool in ("cls", "mean"):
        assert onnx_hub.embed(ids, pool=pool) == pytest.approx(hub.embed(ids, pool=pool), abs=1e-4)
    assert onnx_hub.predict("topic", ids) == pytest.approx(hub.predict("topic", ids), abs=1e-4)
    features = onnx_hub.extract_features(ids)
    assert all(f == pytest.approx(e, abs=1e-4) for f, e in zip(features, hub.extract_features(ids)))


def test_a_sentence_encoders_head_is_exported_and_gives_its_vectors(hub, tmp_path):
    """The embedding head (pooling, and a map onto another width) is the `sentence_embedding` output
    of its directory's graph, beside sentence-transformers' modules: the export's default vectors
    are the checkpoint's."""
    ours_hub, out = embedding_export(hub, tmp_path)
    assert (out / "embedding" / "modules.json").is_file() and (out / "embedding" / "2_Dense").is_dir()
    exported_hub = Roberta(*load_onnx(out)).eval()
    ids = ours_hub.encode_batch(["Hello", "A longer sentence than the first one."])
    vectors = ours_hub.embed(ids)
    assert vectors.shape == (2, 48)
    assert exported_hub.embed(ids) == pytest.approx(vectors, abs=1e-4)


def embedding_export(hub, tmp_path, *options: str):
    """The serving model with a sentence encoder's head (mean pooling, a map onto 48 dimensions),
    as a hub, and its export (with `options`)."""
    from roberta.model import EmbeddingHead

    model = copy.deepcopy(hub.model)
    torch.manual_seed(0)
    model.add_head("embedding", EmbeddingHead(model.config, "mean", 48))
    ckpt = save(tmp_path / "ckpt", model, hub.tokenizer)
    assert cli.main(["export", str(ckpt), "--to", "onnx", str(tmp_path / "onnx"), *options]) == 0
    return Roberta(model, hub.tokenizer).eval(), tmp_path / "onnx"
