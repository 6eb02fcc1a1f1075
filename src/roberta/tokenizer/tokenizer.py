"""The `Tokenizer`: text <-> model ids for every vocabulary `readers` reads, on the engines that
`engines` builds, ids laid out as fairseq lays them out (`layout`)."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import tokenizers

from roberta.errors import UserError
from roberta.io import atomic_write
from roberta.tokenizer import formats
from roberta.tokenizer.engines import (
    BYTE_TO_CHAR,
    SPACE_MARKER,
    Engine,
    cut_long_runs,
    tiktoken_encoding,
    tiktoken_ids,
    token_bytes,
)
from roberta.tokenizer.formats import BYTE_LEVEL
from roberta.tokenizer.layout import Truncation, assemble


def _pieces(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def _by_pieces(encode, texts: list[str], cuts: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """`encode` (texts -> flat ids, lengths) of the texts cut at `cuts`, each text's pieces' lengths
    summed back into one."""
    ids, lengths = encode([piece for text, at in zip(texts, cuts) for piece in _pieces(text, at)])
    return ids, np.add.reduceat(lengths, np.cumsum([0] + [len(at) + 1 for at in cuts[:-1]]))


def _with_offsets(engine: tokenizers.Tokenizer, text: str, byte_level: bool) -> tuple[list, list]:
    """The engine's ids of `text` and their character spans, a long whitespace run cut first for
    the byte-level regex (`cut_long_runs`)."""
    ids, offsets, start = [], [], 0
    for piece in _pieces(text, cut_long_runs(text) if byte_level else []):
        encoding = engine.encode(piece, add_special_tokens=False)
        ids += encoding.ids
        offsets += [(a + start, b + start) for a, b in encoding.offsets]
        start += len(piece)
    return ids, offsets


def _role_id(role: str) -> property:
    """The id of a special token's role (bos, pad, eos, unk, mask) as a read-only attribute."""
    return property(lambda self: self._roles[role], doc=f"The id of the {role} token.")


