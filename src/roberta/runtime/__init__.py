"""How a model runs, below the trainer, the tasks and the hub that run it: `precision` picks the
dtype (the CPU's bf16/int8 units, `auto`, autocast), `batching` sorts by length and pads (the
hub's lists and fine-tuning's batches alike), `bf16` holds a model's product weights in bf16 for
inference, `int8` quantizes the Linear layers for CPU inference
and measures the agreement, `onnx_model` is an ONNX export behind the model's calls."""
