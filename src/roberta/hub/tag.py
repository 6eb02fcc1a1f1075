"""Token tagging on the hub: `tag(text)`, a text's entities with their type, score and character
offsets, grouped from sub-tokens as HF's token-classification pipeline does with
`aggregation_strategy="simple"` (`tagging.predict.group_entities`)."""

from __future__ import annotations

from collections.abc import Sequence

from roberta.errors import UserError
from roberta.tagging.predict import tag_texts


def tagging_head(hub, name: str | None) -> str:
    """The tagging head `name`, or the model's one tagging head when `name` is None (UserError:
    none, several, or `name` of another kind)."""
    if name is not None:
        hub.head(name, "tagging")
        return name
    names = [n for n, head in hub.model.heads.items() if head.kind == "tagging"]
    if len(names) != 1:
        found = ", ".join(names) or "none"
        raise UserError(f"tag: name the tagging head (the model's tagging heads: {found})")
    return names[0]


def tag(hub, text: str | Sequence[str], name: str | None = None) -> list:
    """Entities [{"type", "text", "start", "end", "score"}] of a text, in order (a list of texts:
    one such list each, run batched by length). `start`/`end` index the text's characters; a text
    longer than the model's positions is read whole, in overlapping windows."""
    texts = [text] if isinstance(text, str) else text
    if not isinstance(texts, (list, tuple)):
        raise UserError(f"text: expected a string or a list of strings, got {type(text).__name__}")
    if not texts:
        raise UserError("text: an empty list")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise UserError(f"text[{i}]: expected a string, got {type(t).__name__}")
    head = tagging_head(hub, name)
    found = tag_texts(hub.model, hub.tokenizer, head, list(texts), hub.batch_tokens)
    return found[0] if isinstance(text, str) else found
