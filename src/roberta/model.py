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
from torch import nn

from roberta.config import RobertaConfig
from roberta.errors import UserError


def make_positions(tokens: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """Position ids counted over real tokens only, starting at padding_idx + 1 (fairseq's rule).

    Padding keeps position padding_idx, whose embedding row is zero.
    """
    real = tokens.ne(padding_idx).int()
    return (torch.cumsum(real, dim=1) * real).long() + padding_idx


class Unpadded(NamedTuple):
    """Where a right-padded batch's real tokens are: the layers' matrix products and LayerNorms
    run on those rows alone ([N, H]), and attention puts them back in place ([B, T, ...])."""

    index: torch.Tensor  # [N]: the real positions in the flattened [B * T], ascending
    batch: int
    length: int

    @classmethod
    def of(cls, padding: torch.Tensor) -> Unpadded:
        return cls((~padding).flatten().nonzero().squeeze(1), *padding.shape)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(0, 1)[self.index]

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """[N, ...] → [B, T, ...], zeros at the padding."""
        out = x.new_zeros(self.batch * self.length, *x.shape[1:])
        return out.index_copy_(0, self.index, x).view(self.batch, self.length, *x.shape[1:])


class Selected(NamedTuple):
    """The positions the last layer computes, a boolean [B, T] mask's True entries in row-major
    order: a classification head reads `<s>` only, the masked-LM loss the masked positions only.
    Their keys and values still come from every position."""

    flat: torch.Tensor  # [N]: their places in the flattened [B * T]
    rows: torch.Tensor  # [N]: their rows in the layers' input ([B * T], or the unpadded rows)
    batch: torch.Tensor  # [N]: each one's sequence
    slot: torch.Tensor  # [N]: its place among its sequence's selected positions
    query_positions: torch.Tensor  # [B, slots]: the position each slot holds (0 where a sequence has fewer)

    @classmethod
    def of(cls, mask: torch.Tensor, unpadded: Unpadded | None, slots: int | None = None) -> Selected:
        """`slots`: the most positions one sequence selects, if known (counting them syncs with the device)."""
        length = mask.size(1)
        flat = mask.flatten().nonzero().squeeze(1)
        batch, position = flat.div(length, rounding_mode="floor"), flat.remainder(length)
        slot = (mask.cumsum(1) - 1).flatten()[flat]
        slots = slots if slots is not None else int(mask.sum(1).max())
        query_positions = flat.new_zeros(mask.size(0), slots).index_put_((batch, slot), position)
        rows = flat if unpadded is None else torch.searchsorted(unpadded.index, flat)
        return cls(flat, rows, batch, slot, query_positions)

    def rows_of(self, x: torch.Tensor) -> torch.Tensor:
        """The selected rows [N, H] of a layer input ([B, T, H], or the unpadded [N_real, H])."""
        return (x.flatten(0, 1) if x.dim() == 3 else x)[self.rows]


DROPOUT_MASKS = ("fast", "torch")


class Dropout(nn.Module):
    """Dropout at rate `p`, its masks drawn one of two ways (`masks`, `[train] dropout_masks`):

    - "fast" (the default): on the CPU a mask is drawn as 15-bit random integers, two from each
      32-bit draw, dropping those below p * 32768: p is rounded to a multiple of 1/32768 (0.1 →
      0.100006) and what is kept is scaled by 1 / (1 - that p), so the expectation is exact. The
      mask is kept as booleans. torch draws one float per element on one thread (`bernoulli_`,
      10.6 ms per million elements here, ours 2.4): a base@128 CPU step is 3.5% faster this way
      (benchmarks/RESULTS.md). On other devices torch's fused kernels, which cost little there.
    - "torch": torch's dropout (and SDPA's) everywhere: the random stream of torch and of HF
      transformers, so a seeded training step is theirs to rounding, dropout on.
    """

    def __init__(self, p: float, masks: str = "fast"):
        super().__init__()
        self.p = p
        self.masks = masks

    def draws_own(self, device: torch.device) -> bool:
        return self.masks == "fast" and device.type == "cpu"

    def mask(self, shape: tuple[int, ...], like: torch.Tensor) -> tuple[torch.Tensor, float]:
        """A mask for a tensor of `shape` (the dtype and device of `like`) and the scale of what it
        keeps: `x * mask * scale` drops x out. Drawn for a whole tensor, a mask can be read at some
        of its elements (the selected positions)."""
        if not self.draws_own(like.device):  # torch's multiplier, computed as its dropout kernel computes it
            return like.new_empty(shape).bernoulli_(1 - self.p).div_(1 - self.p), 1.0
        numel, dropped = math.prod(shape), min(round(self.p * 32768), 32767)
        bits = torch.empty((numel + 1) // 2, dtype=torch.int32).random_().view(torch.int16)[:numel]  # 31 random bits each
        return (bits & 0x7FFF).ge(dropped).view(shape), 32768 / (32768 - dropped)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if not self.draws_own(x.device):
            return F.dropout(x, self.p, training=True)
        mask, scale = self.mask(x.shape, x)
        return x * mask * scale


class SelfAttention(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.head_size = config.hidden_size // config.num_heads
        self.dropout = Dropout(config.attention_dropout)
        # One fused projection: a single matrix product instead of three.
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None, selected: Selected | None = None,
        unpadded: Unpadded | None = None,
    ) -> torch.Tensor:
        qkv = self.qkv(x)  # keys and values everywhere; queries too (one product: int8 Linear layers cannot be sliced)
        qkv_padded = unpadded.pad(qkv) if unpadded is not None else qkv  # SDPA wants [B, heads, T, head size]
        q, k, v = self._heads(qkv_padded).chunk(3, dim=1)
        if selected is None:
            x = merge_heads(attention(q, k, v, attn_mask, self.dropout))
            return self.out_proj(unpadded.unpad(x) if unpadded is not None else x)
        # The selected queries only, each sequence's in slots [B, slots].
        q = selected.rows_of(qkv)[:, : x.size(-1)]
        q_slots = q.new_zeros(*selected.query_positions.shape, q.size(-1)).index_put_((selected.batch, selected.slot), q)
        x = merge_heads(attention(self._heads(q_slots), k, v, attn_mask, self.dropout, selected.query_positions))
        return self.out_proj(x[selected.batch, selected.slot])

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, n * H] → [B, n * heads, T, head size]: n projections' heads, each projection's together."""
        return x.view(*x.shape[:2], x.size(-1) // self.head_size, self.head_size).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, heads, T, head size] → [B, T, H]."""
    return x.transpose(1, 2).flatten(2)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None, dropout: Dropout,
    query_positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scaled dot-product attention; with `query_positions` [B, slots], `q` holds the queries at
    those positions only ([B, heads, slots, head size]).

    SDPA where its kernels can do the work. Otherwise (our dropout masks, or some queries only,
    in training) SDPA's math kernel written out, the kernel CPU training takes anyway (no other
    CPU kernel has dropout): the mask is drawn for every query and read at the selected ones, so
    the random stream advances as the full attention's does."""
    p = dropout.p if dropout.training else 0.0
    if p == 0 or (query_positions is None and not dropout.draws_own(q.device)):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=p)
    scale = q.size(-1) ** -0.25  # the kernel scales q and k by sqrt(1 / sqrt(head size)) each
    scores = (q * scale) @ (k * scale).transpose(-2, -1)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    batch, heads, length = k.shape[:3]
    mask, keep_scale = dropout.mask((batch, heads, length, length), scores)
    if query_positions is not None:
        mask = mask.gather(2, query_positions[:, None, :, None].expand(-1, heads, -1, length))
    return (scores.softmax(-1) * mask * keep_scale) @ v


