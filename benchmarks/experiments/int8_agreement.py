"""int8 against fp32 on a fine-tuned GLUE classifier: the dev metrics of each (issue #13's goal:
int8 accuracy within 0.5 points of fp32), how many labels agree, how close the `<s>` vectors of
the last layer stay (cosine), and the size of each model's weights.

The checkpoint's head named after the task (what `roberta finetune glue` saves in RUN/best)
labels the dev file, whose inputs are cut to the model's positions as in training. fp32 runs
first; then `Roberta.quantize()` and the same inputs again. Speed is
benchmarks/embed_throughput.py's business.

    .venv/bin/python benchmarks/experiments/int8_agreement.py --checkpoint RUN/best --task SST-2 \\
        --dev ../shared/data/glue/SST-2/dev.tsv
"""

from __future__ import annotations

import argparse
import io

import torch
import torch.nn.functional as F

import roberta
from roberta.hub import DEFAULT_BATCH_TOKENS
from roberta.runtime.int8 import embedding_agreement, prediction_agreement
from roberta.tasks.classify import label_ids
from roberta.tasks.glue import get_task, metrics, read_split

GOAL_POINTS = 0.5


def weights_mb(model: torch.nn.Module) -> float:
    """The state dict's size as torch.save writes it (int8 weights are packed with their scales)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell() / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", required=True, help="fine-tuned checkpoint, e.g. RUN/best")
    parser.add_argument(
        "--task", required=True, help="GLUE task name: its dev file layout, labels and metrics"
    )
    parser.add_argument("--dev", required=True, help="labelled GLUE dev file, e.g. SST-2/dev.tsv")
    parser.add_argument("--head", help="classification head (default: the task's name)")
    parser.add_argument("--batch-tokens", type=int, default=DEFAULT_BATCH_TOKENS)
    args = parser.parse_args()

    task = get_task(args.task)
    head = args.head or task.name
    hub = roberta.load(args.checkpoint)
    hub.batch_tokens = args.batch_tokens
    examples = read_split(task, args.dev, labelled=True)
    labels = [e.label for e in examples] if task.regression else label_ids(examples, task.labels, args.dev)
    tokens = hub.tokenizer.encode_batch(
        [e.text for e in examples],
        [e.pair for e in examples] if task.pair_column else None,
        max_length=hub.max_seq_len,
    )

    def measure() -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        logits = hub.predict(head, tokens, return_logits=True).float()
        vectors = hub.embed(tokens)
        predictions = logits.squeeze(-1).tolist() if task.regression else logits.argmax(-1).tolist()
        return logits, vectors, metrics(task, predictions, labels)

    fp32_mb = weights_mb(hub.model)
    fp32_logits, fp32_vectors, fp32_metrics = measure()
    hub.quantize()
    int8_logits, int8_vectors, int8_metrics = measure()

    print(
        f"{task.name} dev: {len(examples)} examples of {args.dev}, head {head!r} of {args.checkpoint}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"engine {torch.backends.quantized.engine}"
    )
    for name in task.metrics:
        points = 100 * (int8_metrics[name] - fp32_metrics[name])
        verdict = "met" if abs(points) <= GOAL_POINTS else "NOT met"
        print(
            f"{name:10s} fp32 {100 * fp32_metrics[name]:.2f}  int8 {100 * int8_metrics[name]:.2f}  "
            f"({points:+.2f} points; goal: within {GOAL_POINTS}: {verdict})"
        )
    print(f"labels     {prediction_agreement(fp32_logits, int8_logits)}")
    cosine = F.cosine_similarity(fp32_vectors, int8_vectors, dim=-1)
    print(
        f"<s> vectors (last layer): {embedding_agreement(fp32_vectors, int8_vectors)}, "
        f"below 0.99: {int(cosine.lt(0.99).sum())} of {len(cosine)}"
    )
    print(f"weights    fp32 {fp32_mb:.0f} MB, int8 {weights_mb(hub.model):.0f} MB (embeddings stay fp32)")


if __name__ == "__main__":
    main()
