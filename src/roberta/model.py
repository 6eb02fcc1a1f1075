"""RoBERTa, top to bottom: embeddings, self-attention, encoder layer, encoder, heads.

The numerics follow fairseq's `TransformerSentenceEncoder` and HF's `modeling_roberta`:
post-LayerNorm layers, exact (erf) GELU, learned positions offset past the padding index.
The module knows nothing about devices, precision, parallelism or files.
"""

from __future__ import annotations

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

    index: torch.Tensor  # [N]: the real positions in the flattened [B * T]
    starts: torch.Tensor  # [B]: each sequence's first token (`<s>`) among the N rows
    batch: int
    length: int

    @classmethod
    def of(cls, padding: torch.Tensor) -> Unpadded:
        real = ~padding
        counts = real.sum(dim=1)
        return cls(real.flatten().nonzero().squeeze(1), counts.cumsum(0) - counts, *padding.shape)

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(0, 1)[self.index]

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """[N, ...] → [B, T, ...], zeros at the padding."""
        out = x.new_zeros(self.batch * self.length, *x.shape[1:])
        return out.index_copy_(0, self.index, x).view(self.batch, self.length, *x.shape[1:])


class SelfAttention(nn.Module):
    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.dropout = config.attention_dropout
        # One fused projection: a single matrix product instead of three.
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None, first_only: bool = False, unpadded: Unpadded | None = None
    ) -> torch.Tensor:
        qkv = self.qkv(x)
        if unpadded is not None:
            qkv = unpadded.pad(qkv)  # SDPA wants [B, heads, T, head size]: the real rows go back in place
        batch, length, width = qkv.size(0), qkv.size(1), x.size(-1)
        q, k, v = qkv.view(batch, length, 3, self.num_heads, width // self.num_heads).permute(2, 0, 3, 1, 4)
        dropout = self.dropout if self.training else 0.0
        if first_only:
            x, length = first_query_attention(q[:, :, :1], k, v, attn_mask, dropout), 1
        else:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)
        x = x.transpose(1, 2).reshape(batch, length, width)
        return self.out_proj(unpadded.unpad(x) if unpadded is not None and not first_only else x)


def first_query_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None, dropout: float
) -> torch.Tensor:
    """SDPA for the first query only, computed as SDPA's math kernel computes it (the kernel CPU
    training takes: no other CPU kernel has dropout), its dropout mask drawn for every query
    (`dropout_leading`)."""
    scale = q.size(-1) ** -0.25  # the kernel scales q and k by sqrt(1 / sqrt(head size)) each
    scores = (q * scale) @ (k * scale).transpose(-2, -1)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    probs = dropout_leading(scores.softmax(-1), dropout, (*k.shape[:-1], k.size(-2)))
    return probs @ v


def dropout_leading(x: torch.Tensor, p: float, full_shape: tuple[int, ...]) -> torch.Tensor:
    """Dropout on `x`, the leading block of a tensor of `full_shape`, with the mask drawn for the
    whole tensor and read there: the random stream advances as dropout on the whole tensor
    advances it, so every later number (and every number in x) is the full computation's."""
    if p == 0:
        return x
    noise = x.new_empty(full_shape).bernoulli_(1 - p)[tuple(slice(0, n) for n in x.shape)]
    return x * noise.div_(1 - p)


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

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None, first_only: bool = False, unpadded: Unpadded | None = None
    ) -> torch.Tensor:
        """[B, T, H] → [B, T, H], or with `unpadded` the real positions [N, H] → [N, H]; with
        `first_only`, position 0's output only ([B, 1, H]), the keys and values still read from
        every position."""
        batch, length = (unpadded.batch, unpadded.length) if unpadded is not None else x.shape[:2]

        def dropout(y: torch.Tensor, module: nn.Dropout) -> torch.Tensor:
            if not first_only or unpadded is not None:
                return module(y)
            return dropout_leading(y, module.p if module.training else 0.0, (batch, length, y.size(-1)))

        a = self.attention(x, attn_mask, first_only, unpadded)
        if first_only:
            x = x[unpadded.starts, None] if unpadded is not None else x[:, :1]
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
        self.dropout = nn.Dropout(config.classifier_dropout)
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
        self.dropout = nn.Dropout(config.dropout)
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
        self, tokens: torch.Tensor, return_all_hiddens: bool = False, first_only: bool = False, unpad: bool = False
    ) -> EncoderOutput:
        """tokens [B, T] of model ids, padded with padding_idx → hidden states [B, T, H].

        first_only: the last layer computes position 0 (`<s>`) only, all that a classification
        head reads, so last_hidden_state is [B, 1, H] and most of one layer's work is saved. The
        numbers are the full forward's `[:, :1]` to rounding, on the CPU dropout included (its
        masks are drawn for every position and read at position 0, so the random stream is the
        same); a GPU's fused dropout kernels draw differently: there, the same in distribution.

        unpad: the layers compute the real (non-padding) positions only, so a padded batch costs
        what its real tokens cost, but for attention (MosaicBERT's and ModernBERT's unpadding).
        Real positions are the padded forward's to rounding; padding positions are zero after the
        embeddings (the padded forward computes meaningless numbers there). Dropout, if active,
        draws for the real positions only: the same in distribution, not the same random stream.
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

        def restore(h: torch.Tensor) -> torch.Tensor:  # unpadded rows [N, H] back to [B, T, H]
            return unpadded.pad(h) if unpadded is not None and h.dim() == 2 else h

        for i, layer in enumerate(self.layers):
            x = layer(x, attn_mask, first_only and i == len(self.layers) - 1, unpadded)
            if hidden_states is not None:
                hidden_states.append(restore(x))
        return EncoderOutput(hidden_states[-1] if hidden_states is not None else restore(x), hidden_states)

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
