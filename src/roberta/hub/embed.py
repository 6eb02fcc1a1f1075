"""The hub's sentence vectors: `Roberta.embed` and the checks and widths around it. A model with a
sentence-embedding head (a trained sentence encoder) gives its own vector; any other layer or
pooling asked for is computed from the hidden states."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from roberta.errors import UserError
from roberta.hub.inputs import TokenSeqs
from roberta.model import EMBEDDING_HEAD, POOLS, RobertaModel
from roberta.model import pool as pooled

if TYPE_CHECKING:
    from roberta.hub.interface import Roberta


def embed(hub: Roberta, tokens: TokenSeqs, layer: int = -1, pool: str | None = None) -> torch.Tensor:
    """`Roberta.embed`'s work; its docstring says what it takes and gives."""
    model = hub.model
    hub.check_embed(layer, pool)
    layers = model.config.num_layers + 1
    last = layer in (-1, layers - 1)
    if own_vector(model, layer, pool):
        return torch.stack(hub._batched(tokens, lambda batch, _: list(model.sentence_embedding(batch, True))))
    pool = pool or "cls"

    def run(batch: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
        out = model(
            batch, return_all_hiddens=not last, select="first" if last and pool == "cls" else None, unpad=True
        )
        hidden = out.last_hidden_state if out.hidden_states is None else out.hidden_states[layer]
        return list(pooled(hidden, batch.ne(model.config.padding_idx), pool))

    return torch.stack(hub._batched(tokens, run))


def embed_width(model: RobertaModel, layer: int = -1, pool: str | None = None) -> int:
    """The width of `embed(tokens, layer, pool)`'s vectors."""
    if own_vector(model, layer, pool):
        return model.heads[EMBEDDING_HEAD].spec().get("dim", model.config.hidden_size)
    return model.config.hidden_size


def own_vector(model: RobertaModel, layer: int, pool: str | None) -> bool:
    """Whether `embed(.., layer, pool)` is the model's own sentence vector: it has an embedding
    head, and the last layer with no other pooling is asked for."""
    own = embedding_pool(model)
    return layer in (-1, model.config.num_layers) and own is not None and pool in (None, own)


def embedding_pool(model: RobertaModel) -> str | None:
    """The pooling of the model's sentence-embedding head, None where it has none."""
    return model.heads[EMBEDDING_HEAD].pool if EMBEDDING_HEAD in model.heads else None


def check_embed(model: RobertaModel, layer: int, pool: str | None) -> None:
    """`embed`'s options: `layer` within the model's, `pool` one of POOLS (UserError)."""
    layers = model.config.num_layers + 1
    if type(layer) is not int or not -layers <= layer < layers:
        raise UserError(
            f"layer {layer!r} out of range: the model has {layers} (embeddings + {layers - 1} layers), "
            f"-{layers}..{layers - 1}"
        )
    if pool is not None and pool not in POOLS:
        raise UserError(f"pool {pool!r} unknown; choose one of {', '.join(POOLS)}")
