"""Windows over SQuAD contexts: `<s> question </s></s> context-window </s>`, each context token
mapped back to its characters through the tokenizer's offsets, so that a token span is a span of
the original context (byte-level BPE spaces, newlines and non-ASCII included). An answer that starts
or ends inside a token (about 1% of SQuAD dev: "1990" in "1990s") maps to the smallest token span
covering it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from roberta.errors import UserError
from roberta.options.finetune import SquadOptions
from roberta.qa.examples import SquadExample
from roberta.tokenizer import Tokenizer
from roberta.validation import check_value

# Tokens per window, as in BERT's run_squad.py and HF's run_qa.py (max_seq_length 384).
SQUAD_MAX_LENGTH = 384


@dataclass
class SquadWindow:
    """One model input: `<s> question </s></s> context[window] </s>`.

    Context tokens are `tokens[context_start:context_end]`; `offsets[k]` is the (start, end)
    character span in the example's context of context token k (a view shared by the windows
    of one context). `start_position`/`end_position` index `tokens`: the answer's tokens,
    or 0 (`<s>`) when the answer is not inside this window, the question is impossible, or the
    windows were made for evaluation."""

    tokens: np.ndarray  # int32 [T]
    example_index: int
    context_start: int
    offsets: np.ndarray  # int32 [context_end - context_start, 2]
    start_position: int = 0
    end_position: int = 0

    @property
    def context_end(self) -> int:
        return self.context_start + len(self.offsets)


@dataclass
class SquadFeatures:
    windows: list[SquadWindow]
    # Training questions whose answer_start does not point at their answer text, or whose
    # answer covers no token (all whitespace): skipped, never trained on.
    mismatched_ids: list[str]

    @property
    def mismatched(self) -> int:
        return len(self.mismatched_ids)


def make_windows(
    tokenizer: Tokenizer,
    examples: Sequence[SquadExample],
    max_length: int = 384,
    stride: int = 128,
    max_query: int = 64,
    *,
    train: bool,
) -> SquadFeatures:
    """Windows over each example's context, every window holding the (truncated) question.

    `stride` is the number of context tokens two consecutive windows share, as HF's `doc_stride`
    is used by its question-answering recipe (`run_qa.py` passes it as the tokenizer's overflow
    `stride`); Google's BERT `run_squad.py` instead moves each window `doc_stride` tokens on.
    Each window holds up to `max_length - len(question) - 4` context tokens.

    With `train`, each window gets the first gold answer's token positions (or `<s>` where the
    answer lies outside the window, and for impossible questions); a question whose answer
    cannot be located is skipped, counted in `mismatched_ids`, and named in a warning.
    """
    check_value(SquadOptions, "max_query", max_query, "squad")
    check_value(SquadOptions, "stride", stride, "squad")
    # HF's recipe strips leading whitespace: some SQuAD questions start with many spaces.
    questions = tokenizer.tokenize_ids_batch([e.question.lstrip() for e in examples])
    # A context is tokenized once for all its questions.
    encoded: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    windows: list[SquadWindow] = []
    mismatched: list[str] = []
    for index, (example, question) in enumerate(zip(examples, questions)):
        if example.context not in encoded:
            ids, offsets = tokenizer.tokenize_with_offsets(example.context)
            encoded[example.context] = (
                np.asarray(ids, dtype=np.int32),
                np.asarray(offsets, dtype=np.int32).reshape(-1, 2),
            )
        context_ids, offsets = encoded[example.context]
        answer = None
        if train and not example.impossible:
            answer = _answer_tokens(example, offsets)
            if answer is None:
                mismatched.append(example.id)
                continue
        prefix = [tokenizer.bos_id, *question[:max_query], tokenizer.eos_id, tokenizer.eos_id]
        windows.extend(
            _example_windows(
                index, prefix, context_ids, offsets, answer, max_length, stride, tokenizer.eos_id
            )
        )
    if mismatched:
        warnings.warn(
            f"{len(mismatched)} SQuAD question(s) skipped in training: answer_start does not match "
            f"the answer text (first: {mismatched[0]})",
            stacklevel=2,
        )
    return SquadFeatures(windows, mismatched)


def _example_windows(
    index: int,
    prefix: list[int],
    context_ids: np.ndarray,
    offsets: np.ndarray,
    answer: tuple[int, int] | None,
    max_length: int,
    stride: int,
    eos_id: int,
) -> list[SquadWindow]:
    """The windows of one question: `prefix` (`<s> question </s></s>`) and a stretch of its
    context each, the answer's token positions in those that hold it whole."""
    budget = max_length - len(prefix) - 1
    if budget <= stride:
        raise UserError(
            f"max_length={max_length} leaves {budget} context tokens per window, "
            f"not more than stride={stride}"
        )
    windows = []
    for begin, end in _window_bounds(len(context_ids), budget, stride):
        start = end_ = 0
        if answer is not None and begin <= answer[0] and answer[1] < end:
            start, end_ = answer[0] - begin + len(prefix), answer[1] - begin + len(prefix)
        tokens = np.concatenate([prefix, context_ids[begin:end], [eos_id]]).astype(np.int32)
        windows.append(SquadWindow(tokens, index, len(prefix), offsets[begin:end], start, end_))
    return windows


def _window_bounds(n: int, budget: int, stride: int) -> list[tuple[int, int]]:
    bounds = [(0, min(n, budget))]
    while bounds[-1][1] < n:
        begin = bounds[-1][1] - stride
        bounds.append((begin, min(n, begin + budget)))
    return bounds


def _answer_tokens(example: SquadExample, offsets: np.ndarray) -> tuple[int, int] | None:
    """First and last context token of the first gold answer: the smallest token span covering
    its characters; None when answer_start does not point at the text, or no token covers it."""
    text, start = example.answers[0]
    end = start + len(text)
    if example.context[start:end] != text:
        return None
    covering = np.flatnonzero(
        (offsets[:, 1] > start) & (offsets[:, 0] < end) & (offsets[:, 1] > offsets[:, 0])
    )
    if len(covering) == 0:
        return None
    return int(covering[0]), int(covering[-1])


def answer_windows(max_seq_len: int) -> tuple[int, int, int]:
    """(max_length, stride, max_query) for reading contexts with a model of `max_seq_len`
    positions: the paper's 384-token windows with HF's doc_stride 128 and 64 question tokens on
    a model that holds them; on a shorter one the window is the model's and stride and question
    shrink in proportion (a 128-token window shares 42 tokens, keeps 32 of the question), so
    that a window always brings more new context than it shares."""
    max_length = min(SQUAD_MAX_LENGTH, max_seq_len)
    stride, max_query = min(128, max_length // 3), min(64, max_length // 4)
    # The longest question leaves max_length - max_query - 4 context tokens (<s> q </s></s> ... </s>).
    if max_length - max_query - 4 <= stride:
        raise UserError(
            f"the model's {max_seq_len} positions are too few to hold a question and a context window "
            f"(at least 10 are needed)"
        )
    return max_length, stride, max_query
