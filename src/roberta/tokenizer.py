"""Tokenizers in the model's id space: byte-level BPE (GPT-2 + fairseq dict.txt, or HF
vocab.json + merges.txt, or an HF tokenizer.json), WordPiece (BERT vocab.txt) and fairseq symbol
vocabularies (a dict.txt of plain symbols: protein, character or pre-tokenized models).

Every id this module returns is a model id (a row of the embedding matrix). Text is always
text: a literal "<mask>" or "[CLS]" inside a string is tokenized as characters, as fairseq
does; special ids come only from `encode`'s layout. A symbol vocabulary is fairseq's exception:
its text is a sequence of dictionary symbols, so "<mask>" written out is the <mask> symbol there,
as `Dictionary.encode_line` reads it.

Two engines. `tokenizers` (HF, Rust) is the reference: it handles WordPiece and offsets.
For byte-level BPE, `tiktoken` encodes the same merges with about a third of the CPU time
(measured here on the books+wiki corpus); its ranks are mapped to model ids with a numpy
lookup array. tiktoken ranks *tokens*, BPE ranks *merge pairs*: a token made by two merges
would get the first merge's priority for both in tiktoken and encode differently. The
`tokenizers` trainer can produce such a vocabulary (a merge whose result already exists
reuses that token's id), so `_tiktoken_ranks` refuses one and the `tokenizers` engine is
used for everything. Beyond that rule, equality is checked, not proven: on all 79 MB of the
corpus for GPT-2, and on held-out text and random Unicode for a trained vocabulary
(tests/tokenizer/test_tokenizer.py).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import numpy as np
import tiktoken
import tokenizers
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers

from roberta.errors import UserError
from roberta.io import atomic_directory, atomic_write
from roberta.text_input import InputOptions, TrainingText

# GPT-2's pre-tokenizer; `tokenizers`' ByteLevel pre-tokenizer uses the same expression.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
SPACE_MARKER = "Ġ"  # byte-level BPE's printable stand-in for a leading space (byte 0x20)
ROLES = ("bos", "pad", "eos", "unk", "mask")
BYTE_LEVEL_SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>", "mask": "<mask>"}
WORDPIECE_SPECIALS = {"bos": "[CLS]", "pad": "[PAD]", "eos": "[SEP]", "unk": "[UNK]", "mask": "[MASK]"}
Truncation = Literal["longest_first", "only_first", "only_second"] | None
Engine = Literal["tiktoken", "tokenizers"] | None
THREAD_CHUNK = 1000  # texts per thread task when encoding a batch
# fairseq's Dictionary holds these four before dict.txt's first line (ids 0..3).
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
# fairseq's `tokenize_line` splits at Python's `\s`, that is str.isspace (every such character lies
# below U+3001); written for the Oniguruma regexes of `tokenizers`.
FAIRSEQ_SPACE = "[" + "".join(f"\\x{{{c:x}}}" for c in range(0x3001) if chr(c).isspace()) + "]+"
# Every file `load_tokenizer` reads: a directory holding none of them holds no tokenizer.
TOKENIZER_FILES = (
    "encoder.json",
    "vocab.bpe",
    "dict.txt",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.json",
)
# Fillers fairseq appends to pad a dictionary to a multiple of 8; no text holds them.
MADEUP_WORD = re.compile(r"madeupword\d{4}")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, in GPT-2's byte order (printable bytes first)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = {b: chr(b) for b in printable}
    for n, b in enumerate(b for b in range(256) if b not in chars):
        chars[b] = chr(256 + n)
    return chars


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


_CHAR_TO_LATIN1 = str.maketrans({c: chr(b) for c, b in CHAR_TO_BYTE.items()})
_NOT_BYTE_CHARS = frozenset(map(chr, range(256))) - CHAR_TO_BYTE.keys()


def _token_bytes(token: str) -> bytes:
    """The bytes a byte-level token stands for; a token outside the byte alphabet is literal text."""
    if _NOT_BYTE_CHARS.isdisjoint(token):
        try:
            return token.translate(_CHAR_TO_LATIN1).encode("latin-1")
        except UnicodeEncodeError:
            pass
    return token.encode("utf-8")


# ---------------------------------------------------------------- file reading


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None


def _decode_utf8(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(f"{path}:{line}: not valid UTF-8") from None


def _lines(path: Path, data: bytes) -> list[str]:
    """The file's lines without line endings (LF or CRLF); a final newline adds no line."""
    lines = _decode_utf8(path, data).split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def _read_json_object(path: Path, data: bytes) -> dict:
    try:
        obj = json.loads(_decode_utf8(path, data))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(obj, dict):
        raise UserError(f"{path}:1: expected a JSON object mapping token -> id")
    return obj


