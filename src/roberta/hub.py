"""fairseq's hub interface on our model: load, encode, decode, extract_features, predict, fill_mask.

Every call taking token ids also takes a *list* of 1-D id sequences. A list runs batched by
length: sorted, cut into batches of at most `batch_tokens` padded tokens, each padded with
`<pad>` only to its own longest sequence, then put back in input order. The layers compute the
real tokens only (`RobertaModel.forward(unpad=True)`), and sorting keeps attention's padding
small too: a naive padded batch spends most of a CPU's time on padding.

In eval mode (the state `load` returns) the calls run under `torch.inference_mode`; in train
mode they keep the autograd graph, so a model can be fine-tuned through this interface.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from roberta.batching import length_batches, pad
from roberta.checkpoint import check_vocabulary, require_lm_head
from roberta.errors import UserError
from roberta.model import EMBEDDING_HEAD, POOLS, RobertaModel
from roberta.model import pool as pooled
from roberta.qa.examples import SquadExample
from roberta.qa.predict import predict_windows
from roberta.qa.windows import answer_windows, make_windows
from roberta.tokenizer import Tokenizer

MASK = "<mask>"
# Padded tokens per batch: the fastest of 1024/2048/4096 in the embed benchmark
# (benchmarks/experiments/batch-tokens.md). Smaller budgets make smaller matrix products; larger
# ones span wider length ranges per batch, so they pad more.
DEFAULT_BATCH_TOKENS = 2048

TokenSeqs = Sequence[torch.Tensor | Sequence[int]]


class TooLongError(UserError):
    """A text has more tokens than the model has positions; `index` is its place in the batch."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


