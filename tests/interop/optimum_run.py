"""Loads `roberta export --to onnx` task directories with Optimum (and sentence-transformers' ONNX
backend), offline, and prints their outputs as JSON. It runs in .venv-optimum (make install):
optimum-onnx pins a transformers older than ours. tests/test_onnx_interop.py compares the outputs.

    python optimum_run.py '[{"dir": ..., "class": "ORTModelForMaskedLM", "texts": [...]}, ...]'
"""

import json
import sys


def run(job: dict) -> dict:
    """The model's outputs on the texts, tokenized by the directory's own tokenizer (padded)."""
    texts = job["texts"]
    if job["class"] == "SentenceTransformer":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(job["dir"], backend="onnx", device="cpu", local_files_only=True)
        return {"sentence_embedding": model.encode(texts, convert_to_numpy=True).tolist()}
    import optimum.onnxruntime
    from transformers import AutoTokenizer

    model = getattr(optimum.onnxruntime, job["class"]).from_pretrained(
        job["dir"], local_files_only=True, **job.get("options", {})
    )
    tokenizer = AutoTokenizer.from_pretrained(job["dir"], local_files_only=True)
    inputs = tokenizer(texts, padding=True, return_tensors="pt")
    outputs = model(**inputs)
    found = {"input_ids": inputs["input_ids"].tolist()}
    for name in ("last_hidden_state", "logits", "start_logits", "end_logits"):
        if name in outputs:
            found[name] = outputs[name].tolist()
    return found


if __name__ == "__main__":
    print(json.dumps([run(job) for job in json.loads(sys.argv[1])]))
