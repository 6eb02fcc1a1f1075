"""RoBERTa, top to bottom: embeddings, self-attention, encoder layer, encoder, heads.

The numerics follow fairseq's `TransformerSentenceEncoder` and HF's `modeling_roberta`:
post-LayerNorm layers, exact (erf) GELU, learned positions offset past the padding index.
The module knows nothing about devices, precision, parallelism or files.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from roberta.config import RobertaConfig
from roberta.errors import UserError
from roberta.padding import Layout, Selected, Unpadded


def make_positions(tokens: Tensor, padding_idx: int) -> Tensor:
    """Position ids counted over real tokens only, from padding_idx + 1 (fairseq's rule); padding
    keeps position padding_idx, whose embedding row is zero."""
    real = tokens.ne(padding_idx).int()
    return (torch.cumsum(real, dim=1) * real).long() + padding_idx


def dropped_positions(shape: tuple[int, ...], like: Tensor, p: float) -> tuple[Tensor, float]:
    """Where dropout with probability `p` zeroes a tensor of `shape` (booleans), and the scale of what
    it keeps. A mask drawn for a whole tensor and read at some of its rows keeps the whole tensor's
    random stream: computing fewer rows (`padding.py`) then leaves the numbers, dropout included,
    those of the full forward.

    In fp32, drawn as torch's kernel draws it (`bernoulli_`, one draw per element), so a seeded
    training step is HF's to rounding. Under CPU autocast, where the numbers are bf16's and no
    longer HF's bits anyway, from 15-bit integers: that sampler takes under a third of
    `bernoulli_`'s time, which was a fifth of a bf16 base step on a CPU with AMX."""
    if not _cpu_autocast(like):
        return like.new_empty(shape).bernoulli_(1 - p).eq(0), 1 / (1 - p)
    # Two 15-bit integers per 31-bit draw of torch's generator (the state a checkpoint saves, so a
    # run resumes exactly); a position is dropped when its integer is below round(p x 32768),
    # i.e. p is rounded to a multiple of 2^-15 (0.1 becomes 0.100006).
    count = math.prod(shape)
    drop = min(round(p * 32768), 32767)
    draws = torch.empty((count + 1) // 2, dtype=torch.int32, device=like.device).random_()  # [0, 2^31)
    # Read as int16 pairs: the low half spans [-2^15, 2^15) (two values a threshold step), the high [0, 2^15).
    thresholds = torch.tensor([2 * drop - 32768, drop], dtype=torch.int16, device=like.device)
    dropped = draws.view(torch.int16).view(-1, 2).lt(thresholds).view(-1)[:count].view(shape)
    return dropped, 32768 / (32768 - drop)


def dropout(y: Tensor, module: nn.Dropout, rows: Tensor | None = None, positions: int = 0) -> Tensor:
    """`module`'s dropout of `y`; with `rows`, `y` holds those rows of a [positions, width] tensor,
    and the mask is drawn for all of it and read at them (`dropped_positions`)."""
    if not module.training or module.p == 0:
        return y
    if rows is None and not _cpu_autocast(y):
        return module(y)  # torch's own kernel: the same draws, one pass fewer
    dropped, scale = dropped_positions((positions, y.size(-1)) if rows is not None else y.shape, y, module.p)
    return y.masked_fill(dropped[rows] if rows is not None else dropped, 0) * scale


class SelfAttention(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.head_size = config.hidden_size // config.num_heads
        self.dropout = nn.Dropout(config.attention_dropout)
        # One fused projection: a single matrix product instead of three.
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor, layout: Layout, selected: Selected | None = None) -> Tensor:
        # Keys and values everywhere; queries too (one product: int8 Linear layers cannot be sliced).
        qkv = self.qkv(x)
        unpadded = layout.unpadded
        qkv_padded = unpadded.pad(qkv) if unpadded is not None else qkv  # SDPA wants [B, heads, T, head size]
        q, k, v = self._heads(qkv_padded).chunk(3, dim=1)
        p = self.dropout.p if self.training else 0.0
        if selected is None:
            x = merge_heads(attention(q, k, v, layout.attn_mask, p))
            return self.out_proj(unpadded.unpad(x) if unpadded is not None else x)
        # The selected queries only, each sequence's in slots [B, slots].
        q = selected.rows_of(qkv)[:, : x.size(-1)]
        q_slots = q.new_zeros(*selected.query_positions.shape, q.size(-1)).index_put_(
            (selected.batch, selected.slot), q
        )
        x = merge_heads(attention(self._heads(q_slots), k, v, layout.attn_mask, p, selected.query_positions))
        return self.out_proj(x[selected.batch, selected.slot])

    def _heads(self, x: Tensor) -> Tensor:
        """[B, T, n * H] → [B, n * heads, T, head size]: n projections' heads, each projection's together."""
        return x.view(*x.shape[:2], x.size(-1) // self.head_size, self.head_size).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """[B, heads, T, head size] → [B, T, H]."""
    return x.transpose(1, 2).flatten(2)


def attention(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, p: float, query_positions: Tensor | None = None
) -> Tensor:
    """Scaled dot-product attention with dropout `p`; with `query_positions` [B, slots], `q` holds
    the queries at those positions only ([B, heads, slots, head size]).

    SDPA where its kernels can do the work. In CPU training (dropout on) with some queries only,
    or under autocast, SDPA's math kernel written out (the kernel CPU training takes anyway: no
    other CPU kernel has dropout): the mask is drawn for every query and read at the selected
    ones, so the random stream advances as the full attention's does. Written out, the products
    run in autocast's bf16 where SDPA's math kernel runs them in fp32; softmax stays fp32."""
    if p == 0 or (query_positions is None and not _cpu_autocast(q)):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
    scale = q.size(-1) ** -0.25  # the kernel scales q and k by sqrt(1 / sqrt(head size)) each
    scores = (q * scale) @ (k * scale).transpose(-2, -1)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    batch, heads, length = k.shape[:3]
    dropped, keep_scale = dropped_positions((batch, heads, length, length), scores, p)
    if query_positions is not None:
        dropped = dropped.gather(2, query_positions[:, None, :, None].expand(-1, heads, -1, length))
    # The kept probabilities' scale on v: a quarter of the elements when a query reads 128 keys of 64.
    return scores.softmax(-1, dtype=torch.float32).masked_fill(dropped, 0) @ (v * keep_scale)


class EncoderLayer(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(config.hidden_size, config.ffn_size)
        self.fc2 = nn.Linear(config.ffn_size, config.hidden_size)
        self.ffn_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.activation_dropout = nn.Dropout(config.activation_dropout)

    def forward(self, x: Tensor, layout: Layout, selected: Selected | None = None) -> Tensor:
        """[B, T, H] → [B, T, H], or when unpadding the real positions [N, H] → [N, H]; with
        `selected`, the selected positions' outputs only ([N_selected, H])."""
        unpadded = layout.unpadded
        positions = unpadded.batch * unpadded.length if unpadded is not None else x.size(0) * x.size(1)
        rows = selected.flat if selected is not None else unpadded.index if unpadded is not None else None

        a = self.attention(x, layout, selected)
        if selected is not None:
            x = selected.rows_of(x)
        # Masks drawn for every position of the padded batch and read at the rows computed: the
        # padded, full layer's random stream.
        x = self.attention_layer_norm(x + dropout(a, self.dropout, rows, positions))
        h = self.fc2(dropout(F.gelu(self.fc1(x)), self.activation_dropout, rows, positions))
        return self.ffn_layer_norm(x + dropout(h, self.dropout, rows, positions))


class LMHead(nn.Module):
    """dense → GELU → LayerNorm → projection onto the (tied) token embedding, plus a bias."""

    def __init__(self, config: RobertaConfig, embedding_weight: nn.Parameter):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.weight = embedding_weight
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(self.layer_norm(F.gelu(self.dense(x))), self.weight, self.bias)


class ClassificationHead(nn.Module):
    """Sentence-level head on the `<s>` token: dropout → dense → tanh → dropout → projection.

    `labels` names the classes (a fine-tuned classifier keeps its label set with it).
    """

    kind = "classification"

    def __init__(self, config: RobertaConfig, num_classes: int, inner_dim: int | None = None, labels=()):
        super().__init__()
        inner_dim = inner_dim or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, inner_dim)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.out_proj = nn.Linear(inner_dim, num_classes)
        self.labels = tuple(labels)

    def forward(self, features: Tensor) -> Tensor:
        x = self.dropout(features[:, 0])
        return self.out_proj(self.dropout(torch.tanh(self.dense(x))))

    def spec(self) -> dict:
        spec = dict(kind=self.kind, num_classes=self.out_proj.out_features, inner_dim=self.dense.out_features)
        return {**spec, "labels": list(self.labels)} if self.labels else spec


class SpanHead(nn.Module):
    """Token-level head for extractive QA: a start and an end score for every token."""

    kind = "span"

    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.proj = nn.Linear(config.hidden_size, 2)

    def forward(self, features: Tensor) -> tuple[Tensor, Tensor]:
        return self.proj(features).unbind(-1)  # start, end

    def spec(self) -> dict:
        return {"kind": self.kind}


class TaggingHead(nn.Module):
    """Token-level head for tagging (HF's RobertaForTokenClassification): dropout → projection of
    every token onto the labels, whose names (`labels`) the head keeps."""

    kind = "tagging"

    def __init__(self, config: RobertaConfig, num_labels: int, labels=()):
        super().__init__()
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.out_proj = nn.Linear(config.hidden_size, num_labels)
        self.labels = tuple(labels)

    def forward(self, features: Tensor) -> Tensor:
        return self.out_proj(self.dropout(features))

    def spec(self) -> dict:
        spec = {"kind": self.kind, "num_labels": self.out_proj.out_features}
        return {**spec, "labels": list(self.labels)} if self.labels else spec


POOLS = ("cls", "mean")
EMBEDDING_HEAD = "embedding"  # the name a sentence encoder's head is saved under


def pool(hidden: Tensor, real: Tensor, how: str) -> Tensor:
    """[B, T, H] hidden states → [B, H]: the `<s>` vector ("cls"), or the mean over the real tokens
    ("mean"; `real` [B, T] is True at them). A hidden of one position ([B, 1, H]) is `<s>` alone."""
    if how == "cls":
        return hidden[:, 0]
    weights = real[:, : hidden.size(1)].to(hidden.dtype)[..., None]
    return (hidden * weights).sum(1) / weights.sum(1)


class EmbeddingHead(nn.Module):
    """A sentence encoder's vector: the last layer pooled (`pool`), then, for a student of another
    width than its teacher, a linear map onto the teacher's `dim`."""

    kind = "embedding"

    def __init__(self, config: RobertaConfig, pool: str = "mean", dim: int | None = None):
        super().__init__()
        if pool not in POOLS:
            raise UserError(f"pool {pool!r} unknown; choose one of {', '.join(POOLS)}")
        self.pool = pool
        self.proj = nn.Linear(config.hidden_size, dim) if dim else None

    def forward(self, hidden: Tensor, real: Tensor) -> Tensor:
        x = pool(hidden, real, self.pool)
        return x if self.proj is None else self.proj(x)

    def spec(self) -> dict:
        spec = {"kind": self.kind, "pool": self.pool}
        return spec if self.proj is None else {**spec, "dim": self.proj.out_features}


def build_head(config: RobertaConfig, spec: dict) -> nn.Module:
    """A head from its `spec()` (as a checkpoint's config.json stores it)."""
    if spec["kind"] == SpanHead.kind:
        return SpanHead(config)
    if spec["kind"] == EmbeddingHead.kind:
        return EmbeddingHead(config, spec["pool"], spec.get("dim"))
    if spec["kind"] == TaggingHead.kind:
        return TaggingHead(config, spec["num_labels"], spec.get("labels", ()))
    labels = tuple(spec.get("labels", ()))
    return ClassificationHead(config, spec["num_classes"], spec.get("inner_dim"), labels)


def require_head(heads: nn.ModuleDict, name: str) -> nn.Module:
    """The head `name`, else a UserError listing the heads there are."""
    if name not in heads:
        known = ", ".join(heads) or "none"
        raise UserError(f"unknown head {name!r} (registered: {known})")
    return heads[name]


def _as_output(h: Tensor, select: Tensor | str | None, unpadded: Unpadded | None) -> Tensor:
    """A layer's output as callers see it: [B, T, H]; [B, 1, H] for select="first"; [N, H] for a mask."""
    if select is not None:
        return h[:, None] if isinstance(select, str) else h
    return unpadded.pad(h) if unpadded is not None else h


def _cpu_autocast(t: Tensor) -> bool:
    return t.device.type == "cpu" and torch.is_autocast_enabled("cpu")


class EncoderOutput(NamedTuple):
    last_hidden_state: Tensor
    # Embedding output first, then every layer's output; None unless asked for.
    hidden_states: list[Tensor] | None


class RobertaModel(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.padding_idx)
        self.embed_positions = nn.Embedding(config.max_positions, config.hidden_size, config.padding_idx)
        self.embed_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
        self.lm_head = LMHead(config, self.embed_tokens.weight)
        self.heads = nn.ModuleDict()
        self.apply(self._init_weights)

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def _init_weights(self, module: nn.Module) -> None:
        # BERT/fairseq initialisation: N(0, 0.02) weights, zero biases, a zero padding row.
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(
        self,
        tokens: Tensor,
        return_all_hiddens: bool = False,
        unpad: bool = False,
        select: Tensor | str | None = None,
        attention_mask: Tensor | None = None,
    ) -> EncoderOutput:
        """tokens [B, T] of model ids, padded with padding_idx → hidden states [B, T, H].

        select: the positions the last layer computes, the others' keys and values still read:
        "first" for `<s>` alone, all a classification head reads (last_hidden_state [B, 1, H]); a
        boolean [B, T] mask for its positions ([N, H] in the order `hidden[select]` gives), as the
        masked-LM loss reads its ~15% of masked tokens.
        unpad: the layers compute the real (non-padding) positions only, so a padded batch costs
        what its real tokens cost but for attention (MosaicBERT's and ModernBERT's unpadding);
        padding positions are zero after the embeddings.

        Either way the numbers are the full padded forward's at the positions computed, to
        rounding; in training too, since dropout's masks are drawn for the full padded batch and
        read at those positions (`dropped_positions`).
        attention_mask: [B, T], 0 at the positions no token attends to (HF's input, which an ONNX
        export takes); without it, those are the padding_idx tokens. Position ids count the
        non-padding ids either way, as fairseq's and HF's do, so the two agree on a right-padded batch.
        """
        if tokens.size(1) > self.config.max_seq_len:
            limit = self.config.max_seq_len
            raise UserError(f"sequence of {tokens.size(1)} tokens exceeds the model's {limit} positions")
        padding = tokens.eq(self.config.padding_idx) if attention_mask is None else attention_mask.eq(0)
        # Without padding, no mask: SDPA may then take its fastest (flash) kernel. A mask given is
        # always applied, so that a graph traced with it keeps it for any input.
        attn_mask = ~padding[:, None, None, :] if attention_mask is not None or padding.any() else None
        x = self.embed_tokens(tokens) + self.embed_positions(make_positions(tokens, self.config.padding_idx))
        x = dropout(self.embed_layer_norm(x), self.dropout)  # [B, T, H]
        hidden_states = [x] if return_all_hiddens else None
        # Under CPU autocast (bf16 products in oneDNN), the computed rows in few sizes, where the
        # output is the selected rows alone (`Unpadded.of`).
        bucketed = select is not None and not return_all_hiddens and _cpu_autocast(tokens)
        unpadded = Unpadded.of(padding, bucketed) if unpad and attn_mask is not None else None
        if unpadded is not None:
            x = unpadded.unpad(x)  # [N_real, H]
        selected = self._selected(select, padding, unpadded)
        last = len(self.layers) - 1
        layout = Layout(attn_mask, unpadded)
        for i, layer in enumerate(self.layers):
            x = layer(x, layout, selected if i == last else None)
            if hidden_states is not None:
                hidden_states.append(_as_output(x, select if i == last else None, unpadded))
        return EncoderOutput(
            hidden_states[-1] if hidden_states else _as_output(x, select, unpadded), hidden_states
        )

    def _selected(
        self, select: Tensor | str | None, padding: Tensor, unpadded: Unpadded | None
    ) -> Selected | None:
        if select is None:
            return None
        if isinstance(select, str):
            if select != "first":
                raise UserError(f"select={select!r}: give 'first' or a boolean mask")
            return Selected.first(padding, unpadded)
        if unpadded is not None and (select & padding).any():
            raise UserError("select: with unpad=True only real (non-padding) positions can be selected")
        return Selected.of(select, unpadded)

    def lm_logits(self, hidden: Tensor, selected: Tensor | None = None) -> Tensor:
        """Vocabulary logits; with a boolean `selected` mask, only for those positions ([N, V]): the
        masked-LM loss reads ~15% of them, and the rest would be most of a small model's compute."""
        if selected is not None:
            hidden = hidden[selected]
        return self.lm_head(hidden)

    def add_classification_head(
        self, name: str, num_classes: int, inner_dim: int | None = None, labels=()
    ) -> None:
        self.add_head(name, ClassificationHead(self.config, num_classes, inner_dim, labels))

    def add_head(self, name: str, head: nn.Module) -> None:
        """Attach a task head (ClassificationHead, SpanHead) under a name, initialised as the model is."""
        head.apply(self._init_weights)
        self.heads[name] = head

    def remove_head(self, name: str) -> None:
        self._require_head(name)
        del self.heads[name]

    def classify(self, name: str, hidden: Tensor) -> Tensor:
        return self._require_head(name)(hidden)

    # The calls on token ids that the hub makes: an ONNX export (`onnx_model.OnnxModel`) runs each
    # as one of its task graphs, so each asks for no more than its task's outputs.

    def mask_logits(self, tokens: Tensor, mask_id: int) -> Tensor:
        """[N, V]: the vocabulary logits at each `mask_id` token of `tokens`, in the order
        `tokens.eq(mask_id)` takes them; the last layer and the LM head compute nothing else."""
        hidden = self(tokens, unpad=True, select=tokens.eq(mask_id)).last_hidden_state
        return self.lm_logits(hidden)

    def head_outputs(self, name: str, tokens: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        """The head `name` on `tokens`: a classification head's logits [B, C] (the last layer
        computes `<s>` alone, all it reads), a span head's start and end logits [B, T], a tagging
        head's logits [B, T, labels]."""
        head = self._require_head(name)
        select = "first" if head.kind == ClassificationHead.kind else None
        return head(self(tokens, unpad=True, select=select).last_hidden_state)

    def sentence_embedding(self, tokens: Tensor, unpad: bool = False) -> Tensor:
        """[B, D]: the `embedding` head's vector of each sequence (its pooling of the last layer,
        and its map onto a teacher's width if it has one)."""
        head = self._require_head(EMBEDDING_HEAD)
        select = "first" if head.pool == "cls" else None  # <s> alone: the last layer computes no more
        hidden = self(tokens, unpad=unpad, select=select).last_hidden_state
        return head(hidden, tokens.ne(self.config.padding_idx))

    def _require_head(self, name: str) -> nn.Module:
        return require_head(self.heads, name)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
