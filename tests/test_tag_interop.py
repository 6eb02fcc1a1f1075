"""Tagging beyond the checkpoint: `convert --to hf` gives a RobertaForTokenClassification whose HF
pipeline (aggregation_strategy="simple") returns our `tag()`'s entities; `export --to onnx` gives a
token-classification directory that Optimum and transformers.js load with our logits; `serve`
answers /tag as the hub does."""

import json
from pathlib import Path

import pytest
import torch

from roberta import Roberta, checkpoint
from roberta.cli import main
from roberta.runtime.batching import pad
from roberta.runtime.onnx_model import load_onnx
from serve_fixtures import Running, call, fetch
from tag_fixtures import tagger_hub
from test_onnx_interop import close, optimum, transformers_js

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]
TEXTS = [
    "EU rejects German call to boycott British lamb.",
    "Peter Blackburn flew from Zürich to BRUSSELS on 1996-08-22 (a Thursday), naïvely.",
    "x",
]


@pytest.fixture(scope="module")
def saved(shared_data, tmp_path_factory) -> tuple[Roberta, Path]:
    """The tagging micro model and its checkpoint directory."""
    hub = tagger_hub(shared_data)
    return hub, checkpoint.save(tmp_path_factory.mktemp("tagger") / "ckpt", hub.model, hub.tokenizer)


def test_hf_pipeline_on_the_converted_model_returns_our_entities(saved, tmp_path):
    import transformers

    hub, ckpt = saved
    assert main(["convert", str(ckpt), "--to", "hf", str(tmp_path / "hf")]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["RobertaForTokenClassification"]
    assert list(config["id2label"].values()) == list(hub.model.heads["ner"].labels)
    model = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path / "hf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    pipe = transformers.pipeline(
        "token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple"
    )
    theirs, ours = pipe(TEXTS), hub.tag(TEXTS)
    assert sum(map(len, ours)) >= 10  # many entities, multi-token ones among them
    assert any(len(hub.tokenizer.tokenize_ids(e["text"])) > 1 for found in ours for e in found)
    for mine, found in zip(ours, theirs):
        assert [(e["type"], e["start"], e["end"]) for e in mine] == [
            (e["entity_group"], e["start"], e["end"]) for e in found
        ]
        assert [e["score"] for e in mine] == pytest.approx([float(e["score"]) for e in found], abs=1e-5)
        assert [e["text"] for e in mine] == [e["word"].strip() for e in found]
    # And back: the HF directory loads as our model, with its labels, tagging as the original.
    assert same_entities(Roberta(*checkpoint_or_hf(tmp_path / "hf")).eval().tag(TEXTS), ours)


def same_entities(ours: list, theirs: list, tolerance: float = 1e-5) -> bool:
    """Two texts' (or lists of texts') entities: the same types, texts and offsets, scores within
    `tolerance`."""
    if ours and isinstance(ours[0], list):
        return len(ours) == len(theirs) and all(same_entities(a, b, tolerance) for a, b in zip(ours, theirs))
    fields = [(e["type"], e["text"], e["start"], e["end"]) for e in ours]
    return fields == [(e["type"], e["text"], e["start"], e["end"]) for e in theirs] and all(
        abs(a["score"] - b["score"]) <= tolerance for a, b in zip(ours, theirs)
    )


def checkpoint_or_hf(path: Path):
    from roberta.convert import load_any

    return load_any(path)


@pytest.fixture(scope="module")
def exported(saved, tmp_path_factory) -> Path:
    _, ckpt = saved
    out = tmp_path_factory.mktemp("tag-onnx") / "onnx"
    assert main(["export", str(ckpt), "--to", "onnx", str(out)]) == 0
    return out


def test_onnx_export_loads_in_optimum_and_transformers_js_with_our_logits(saved, exported):
    hub, _ = saved
    ids = pad(hub.encode_batch(TEXTS), hub.tokenizer.pad_id)
    real = ids.ne(hub.tokenizer.pad_id)
    with torch.inference_mode():
        logits = hub.model.head_outputs("ner", ids)
    (found,) = optimum(exported, [{"dir": "ner", "class": "ORTModelForTokenClassification", "texts": TEXTS}])
    assert found["input_ids"] == ids.tolist()
    assert close(torch.tensor(found["logits"])[real], logits[real])

    labels = hub.model.heads["ner"].labels
    tokens = transformers_js(exported, "ner", "token-classification", TEXTS[:2], ignore_labels=[])
    for row, found in enumerate(tokens):
        probabilities = logits[row].softmax(-1)
        assert [t["index"] for t in found] == list(range(1, int(real[row].sum()) - 1))  # every token
        assert [t["entity"] for t in found] == [
            labels[int(probabilities[t["index"]].argmax())] for t in found
        ]
        assert close(
            [t["score"] for t in found], torch.stack([probabilities[t["index"]].max() for t in found])
        )

    onnx_hub = Roberta(*load_onnx(exported)).eval()
    for mine, theirs in zip(hub.tag(TEXTS), onnx_hub.tag(TEXTS)):
        assert [(e["type"], e["start"], e["end"]) for e in mine] == [
            (e["type"], e["start"], e["end"]) for e in theirs
        ]
        assert [e["score"] for e in mine] == pytest.approx([e["score"] for e in theirs], abs=1e-4)


def test_serve_answers_tag_as_the_hub_does(saved):
    hub, _ = saved
    running = Running(hub, max_items=4, max_request_tokens=400)
    try:
        status, answer = call(running.url + "/tag", {"text": TEXTS})
        assert status == 200 and answer["head"] == "ner"
        assert same_entities(answer["entities"], hub.tag(TEXTS))
        long = " ".join(["Peter went to Brussels."] * 40)  # ~200 tokens: read whole, in windows
        status, answer = call(running.url + "/tag", {"text": long, "head": "ner"})
        assert status == 200 and same_entities(answer["entities"], [hub.tag(long)])
        assert max(e["end"] for e in answer["entities"][0]) > len(long) - 30
        status, answer = call(running.url + "/tag", {"text": ["a"] * 5})
        assert status == 413 and "--max-items" in answer["error"]
        status, answer = call(running.url + "/tag", {"text": " ".join(["Peter"] * 500)})
        assert status == 413 and "--max-request-tokens" in answer["error"]
        status, answer = call(running.url + "/tag", {"text": "a", "head": "nope"})
        assert status == 400 and "nope" in answer["error"]
        status, document = call(running.url + "/openapi.json")
        assert "/tag" in document["paths"] and "post" in document["paths"]["/tag"]
        _, _, metrics = fetch(running.url + "/metrics")
        assert 'endpoint="/tag"' in metrics.decode()
        _, _, page = fetch(running.url + "/")
        assert 'id="tag"' in page.decode() and '"/tag"' in page.decode()
    finally:
        running.stop()
