"""A tokenizer directory: which of the formats it holds is read (`load_tokenizer`), and every other
vocabulary file beside it must agree with it; the directory a trainer may write."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from roberta.errors import UserError
from roberta.tokenizer.readers import (
    fairseq_ids,
    gpt2_ids,
    is_gpt2_id,
    library_reads,
    read_bytes,
    read_fairseq_dict,
    read_tokenizer_json,
    read_vocab_json,
    read_wordpiece_tokenizer_json,
    require_roberta_bpe,
    tokenizer_json_merges,
)
from roberta.tokenizer.tokenizer import Tokenizer

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
        tokenizer = Tokenizer.from_wordpiece(d / "vocab.txt")
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
    return bool(gpt2_ids(read_fairseq_dict(path, read_bytes(path))))


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
        symbols = read_fairseq_dict(path, read_bytes(path))
        # Without encoder.json a GPT-2 id names no token: only where it sits is checked.
        differ(
            path,
            [None if is_gpt2_id(t) else t for t in fairseq_ids(symbols)],
            "ids with fairseq's <s> <pad> </s> <unk> and <mask>",
        )
    if "vocab.json" in has - read:
        path = d / "vocab.json"
        vocab = read_vocab_json(path, read_bytes(path))
        differ(path, sorted(vocab, key=vocab.__getitem__))
    if "tokenizer.json" in has - read:
        path = d / "tokenizer.json"
        raw = read_bytes(path)
        obj, vocab = read_tokenizer_json(path, raw)
        differ(path, sorted(vocab, key=vocab.__getitem__))
        _same_engine(tokenizer, path, obj, vocab, chosen)
        library_reads(path, raw)


def _same_engine(tokenizer: Tokenizer, path: Path, obj: dict, vocab: dict[str, int], chosen: Path) -> None:
    """A tokenizer.json beside `tokenizer`'s own files that gives the same ids to the same tokens
    must also split text as they do: the same model (BPE with the same merges, or WordPiece with
    the same case and accents), as transformers reads the tokenizer.json and fairseq the rest."""
    kind = obj["model"].get("type")
    wordpiece = tokenizer.kind == "wordpiece"
    expected = {"wordpiece": "WordPiece", "symbols": "WordLevel"}.get(tokenizer.kind, "BPE")
    if kind != expected:
        raise UserError(
            f"{path}: model.type is {json.dumps(kind)}, {chosen} is {expected}: the two files disagree"
        )
    if tokenizer.kind == "symbols":  # its words are the dictionary's symbols: the ids decide
        return
    if wordpiece:
        read = read_wordpiece_tokenizer_json(path, obj, vocab)
        for name in ("lowercase", "strip_accents"):
            if getattr(read, name) != getattr(tokenizer, name):
                raise UserError(
                    f"{path}: normalizer gives {name} {json.dumps(getattr(read, name))}, {chosen} "
                    f"{json.dumps(getattr(tokenizer, name))}: the two files disagree"
                )
        return
    require_roberta_bpe(path, obj)
    if tokenizer_json_merges(path, obj["model"], vocab) != tokenizer.merges:
        merges = chosen.with_name(
            next((n for n in ("merges.txt", "vocab.bpe") if n in tokenizer._files), chosen.name)
        )
        raise UserError(f"{path}: model.merges differ from {merges}: the two files disagree")


def check_tokenizer_out(out: Path) -> None:
    """A trainer writes a new directory, or fills an empty one."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out}: already exists and is not empty")