class Tokenizer:
    """Text <-> model ids. Build with `from_gpt2`, `from_hf`, `from_wordpiece` or `load_tokenizer`."""

    def __init__(
        self,
        kind: Literal["gpt2", "hf", "wordpiece", "symbols"],
        tokens: list[str],
        roles: dict[str, int],
        reference: tokenizers.Tokenizer,
        reference_vocab: dict[str, int],
        files: dict[str, bytes],
        *,
        reference_to_model: np.ndarray | None = None,
        merges: Sequence[tuple[str, str]] = (),
        lowercase: bool = False,
        strip_accents: bool = False,
        joiner: str = " ",
    ):
        self.kind = kind
        self._tokens = tokens
        self._token_ids = {t: i for i, t in enumerate(tokens)}
        self._roles = roles
        self._reference = reference
        self._reference_to_model = reference_to_model
        self._merges = merges
        self._files = files
        self._lowercase = lowercase
        self._strip_accents = strip_accents
        self._joiner = joiner  # between decoded symbols of a symbol vocabulary
        self._special = np.zeros(len(tokens), dtype=bool)
        self._special[list(roles.values())] = True
        byte_level = kind in BYTE_LEVEL
        if byte_level:
            reachable = set(BYTE_TO_CHAR.values()) | {a + b for a, b in merges}
            # A literal symbol (fairseq's madeupwordNNNN, <|endoftext|>) is a word of its own, as in fairseq.
            starts = [t.startswith(SPACE_MARKER) or t not in reachable for t in tokens]
            self._bytes = [token_bytes(t) for t in tokens]
        elif kind == "wordpiece":
            starts = [not t.startswith("##") for t in tokens]
        else:  # every symbol is a word of its own
            starts = [True] * len(tokens)
        self._word_start = np.array(starts, dtype=bool) | self._special
        self._tiktoken, self._rank_to_model = (
            tiktoken_encoding(f"roberta-{kind}", merges, reference_vocab, reference_to_model)
            if byte_level
            else (None, None)
        )

    # ---- constructors

    @classmethod
    def from_gpt2(cls, encoder_json: str | Path, vocab_bpe: str | Path, dict_txt: str | Path) -> Tokenizer:
        """GPT-2 BPE files + fairseq dict.txt, ids exactly as fairseq (`formats.gpt2`)."""
        return cls.from_vocabulary(formats.gpt2(encoder_json, vocab_bpe, dict_txt))

    @classmethod
    def from_hf(cls, vocab_json: str | Path, merges_txt: str | Path) -> Tokenizer:
        """HF byte-level BPE files, vocab.json + merges.txt (`formats.hf`)."""
        return cls.from_vocabulary(formats.hf(vocab_json, merges_txt))

    @classmethod
    def from_tokenizer_json(cls, tokenizer_json: str | Path) -> Tokenizer:
        """The tokenizer.json that transformers 5.x saves alone (`formats.tokenizer_json`)."""
        return cls.from_vocabulary(formats.tokenizer_json(tokenizer_json))

    @classmethod
    def from_fairseq_dict(cls, dict_txt: str | Path) -> Tokenizer:
        """A fairseq dict.txt of plain symbols, no BPE (`formats.fairseq_dict`)."""
        return cls.from_vocabulary(formats.fairseq_dict(dict_txt))

    @classmethod
    def from_wordpiece(
        cls, vocab_txt: str | Path, lowercase: bool | None = None, strip_accents: bool | None = None
    ) -> Tokenizer:
        """BERT WordPiece vocab.txt, case and accents as recorded beside it (`formats.wordpiece`)."""
        return cls.from_vocabulary(formats.wordpiece(vocab_txt, lowercase, strip_accents))

    @classmethod
    def from_vocabulary(cls, vocabulary: formats.Vocabulary) -> Tokenizer:
        """The tokenizer of a vocabulary read from its files, encoding with its engine."""
        read = vocabulary.read
        return cls(
            vocabulary.kind,
            read.tokens,
            read.roles,
            vocabulary.engine,
            read.vocab,
            read.files,
            reference_to_model=read.engine_to_model,
            merges=read.merges,
            lowercase=read.lowercase,
            strip_accents=read.strip_accents,
            joiner=vocabulary.joiner,
        )

    # ---- vocabulary

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    bos_id = _role_id("bos")
    pad_id = _role_id("pad")
    eos_id = _role_id("eos")
    unk_id = _role_id("unk")
    mask_id = _role_id("mask")

    @property
    def lowercase(self) -> bool:
        """Whether text is lowercased before tokenizing (WordPiece's do_lower_case)."""
        return self._lowercase

    @property
    def strip_accents(self) -> bool:
        """Whether accents are stripped before tokenizing (WordPiece's strip_accents)."""
        return self._strip_accents

    @property
    def engine(self) -> str:
        """The engine `tokenize_ids` uses by default: 'tiktoken' (byte-level BPE) or 'tokenizers'."""
        return "tiktoken" if self._tiktoken is not None else "tokenizers"

    @property
    def merges(self) -> list[tuple[str, str]]:
        """The BPE merges in priority order (empty for WordPiece and symbol vocabularies)."""
        return list(self._merges)

    def hf_tokenizer_json(self) -> str:
        """This tokenizer as an HF tokenizer.json in model ids, the one file transformers.js reads
        (`formats.hf_tokenizer_json`)."""
        return formats.hf_tokenizer_json(self.kind, self._tokens, self._roles, self._merges, self._reference)

    def id_to_token(self, i: int) -> str:
        return self._tokens[i]

    def token_to_id(self, token: str) -> int:
        """The id of a token as the vocabulary spells it ('Ġworld', '##ing', '<mask>'); KeyError if absent."""
        return self._token_ids[token]

    def fingerprint(self) -> str:
        """sha256 of what decides the ids (tokens in id order, merges, lowercasing), not of file bytes.

        GPT-2+dict.txt and the equivalent vocab.json+merges.txt give the same fingerprint.
        """
        model = {"wordpiece": "wordpiece", "symbols": "symbols"}.get(self.kind, "byte-level-bpe")
        content = {
            "model": model,
            "tokens": self._tokens,
            "merges": [f"{a} {b}" for a, b in self._merges],
            "lowercase": self._lowercase,
        }
        # Accents stripped as BERT does (with lowercasing only) add no key: fingerprints stay as they were.
        if self._strip_accents != self._lowercase:
            content["strip_accents"] = self._strip_accents
        return hashlib.sha256(
            json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()
        ).hexdigest()

    def word_start(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """True where a token starts a word: a special token, the first token, a token after a special
        token, a byte-level token with a leading space ('Ġ...'), a WordPiece token without '##'.
        `ids` may be a batch: sequences run along the last axis."""
        ids = np.asarray(ids, dtype=np.int64)
        starts = self._word_start[ids]
        if ids.shape[-1:] != (0,):
            starts[..., 0] = True
            starts[..., 1:] |= self._special[ids[..., :-1]]
        return starts

    @property
    def word_start_table(self) -> np.ndarray:
        """bool[vocab_size]: whether each id starts a word by itself (specials and literal symbols
        included), without the positional rules of `word_start`."""
        return self._word_start.copy()

    # ---- encoding

    def tokenize_ids(self, text: str, *, engine: Engine = None) -> list[int]:
        """Model ids of `text`, no special tokens. `engine` forces 'tiktoken' or 'tokenizers' (for checks)."""
        return self.tokenize_ids_batch([text], engine=engine)[0]

    def tokenize_ids_batch(self, texts: Sequence[str], *, engine: Engine = None) -> list[list[int]]:
        """`tokenize_ids` for many texts, on all cores."""
        ids, lengths = self.tokenize_ids_flat(texts, engine=engine)
        flat = ids.tolist()
        ends = np.cumsum(lengths).tolist()
        return [flat[end - n : end] for end, n in zip(ends, lengths.tolist())]

    def tokenize_ids_flat(
        self, texts: Sequence[str], *, engine: Engine = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """All texts' model ids concatenated (int32) and each text's token count (int64): the form a
        binarized corpus wants, without a Python list per token."""
        texts = list(texts)
        cuts = [cut_long_runs(t) for t in texts] if self.kind in BYTE_LEVEL else []
        if any(cuts):  # a whitespace run too long for the regex: its pieces, encoded apart
            return _by_pieces(lambda pieces: self.tokenize_ids_flat(pieces, engine=engine), texts, cuts)
        if (engine or self.engine) == "tiktoken":
            if self._tiktoken is None:
                raise ValueError(f"the tiktoken engine is not available for this {self.kind} tokenizer")
            return tiktoken_ids(self._tiktoken, self._rank_to_model, texts)
        pieces = [e.ids for e in self._reference.encode_batch_fast(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        ids = np.fromiter(itertools.chain.from_iterable(pieces), dtype=np.int64, count=int(lengths.sum()))
        lookup = self._reference_to_model
        return (ids if lookup is None else lookup[ids]).astype(np.int32), lengths

    def tokenize_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Model ids and each token's (start, end) character span in `text`, leading space excluded."""
        ids, offsets = _with_offsets(self._reference, text, self.kind in BYTE_LEVEL)
        if self._reference_to_model is not None:
            ids = self._reference_to_model[ids].tolist()
        return ids, offsets

    def encode(
        self,
        text: str,
        *pairs: str,
        no_separator: bool = False,
        max_length: int | None = None,
        truncation: Truncation = "longest_first",
    ) -> list[int]:
        """fairseq's layout: `<s> A </s>`, and for each further text `</s> B </s>` (one `</s>` less
        between texts with `no_separator`). `max_length` counts the special tokens."""
        seqs = self.tokenize_ids_batch([text, *pairs])
        return assemble(seqs, self.bos_id, self.eos_id, no_separator, max_length, truncation)

    def encode_batch(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        *,
        no_separator: bool = False,
        max_length: int | None = None,
        truncation: Truncation = "longest_first",
    ) -> list[list[int]]:
        """`encode(text)` or `encode(text, pair)` for each text, tokenized together on all cores."""
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(pairs)} pairs")
        firsts = self.tokenize_ids_batch(texts)
        seconds = self.tokenize_ids_batch(pairs) if pairs is not None else None
        return [
            assemble(
                [a] if seconds is None else [a, seconds[k]],
                self.bos_id,
                self.eos_id,
                no_separator,
                max_length,
                truncation,
            )
            for k, a in enumerate(firsts)
        ]

    # ---- decoding

    def decode(self, ids: Sequence[int] | np.ndarray, skip_special_tokens: bool = True) -> str:
        """Text of `ids`; exactly the encoded text for byte-level BPE. Bytes that do not form UTF-8
        (a sequence cut inside a character) become U+FFFD."""
        ids = [int(i) for i in ids]
        outside = [i for i in ids if not 0 <= i < len(self._tokens)]
        if outside:
            raise UserError(
                f"id {outside[0]} is outside the vocabulary of {len(self._tokens)} tokens "
                f"(0..{len(self._tokens) - 1})"
            )
        if skip_special_tokens:
            ids = [i for i in ids if not self._special[i]]
        if self.kind == "wordpiece":
            return self._reference.decode(ids, skip_special_tokens=False)
        if self.kind == "symbols":
            return self._joiner.join(self._tokens[i] for i in ids)
        return b"".join(self._bytes[i] for i in ids).decode("utf-8", errors="replace")

    # ---- files

    def save(self, directory: str | Path) -> None:
        """Write this tokenizer's files, byte for byte as loaded, into `directory` (created if needed)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in self._files.items():
            with atomic_write(directory / name, "wb") as f:
                f.write(data)
