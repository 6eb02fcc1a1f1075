"""Training a WordPiece vocabulary: BERT's vocab.txt + tokenizer_config.json, with RoBERTa's roles.

`roberta train-tokenizer --kind wordpiece` (RoBERTa-tiny-cased's tokenizer). HF `tokenizers` trains
it behind BERT's own normalizer and pre-tokenizer, so the files it writes tokenize the same in
`Tokenizer.from_wordpiece` and in transformers' `BertTokenizerFast`. Cased by default: "Apple" and
"apple" are different tokens and accents stay unless `strip_accents` asks otherwise; the choice is
recorded in tokenizer_config.json (`do_lower_case`, `strip_accents`), where both loaders read it.
The specials take RoBERTa's ids, [CLS]=0 [PAD]=1 [SEP]=2 [UNK]=3, and [MASK] is last, as <mask> is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import tokenizers
from tokenizers import models, pre_tokenizers, trainers

from roberta.errors import UserError
from roberta.io import atomic_directory
from roberta.text_input import InputOptions, TrainingText
from roberta.tokenizer import WORDPIECE_SPECIALS, Tokenizer, bert_normalizer, check_tokenizer_out

LEADING = ("bos", "pad", "eos", "unk")  # the roles of ids 0..3
# transformers' names for the special tokens' roles.
_HF_NAMES = {"cls": "bos", "pad": "pad", "sep": "eos", "unk": "unk", "mask": "mask"}


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
    words and pieces). `strip_accents=None` follows `lowercase`, as in BERT."""
    out = Path(out_dir)
    specials = [WORDPIECE_SPECIALS[role] for role in LEADING]
    if vocab_size <= len(specials) + 1:
        raise UserError(f"--vocab-size {vocab_size} is too small: the specials take {len(specials) + 1} ids")
    check_tokenizer_out(out)
    strip = lowercase if strip_accents is None else strip_accents
    options = InputOptions(text_field=text_field, errors=errors)
    # HF's trainer numbers the '##' pieces of single characters in hash order, other in each run, and
    # breaks ties between merges by those numbers: given first, in code-point order, they make the
    # training reproducible. A first pass over the text (no merges) finds which there are.
    pieces = _continuations(TrainingText(list(files), options, progress=False), lowercase, strip)
    text = TrainingText(list(files), options, progress)
    engine = _engine(lowercase, strip)
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


def _engine(lowercase: bool, strip_accents: bool) -> tokenizers.Tokenizer:
    """An untrained WordPiece behind BERT's normalizer and pre-tokenizer, as BertTokenizerFast runs it."""
    engine = tokenizers.Tokenizer(models.WordPiece(unk_token=WORDPIECE_SPECIALS["unk"]))
    engine.normalizer = bert_normalizer(lowercase, strip_accents)
    engine.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return engine


def _continuations(text: TrainingText, lowercase: bool, strip_accents: bool) -> list[str]:
    """'##c' for every character c the trainer will meet inside a word, in code-point order."""
    engine = _engine(lowercase, strip_accents)
    trainer = trainers.WordPieceTrainer(vocab_size=1, continuing_subword_prefix="##", show_progress=False)
    engine.train_from_iterator(text.batches(), trainer)
    return sorted(t for t in engine.get_vocab() if t.startswith("##") and len(t) == 3)


def tokenizer_config(lowercase: bool, strip_accents: bool) -> dict:
    """What BertTokenizer(Fast) and `Tokenizer.from_wordpiece` read beside vocab.txt."""
    return {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": lowercase,
        "strip_accents": strip_accents,
        "tokenize_chinese_chars": True,
        **{f"{name}_token": WORDPIECE_SPECIALS[role] for name, role in _HF_NAMES.items()},
    }
