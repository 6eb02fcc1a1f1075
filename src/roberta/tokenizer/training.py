"""Training a vocabulary on text files, read as `roberta prepare` reads them: RoBERTa's byte-level
BPE (`train_tokenizer`: vocab.json + merges.txt) or BERT's WordPiece (`train_wordpiece`: vocab.txt
+ tokenizer_config.json), both with RoBERTa's roles, the specials at ids 0..3 and the mask last.

WordPiece is RoBERTa-tiny-cased's tokenizer (`roberta train-tokenizer --kind wordpiece`). HF
`tokenizers` trains it behind BERT's own normalizer and pre-tokenizer, so the files it writes
tokenize the same in `Tokenizer.from_wordpiece` and in transformers' `BertTokenizerFast`. Cased by
default: "Apple" and "apple" are different tokens and accents stay unless `strip_accents` asks
otherwise; the choice is recorded in tokenizer_config.json (`do_lower_case`, `strip_accents`),
where both loaders read it. The specials take RoBERTa's ids, [CLS]=0 [PAD]=1 [SEP]=2 [UNK]=3, and
[MASK] is last, as <mask> is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import tokenizers
from tokenizers import models, pre_tokenizers, trainers

from roberta.errors import UserError
from roberta.inputs.text import InputOptions, TrainingText
from roberta.io import atomic_directory
from roberta.tokenizer.engines import BYTE_TO_CHAR, wordpiece_engine
from roberta.tokenizer.loading import check_tokenizer_out
from roberta.tokenizer.readers import BYTE_LEVEL_SPECIALS, WORDPIECE_SPECIALS
from roberta.tokenizer.tokenizer import Tokenizer

LEADING = ("bos", "pad", "eos", "unk")  # the roles of ids 0..3
# transformers' names for the special tokens' roles.
_HF_NAMES = {"cls": "bos", "pad": "pad", "sep": "eos", "unk": "unk", "mask": "mask"}

# ---------------------------------------------------------------- byte-level BPE


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
    invalid UTF-8 does (an error naming file and line, or U+FFFD). `train_wordpiece` trains BERT's
    WordPiece instead."""
    out = Path(out_dir)
    _check_min_frequency(min_frequency)
    specials = [BYTE_LEVEL_SPECIALS[r] for r in LEADING]
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


# ---------------------------------------------------------------- WordPiece


def train_wordpiece(
    files: Sequence[str | Path],
    out_dir: str | Path,
    vocab_size: int,
    min_frequency: int = 2,
    *,
    lowercase: bool = False,
    strip_accents: bool | None = None,
    text_field: str = "text",
    errors: Literal["strict", "replace"] = "strict",
    progress: bool = True,
) -> Tokenizer:
    """Train WordPiece on text files (read as `roberta prepare` reads them) and write vocab.txt +
    tokenizer_config.json to `out_dir`: `vocab_size` ids at most (fewer where the text has fewer
    words and pieces), refused where the specials and the text's alphabet leave no room below it.
    `strip_accents=None` follows `lowercase`, as in BERT."""
    out = Path(out_dir)
    _check_min_frequency(min_frequency)
    specials = [WORDPIECE_SPECIALS[role] for role in LEADING]
    if vocab_size <= len(specials) + 1:
        raise UserError(f"--vocab-size {vocab_size} is too small: the specials take {len(specials) + 1} ids")
    check_tokenizer_out(out)
    strip = lowercase if strip_accents is None else strip_accents
    options = InputOptions(text_field=text_field, errors=errors)
    # A first pass over the text (no merges) finds its alphabet: the characters that start a word and
    # the '##' pieces of those inside one, all of which the trainer keeps whatever the vocab_size.
    alphabet = _alphabet(TrainingText(list(files), options, progress=False), lowercase, strip)
    smallest = len(specials) + len(alphabet) + 1
    if vocab_size <= smallest:
        # Refused as byte-level BPE refuses a vocabulary without room beyond its bytes: the trainer
        # would write `smallest` ids, more than were asked for.
        raise UserError(
            f"--vocab-size {vocab_size} is too small: the specials and the text's {len(alphabet)} "
            f"characters and '##' pieces take {smallest} ids"
        )
    # HF's trainer numbers the '##' pieces of single characters in hash order, other in each run, and
    # breaks ties between merges by those numbers: given first, in code-point order, they make the
    # training reproducible.
    pieces = [t for t in alphabet if t.startswith("##") and len(t) == 3]
    text = TrainingText(list(files), options, progress)
    engine = wordpiece_engine(None, WORDPIECE_SPECIALS["unk"], lowercase, strip)
    # [MASK] is appended after training so that it takes the last id, as <mask> does in RoBERTa.
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size - 1,
        min_frequency=min_frequency,
        special_tokens=[*specials, *pieces],
        continuing_subword_prefix="##",
        show_progress=progress,
    )
    engine.train_from_iterator(text.batches(), trainer)
    text.close()
    vocab = engine.get_vocab()
    tokens = [*sorted(vocab, key=vocab.__getitem__), WORDPIECE_SPECIALS["mask"]]
    # replace_if=(): only an empty `out` may be replaced, as checked above.
    with atomic_directory(out, replace_if=()) as staging:
        (staging / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
        config = tokenizer_config(lowercase, strip)
        (staging / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return Tokenizer.from_wordpiece(out / "vocab.txt")


def _alphabet(text: TrainingText, lowercase: bool, strip_accents: bool) -> list[str]:
    """Every character c the trainer will meet at the start of a word, and '##c' for every one it
    will meet inside a word, in code-point order."""
    engine = wordpiece_engine(None, WORDPIECE_SPECIALS["unk"], lowercase, strip_accents)
    trainer = trainers.WordPieceTrainer(vocab_size=1, continuing_subword_prefix="##", show_progress=False)
    engine.train_from_iterator(text.batches(), trainer)
    return sorted(engine.get_vocab())


def _check_min_frequency(min_frequency: int) -> None:
    # The trainers take an unsigned count: a negative one would end in an OverflowError inside them.
    if min_frequency < 0:
        raise UserError(f"--min-frequency {min_frequency} is negative: give 0 or more")


def tokenizer_config(lowercase: bool, strip_accents: bool) -> dict:
    """What BertTokenizer(Fast) and `Tokenizer.from_wordpiece` read beside vocab.txt."""
    return {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": lowercase,
        "strip_accents": strip_accents,
        "tokenize_chinese_chars": True,
        **{f"{name}_token": WORDPIECE_SPECIALS[role] for name, role in _HF_NAMES.items()},
    }
