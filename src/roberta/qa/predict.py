"""A fine-tuned model's answers over SQuAD windows: the span head's logits, batched, decoded."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from roberta.qa.decode import Decoded, decode
from roberta.qa.examples import SquadExample
from roberta.qa.windows import SquadWindow
from roberta.runtime.batching import cut, pad


def window_logits(model, name: str, hidden, tokens, pad_id: int):
    """Start and end logits [B, T] of the span head `name` on `hidden` in float32, padding at
    the lowest value (`padding_lowest`)."""
    return padding_lowest(model.classify(name, hidden), tokens, pad_id)


def padding_lowest(logits, tokens, pad_id: int):
    """A span head's (start, end) logits [B, T] in float32, padding pushed to the lowest value so
    that it is never a training target's rival nor a decoded span."""
    start, end = (x.float() for x in logits)
    padding = tokens.eq(pad_id)
    low = torch.finfo(torch.float32).min
    return start.masked_fill(padding, low), end.masked_fill(padding, low)


def predict_windows(
    model,
    head: str,
    version: str,
    examples: Sequence[SquadExample],
    windows: Sequence[SquadWindow],
    pad_id: int,
    batch_size: int = 32,
    n_best: int = 20,
) -> Decoded:
    """Decoded answers of the span head `head` of a fine-tuned model (on its own device) for
    windows made with train=False, up to `n_best` spans per question."""
    device = model.device
    width = max(len(w.tokens) for w in windows)
    starts, ends = [], []
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for rows in cut(np.arange(len(windows)), batch_size):
            tokens = pad([windows[w].tokens for w in rows], pad_id, width).to(device)
            start, end = padding_lowest(model.head_outputs(head, tokens), tokens, pad_id)
            starts.append(start.float().cpu().numpy())  # fp32 under bf16 autocast too
            ends.append(end.float().cpu().numpy())
    model.train(was_training)
    return decode(examples, windows, np.concatenate(starts), np.concatenate(ends), n_best, version=version)