class EncoderLayer(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(config.hidden_size, config.ffn_size)
        self.fc2 = nn.Linear(config.ffn_size, config.hidden_size)
        self.ffn_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)
        self.activation_dropout = Dropout(config.activation_dropout)

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None, selected: Selected | None = None,
        unpadded: Unpadded | None = None,
    ) -> torch.Tensor:
        """[B, T, H] → [B, T, H], or with `unpadded` the real positions [N, H] → [N, H]; with
        `selected`, the selected positions' outputs only ([N_selected, H])."""
        positions = unpadded.batch * unpadded.length if unpadded is not None else x.size(0) * x.size(1)
        rows = selected.flat if selected is not None else unpadded.index if unpadded is not None else None

        def dropout(y: torch.Tensor, module: Dropout) -> torch.Tensor:
            if rows is None or not module.training or module.p == 0:
                return module(y)
            # The mask drawn for every position of the padded batch and read at the rows computed:
            # the padded, full layer's random stream.
            mask, scale = module.mask((positions, y.size(-1)), y)
            return y * mask[rows] * scale

        a = self.attention(x, attn_mask, selected, unpadded)
        if selected is not None:
            x = selected.rows_of(x)
        x = self.attention_layer_norm(x + dropout(a, self.dropout))
        h = self.fc2(dropout(F.gelu(self.fc1(x)), self.activation_dropout))
        return self.ffn_layer_norm(x + dropout(h, self.dropout))


