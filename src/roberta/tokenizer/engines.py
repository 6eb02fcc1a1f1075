"""The engines that turn text into ids, and GPT-2's byte table that both read.

`tokenizers` (HF, Rust) is the reference: it handles WordPiece and offsets. For byte-level BPE,
`tiktoken` encodes the same merges with about a third of the CPU time (measured here on the
books+wiki corpus); its ranks are mapped to model ids with a numpy lookup array. tiktoken ranks
*tokens*, BPE ranks *merge pairs*: a token made by two merges would get the first merge's priority
for both in tiktoken and encode differently. The `tokenizers` trainer can produce such a vocabulary
(a merge whose result already exists reuses that token's id), so `_tiktoken_ranks` refuses one and
the `tokenizers` engine is used for everything. Beyond that rule, equality is checked, not proven:
on all 79 MB of the corpus for GPT-2, and on held-out text and random Unicode for a trained
vocabulary (tests/tokenizer/test_tokenizer.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import numpy as np
import tiktoken
import tokenizers
from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors

from roberta.tokenizer.readers import FAIRSEQ_SPECIALS

# GPT-2's pre-tokenizer; `tokenizers`' ByteLevel pre-tokenizer uses the same expression.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
SPACE_MARKER = "Ġ"  # byte-level BPE's printable stand-in for a leading space (byte 0x20)
Engine = Literal["tiktoken", "tokenizers"] | None
THREAD_CHUNK = 1000  # texts per thread task when encoding a batch
# fairseq's `tokenize_line` splits at Python's `\s`, that is str.isspace (every such character lies
# below U+3001); written for the Oniguruma regexes of `tokenizers`.
FAIRSEQ_SPACE = "[" + "".join(f"\\x{{{c:x}}}" for c in range(0x3001) if chr(c).isspace()) + "]+"
# Fillers fairseq appends to pad a dictionary to a multiple of 8; no text holds them.
MADEUP_WORD = re.compile(r"madeupword\d{4}")
# A whitespace run is cut into pieces of this many characters before the byte-level regex sees it.
# GPT-2's `\s+(?!\S)` backtracks over the whole run, and tiktoken's regex engine gives up at about a
# million steps ("Max stack size exceeded for backtracking", measured: a run of 999,024 characters
# of any whitespace passes, one of 1,000,000 fails). Production tokenizers cut such runs first (Meta's
# Llama 3 tokenizer cuts runs of 25,000 characters); 2**16 leaves ids unchanged for any text with
# shorter runs, and a cut at a power of two keeps a run of one character tiled as it was.
RUN_LIMIT = 1 << 16
# The regex's \s: Unicode's White_Space (Python's str.isspace adds U+001C..U+001F).
WHITESPACE = "[\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
LONG_WHITESPACE = re.compile(f"{WHITESPACE}{{{RUN_LIMIT + 1},}}")


def cut_long_runs(text: str) -> list[int]:
    """Where `text` is cut before the byte-level regex: every `RUN_LIMIT` characters into each
    whitespace run longer than that (none for every text without one)."""
    if len(text) <= RUN_LIMIT:
        return []
    return [
        cut
        for run in LONG_WHITESPACE.finditer(text)
        for cut in range(run.start() + RUN_LIMIT, run.end(), RUN_LIMIT)
    ]


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


def token_bytes(token: str) -> bytes:
    """The bytes a byte-level token stands for; a token outside the byte alphabet is literal text."""
    if _NOT_BYTE_CHARS.isdisjoint(token):
        try:
            return token.translate(_CHAR_TO_LATIN1).encode("latin-1")
        except UnicodeEncodeError:
            pass
    return token.encode("utf-8")


# ---------------------------------------------------------------- tokenizers


def byte_level_engine(vocab: dict[str, int], merges: list[tuple[str, str]]) -> tokenizers.Tokenizer:
    engine = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges))
    engine.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    engine.decoder = decoders.ByteLevel()
    # Offsets without the leading space, as HF RoBERTa gives them.
    engine.post_processor = processors.ByteLevel(trim_offsets=True)
    return engine


def symbol_engine(vocab: dict[str, int]) -> tuple[tokenizers.Tokenizer, str]:
    """fairseq's `Dictionary.encode_line` for a vocabulary of plain symbols, and the string that
    joins decoded symbols.

    Text is split at whitespace, a word outside the dictionary being <unk>. When every symbol is one
    character (protein and character models), each character is a symbol, so "EVQL" reads as
    "E V Q L" does (how sapiens encodes a sequence), and decoded symbols are joined without spaces;
    the special symbols written out (<mask>) stay whole."""
    specials = {*FAIRSEQ_SPECIALS, "<mask>"}
    characters = all(len(t) == 1 for t in vocab if t not in specials and not MADEUP_WORD.fullmatch(t))
    split = [pre_tokenizers.Split(Regex(FAIRSEQ_SPACE), "removed")]
    if characters:
        written = "|".join(re.escape(t) for t in sorted(specials))
        split.append(pre_tokenizers.Split(Regex(f"{written}|."), "isolated"))
    engine = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    engine.pre_tokenizer = pre_tokenizers.Sequence(split)
    return engine, "" if characters else " "


def bert_normalizer(lowercase: bool, strip_accents: bool) -> normalizers.Normalizer:
    """BERT's text cleaning (control characters removed, CJK characters split off), then the case
    and accents as chosen: what BertTokenizerFast applies before WordPiece."""
    return normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents, lowercase=lowercase
    )


def wordpiece_engine(
    vocab: dict[str, int] | None, unk_token: str, lowercase: bool, strip_accents: bool
) -> tokenizers.Tokenizer:
    """WordPiece behind BERT's normalizer and pre-tokenizer, as BertTokenizerFast runs it (`vocab`
    None: an untrained one, for a trainer)."""
    engine = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token=unk_token, max_input_chars_per_word=100))
    engine.normalizer = bert_normalizer(lowercase, strip_accents)
    engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    engine.decoder = decoders.WordPiece(prefix="##")
    return engine


# ---------------------------------------------------------------- tiktoken


def tiktoken_encoding(
    name: str, merges: Sequence[tuple[str, str]], vocab: dict[str, int], engine_to_model: np.ndarray | None
) -> tuple[tiktoken.Encoding, np.ndarray] | tuple[None, None]:
    """A tiktoken encoding of these byte-level merges and the model id (int32) of each of its ranks,
    or (None, None) where tiktoken would not give the same tokens."""
    found = _tiktoken_ranks(merges, vocab)
    if found is None:
        return None, None
    ranks, engine_ids = found
    encoding = tiktoken.Encoding(name, pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    engine_ids = np.array(engine_ids, dtype=np.int64)
    rank_to_model = engine_ids if engine_to_model is None else engine_to_model[engine_ids]
    return encoding, rank_to_model.astype(np.int32)


def _tiktoken_ranks(
    merges: Sequence[tuple[str, str]], vocab: dict[str, int]
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
        token = token_bytes(left + right)
        if token in ranks:
            return None
        ranks[token] = len(ranks)
        ids.append(vocab[left + right])
    return ranks, ids


def tiktoken_ids(
    encoding: tiktoken.Encoding, rank_to_model: np.ndarray, texts: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """All texts' model ids concatenated (int32) and each text's token count (int64), on all cores."""
    arrays = _tiktoken_arrays(encoding, texts)
    lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    ranks = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.uint32)
    return rank_to_model[ranks], lengths


def _tiktoken_arrays(encoding: tiktoken.Encoding, texts: list[str]) -> list[np.ndarray]:
    # encode_to_numpy skips the Python list per text that encode_ordinary_batch builds: measured
    # here it takes less CPU time than encode_ordinary_batch itself. tiktoken releases the GIL.
    encode = encoding.encode_to_numpy
    if len(texts) <= THREAD_CHUNK:
        return [encode(t) for t in texts]
    chunks = [texts[i : i + THREAD_CHUNK] for i in range(0, len(texts), THREAD_CHUNK)]
    with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
        return [a for part in pool.map(lambda chunk: [encode(t) for t in chunk], chunks) for a in part]
