"""Each vocabulary format as a `Tokenizer` is built from it: its files read and checked
(`readers`) and the engine that encodes with it (`engines`), one function per format; and the one
format written for others, HF's tokenizer.json (`hf_tokenizer_json`). `Tokenizer.from_gpt2`,
`from_hf`, `from_tokenizer_json`, `from_fairseq_dict` and `from_wordpiece` call these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tokenizers
from tokenizers import processors

from roberta.tokenizer.engines import byte_level_engine, symbol_engine, wordpiece_engine
from roberta.tokenizer.readers import (
    VocabularyFiles,
    read_gpt2,
    read_hf,
    read_saved_tokenizer_json,
    read_symbol_dict,
    read_wordpiece,
)

BYTE_LEVEL = ("gpt2", "hf")  # the kinds whose engine runs GPT-2's regex first


@dataclass(frozen=True)
class Vocabulary:
    """A vocabulary read from its files (`kind`: gpt2, hf, wordpiece or symbols), the engine that
    encodes with it, and what joins decoded symbols (a symbol vocabulary's)."""

    kind: str
    read: VocabularyFiles
    engine: tokenizers.Tokenizer
    joiner: str = " "


def _wordpiece_engine(read: VocabularyFiles) -> tokenizers.Tokenizer:
    return wordpiece_engine(read.vocab, read.tokens[read.roles["unk"]], read.lowercase, read.strip_accents)


def gpt2(encoder_json: str | Path, vocab_bpe: str | Path, dict_txt: str | Path) -> Vocabulary:
    """GPT-2 BPE files + fairseq dict.txt, ids exactly as fairseq: <s> <pad> </s> <unk>, dict.txt,
    <mask>."""
    read = read_gpt2(Path(encoder_json), Path(vocab_bpe), Path(dict_txt))
    return Vocabulary("gpt2", read, byte_level_engine(read.vocab, read.merges))


def hf(vocab_json: str | Path, merges_txt: str | Path) -> Vocabulary:
    """HF byte-level BPE files (RoBERTa's vocab.json + merges.txt); ids are vocab.json's."""
    read = read_hf(Path(vocab_json), Path(merges_txt))
    return Vocabulary("hf", read, byte_level_engine(read.vocab, read.merges))


def tokenizer_json(path: str | Path) -> Vocabulary:
    """The tokenizer.json that transformers 5.x saves alone: RoBERTa's byte-level BPE or BERT's
    WordPiece, ids as its model.vocab (and added_tokens) give them."""
    kind, read = read_saved_tokenizer_json(Path(path))
    wordpiece = kind == "wordpiece"
    engine = _wordpiece_engine(read) if wordpiece else byte_level_engine(read.vocab, read.merges)
    return Vocabulary(kind, read, engine)


def fairseq_dict(dict_txt: str | Path) -> Vocabulary:
    """A fairseq dict.txt of plain symbols (no BPE), ids as fairseq's Dictionary gives them:
    <s> <pad> </s> <unk>, dict.txt's symbols, <mask>.

    Text is split as fairseq's `Dictionary.encode_line` splits it, at whitespace, a word
    outside the dictionary being <unk>. When every symbol is one character (protein and
    character models), each character is a symbol, so "EVQL" reads as "E V Q L" does (how
    sapiens encodes a sequence); the special symbols written out (<mask>) stay whole.
    """
    read = read_symbol_dict(Path(dict_txt))
    engine, joiner = symbol_engine(read.vocab)
    return Vocabulary("symbols", read, engine, joiner)


def wordpiece(
    vocab_txt: str | Path, lowercase: bool | None = None, strip_accents: bool | None = None
) -> Vocabulary:
    """BERT WordPiece vocab.txt; roles from [CLS] [SEP] [PAD] [UNK] [MASK] or <s> ....

    Case and accents as the tokenizer_config.json beside it records them (`do_lower_case`,
    `strip_accents`; without one: cased, accents kept), or as given; a value given that the
    file contradicts is refused, since the vocabulary was built for the file's choice.
    `strip_accents=None` follows `lowercase`, as in BERT."""
    read = read_wordpiece(Path(vocab_txt), lowercase, strip_accents)
    return Vocabulary("wordpiece", read, _wordpiece_engine(read))


def hf_tokenizer_json(
    kind: str,
    tokens: list[str],
    roles: dict[str, int],
    merges: Sequence[tuple[str, str]],
    engine: tokenizers.Tokenizer,
) -> str:
    """A tokenizer (of `kind`, its `tokens` in id order, their `roles`, its BPE `merges` and its
    encoding `engine`) as an HF tokenizer.json in model ids, the one file transformers.js (and any
    `tokenizers` user) reads: the same engine, the special tokens matched whole in text (`<mask>`
    taking the space before it, as RoBERTa's does in byte-level BPE) and fairseq's
    `<s> A </s></s> B </s>` layout around the texts."""
    byte_level = kind in BYTE_LEVEL
    if byte_level:  # a GPT-2 engine runs in encoder.json's ids: rebuilt in the model's
        out = byte_level_engine({t: i for i, t in enumerate(tokens)}, list(merges))
    else:
        out = tokenizers.Tokenizer.from_str(engine.to_str())
    out.add_special_tokens(
        [
            tokenizers.AddedToken(
                tokens[i], special=True, normalized=False, lstrip=byte_level and role == "mask"
            )
            for role, i in sorted(roles.items(), key=lambda item: item[1])
        ]
    )
    bos, eos = (tokens[roles["bos"]], roles["bos"]), (tokens[roles["eos"]], roles["eos"])
    if kind == "wordpiece":
        out.post_processor = processors.TemplateProcessing(
            single=f"{bos[0]} $A {eos[0]}",
            pair=f"{bos[0]} $A {eos[0]} {eos[0]} $B {eos[0]}",
            special_tokens=[bos, eos],
        )
    else:
        out.post_processor = processors.RobertaProcessing(eos, bos, trim_offsets=byte_level)
    return out.to_str()