class LMHead(nn.Module):
    """dense → GELU → LayerNorm → projection onto the (tied) token embedding, plus a bias."""

    def __init__(self, config: RobertaConfig, embedding_weight: nn.Parameter):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.weight = embedding_weight
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.layer_norm(F.gelu(self.dense(x))), self.weight, self.bias)


class ClassificationHead(nn.Module):
    """Sentence-level head on the `<s>` token: dropout → dense → tanh → dropout → projection.

    `labels` names the classes (a fine-tuned classifier keeps its label set with it).
    """

    kind = "classification"

    def __init__(self, config: RobertaConfig, num_classes: int, inner_dim: int | None = None, labels: tuple = ()):
        super().__init__()
        inner_dim = inner_dim or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, inner_dim)
        self.dropout = Dropout(config.classifier_dropout)
        self.out_proj = nn.Linear(inner_dim, num_classes)
        self.labels = tuple(labels)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.dropout(features[:, 0])
        return self.out_proj(self.dropout(torch.tanh(self.dense(x))))

    def spec(self) -> dict:
        spec = {"kind": self.kind, "num_classes": self.out_proj.out_features, "inner_dim": self.dense.out_features}
        return {**spec, "labels": list(self.labels)} if self.labels else spec


class SpanHead(nn.Module):
    """Token-level head for extractive QA: a start and an end score for every token."""

    kind = "span"

    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.proj = nn.Linear(config.hidden_size, 2)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.proj(features).unbind(-1)
        return start, end

    def spec(self) -> dict:
        return {"kind": self.kind}


def build_head(config: RobertaConfig, spec: dict) -> nn.Module:
    """A head from its `spec()` (as a checkpoint's config.json stores it)."""
    if spec["kind"] == SpanHead.kind:
        return SpanHead(config)
    return ClassificationHead(config, spec["num_classes"], spec.get("inner_dim"), tuple(spec.get("labels", ())))


