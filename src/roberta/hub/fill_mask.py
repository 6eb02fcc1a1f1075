"""fairseq's fill-mask on the hub: the fillings of a text's one `<mask>` and the logits they rank."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from roberta.checkpoint import require_lm_head
from roberta.errors import UserError
from roberta.hub.inputs import quote
from roberta.tokenizer import Tokenizer

if TYPE_CHECKING:
    from roberta.hub.interface import Roberta

MASK = "<mask>"


def fill_mask(hub: Roberta, masked_input: str | Sequence[str], topk: int = 5):
    """`Roberta.fill_mask`'s work; its docstring says what it takes and gives."""
    check_fill_mask(hub, topk)
    texts = [masked_input] if isinstance(masked_input, str) else list(masked_input)

    def run(batch: torch.Tensor, _: list[int]) -> list[tuple[list[float], list[int]]]:
        values, indices = logits_at_mask(hub, batch).softmax(dim=-1).topk(topk, dim=-1)
        return list(zip(values.tolist(), indices.tolist()))

    found = hub._batched([hub.encode_masked(text) for text in texts], run)
    results = [fillings(hub.tokenizer, text, *best) for text, best in zip(texts, found)]
    return results[0] if isinstance(masked_input, str) else results


def check_fill_mask(hub: Roberta, topk: int) -> None:
    """`fill_mask`'s model and `topk`, checked before any text is read (UserError)."""
    require_lm_head(hub.model, "fill_mask")
    vocab = hub.model.config.vocab_size
    if hub.tokenizer.vocab_size != vocab:
        # The LM would rank ids the tokenizer cannot spell, or never predict some it can.
        raise UserError(
            f"the tokenizer has {hub.tokenizer.vocab_size} tokens but the model's output layer "
            f"{vocab}: they were not trained together"
        )
    if type(topk) is not int or not 1 <= topk <= vocab:
        raise UserError(f"topk {topk!r} out of range: give 1..{vocab} (the model's vocabulary size)")


def mask_logits(hub: Roberta, masked_input: str | Sequence[str]) -> torch.Tensor:
    """The vocabulary logits (float32) that `fill_mask` ranks, at the one `<mask>` of a text:
    [V] for a text, [N, V] for a list of texts (batched by length, in input order)."""
    require_lm_head(hub.model, "mask_logits")
    texts = [masked_input] if isinstance(masked_input, str) else list(masked_input)
    logits = torch.stack(
        hub._batched(
            [hub.encode_masked(text) for text in texts], lambda batch, _: list(logits_at_mask(hub, batch))
        )
    )
    return logits[0] if isinstance(masked_input, str) else logits


def logits_at_mask(hub: Roberta, batch: torch.Tensor) -> torch.Tensor:
    # One <mask> per row, so the rows come out one per sequence, in order.
    return hub.model.mask_logits(batch, hub.tokenizer.mask_id).float()


def masked_ids(t: Tokenizer, text: str, max_seq_len: int) -> list[int]:
    """`<s> before <mask> after </s>`, each side right-stripped and encoded on its own (fairseq)."""
    count = text.count(MASK)
    if count != 1:
        raise UserError(f"fill_mask needs exactly one {MASK} in the text, found {count}: {quote(text)}")
    before, after = text.split(MASK)
    ids = [t.bos_id, *t.tokenize_ids(before.rstrip()), t.mask_id, *t.tokenize_ids(after.rstrip()), t.eos_id]
    if len(ids) > max_seq_len:
        raise UserError(
            f"fill_mask text of {len(ids)} tokens is longer than the model's {max_seq_len} "
            f"positions: {quote(text)}"
        )
    return ids


def fillings(t: Tokenizer, text: str, scores: list[float], ids: list[int]) -> list[tuple[str, float, str]]:
    """Each filling of the `<mask>` in `text`: (the filled text, its probability, the token)."""
    specials = {t.bos_id, t.pad_id, t.eos_id, t.unk_id, t.mask_id}
    # A byte-level token carries its leading space ('Ġ'), so it takes the space before <mask> too.
    byte_level = t.kind in ("gpt2", "hf")
    target = " " + MASK if byte_level and " " + MASK in text else MASK
    out = []
    for score, i in zip(scores, ids):
        token = t.id_to_token(i) if i in specials else t.decode([i])
        out.append((text.replace(target, token), score, token))
    return out