def _read_vocab_json(path: Path, data: bytes) -> dict[str, int]:
    """A token -> id JSON object whose ids are exactly 0..n-1."""
    vocab = _read_json_object(path, data)
    ids = sorted(vocab.values()) if all(type(i) is int for i in vocab.values()) else None
    if ids != list(range(len(vocab))):
        raise UserError(f"{path}:1: ids must be the integers 0..{len(vocab) - 1}, each used once")
    return vocab


def _read_merges(path: Path, data: bytes, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """GPT-2 vocab.bpe / HF merges.txt: an optional '#version' line, then 'left right' per line."""
    merges = []
    for number, line in enumerate(_lines(path, data), start=1):
        if not line or (number == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise UserError(
                f"{path}:{number}: expected 'left right' (two tokens separated by one space), got {line!r}"
            )
        merges.append(_merge(parts, vocab, f"{path}:{number}", "the vocabulary"))
    return merges


def _merge(pair: list[str], vocab: dict[str, int], where: str, vocabulary: str) -> tuple[str, str]:
    """A merge whose two tokens and the token they make are all in `vocab`, or a UserError."""
    for token in (*pair, pair[0] + pair[1]):
        if token not in vocab:
            raise UserError(f"{where}: token {token!r} is not in {vocabulary}")
    return pair[0], pair[1]


def _read_fairseq_dict(path: Path, data: bytes) -> list[str]:
    """fairseq dict.txt: '<symbol> <count> [#fairseq:overwrite]' per line; returns the symbols in
    order, one per line. As in fairseq's Dictionary, <s> <pad> </s> <unk> are already held."""
    if data.startswith(b"\xef\xbb\xbf"):
        raise UserError(
            f"{path}:1: starts with a UTF-8 byte-order mark, which fairseq reads as part of the first symbol"
        )
    symbols: list[str] = []
    seen: set[str] = set(FAIRSEQ_SPECIALS)
    for number, line in enumerate(_lines(path, data), start=1):
        symbol, _, count = line.rstrip().rpartition(" ")  # fairseq strips trailing whitespace first
        overwrite = count == "#fairseq:overwrite"
        if overwrite:
            symbol, _, count = symbol.rpartition(" ")
        if not symbol or not (count.isascii() and count.isdigit()):
            raise UserError(f"{path}:{number}: expected '<symbol> <count>', got {line!r}")
        if symbol in seen:
            # fairseq's `add_symbol(overwrite=True)` gives the symbol a second id and encodes it with
            # the new one: a vocabulary with one token at two ids, which no other format can hold.
            flag = " (#fairseq:overwrite would give it a second id)" if overwrite else ""
            raise UserError(f"{path}:{number}: duplicate symbol {symbol!r}{flag}")
        seen.add(symbol)
        symbols.append(symbol)
    return symbols


def _read_wordpiece_vocab(path: Path, data: bytes) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for number, token in enumerate(_lines(path, data), start=1):
        if not token:
            raise UserError(f"{path}:{number}: empty token")
        if token in vocab:
            raise UserError(f"{path}:{number}: duplicate token {token!r}")
        vocab[token] = number - 1
    return vocab


def _roles(path: Path, vocab: dict[str, int], *choices: dict[str, str]) -> dict[str, int]:
    roles = {}
    for role in ROLES:
        names = [c[role] for c in choices]
        found = [vocab[n] for n in names if n in vocab]
        if not found:
            raise UserError(f"{path}: no {' or '.join(names)} token (needed for the {role} role)")
        roles[role] = found[0]
    return roles


def _read_wordpiece_config(path: Path) -> tuple[dict[str, bool | None], bytes | None]:
    """do_lower_case and strip_accents of a BERT tokenizer_config.json ({} without one), and its bytes."""
    if not path.is_file():
        return {}, None
    raw = _read_bytes(path)
    config = _read_json_object(path, raw)
    for field in ("do_lower_case", "strip_accents"):
        if config.get(field) is not None and type(config[field]) is not bool:
            raise UserError(
                f"{path}: field {field!r} is {json.dumps(config[field])}, expected true, false or null"
            )
    return {
        "do_lower_case": config.get("do_lower_case") or False,
        "strip_accents": config.get("strip_accents"),
    }, raw


def _agreed(recorded: dict[str, bool | None], field: str, asked: bool | None, vocab: Path) -> bool | None:
    """The value asked for, else the recorded one; where both are given they must agree."""
    found = recorded.get(field)
    if asked is not None and found is not None and found != asked:
        raise UserError(
            f"{vocab.with_name('tokenizer_config.json')}: field {field!r} is {json.dumps(found)}, but "
            f"{json.dumps(asked)} was asked for: {vocab} was built for the recorded choice "
            "(load it as recorded, or train a vocabulary for the other)"
        )
    return asked if asked is not None else found


def bert_normalizer(lowercase: bool, strip_accents: bool) -> normalizers.Normalizer:
    """BERT's text cleaning (control characters removed, CJK characters split off), then the case
    and accents as chosen: what BertTokenizerFast applies before WordPiece."""
    return normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
    )


def _fairseq_ids(symbols: list[str]) -> list[str]:
    """Tokens in fairseq's id order: the four specials, dict.txt's symbols, then <mask>, which
    fairseq's masked_lm task adds unless dict.txt already lists it (`add_symbol` keeps that id)."""
    return [*FAIRSEQ_SPECIALS, *symbols, *(["<mask>"] if "<mask>" not in symbols else [])]


def _is_gpt2_id(symbol: str) -> bool:
    return symbol.isascii() and symbol.isdigit()


def _gpt2_ids(symbols: list[str]) -> int:
    """How many symbols are GPT-2 BPE ids, if they are most of a dict.txt (a GPT-2 dictionary), else 0."""
    numbers = sum(map(_is_gpt2_id, symbols))
    return numbers if 2 * numbers > len(symbols) else 0


def _read_tokenizer_json(path: Path, data: bytes) -> tuple[dict, dict[str, int]]:
    """An HF tokenizer.json → (the object, token → id over model.vocab and added_tokens, ids 0..n-1)."""
    obj = _read_json_object(path, data)
    model = obj.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("vocab"), dict):
        raise UserError(f"{path}: field 'model.vocab' must be a JSON object mapping token -> id")
    vocab = dict(model["vocab"])
    added = obj.get("added_tokens") or []
    if not isinstance(added, list) or not all(isinstance(a, dict) for a in added):
        raise UserError(f"{path}: field 'added_tokens' must be a list of objects")
    for token in added:
        content, i = token.get("content"), token.get("id")
        if not isinstance(content, str) or type(i) is not int:
            raise UserError(f"{path}: added token {token!r} needs a string 'content' and an integer 'id'")
        if vocab.get(content, i) != i or (content not in vocab and i in vocab.values()):
            raise UserError(f"{path}: added token {content!r} with id {i} contradicts model.vocab")
        vocab[content] = i
    ids = sorted(vocab.values()) if all(type(i) is int for i in vocab.values()) else None
    if ids != list(range(len(vocab))):
        raise UserError(f"{path}: model.vocab ids must be the integers 0..{len(vocab) - 1}, each used once")
    return obj, vocab


