"""`roberta convert`, `export` and `serve`: a checkpoint into another format, or behind HTTP."""

from __future__ import annotations

import argparse

from roberta.cli.common import Handler, add_options, options_from
from roberta.options import ConvertOptions, ExportOptions, ServeOptions


def _convert(p: argparse.ArgumentParser) -> Handler:
    """convert a checkpoint between roberta, HF transformers and fairseq formats (checked)

    Reads SRC (our checkpoint directory, an HF save_pretrained directory, or a fairseq model.pt /
    its directory), writes DST in the chosen format, then runs both models on a probe batch and
    prints the largest difference; above --tolerance nothing is written.
    """
    add_options(p, ConvertOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.convert import convert

        convert(**vars(options_from(args, ConvertOptions)))

    return run


def _serve(p: argparse.ArgumentParser) -> Handler:
    """serve a checkpoint over HTTP: JSON endpoints, dynamic batching, a web page at /

    Serves /fill-mask, /embed, /predict, /answer, /v1/embeddings (OpenAI's form), /health, /info,
    /metrics (Prometheus), /openapi.json, and a page at / to try them. Requests that arrive together
    run as length-sorted batches through the hub's calls (the same answers as one-by-one calls). A
    request asking for more than --max-items, --max-request-tokens or --max-answers gets 413 naming
    the limit. Binds to 127.0.0.1: --host 0.0.0.0 exposes the server to the network; with
    --api-key or --api-key-file every path but / and /health needs the key (401 without it).
    SIGTERM or Ctrl-C stops it after answering the requests in flight.
    """
    add_options(p, ServeOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.serve.server import serve

        serve(options_from(args, ServeOptions))

    return run


def _export(p: argparse.ArgumentParser) -> Handler:
    """export a checkpoint to ONNX for HF's loaders (a directory per task), checked against our outputs

    Writes OUT/feature-extraction/, OUT/fill-mask/ (with an LM head) and OUT/<head>/ per task head
    (text-classification, question-answering, a sentence encoder's embedding), each with config.json,
    the tokenizer and onnx/model.onnx (inputs input_ids and attention_mask, dynamic batch and
    sequence axes), and OUT/onnx.json. Every graph runs with onnxruntime on a padded batch of real
    text and the largest difference from our PyTorch outputs is printed; above --tolerance it fails
    and OUT is not written. --int8 adds onnxruntime's dynamic int8 quantization of each graph
    (onnx/model_quantized.onnx), printing its agreement with fp32. Optimum's ORTModelFor*,
    transformers.js's pipeline() and SentenceTransformer(dir, backend="onnx") load the directories
    (docs/onnx.md); `roberta serve OUT --runtime onnx` serves them.
    """
    add_options(p, ExportOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.convert.onnx import export_onnx

        options = options_from(args, ExportOptions)
        export_onnx(options.checkpoint, options.out, int8=options.int8, tolerance=options.tolerance)

    return run


VERBS = {"convert": _convert, "serve": _serve, "export": _export}
