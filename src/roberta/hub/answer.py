"""Extractive QA on the hub: `answer(question, context)` decoded as SQuAD dev is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from roberta.errors import UserError
from roberta.qa.examples import SquadExample
from roberta.qa.predict import predict_windows
from roberta.qa.windows import answer_windows, make_windows
from roberta.runtime.precision import autocast

if TYPE_CHECKING:
    from roberta.hub.interface import Roberta


def answer(
    hub: Roberta,
    question: str | Sequence[str],
    context: str | Sequence[str],
    topk: int = 1,
    name: str = "squad",
) -> list:
    """`Roberta.answer`'s work; its docstring says what it takes and gives."""
    questions, contexts = question_context_pairs(question, context)
    if type(topk) is not int or topk < 1:
        raise UserError(f"topk {topk!r} out of range: give 1 or more")
    hub.head(name, "span")
    max_length, stride, max_query = answer_windows(hub.max_seq_len)
    examples = [
        SquadExample(str(i), q, c, ()) for i, (q, c) in enumerate(zip(questions, contexts)) if c.strip()
    ]
    nbest = {}
    if examples:
        windows = make_windows(hub.tokenizer, examples, max_length, stride, max_query, train=False).windows
        # Decoding's usual 20 candidates (HF's n_best_size), more when more spans are asked for.
        with autocast(hub.precision, hub.device):
            nbest = predict_windows(
                hub.model, name, "1.1", examples, windows, hub.tokenizer.pad_id, n_best=max(topk, 20)
            ).nbest
    answers = [
        [(s.text, s.score, s.char_start) for s in nbest.get(str(i), [])[:topk]] for i in range(len(questions))
    ]
    return answers[0] if isinstance(question, str) else answers


def question_context_pairs(question, context) -> tuple[list[str], list[str]]:
    """`answer`'s arguments as equal lists of questions and contexts, or a UserError naming the
    argument (and the item): a string is one text, never a sequence of one-character texts."""
    if isinstance(question, str):
        if not isinstance(context, str):
            raise UserError(
                f"context: one question takes one context string, not {type(context).__name__} "
                f"(for several contexts give a list of as many questions)"
            )
        return [_text("question", question)], [_text("context", context, blank=True)]
    if not isinstance(question, (list, tuple)):
        raise UserError(f"question: expected a string or a list of strings, got {type(question).__name__}")
    if not question:
        raise UserError("question: an empty list")
    questions = [_text(f"question[{i}]", q) for i, q in enumerate(question)]
    if isinstance(context, str):
        return questions, [_text("context", context, blank=True)] * len(questions)
    if not isinstance(context, (list, tuple)):
        raise UserError(f"context: expected a string or a list of strings, got {type(context).__name__}")
    if len(context) != len(questions):
        raise UserError(
            f"context: {len(context)} contexts for {len(questions)} questions (give one per question, "
            f"or one string for all)"
        )
    return questions, [_text(f"context[{i}]", c, blank=True) for i, c in enumerate(context)]


def _text(argument: str, value, blank: bool = False) -> str:
    """A non-empty string; one of only whitespace too with `blank` (a context: it has no span)."""
    if not isinstance(value, str):
        raise UserError(f"{argument}: expected a string, got {type(value).__name__}")
    if not (value if blank else value.strip()):
        raise UserError(f"{argument}: {'empty' if not value else 'only whitespace'}")
    return value