def _tokenizer_json_merges(path: Path, model: dict, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """model.merges, as "left right" strings (tokenizers < 0.20) or [left, right] pairs (later)."""
    merges = model.get("merges")
    if not isinstance(merges, list):
        raise UserError(f"{path}: field 'model.merges' must be a list")
    pairs = []
    for number, merge in enumerate(merges):
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, str) and t for t in pair)):
            raise UserError(f"{path}: model.merges[{number}] is {merge!r}, expected two tokens")
        pairs.append(_merge(pair, vocab, f"{path}: model.merges[{number}]", "model.vocab"))
    return pairs


def _require_roberta_bpe(path: Path, obj: dict) -> None:
    """Only RoBERTa's byte-level BPE is read: any other model, normalizer or pre-tokenizer gives
    other ids than the `tokenizers` engine built here would."""
    model, pre = obj["model"], obj.get("pre_tokenizer")
    kind = model.get("type")
    if kind != "BPE":
        raise UserError(
            f"{path}: model.type is {kind!r}; only RoBERTa's byte-level BPE tokenizer.json is read"
        )
    if not (isinstance(pre, dict) and pre.get("type") == "ByteLevel"):
        found = pre.get("type") if isinstance(pre, dict) else pre
        raise UserError(
            f"{path}: pre_tokenizer is {found!r}, not ByteLevel; only RoBERTa's byte-level BPE is read"
        )
    if pre.get("add_prefix_space", False) or not pre.get("use_regex", True):
        raise UserError(
            f"{path}: pre_tokenizer has add_prefix_space={pre.get('add_prefix_space')}, "
            f"use_regex={pre.get('use_regex', True)}; RoBERTa's are false and true"
        )
    if obj.get("normalizer") is not None:
        raise UserError(
            f"{path}: normalizer is {json.dumps(obj['normalizer'])[:60]}; RoBERTa's byte-level BPE has none"
        )
    for field, plain in (
        ("dropout", None),
        ("continuing_subword_prefix", ""),
        ("end_of_word_suffix", ""),
        ("byte_fallback", False),
    ):
        if model.get(field) not in (plain, None):
            raise UserError(f"{path}: model.{field} is {model[field]!r}; RoBERTa's BPE has none")


