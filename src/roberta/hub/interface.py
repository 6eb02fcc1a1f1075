"""fairseq's hub interface on our model: encode, decode, extract_features, embed, predict, and the
calls that live in modules of their own beside it (fill_mask, answer).

Every call taking token ids also takes a *list* of 1-D id sequences. A list runs batched by
length: sorted, cut into batches of at most `batch_tokens` padded tokens, each padded with
`<pad>` only to its own longest sequence, then put back in input order. The layers compute the
real tokens only (`RobertaModel.forward(unpad=True)`), and sorting keeps attention's padding
small too: a naive padded batch spends most of a CPU's time on padding.

In eval mode (the state `load` returns) the calls run under `torch.inference_mode`; in train
mode they keep the autograd graph, so a model can be fine-tuned through this interface.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from roberta.errors import UserError
from roberta.hub.answer import answer
from roberta.hub.embed import check_embed, embed, embed_width, embedding_pool
from roberta.hub.fill_mask import check_fill_mask, fill_mask, mask_logits, masked_ids
from roberta.hub.inputs import TokenSeqs, as_fp32, check_ids, refuse_or_warn, sequences
from roberta.hub.tag import tag
from roberta.model import RobertaModel
from roberta.runtime.batching import length_batches, pad
from roberta.runtime.bf16 import HeldWeights
from roberta.runtime.precision import INFERENCE, autocast, resolve
from roberta.tokenizer import Tokenizer

# Padded tokens per batch: the fastest of 1024/2048/4096 in the embed benchmark
# (benchmarks/experiments/batch-tokens.md). Smaller budgets make smaller matrix products; larger
# ones span wider length ranges per batch, so they pad more.
DEFAULT_BATCH_TOKENS = 2048


class Roberta(nn.Module):
    """A model and its tokenizer behind fairseq's `RobertaHubInterface` calls."""

    def __init__(self, model: RobertaModel, tokenizer: Tokenizer, batch_tokens: int = DEFAULT_BATCH_TOKENS):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.batch_tokens = batch_tokens
        self.precision = "fp32"  # or bf16 (autocast) or int8 (quantized): `use_precision`
        self._held = HeldWeights(model)  # in bf16 and eval mode, the products' weights in bf16

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | Path,
        checkpoint_file: str = "model.pt",
        map_location: str | torch.device = "cpu",
    ) -> Roberta:
        """fairseq's signature. `checkpoint_file` picks the `.pt` of a fairseq directory; our and
        HF directories hold one model, so for them (no such file) it is ignored."""
        chosen = checkpoint_file if (Path(model_dir) / checkpoint_file).is_file() else None
        from roberta.hub.loading import load

        return load(model_dir, chosen, map_location)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def max_seq_len(self) -> int:
        return self.model.config.max_seq_len

    def _mode(self) -> AbstractContextManager:
        stack = ExitStack()
        stack.enter_context(torch.inference_mode(not self.training))
        stack.enter_context(autocast(self.precision, self.device))
        return stack

    def train(self, mode: bool = True) -> Roberta:
        """nn.Module's; in bf16, eval mode also holds the matrix products' weights in bf16 (not cast
        again at each call: `runtime.bf16`) and train mode gives them back in fp32, where autocast
        casts them as a trainer's does."""
        super().train(mode)
        self._hold_weights()
        return self

    def _hold_weights(self) -> None:
        if self.precision == "bf16" and not self.training:
            self._held.hold()
        else:
            self._held.release()

    def _outputs(self, value):
        """What a call returns: under bf16 autocast, its float tensors as fp32, as every caller expects."""
        return as_fp32(value) if self.precision == "bf16" else value

    def use_precision(self, precision: str = "auto") -> Roberta:
        """Run every call in `precision`: fp32 (as loaded), bf16 (autocast: the matrix products run
        in bf16, their weights held in bf16 while the hub is in eval mode, LayerNorm and the
        embeddings in fp32; outputs come back fp32; `state_dict()` and a checkpoint saved from it
        stay the exact fp32 weights, which fp32 gets back), int8 (`quantize`), or auto: bf16 on a
        CPU with native bf16 units (AMX, AVX512-BF16) or a bf16 GPU, else fp32 (`roberta.runtime.precision`).
        Returns the hub."""
        if precision not in INFERENCE:
            raise UserError(f"precision {precision!r} unknown; choose one of {', '.join(INFERENCE)}")
        chosen = resolve(precision, self.device, width=self.model.config.hidden_size)
        if self.precision == "int8" and chosen != "int8":
            raise UserError(f"the hub is quantized to int8; load it again to run it in {chosen}")
        if chosen == "int8":
            return self.quantize()
        self.precision = chosen
        self._hold_weights()
        return self

    def quantize(self) -> Roberta:
        """Dynamic int8 for CPU serving, in place: every `nn.Linear` of the encoder and the heads
        holds int8 weights and runs int8 products (inputs quantized per call). Embeddings,
        LayerNorm, attention and the masked-LM projection (tied to the token embedding) stay fp32.
        Returns the hub in eval mode; every call works as before, within int8's error (the CLI's
        `--int8` prints it). It is for serving: it does not train, and `checkpoint.save` takes the
        fp32 model (quantize after loading).

        Refused (UserError) off the CPU, or on weights that are not float32.
        """
        from roberta.runtime.int8 import quantize_model

        self._held.release()  # int8 quantizes the fp32 weights
        quantize_model(self.model, self.device)
        self.precision = "int8"
        return self.eval()

    # ---- text <-> ids

    def encode(
        self, sentence: str, *pairs: str, no_separator: bool = False, truncate: bool = False
    ) -> torch.Tensor:
        """`<s> a </s>`, and `</s> b </s>` for each pair (one `</s>` less with `no_separator`).

        Longer than the model's positions: a UserError, or with `truncate` a warning and the
        texts cut (longest first) to fit.
        """
        ids = self.tokenizer.encode(sentence, *pairs, no_separator=no_separator)
        if len(ids) > self.max_seq_len:
            refuse_or_warn(len(ids), 0, truncate, 1, self.max_seq_len)
            ids = self.tokenizer.encode(
                sentence, *pairs, no_separator=no_separator, max_length=self.max_seq_len
            )
        return torch.tensor(ids, dtype=torch.long)

    def encode_batch(
        self,
        sentences: Sequence[str],
        pairs: Sequence[str] | None = None,
        *,
        no_separator: bool = False,
        truncate: bool = False,
    ) -> list[torch.Tensor]:
        """`encode(s)` (or `encode(s, pair)`) for each sentence, tokenized together on all cores."""
        ids = self.tokenizer.encode_batch(sentences, pairs, no_separator=no_separator)
        long = [i for i, seq in enumerate(ids) if len(seq) > self.max_seq_len]
        if long:
            refuse_or_warn(len(ids[long[0]]), long[0], truncate, len(long), self.max_seq_len)
            cut = self.tokenizer.encode_batch(
                [sentences[i] for i in long],
                None if pairs is None else [pairs[i] for i in long],
                no_separator=no_separator,
                max_length=self.max_seq_len,
            )
            for i, seq in zip(long, cut):
                ids[i] = seq
        return [torch.tensor(seq, dtype=torch.long) for seq in ids]

    def decode(self, tokens: torch.Tensor) -> str | list[str]:
        """Text of 1-D ids, specials dropped; a list of texts where `</s></s>` separates a pair
        (fairseq's rule). A 2-D batch gives one result per row."""
        if tokens.dim() == 2:
            return [self.decode(row) for row in tokens]
        ids = tokens.tolist()
        if ids[:1] == [self.tokenizer.bos_id]:
            ids = ids[1:]
        eos = self.tokenizer.eos_id
        cuts = [k + 1 for k in range(len(ids) - 1) if ids[k] == eos and ids[k + 1] == eos]
        texts = [self.tokenizer.decode(ids[a:b]) for a, b in zip([0, *cuts], [*cuts, len(ids)])]
        return texts[0] if len(texts) == 1 else texts

    # ---- the model

    def extract_features(self, tokens: torch.Tensor | TokenSeqs, return_all_hiddens: bool = False):
        """Hidden states of the last layer, [B, T, H]; with `return_all_hiddens` the list of the
        embedding output and every layer's output (the last equal to the default).

        A tensor (1-D, or 2-D padded with `<pad>`) runs as given; a list of 1-D sequences runs
        batched by length and gives one [T_i, H] tensor (or list of them) per sequence.
        """
        if isinstance(tokens, torch.Tensor):
            batch = self._as_batch(tokens)
            with self._mode():
                out = self.model(batch, return_all_hiddens=return_all_hiddens)
            return self._outputs(out.hidden_states if return_all_hiddens else out.last_hidden_state)

        def run(batch: torch.Tensor, lengths: list[int]) -> list:
            out = self.model(batch, return_all_hiddens=return_all_hiddens, unpad=True)
            if return_all_hiddens:
                return [[h[row, :n] for h in out.hidden_states] for row, n in enumerate(lengths)]
            return [out.last_hidden_state[row, :n] for row, n in enumerate(lengths)]

        return self._batched(tokens, run)

    def embed(self, tokens: TokenSeqs, layer: int = -1, pool: str | None = None) -> torch.Tensor:
        """One vector per sequence, [N, D], batched by length: the model's own sentence vector (a
        sentence encoder's `embedding` head: its pooling and any map onto a teacher's width) where
        it has one and neither `layer` nor another `pool` is asked for; otherwise layer `layer`
        (0 = embeddings, -1 = last) pooled at `<s>` ("cls", the default) or averaged over the
        sequence's tokens ("mean")."""
        return embed(self, tokens, layer, pool)

    def embed_width(self, layer: int = -1, pool: str | None = None) -> int:
        """The width of `embed(tokens, layer, pool)`'s vectors: a sentence encoder's own may be mapped
        onto its teacher's width."""
        return embed_width(self.model, layer, pool)

    def embedding_pool(self) -> str | None:
        """The pooling of the model's sentence-embedding head, None where it has none."""
        return embedding_pool(self.model)

    def check_embed(self, layer: int, pool: str | None) -> None:
        """`embed`'s options, checked on their own: a file is refused before anything is read or drawn."""
        check_embed(self.model, layer, pool)

    def head(self, name: str, kind: str) -> nn.Module:
        """The head `name`, which must be of `kind` ("classification" for `predict`, "span" for
        `answer`), else a UserError: a span head's two logits per token are no class scores."""
        head = self.model._require_head(name)
        if head.kind != kind:
            use = {"classification": "predict/--head", "tagging": "tag()"}.get(head.kind, "answer()")
            raise UserError(f"head {name!r} is a {head.kind} head (for {use}), not a {kind} head")
        return head

    def register_classification_head(self, name: str, num_classes: int, inner_dim: int | None = None) -> None:
        self.model.add_classification_head(name, num_classes, inner_dim)
        # A new module starts in train mode; in an eval-mode hub its dropout would make predictions random.
        self.model.heads[name].train(self.training)

    def predict(
        self, head: str, tokens: torch.Tensor | TokenSeqs, return_logits: bool = False
    ) -> torch.Tensor:
        """Log-probabilities [B, C] of the classification head `head` (its logits with `return_logits`)."""
        self.head(head, "classification")

        def run(batch: torch.Tensor) -> torch.Tensor:
            return self.model.head_outputs(head, batch)

        if isinstance(tokens, torch.Tensor):
            batch = self._as_batch(tokens)
            with self._mode():
                logits = self._outputs(run(batch))
        else:
            logits = torch.stack(self._batched(tokens, lambda batch, _: list(run(batch))))
        return logits if return_logits else F.log_softmax(logits, dim=-1)

    def answer(
        self, question: str | Sequence[str], context: str | Sequence[str], topk: int = 1, name: str = "squad"
    ) -> list:
        """Extractive QA with the span head `name`: up to `topk` spans [(text, score, char_start)]
        of `context`, best first, decoded as SQuAD dev is.

        A question and a context (strings) give one such list. A list of questions gives one list
        each: against a list of as many contexts, or all against one context string. A question
        must hold text and a context must not be empty (UserError naming the argument); a context
        of only whitespace has no span ([]). Contexts are read in overlapping windows sized to the
        model's positions (`qa.windows.answer_windows`); a question is cut to the window's share.
        """
        return answer(self, question, context, topk, name)

    def tag(self, text: str | Sequence[str], name: str | None = None) -> list:
        """Entities [{"type", "text", "start", "end", "score"}] of a text (a list of texts: a list
        each, batched by length) from the tagging head `name` (default: the model's one), grouped
        as HF's token-classification pipeline with aggregation_strategy="simple" groups them."""
        return tag(self, text, name)

    def disambiguate(
        self, sentence: str, candidates: Sequence[str] | None = None, return_scores: bool = False
    ):
        """fairseq's `disambiguate_pronoun`: the candidate that the `[pronoun]` marked in `sentence`
        refers to, scored by the masked LM at the pronoun's place (without `candidates`: the
        sentence's noun phrases; with a `_query_` marked: whether it wins). See hub/disambiguate.py."""
        from roberta.hub.disambiguate import disambiguate

        return disambiguate(self, sentence, candidates, return_scores)

    def fill_mask(self, masked_input: str | Sequence[str], topk: int = 5):
        """The `topk` fillings of the one `<mask>` in a text: [(filled text, probability, token)].

        fairseq's semantics: the text is split at `<mask>`, each side right-stripped and encoded
        on its own, so the mask stands for a token that carries its leading space (' Paris'),
        and the filled text replaces ' <mask>' (or '<mask>' with no space before it) by that
        token. A symbol or WordPiece token carries no space: it replaces '<mask>' alone
        ("EVQL<mask>ES" -> "EVQLVES"). A list of texts gives a list of such lists, computed in batches.

        Refused for a model whose checkpoint held no masked-LM head.
        """
        return fill_mask(self, masked_input, topk)

    def check_fill_mask(self, topk: int) -> None:
        """`fill_mask`'s model and `topk`, checked before any text is read (UserError)."""
        check_fill_mask(self, topk)

    def mask_logits(self, masked_input: str | Sequence[str]) -> torch.Tensor:
        """The vocabulary logits (float32) that `fill_mask` ranks, at the one `<mask>` of a text:
        [V] for a text, [N, V] for a list of texts (batched by length, in input order)."""
        return mask_logits(self, masked_input)

    def encode_masked(self, text: str) -> torch.Tensor:
        """The ids `fill_mask` runs for a text with one `<mask>` (UserError: no or several masks,
        or longer than the model's positions)."""
        return torch.tensor(masked_ids(self.tokenizer, text, self.max_seq_len), dtype=torch.long)

    # ---- batching

    def _as_batch(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() not in (1, 2):
            raise UserError(
                f"token ids must be a 1-D sequence or a 2-D [batch, length] tensor, not {tokens.dim()}-D "
                f"(shape {list(tokens.shape)})"
            )
        check_ids(tokens, self.model.config.vocab_size)
        return (tokens.unsqueeze(0) if tokens.dim() == 1 else tokens).to(self.device)

    def _batched(self, seqs: TokenSeqs, run: Callable[[torch.Tensor, list[int]], list]) -> list:
        """`run(padded batch, lengths)` over length-sorted batches; its per-row results in input order."""
        seqs = sequences(seqs, self.model.config.vocab_size)
        lengths = [len(s) for s in seqs]
        results: list = [None] * len(seqs)
        with self._mode():
            for batch in length_batches(lengths, self.batch_tokens):
                padded = pad([seqs[i] for i in batch], self.tokenizer.pad_id).to(self.device)
                for i, result in zip(batch, self._outputs(run(padded, [lengths[i] for i in batch]))):
                    results[i] = result
        return results