class Roberta(nn.Module):
    """A model and its tokenizer behind fairseq's `RobertaHubInterface` calls."""

    def __init__(self, model: RobertaModel, tokenizer: Tokenizer, batch_tokens: int = DEFAULT_BATCH_TOKENS):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.batch_tokens = batch_tokens

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
        return load(model_dir, chosen, map_location)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def max_seq_len(self) -> int:
        return self.model.config.max_seq_len

    def _mode(self) -> AbstractContextManager:
        return torch.inference_mode(not self.training)

    def quantize(self) -> Roberta:
        """Dynamic int8 for CPU serving, in place: every `nn.Linear` of the encoder and the heads
        holds int8 weights and runs int8 products (inputs quantized per call). Embeddings,
        LayerNorm, attention and the masked-LM projection (tied to the token embedding) stay fp32.
        Returns the hub in eval mode; every call works as before, within int8's error (the CLI's
        `--int8` prints it). It is for serving: it does not train, and `checkpoint.save` takes the
        fp32 model (quantize after loading).

        Refused (UserError) off the CPU, or on weights that are not float32.
        """
        from roberta.int8 import quantize_linears, require_cpu

        require_cpu(self.device)
        quantize_linears(self.model)
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
            _refuse_or_warn(len(ids), 0, truncate, 1, self.max_seq_len)
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
            _refuse_or_warn(len(ids[long[0]]), long[0], truncate, len(long), self.max_seq_len)
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
            return out.hidden_states if return_all_hiddens else out.last_hidden_state

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
        self.check_embed(layer, pool)
        layers = self.model.config.num_layers + 1
        last = layer in (-1, layers - 1)
        if self._own_vector(layer, pool):
            return torch.stack(
                self._batched(tokens, lambda batch, _: list(self.model.sentence_embedding(batch, True)))
            )
        pool = pool or "cls"

        def run(batch: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
            out = self.model(
                batch,
                return_all_hiddens=not last,
                select="first" if last and pool == "cls" else None,
                unpad=True,
            )
            hidden = out.last_hidden_state if out.hidden_states is None else out.hidden_states[layer]
            return list(pooled(hidden, batch.ne(self.model.config.padding_idx), pool))

        return torch.stack(self._batched(tokens, run))

    def embed_width(self, layer: int = -1, pool: str | None = None) -> int:
        """The width of `embed(tokens, layer, pool)`'s vectors: a sentence encoder's own may be mapped
        onto its teacher's width."""
        if self._own_vector(layer, pool):
            return self.model.heads[EMBEDDING_HEAD].spec().get("dim", self.model.config.hidden_size)
        return self.model.config.hidden_size

    def _own_vector(self, layer: int, pool: str | None) -> bool:
        """Whether `embed(.., layer, pool)` is the model's own sentence vector: it has an embedding
        head, and the last layer with no other pooling is asked for."""
        own = self.embedding_pool()
        return layer in (-1, self.model.config.num_layers) and own is not None and pool in (None, own)

    def embedding_pool(self) -> str | None:
        """The pooling of the model's sentence-embedding head, None where it has none."""
        return self.model.heads[EMBEDDING_HEAD].pool if EMBEDDING_HEAD in self.model.heads else None

    def check_embed(self, layer: int, pool: str | None) -> None:
        """`embed`'s options, checked on their own: a file is refused before anything is read or drawn."""
        layers = self.model.config.num_layers + 1
        if type(layer) is not int or not -layers <= layer < layers:
            raise UserError(
                f"layer {layer!r} out of range: the model has {layers} (embeddings + {layers - 1} layers), "
                f"-{layers}..{layers - 1}"
            )
        if pool is not None and pool not in POOLS:
            raise UserError(f"pool {pool!r} unknown; choose one of {', '.join(POOLS)}")

    def head(self, name: str, kind: str) -> nn.Module:
        """The head `name`, which must be of `kind` ("classification" for `predict`, "span" for
        `answer`), else a UserError: a span head's two logits per token are no class scores."""
        head = self.model._require_head(name)
        if head.kind != kind:
            use = "predict/--head" if head.kind == "classification" else "answer()"
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
                logits = run(batch)
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
        questions, contexts = _question_context_pairs(question, context)
        if type(topk) is not int or topk < 1:
            raise UserError(f"topk {topk!r} out of range: give 1 or more")
        self.head(name, "span")
        max_length, stride, max_query = answer_windows(self.max_seq_len)
        examples = [
            SquadExample(str(i), q, c, ()) for i, (q, c) in enumerate(zip(questions, contexts)) if c.strip()
        ]
        nbest = {}
        if examples:
            windows = make_windows(
                self.tokenizer, examples, max_length, stride, max_query, train=False
            ).windows
            # Decoding's usual 20 candidates (HF's n_best_size), more when more spans are asked for.
            nbest = predict_windows(
                self.model, name, "1.1", examples, windows, self.tokenizer.pad_id, n_best=max(topk, 20)
            ).nbest
        answers = [
            [(s.text, s.score, s.char_start) for s in nbest.get(str(i), [])[:topk]]
            for i in range(len(questions))
        ]
        return answers[0] if isinstance(question, str) else answers

    def fill_mask(self, masked_input: str | Sequence[str], topk: int = 5):
        """The `topk` fillings of the one `<mask>` in a text: [(filled text, probability, token)].

        fairseq's semantics: the text is split at `<mask>`, each side right-stripped and encoded
        on its own, so the mask stands for a token that carries its leading space (' Paris'),
        and the filled text replaces ' <mask>' (or '<mask>' with no space before it) by that
        token. A symbol or WordPiece token carries no space: it replaces '<mask>' alone
        ("EVQL<mask>ES" -> "EVQLVES"). A list of texts gives a list of such lists, computed in batches.

        Refused for a model whose checkpoint held no masked-LM head.
        """
        self.check_fill_mask(topk)
        texts = [masked_input] if isinstance(masked_input, str) else list(masked_input)

        def run(batch: torch.Tensor, _: list[int]) -> list[tuple[list[float], list[int]]]:
            values, indices = self._logits_at_mask(batch).softmax(dim=-1).topk(topk, dim=-1)
            return list(zip(values.tolist(), indices.tolist()))

        found = self._batched([self.encode_masked(text) for text in texts], run)
        results = [_fillings(self.tokenizer, text, *best) for text, best in zip(texts, found)]
        return results[0] if isinstance(masked_input, str) else results

    def check_fill_mask(self, topk: int) -> None:
        """`fill_mask`'s model and `topk`, checked before any text is read (UserError)."""
        require_lm_head(self.model, "fill_mask")
        vocab = self.model.config.vocab_size
        if self.tokenizer.vocab_size != vocab:
            # The LM would rank ids the tokenizer cannot spell, or never predict some it can.
            raise UserError(
                f"the tokenizer has {self.tokenizer.vocab_size} tokens but the model's output layer "
                f"{vocab}: they were not trained together"
            )
        if type(topk) is not int or not 1 <= topk <= vocab:
            raise UserError(f"topk {topk!r} out of range: give 1..{vocab} (the model's vocabulary size)")

    def mask_logits(self, masked_input: str | Sequence[str]) -> torch.Tensor:
        """The vocabulary logits (float32) that `fill_mask` ranks, at the one `<mask>` of a text:
        [V] for a text, [N, V] for a list of texts (batched by length, in input order)."""
        require_lm_head(self.model, "mask_logits")
        texts = [masked_input] if isinstance(masked_input, str) else list(masked_input)
        logits = torch.stack(
            self._batched(
                [self.encode_masked(text) for text in texts],
                lambda batch, _: list(self._logits_at_mask(batch)),
            )
        )
        return logits[0] if isinstance(masked_input, str) else logits

    def _logits_at_mask(self, batch: torch.Tensor) -> torch.Tensor:
        # One <mask> per row, so the rows come out one per sequence, in order.
        return self.model.mask_logits(batch, self.tokenizer.mask_id).float()

    def encode_masked(self, text: str) -> torch.Tensor:
        """The ids `fill_mask` runs for a text with one `<mask>` (UserError: no or several masks,
        or longer than the model's positions)."""
        return torch.tensor(_masked_ids(self.tokenizer, text, self.max_seq_len), dtype=torch.long)

    # ---- batching

    def _as_batch(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() not in (1, 2):
            raise UserError(
                f"token ids must be a 1-D sequence or a 2-D [batch, length] tensor, not {tokens.dim()}-D "
                f"(shape {list(tokens.shape)})"
            )
        _check_ids(tokens, self.model.config.vocab_size)
        return (tokens.unsqueeze(0) if tokens.dim() == 1 else tokens).to(self.device)

    def _batched(self, seqs: TokenSeqs, run: Callable[[torch.Tensor, list[int]], list]) -> list:
        """`run(padded batch, lengths)` over length-sorted batches; its per-row results in input order."""
        seqs = _sequences(seqs, self.model.config.vocab_size)
        lengths = [len(s) for s in seqs]
        results: list = [None] * len(seqs)
        with self._mode():
            for batch in length_batches(lengths, self.batch_tokens):
                padded = pad([seqs[i] for i in batch], self.tokenizer.pad_id).to(self.device)
                for i, result in zip(batch, run(padded, [lengths[i] for i in batch])):
                    results[i] = result
        return results


def _question_context_pairs(question, context) -> tuple[list[str], list[str]]:
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


def _quote(text: str) -> str:
    """A text as an error message quotes it: its start, never a whole document."""
    return repr(text) if len(text) <= 60 else f"{text[:60]!r}..."


def _text(argument: str, value, blank: bool = False) -> str:
    """A non-empty string; one of only whitespace too with `blank` (a context: it has no span)."""
    if not isinstance(value, str):
        raise UserError(f"{argument}: expected a string, got {type(value).__name__}")
    if not (value if blank else value.strip()):
        raise UserError(f"{argument}: {'empty' if not value else 'only whitespace'}")
    return value


def load(
    path: str | Path, checkpoint_file: str | None = None, map_location: str | torch.device = "cpu"
) -> Roberta:
    """Our checkpoint directory, an HF directory, or a fairseq directory / `.pt` file, in eval mode.

    `checkpoint_file` names the `.pt` inside a fairseq directory (default: its model.pt).
    """
    from roberta.convert import load_any

    path = Path(path)
    if checkpoint_file is not None:
        path = path / checkpoint_file
        if not path.is_file():
            raise UserError(f"{path}: no such checkpoint file")
    map_location = check_device(map_location)
    model, tokenizer = load_any(path, map_location)
    if tokenizer is None:
        raise UserError(
            f"{path}: no tokenizer files beside the weights (vocab.json + merges.txt, tokenizer.json, "
            "encoder.json + vocab.bpe + dict.txt, or a dict.txt of symbols)"
        )
    # Our format checks this on read; HF and fairseq directories are checked here, the same way.
    check_vocabulary(tokenizer, model.config, str(path))
    return Roberta(model, tokenizer).eval()


def check_device(device: str | torch.device) -> torch.device:
    """`device` as a torch.device this machine has, else a UserError naming it."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"device {device!r} unknown (e.g. cpu, cuda, cuda:1, mps)") from None
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as e:
        # torch's messages run to a page (the list of every backend); the first sentence says it.
        reason = (str(e).strip() or type(e).__name__).splitlines()[0].split(". ")[0]
        raise UserError(f"device {str(device)!r} unavailable on this machine ({reason})") from None
    return device


# ---- the hub's inputs, checked and shaped


def _refuse_or_warn(length: int, index: int, truncate: bool, count: int, max_seq_len: int) -> None:
    if not truncate:
        raise TooLongError(
            f"text of {length} tokens is longer than the model's {max_seq_len} positions "
            f"(truncate=True / --truncate cuts it)",
            index,
        )
    warnings.warn(f"truncated {count} text(s) to the model's {max_seq_len} positions", stacklevel=3)


def _masked_ids(t: Tokenizer, text: str, max_seq_len: int) -> list[int]:
    """`<s> before <mask> after </s>`, each side right-stripped and encoded on its own (fairseq)."""
    count = text.count(MASK)
    if count != 1:
        raise UserError(f"fill_mask needs exactly one {MASK} in the text, found {count}: {_quote(text)}")
    before, after = text.split(MASK)
    ids = [t.bos_id, *t.tokenize_ids(before.rstrip()), t.mask_id, *t.tokenize_ids(after.rstrip()), t.eos_id]
    if len(ids) > max_seq_len:
        raise UserError(
            f"fill_mask text of {len(ids)} tokens is longer than the model's {max_seq_len} "
            f"positions: {_quote(text)}"
        )
    return ids


def _fillings(t: Tokenizer, text: str, scores: list[float], ids: list[int]) -> list[tuple[str, float, str]]:
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


def _sequences(seqs: TokenSeqs, vocab: int) -> list[torch.Tensor]:
    """A list of 1-D id sequences, each checked (UserError naming the input)."""
    if isinstance(seqs, (str, bytes)):
        raise UserError(f"token ids expected, got text {seqs[:40]!r} (encode it first: roberta.encode)")
    if not isinstance(seqs, (Sequence, np.ndarray)):
        raise UserError(
            f"token ids expected: a tensor or a list of 1-D id sequences, not {type(seqs).__name__}"
        )
    if len(seqs) == 0:
        raise UserError("an empty list of inputs")
    return [_as_sequence(seq, i, vocab) for i, seq in enumerate(seqs)]


def _as_sequence(seq, index: int, vocab: int) -> torch.Tensor:
    if isinstance(seq, (str, bytes)):
        raise UserError(
            f"input {index}: token ids expected, got text {seq[:40]!r} (encode it first: roberta.encode)"
        )
    try:
        tensor = torch.as_tensor(seq)
    except (TypeError, ValueError, RuntimeError):
        raise UserError(f"input {index}: not a sequence of token ids: {str(seq)[:60]!r}") from None
    if tensor.dim() == 0:
        raise UserError(
            f"input {index}: a single id {seq!r}, not a sequence (the ids of one text: a tensor, or [ids])"
        )
    if tensor.dim() != 1:
        raise UserError(f"input {index}: each sequence in a list must be 1-D, not shape {list(tensor.shape)}")
    _check_ids(tensor, vocab, index)
    return tensor.long()


def _check_ids(tokens: torch.Tensor, vocab: int, index: int | None = None) -> None:
    """Integer ids inside the model's vocabulary, else a UserError (not an IndexError from the
    embedding)."""
    where = "" if index is None else f"input {index}: "
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise UserError(f"{where}token ids must be integers, not {tokens.dtype}")
    if tokens.numel() == 0:
        raise UserError(f"{where}an empty sequence of token ids")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab:
        raise UserError(
            f"{where}token id {low if low < 0 else high} is outside the model's vocabulary of {vocab} "
            f"(0..{vocab - 1})"
        )