# ---------------------------------------------------------------- engines


def _byte_level_engine(vocab: dict[str, int], merges: list[tuple[str, str]]) -> tokenizers.Tokenizer:
    engine = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
    engine.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    engine.decoder = decoders.ByteLevel()
    # Offsets without the leading space, as HF RoBERTa gives them.
    engine.post_processor = processors.ByteLevel(trim_offsets=True)
    return engine


def _tiktoken_ranks(
    merges: list[tuple[str, str]], vocab: dict[str, int]
) -> tuple[dict[bytes, int], list[int]] | None:
    """tiktoken's mergeable ranks for these merges and the `vocab` id of each rank, or None where
    tiktoken would not give the same tokens.

    tiktoken merges the adjacent pair whose *concatenation* has the lowest rank. That is BPE
    exactly when every single byte is a token and each merged token comes from one merge only:
    a token made by two merges would get the first merge's priority for both.
    """
    if any(char not in vocab for char in BYTE_TO_CHAR.values()):
        return None
    ranks = {bytes([b]): rank for rank, b in enumerate(BYTE_TO_CHAR)}
    ids = [vocab[c] for c in BYTE_TO_CHAR.values()]
    for left, right in merges:
        token = _token_bytes(left + right)
        if token in ranks:
            return None
        ranks[token] = len(ranks)
        ids.append(vocab[left + right])
    return ranks, ids


