"""Token tagging on the hub: `tag(text)`, a text's entities with their type, score and character
offsets, grouped from sub-tokens as HF's token-classification pipeline does with
`aggregation_strategy="simple"` (`tagging.predict.group_entities`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from roberta.errors import UserError
from roberta.io import atomic_write
from roberta.runtime.precision import autocast
from roberta.tagging.predict import tag_texts, tag_words


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
    with autocast(hub.precision, hub.device):
        found = tag_texts(hub.model, hub.tokenizer, head, list(texts), hub.batch_tokens)
    return found[0] if isinstance(text, str) else found


def tag_file(hub, input: str | Path, out: str | Path, head: str | None = None, word_column: int = 0) -> int:
    """Tags for every sentence of `input` (a CoNLL file, words in `word_column`, or .jsonl /
    .parquet / .arrow rows of `tokens`) into `out`: JSONL rows {"tokens", "tags"} where `out` ends
    in .jsonl, else CoNLL lines "word<TAB>tag" with a blank line after each sentence (what
    `roberta evaluate tag` reads). Written under a temporary name, then renamed; the count of
    sentences."""
    from roberta.tasks.tag_data import TagColumns, read_tagged

    name = tagging_head(hub, head)
    sentences = read_tagged(input, TagColumns(word_column=word_column), tagged=False)
    with autocast(hub.precision, hub.device):
        tags = tag_words(hub.model, hub.tokenizer, name, [s.words for s in sentences], hub.batch_tokens)
    jsonl = Path(out).suffix.lower() == ".jsonl"
    with atomic_write(out) as f:
        for sentence, row in zip(sentences, tags):
            if jsonl:
                f.write(json.dumps({"tokens": list(sentence.words), "tags": row}, ensure_ascii=False) + "\n")
            else:
                f.write("".join(f"{word}\t{tag}\n" for word, tag in zip(sentence.words, row)) + "\n")
    return len(sentences)