@torch.no_grad()
def sinusoidal_positions(weight: torch.Tensor, padding_idx: int, std: float) -> None:
    """Start a learned position table [P, H] as the original Transformer's sinusoids: sin/cos of
    the position at geometric frequencies, at RMS `std` (the normal init's). The table is still
    learned, so the architecture and every export stay RoBERTa's; what changes is that attention
    can tell near from far at step 0. A 2 x 128 model pretrained for 20 CPU minutes leaves its
    plateau minutes sooner this way (benchmarks/RESULTS.md). `[model] position_init`."""
    width = weight.size(1)
    position = torch.arange(weight.size(0) - padding_idx - 1, dtype=torch.float32, device=weight.device)[:, None]
    angle = position * 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float32, device=weight.device) / width)
    scale = std * math.sqrt(2)  # a sin/cos column has RMS 1/sqrt(2)
    weight.zero_()  # the padding row and the one before it stay zero: positions start after padding_idx
    weight[padding_idx + 1 :, 0::2] = angle.sin() * scale
    weight[padding_idx + 1 :, 1::2] = angle[:, : width // 2].cos() * scale


class EncoderOutput(NamedTuple):
    last_hidden_state: torch.Tensor
    # Embedding output first, then every layer's output; None unless asked for.
    hidden_states: list[torch.Tensor] | None


class RobertaModel(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.padding_idx)
        self.embed_positions = nn.Embedding(config.max_positions, config.hidden_size, config.padding_idx)
        self.embed_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
        self.lm_head = LMHead(config, self.embed_tokens.weight)
        self.heads = nn.ModuleDict()
        self.apply(self._init_weights)

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
        self, tokens: torch.Tensor, return_all_hiddens: bool = False, first_only: bool = False, unpad: bool = False,
        select: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """tokens [B, T] of model ids, padded with padding_idx → hidden states [B, T, H].

        select: a boolean [B, T] mask; the last layer computes those positions only (their keys
        and values still read every position) and last_hidden_state is their rows, [N, H] in the
        order `hidden[select]` gives. The masked-LM loss selects the masked positions: the last
        layer's products then run on ~15% of the tokens. The numbers are the full forward's at
        those positions to rounding, on the CPU dropout included (its masks are drawn for every
        position and read at the selected ones, so the random stream is the same); a GPU's fused
        dropout kernels draw differently: there, the same in distribution.

        first_only: select position 0 (`<s>`), all a classification head reads; last_hidden_state
        is then [B, 1, H].

        unpad: the layers compute the real (non-padding) positions only, so a padded batch costs
        what its real tokens cost, but for attention (MosaicBERT's and ModernBERT's unpadding).
        Real positions are the padded forward's to rounding; padding positions are zero after the
        embeddings (the padded forward computes meaningless numbers there). Dropout draws its masks
        for the padded batch and reads them at the real positions, so in training too the numbers
        are the padded forward's (on a GPU, as for `select`, the same in distribution).
        """
        if tokens.size(1) > self.config.max_seq_len:
            raise UserError(
                f"sequence of {tokens.size(1)} tokens exceeds the model's {self.config.max_seq_len} positions"
            )
        padding = tokens.eq(self.config.padding_idx)
        # Without padding, no mask: SDPA may then take its fastest (flash) kernel.
        attn_mask = ~padding[:, None, None, :] if padding.any() else None
        x = self.embed_tokens(tokens) + self.embed_positions(make_positions(tokens, self.config.padding_idx))
        x = self.dropout(self.embed_layer_norm(x))
        hidden_states = [x] if return_all_hiddens else None
        unpadded = Unpadded.of(padding) if unpad and attn_mask is not None else None
        if unpadded is not None:
            x = unpadded.unpad(x)
        if select is not None and unpadded is not None and (select & padding).any():
            raise UserError("select: with unpad=True only real (non-padding) positions can be selected")
        if first_only:
            select = torch.zeros_like(padding)
            select[:, 0] = True
        selected = Selected.of(select, unpadded, slots=1 if first_only else None) if select is not None else None

        def restore(h: torch.Tensor, selected: Selected | None) -> torch.Tensor:  # a layer's output as callers see it
            if selected is not None:
                return h[:, None] if first_only else h
            return unpadded.pad(h) if unpadded is not None else h

        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, attn_mask, selected if i == last else None, unpadded)
            if hidden_states is not None:
                hidden_states.append(restore(x, selected if i == last else None))
        return EncoderOutput(hidden_states[-1] if hidden_states is not None else restore(x, selected), hidden_states)

    def lm_logits(self, hidden: torch.Tensor, selected: torch.Tensor | None = None) -> torch.Tensor:
        """Vocabulary logits; with a boolean `selected` mask, only for those positions ([N, V]).

        Pretraining passes the masked positions: logits for the other ~85% of tokens would be
        most of a small model's compute and are never used.
        """
        if selected is not None:
            hidden = hidden[selected]
        return self.lm_head(hidden)

    def add_classification_head(
        self, name: str, num_classes: int, inner_dim: int | None = None, labels: tuple = ()
    ) -> None:
        self.add_head(name, ClassificationHead(self.config, num_classes, inner_dim, labels))

    def add_head(self, name: str, head: nn.Module) -> None:
        """Attach a task head (ClassificationHead, SpanHead) under a name, initialised as the model is."""
        head.apply(self._init_weights)
        self.heads[name] = head
        self.set_dropout_masks(self.dropout.masks)  # a head added later draws as the model does

    def set_dropout_masks(self, masks: str) -> None:
        """How every dropout draws its masks, heads included: "fast" (the default) or "torch"; see `Dropout`."""
        if masks not in DROPOUT_MASKS:
            raise UserError(f"dropout masks {masks!r}: expected one of {', '.join(DROPOUT_MASKS)}")
        for module in self.modules():
            if isinstance(module, Dropout):
                module.masks = masks

    def remove_head(self, name: str) -> None:
        self._require_head(name)
        del self.heads[name]

    def classify(self, name: str, hidden: torch.Tensor) -> torch.Tensor:
        return self._require_head(name)(hidden)

    def _require_head(self, name: str) -> nn.Module:
        if name not in self.heads:
            known = ", ".join(self.heads) or "none"
            raise UserError(f"unknown head {name!r} (registered: {known})")
        return self.heads[name]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