# ---------------------------------------------------------------- the tokenizer


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
        byte_level = kind in ("gpt2", "hf")
        if byte_level:
            reachable = set(BYTE_TO_CHAR.values()) | {a + b for a, b in merges}
            # A literal symbol (fairseq's madeupwordNNNN, <|endoftext|>) is a word of its own, as in fairseq.
            starts = [t.startswith(SPACE_MARKER) or t not in reachable for t in tokens]
            self._bytes = [_token_bytes(t) for t in tokens]
        elif kind == "wordpiece":
            starts = [not t.startswith("##") for t in tokens]
        else:  # every symbol is a word of its own
            starts = [True] * len(tokens)
        self._word_start = np.array(starts, dtype=bool) | self._special
        self._tiktoken, self._rank_to_model = None, None
        found = _tiktoken_ranks(merges, reference_vocab) if byte_level else None
        if found is not None:
            ranks, engine_ids = found
            self._tiktoken = tiktoken.Encoding(
                f"roberta-{kind}", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={}
            )
            engine_ids = np.array(engine_ids, dtype=np.int64)
            self._rank_to_model = (
                engine_ids if reference_to_model is None else reference_to_model[engine_ids]
            ).astype(np.int32)

    # ---- constructors

    @classmethod
    def from_gpt2(cls, encoder_json: str | Path, vocab_bpe: str | Path, dict_txt: str | Path) -> Tokenizer:
        """GPT-2 BPE files + fairseq dict.txt, ids exactly as fairseq: <s> <pad> </s> <unk>, dict.txt,
        <mask>."""
        paths = [Path(encoder_json), Path(vocab_bpe), Path(dict_txt)]
        raw = [_read_bytes(p) for p in paths]
        encoder = _read_vocab_json(paths[0], raw[0])
        merges = _read_merges(paths[1], raw[1], encoder)
        symbols = _read_fairseq_dict(paths[2], raw[2])
        gpt2_tokens = sorted(encoder, key=encoder.__getitem__)
        tokens = ["<s>", "<pad>", "</s>", "<unk>"]
        gpt2_to_model = np.full(len(encoder), 3, dtype=np.int64)  # a GPT-2 id missing from dict.txt is <unk>
        for number, symbol in enumerate(symbols, start=1):
            # dict.txt names GPT-2 ids as decimal strings; any other symbol is a literal token.
            if symbol.isascii() and symbol.isdigit():
                if int(symbol) >= len(encoder):
                    raise UserError(
                        f"{paths[2]}:{number}: GPT-2 id {symbol} is not in {paths[0].name} "
                        f"(ids 0..{len(encoder) - 1})"
                    )
                gpt2_to_model[int(symbol)] = len(tokens)
                tokens.append(gpt2_tokens[int(symbol)])
            else:
                tokens.append(symbol)
        tokens.append("<mask>")
        if len(set(tokens)) != len(tokens):
            raise UserError(f"{paths[2]}: a symbol appears twice once GPT-2 ids are turned into tokens")
        roles = {role: tokens.index(name) for role, name in BYTE_LEVEL_SPECIALS.items()}
        files = {"encoder.json": raw[0], "vocab.bpe": raw[1], "dict.txt": raw[2]}
        engine = _byte_level_engine(encoder, merges)
        return cls(
            "gpt2", tokens, roles, engine, encoder, files, reference_to_model=gpt2_to_model, merges=merges
        )

    @classmethod
    def from_hf(cls, vocab_json: str | Path, merges_txt: str | Path) -> Tokenizer:
        """HF byte-level BPE files (RoBERTa's vocab.json + merges.txt); ids are vocab.json's."""
        paths = [Path(vocab_json), Path(merges_txt)]
        raw = [_read_bytes(p) for p in paths]
        vocab = _read_vocab_json(paths[0], raw[0])
        merges = _read_merges(paths[1], raw[1], vocab)
        roles = _roles(paths[0], vocab, BYTE_LEVEL_SPECIALS)
        files = {"vocab.json": raw[0], "merges.txt": raw[1]}
        tokens = sorted(vocab, key=vocab.__getitem__)
        return cls("hf", tokens, roles, _byte_level_engine(vocab, merges), vocab, files, merges=merges)

    @classmethod
    def from_tokenizer_json(cls, tokenizer_json: str | Path) -> Tokenizer:
        """The tokenizer.json that transformers 5.x saves alone (no vocab.json / merges.txt): RoBERTa's
        byte-level BPE only, ids as its model.vocab (and added_tokens) give them."""
        path = Path(tokenizer_json)
        raw = _read_bytes(path)
        obj, vocab = _read_tokenizer_json(path, raw)
        _require_roberta_bpe(path, obj)
        merges = _tokenizer_json_merges(path, obj["model"], vocab)
        roles = _roles(path, vocab, BYTE_LEVEL_SPECIALS)
        files = {"tokenizer.json": raw}
        tokens = sorted(vocab, key=vocab.__getitem__)
        return cls("hf", tokens, roles, _byte_level_engine(vocab, merges), vocab, files, merges=merges)

    @classmethod
    def from_fairseq_dict(cls, dict_txt: str | Path) -> Tokenizer:
        """A fairseq dict.txt of plain symbols (no BPE), ids as fairseq's Dictionary gives them:
        <s> <pad> </s> <unk>, dict.txt's symbols, <mask>.

        Text is split as fairseq's `Dictionary.encode_line` splits it, at whitespace, a word
        outside the dictionary being <unk>. When every symbol is one character (protein and
        character models), each character is a symbol, so "EVQL" reads as "E V Q L" does (how
        sapiens encodes a sequence); the special symbols written out (<mask>) stay whole.
        """
        path = Path(dict_txt)
        raw = _read_bytes(path)
        symbols = _read_fairseq_dict(path, raw)
        if not symbols:
            raise UserError(f"{path}: no symbols (an empty dict.txt)")
        numbers = _gpt2_ids(symbols)
        if numbers:
            raise UserError(
                f"{path}: {numbers} of its {len(symbols)} symbols are numbers, GPT-2 BPE ids: "
                "encoder.json and vocab.bpe must be beside it"
            )
        for number, symbol in enumerate(symbols, start=1):
            if any(c.isspace() for c in symbol):
                raise UserError(
                    f"{path}:{number}: symbol {symbol!r} holds whitespace, where fairseq splits text: "
                    "no text can produce it"
                )
        tokens = _fairseq_ids(symbols)
        specials = {*FAIRSEQ_SPECIALS, "<mask>"}
        characters = all(len(t) == 1 for t in tokens if t not in specials and not MADEUP_WORD.fullmatch(t))
        split = [pre_tokenizers.Split(Regex(FAIRSEQ_SPACE), "removed")]
        if characters:
            written = "|".join(re.escape(t) for t in sorted(specials))
            split.append(pre_tokenizers.Split(Regex(f"{written}|."), "isolated"))
        vocab = {t: i for i, t in enumerate(tokens)}
        engine = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        engine.pre_tokenizer = pre_tokenizers.Sequence(split)
        roles = {role: vocab[name] for role, name in BYTE_LEVEL_SPECIALS.items()}
        joiner = "" if characters else " "
        return cls("symbols", tokens, roles, engine, vocab, {"dict.txt": raw}, joiner=joiner)

    @classmethod
    def from_wordpiece(
        cls, vocab_txt: str | Path, lowercase: bool | None = None, strip_accents: bool | None = None
    ) -> Tokenizer:
        """BERT WordPiece vocab.txt; roles from [CLS] [SEP] [PAD] [UNK] [MASK] or <s> ....

        Case and accents as the tokenizer_config.json beside it records them (`do_lower_case`,
        `strip_accents`; without one: cased, accents kept), or as given; a value given that the
        file contradicts is refused, since the vocabulary was built for the file's choice.
        `strip_accents=None` follows `lowercase`, as in BERT."""
        path = Path(vocab_txt)
        raw = _read_bytes(path)
        vocab = _read_wordpiece_vocab(path, raw)
        recorded, config_raw = _read_wordpiece_config(path.with_name("tokenizer_config.json"))
        lowercase = bool(_agreed(recorded, "do_lower_case", lowercase, path))
        strip = _agreed(recorded, "strip_accents", strip_accents, path)
        strip = lowercase if strip is None else strip
        roles = _roles(path, vocab, BYTE_LEVEL_SPECIALS, WORDPIECE_SPECIALS)
        tokens = sorted(vocab, key=vocab.__getitem__)
        engine = tokenizers.Tokenizer(
            models.WordPiece(vocab, unk_token=tokens[roles["unk"]], max_input_chars_per_word=100)
        )
        engine.normalizer = bert_normalizer(lowercase, strip)
        engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        engine.decoder = decoders.WordPiece(prefix="##")
        files = {"vocab.txt": raw}
        if config_raw is not None:
            files["tokenizer_config.json"] = config_raw
        elif lowercase or strip:
            config = {"do_lower_case": lowercase, "strip_accents": strip}
            files["tokenizer_config.json"] = (json.dumps(config) + "\n").encode()
        return cls("wordpiece", tokens, roles, engine, vocab, files, lowercase=lowercase, strip_accents=strip)

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
        """A symbol vocabulary as an HF tokenizer.json, for transformers (which reads no dict.txt):
        the same engine, with RoBERTa's `<s> A </s></s> B </s>` layout around it."""
        if self.kind != "symbols":
            raise ValueError(
                f"a {self.kind} tokenizer is written in its own files, not as a symbol tokenizer.json"
            )
        engine = tokenizers.Tokenizer.from_str(self._reference.to_str())
        engine.post_processor = processors.RobertaProcessing(
            (self._tokens[self.eos_id], self.eos_id),
            (self._tokens[self.bos_id], self.bos_id),
            trim_offsets=False,
        )
        return engine.to_str()

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
        if (engine or self.engine) == "tiktoken":
            if self._tiktoken is None:
                raise ValueError(f"the tiktoken engine is not available for this {self.kind} tokenizer")
            arrays = self._tiktoken_arrays(texts)
            lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
            ranks = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.uint32)
            return self._rank_to_model[ranks], lengths
        pieces = [e.ids for e in self._reference.encode_batch_fast(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        ids = np.fromiter(itertools.chain.from_iterable(pieces), dtype=np.int64, count=int(lengths.sum()))
        lookup = self._reference_to_model
        return (ids if lookup is None else lookup[ids]).astype(np.int32), lengths

    def _tiktoken_arrays(self, texts: list[str]) -> list[np.ndarray]:
        # encode_to_numpy skips the Python list per text that encode_ordinary_batch builds: measured
        # here it takes less CPU time than encode_ordinary_batch itself. tiktoken releases the GIL.
        encode = self._tiktoken.encode_to_numpy
        if len(texts) <= THREAD_CHUNK:
            return [encode(t) for t in texts]
        chunks = [texts[i : i + THREAD_CHUNK] for i in range(0, len(texts), THREAD_CHUNK)]
        with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
            return [a for part in pool.map(lambda chunk: [encode(t) for t in chunk], chunks) for a in part]

    def tokenize_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Model ids and each token's (start, end) character span in `text`, leading space excluded."""
        encoding = self._reference.encode(text, add_special_tokens=False)
        ids = (
            encoding.ids
            if self._reference_to_model is None
            else self._reference_to_model[encoding.ids].tolist()
        )
        return ids, encoding.offsets

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
        return self._assemble(self.tokenize_ids_batch([text, *pairs]), no_separator, max_length, truncation)

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
            self._assemble([a] if seconds is None else [a, seconds[k]], no_separator, max_length, truncation)
            for k, a in enumerate(firsts)
        ]

    def _assemble(
        self, seqs: list[list[int]], no_separator: bool, max_length: int | None, truncation: Truncation
    ) -> list[int]:
        between = [self.eos_id] if no_separator else [self.eos_id, self.eos_id]
        if max_length is not None:
            budget = max_length - 2 - len(between) * (len(seqs) - 1)
            if budget < 0:
                raise UserError(
                    f"max_length={max_length} leaves no room for the special tokens of {len(seqs)} text(s)"
                )
            keep = _truncated_lengths([len(s) for s in seqs], budget, truncation, max_length)
            seqs = [s[:n] for s, n in zip(seqs, keep)]
        ids = [self.bos_id, *seqs[0]]
        for seq in seqs[1:]:
            ids += between + seq
        ids.append(self.eos_id)
        return ids

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


def _truncated_lengths(lengths: list[int], budget: int, truncation: Truncation, max_length: int) -> list[int]:
    """How many tokens of each text to keep so that they fit in `budget`."""
    excess = sum(lengths) - budget
    if excess <= 0:
        return lengths
    if truncation in ("only_first", "only_second"):
        which = 0 if truncation == "only_first" else 1
        if which >= len(lengths) or lengths[which] < excess:
            raise UserError(
                f"cannot fit max_length={max_length} by truncating only the "
                f"{'first' if which == 0 else 'second'} text"
            )
        return [n - excess if k == which else n for k, n in enumerate(lengths)]
    if truncation != "longest_first":
        raise UserError(
            f"{sum(lengths)} tokens exceed max_length={max_length} and truncation is {truncation!r}"
        )
    # Remove tokens from the longest text, one at a time, ties taken from the later text (HF's rule):
    # the result caps every text at some c, and the earliest texts above the cap keep one more.
    lo, hi = 0, max(lengths)
    while lo < hi:
        cap = (lo + hi + 1) // 2
        lo, hi = (cap, hi) if sum(min(n, cap) for n in lengths) <= budget else (lo, cap - 1)
    keep = [min(n, lo) for n in lengths]
    spare = budget - sum(keep)
    for k, n in enumerate(lengths):
        if spare and n > lo:
            keep[k] += 1
            spare -= 1
    return keep


def load_tokenizer(directory: str | Path) -> Tokenizer:
    """The tokenizer whose files are in `directory`, the first found of: GPT-2 BPE (encoder.json +
    vocab.bpe + dict.txt), HF vocab.json + merges.txt, BERT vocab.txt, a fairseq dict.txt of plain
    symbols, an HF tokenizer.json (transformers 5.x saves it alone).

    fairseq reads dict.txt, transformers tokenizer.json or vocab.json: where a directory holds
    more than one, each must give every token the id the chosen files give it, or it is refused.
    """
    d = Path(directory)
    has = {name for name in TOKENIZER_FILES if (d / name).is_file()}
    gpt2 = {"encoder.json", "vocab.bpe"} & has
    if gpt2 and "dict.txt" in has:
        if len(gpt2) == 1:
            missing = ({"encoder.json", "vocab.bpe"} - gpt2).pop()
            raise UserError(
                f"{d}: dict.txt and {gpt2.pop()} make a GPT-2 BPE tokenizer, but {missing} is missing"
            )
        tokenizer = Tokenizer.from_gpt2(d / "encoder.json", d / "vocab.bpe", d / "dict.txt")
    elif {"vocab.json", "merges.txt"} <= has:
        tokenizer = Tokenizer.from_hf(d / "vocab.json", d / "merges.txt")
    elif "vocab.txt" in has:
        return Tokenizer.from_wordpiece(d / "vocab.txt")
    elif "dict.txt" in has and not ("tokenizer.json" in has and _lists_gpt2_ids(d / "dict.txt")):
        tokenizer = Tokenizer.from_fairseq_dict(d / "dict.txt")
    elif "tokenizer.json" in has:
        tokenizer = Tokenizer.from_tokenizer_json(d / "tokenizer.json")
    else:
        raise UserError(
            f"{d}: no tokenizer files (expected encoder.json + vocab.bpe + dict.txt, vocab.json + "
            "merges.txt, tokenizer.json, a dict.txt of symbols, or vocab.txt)"
        )
    _check_other_vocabularies(tokenizer, d, has)
    return tokenizer


def _lists_gpt2_ids(path: Path) -> bool:
    """A dict.txt of GPT-2 ids beside a tokenizer.json is HF's copy of a fairseq RoBERTa: the
    tokenizer.json is read and the dict.txt checked against it."""
    return bool(_gpt2_ids(_read_fairseq_dict(path, _read_bytes(path))))


def _check_other_vocabularies(tokenizer: Tokenizer, d: Path, has: set[str]) -> None:
    """Refuse a dict.txt, vocab.json or tokenizer.json beside `tokenizer`'s own files that gives
    some token another id."""
    read = set(tokenizer._files)
    chosen = d / (
        "dict.txt" if tokenizer.kind == "gpt2" else next(iter(tokenizer._files))
    )  # vocab.json or tokenizer.json
    ours = tokenizer._tokens

    def differ(other: Path, theirs: Sequence[str | None], what: str = "ids") -> None:
        if len(theirs) != len(ours):
            raise UserError(
                f"{other}: gives {len(theirs)} {what}, {chosen} {len(ours)}: the two files disagree "
                "(fairseq and transformers would read different vocabularies)"
            )
        for i, (a, b) in enumerate(zip(ours, theirs)):
            if b is not None and a != b:
                raise UserError(
                    f"{other}: id {i} is {b!r}, {chosen} gives it to {a!r}: the two files disagree "
                    "(fairseq and transformers would read different vocabularies)"
                )

    if "dict.txt" in has - read:
        path = d / "dict.txt"
        symbols = _read_fairseq_dict(path, _read_bytes(path))
        # Without encoder.json a GPT-2 id names no token: only where it sits is checked.
        differ(
            path,
            [None if _is_gpt2_id(t) else t for t in _fairseq_ids(symbols)],
            "ids with fairseq's <s> <pad> </s> <unk> and <mask>",
        )
    if "vocab.json" in has - read:
        path = d / "vocab.json"
        vocab = _read_vocab_json(path, _read_bytes(path))
        differ(path, sorted(vocab, key=vocab.__getitem__))
    if "tokenizer.json" in has - read:
        path = d / "tokenizer.json"
        obj, vocab = _read_tokenizer_json(path, _read_bytes(path))
        differ(path, sorted(vocab, key=vocab.__getitem__))
        if (
            obj["model"].get("type") == "BPE"
            and _tokenizer_json_merges(path, obj["model"], vocab) != tokenizer.merges
        ):
            merges = d / next((n for n in ("merges.txt", "vocab.bpe") if n in read), chosen.name)
            raise UserError(f"{path}: model.merges differ from {merges}: the two files disagree")


def check_tokenizer_out(out: Path) -> None:
    """A trainer writes a new directory, or fills an empty one."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out}: already exists and is not empty")


def train_tokenizer(
    files: Sequence[str | Path],
    out_dir: str | Path,
    vocab_size: int,
    min_frequency: int = 2,
    *,
    text_field: str = "text",
    errors: Literal["strict", "replace"] = "strict",
    progress: bool = True,
) -> Tokenizer:
    """Train a byte-level BPE on text files (plain, .gz, .jsonl, .parquet, Arrow; directories
    expanded) and write HF-layout vocab.json + merges.txt to `out_dir`: <s>=0 <pad>=1 </s>=2
    <unk>=3, the 256 bytes, the merges, and <mask> last, `vocab_size` ids in all (fewer if the text
    has too few pairs). Sentences are read exactly as `roberta prepare` reads them; `errors` is what
    invalid UTF-8 does (an error naming file and line, or U+FFFD). `roberta.wordpiece` trains BERT's
    WordPiece instead."""
    out = Path(out_dir)
    specials = [BYTE_LEVEL_SPECIALS[r] for r in ("bos", "pad", "eos", "unk")]
    smallest = len(specials) + len(BYTE_TO_CHAR) + 1
    if vocab_size <= smallest:
        raise UserError(
            f"--vocab-size {vocab_size} is too small: the specials and 256 bytes take {smallest} ids"
        )
    check_tokenizer_out(out)
    text = TrainingText(list(files), InputOptions(text_field=text_field, errors=errors), progress)
    engine = tokenizers.Tokenizer(models.BPE())
    engine.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = _bpe_trainer(vocab_size, min_frequency, specials, progress)
    engine.train_from_iterator(text.batches(), trainer)
    text.close()
    # replace_if=(): only an empty `out` may be replaced, as checked above.
    with atomic_directory(out, replace_if=()) as staging:
        _write_hf_files(engine, staging)
    return Tokenizer.from_hf(out / "vocab.json", out / "merges.txt")


def _bpe_trainer(
    vocab_size: int, min_frequency: int, specials: list[str], progress: bool
) -> trainers.BpeTrainer:
    # <mask> is appended after training so that it takes the last id, as in fairseq's RoBERTa.
    return trainers.BpeTrainer(
        vocab_size=vocab_size - 1,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=progress,
    )


def _write_hf_files(engine: tokenizers.Tokenizer, directory: Path) -> None:
    """vocab.json (with <mask> given the last id) and merges.txt of a trained byte-level BPE."""
    model = json.loads(engine.to_str())["model"]
    vocab = dict(sorted(model["vocab"].items(), key=lambda item: item[1]))
    vocab[BYTE_LEVEL_SPECIALS["mask"]] = len(vocab)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (directory / "merges.txt").write_text(
        "#version: 0.2\n" + "".join(m + "\n" for m in merges), encoding="utf-8"
    )
