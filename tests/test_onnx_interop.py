"""An ONNX export loads in the HF ecosystem's own libraries, offline, and gives our numbers:
Optimum's ORTModelFor* and sentence-transformers' ONNX backend (in .venv-optimum: optimum-onnx
pins a transformers older than ours) and transformers.js under Node (tests/interop/js).
`make install` installs both; where either is missing the tests skip, and fail under CI."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from roberta import Roberta
from roberta.convert.hf import write_hf_tokenizer
from roberta.runtime.batching import pad
from roberta.runtime.onnx_model import graph_file, graph_inputs, load_onnx, run_graph, session
from roberta.tokenizer.training import train_wordpiece
from serve_fixtures import serving_hub
from test_onnx_export import FILL, embedding_export

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
INTEROP = Path(__file__).resolve().parent / "interop"
OPTIMUM_PYTHON = ROOT / ".venv-optimum" / "bin" / "python"
TRANSFORMERS_JS = INTEROP / "js" / "node_modules" / "@huggingface" / "transformers"
TEXTS = ["Hello world!", "A somewhat longer sentence, with a comma and more words in it."]


def require(path: Path, what: str) -> None:
    if not path.exists():
        message = f"{what} not installed ({path} missing): make install"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def export(shared_data, tmp_path_factory):
    """(our hub with every kind of head, its export with --int8)."""
    root = tmp_path_factory.mktemp("interop")
    hub, out = embedding_export(serving_hub(shared_data), root, "--int8")
    return hub, out


def optimum(out: Path, jobs: list[dict]) -> list[dict]:
    """tests/interop/optimum_run.py's outputs for `jobs`, run in .venv-optimum on `out`'s directories."""
    require(OPTIMUM_PYTHON, "Optimum (.venv-optimum)")
    done = subprocess.run(
        [str(OPTIMUM_PYTHON), str(INTEROP / "optimum_run.py"), json.dumps(jobs)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def transformers_js(root: Path, name: str, task: str, inputs, **options):
    """tests/interop/js/pipeline.mjs's output: transformers.js on `root`/`name`."""
    require(TRANSFORMERS_JS, "transformers.js (tests/interop/js/node_modules)")
    done = subprocess.run(
        ["node", str(INTEROP / "js" / "pipeline.mjs"), str(root), name, task, json.dumps(inputs)]
        + [json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def close(theirs, ours: torch.Tensor, tolerance: float = 1e-4) -> bool:
    return float((torch.as_tensor(theirs) - ours).abs().max()) <= tolerance


def test_optimum_and_sentence_transformers_load_each_task_and_give_our_outputs(export):
    hub, out = export
    model = hub.model
    jobs = [
        {"dir": "feature-extraction", "class": "ORTModelForFeatureExtraction"},
        {"dir": "fill-mask", "class": "ORTModelForMaskedLM", "texts": [FILL, TEXTS[1]]},
        {"dir": "topic", "class": "ORTModelForSequenceClassification"},
        {"dir": "sentiment", "class": "ORTModelForSequenceClassification"},
        {"dir": "squad", "class": "ORTModelForQuestionAnswering"},
        {"dir": "embedding", "class": "SentenceTransformer"},
        {
            "dir": "topic",
            "class": "ORTModelForSequenceClassification",
            "options": {"file_name": "model_quantized.onnx"},
        },
    ]
    jobs = [{"texts": TEXTS, **job} for job in jobs]
    results = optimum(out, jobs)
    for job, found in zip(jobs, results):
        if job["class"] == "SentenceTransformer":
            assert close(found["sentence_embedding"], hub.embed(hub.encode_batch(job["texts"]))), job
            continue
        masked = [hub.encode_masked(t) if "<mask>" in t else hub.encode(t) for t in job["texts"]]
        ids = pad(masked, hub.tokenizer.pad_id)
        assert found["input_ids"] == ids.tolist(), job  # HF's tokenizer reads our files as we do
        real = ids.ne(hub.tokenizer.pad_id)
        with torch.inference_mode():
            hidden = model(ids).last_hidden_state
            if job["class"] == "ORTModelForFeatureExtraction":
                assert close(torch.tensor(found["last_hidden_state"])[real], hidden[real]), job
            elif job["class"] == "ORTModelForMaskedLM":
                assert close(torch.tensor(found["logits"])[real], model.lm_logits(hidden, real)), job
            elif job["class"] == "ORTModelForQuestionAnswering":
                start, end = model.head_outputs(job["dir"], ids)
                assert close(torch.tensor(found["start_logits"])[real], start[real]), job
                assert close(torch.tensor(found["end_logits"])[real], end[real]), job
            elif "options" in job:
                # The int8 graph as onnxruntime runs it here on the same batch: dynamic quantization
                # scales each activation by its batch's range, so only the same batch compares.
                graph = session(out / job["dir"] / graph_file(int8=True), 1)
                int8 = run_graph(graph, graph_inputs(ids, hub.tokenizer.pad_id), ["logits"])[0]
                assert close(found["logits"], int8), job
            else:
                assert close(found["logits"], model.head_outputs(job["dir"], ids)), job


def test_transformers_js_pipelines_give_our_fillings_vectors_and_labels(export):
    hub, out = export
    fillings = transformers_js(out, "fill-mask", "fill-mask", [FILL], top_k=3)[0]
    ours = hub.fill_mask(FILL, topk=3)
    assert [f["token_str"] for f in fillings] == [token for _, _, token in ours]
    assert close([f["score"] for f in fillings], torch.tensor([p for _, p, _ in ours]))
    quantized = transformers_js(out, "fill-mask", "fill-mask", [FILL], top_k=1, dtype="q8")
    assert quantized[0][0]["token_str"] == Roberta(*load_onnx(out, int8=True)).fill_mask(FILL, 1)[0][2]
    # (The hub's own vectors are its embedding head's, mean-pooled: `<s>`'s are the encoder's alone.)
    vectors = transformers_js(out, "feature-extraction", "feature-extraction", TEXTS, pooling="cls")
    assert close(vectors, hub.embed(hub.encode_batch(TEXTS), pool="cls"))
    labels = transformers_js(out, "topic", "text-classification", TEXTS)
    probabilities = hub.predict("topic", hub.encode_batch(TEXTS)).exp()
    names = hub.model.heads["topic"].labels
    assert [p["label"] for p in labels] == [names[i] for i in probabilities.argmax(-1)]
    assert close([p["score"] for p in labels], probabilities.max(-1).values)


def test_transformers_js_reads_our_byte_level_and_wordpiece_tokenizers(export, tmp_path):
    """tokenizer.json carries our ids: byte-level BPE (GPT-2's, with fairseq's dict.txt order) and a
    WordPiece vocabulary, specials and `<mask>` matched whole."""
    hub, out = export
    text = tmp_path / "text.txt"
    text.write_text("Héllo wörld, the quick brown fox jumps over the lazy dog.\n" * 50)
    wordpiece = train_wordpiece([text], tmp_path / "trained", 200, lowercase=True, progress=False)
    write_hf_tokenizer(tmp_path / "wordpiece", wordpiece, 64)
    for tokenizer, root, name in ((hub.tokenizer, out, "fill-mask"), (wordpiece, tmp_path, "wordpiece")):
        mask = tokenizer.id_to_token(tokenizer.mask_id)  # WordPiece's is [MASK]
        texts = [f"Hello wörld, the LAZY fox {mask}.", "quick brown dogs"]
        before, after = texts[0].split(mask)  # as fill_mask encodes a text: each side on its own
        masked = [*tokenizer.tokenize_ids(before.rstrip()), tokenizer.mask_id, *tokenizer.tokenize_ids(after)]
        expected = [[tokenizer.bos_id, *masked, tokenizer.eos_id], tokenizer.encode(texts[1])]
        assert transformers_js(root, name, "tokenize", texts) == expected, name
