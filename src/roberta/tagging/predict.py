"""A tagging head run over windows: each sentence's sub-token logits (`window_logits`), its words'
labels, and a text's entities grouped from its tokens as HF's token-classification pipeline groups
them with `aggregation_strategy="simple"` (`tag_texts`).

Grouping ("simple"): every sub-token takes its most probable label (softmax over the head's
logits) with that probability as its score; consecutive tokens join one group while their types
agree and the later one is not a B- tag (a label without a B-/I- prefix counts as I-); a group's
type is its first token's without the prefix, its score the mean of its tokens' scores, its
characters from its first token's start to its last token's end (offsets in the text given, a
byte-level token's leading space excluded). Groups of type O are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from roberta.runtime.batching import length_batches, pad
from roberta.tagging.encoding import EncodedSentence, TagWindow, make_windows, sentence_rows

DEFAULT_BATCH_TOKENS = 2048


def window_logits(
    model, head: str, windows: Sequence[TagWindow], pad_id: int, batch_tokens: int = DEFAULT_BATCH_TOKENS
) -> list[np.ndarray]:
    """float32 [len(tokens), labels] logits of every window, batched by length (the layers compute
    the real tokens only), in the windows' order."""
    lengths = [len(w.tokens) for w in windows]
    found: list[np.ndarray | None] = [None] * len(windows)
    with torch.inference_mode():
        for batch in length_batches(lengths, batch_tokens):
            tokens = pad([torch.from_numpy(windows[i].tokens).long() for i in batch], pad_id)
            logits = model.head_outputs(head, tokens.to(model.device)).float().cpu().numpy()
            for row, i in enumerate(batch):
                found[i] = logits[row, : lengths[i]]
    return found


def piece_logits(
    model, head: str, sentences: Sequence[EncodedSentence], tokenizer, stride: int, batch_tokens: int
) -> list[np.ndarray]:
    """Each sentence's [N, labels] logits, its windows sized to the model's positions."""
    windows = make_windows(sentences, tokenizer.bos_id, tokenizer.eos_id, model.config.max_seq_len, stride)
    return sentence_rows(
        sentences, windows, window_logits(model, head, windows, tokenizer.pad_id, batch_tokens)
    )


def default_stride(max_seq_len: int) -> int:
    """Sub-tokens two windows share: a quarter of a window, so each brings half a window of new text."""
    return max(0, (max_seq_len - 2) // 4)


def word_labels(sentences: Sequence[EncodedSentence], logits: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Each word's label id: the argmax at its first sub-token."""
    return [rows[s.first].argmax(-1) for s, rows in zip(sentences, logits)]


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def _bi(label: str) -> tuple[str, str]:
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label


def group_entities(
    text: str, offsets: Sequence[tuple[int, int]], logits: np.ndarray, labels: Sequence[str]
) -> list[dict]:
    """A text's entities from its tokens' character `offsets` and logits: [{"type", "text",
    "start", "end", "score"}] in order (the grouping in this module's docstring)."""
    probabilities = softmax(logits.astype(np.float32))
    best = probabilities.argmax(-1)
    groups: list[list[tuple[str, float, int, int]]] = []
    for k, (start, end) in enumerate(offsets):
        label, score = labels[best[k]], float(probabilities[k, best[k]])
        bi, type_ = _bi(label)
        if groups and bi != "B" and _bi(groups[-1][-1][0])[1] == type_:
            groups[-1].append((label, score, start, end))
        else:
            groups.append([(label, score, start, end)])
    found = []
    for group in groups:
        type_ = group[0][0].split("-", 1)[-1]
        if type_ == "O":
            continue
        start, end = group[0][2], group[-1][3]
        score = float(np.mean([score for _, score, _, _ in group]))
        found.append({"type": type_, "text": text[start:end], "start": start, "end": end, "score": score})
    return found


def tag_texts(
    model, tokenizer, head: str, texts: Sequence[str], batch_tokens: int = DEFAULT_BATCH_TOKENS
) -> list[list[dict]]:
    """Each text's entities (`group_entities`), the texts batched by length together; a text
    longer than the model's positions read whole in overlapping windows."""
    labels = head_labels(model, head)
    encoded, offsets = [], []
    for text in texts:
        ids, spans = tokenizer.tokenize_with_offsets(text)
        n = len(ids)
        encoded.append(EncodedSentence(np.asarray(ids, np.int32), np.arange(n, dtype=np.int32), np.arange(n)))
        offsets.append(spans)
    present = [k for k, e in enumerate(encoded) if len(e.ids)]
    logits = piece_logits(
        model,
        head,
        [encoded[k] for k in present],
        tokenizer,
        default_stride(model.config.max_seq_len),
        batch_tokens,
    )
    found: list[list[dict]] = [[] for _ in texts]
    for k, rows in zip(present, logits):
        found[k] = group_entities(texts[k], offsets[k], rows, labels)
    return found


def tag_words(
    model, tokenizer, head: str, sentences: Sequence[Sequence[str]], batch_tokens: int = DEFAULT_BATCH_TOKENS
) -> list[list[str]]:
    """Each pre-split sentence's tags, a label per word (read at its first sub-token), the words
    encoded as fine-tuning encodes them (`encoding.encode_words`)."""
    from roberta.tagging.encoding import encode_words

    labels = head_labels(model, head)
    encoded = encode_words(tokenizer, sentences)
    logits = piece_logits(
        model, head, encoded, tokenizer, default_stride(model.config.max_seq_len), batch_tokens
    )
    return [[labels[i] for i in row] for row in word_labels(encoded, logits)]


def head_labels(model, head: str) -> list[str]:
    """A tagging head's label names: those it was trained with, else "0".."L-1"."""
    module = model.heads[head]
    return list(module.labels) or [str(i) for i in range(module.spec()["num_labels"])]
