"""Tokenizers in the model's id space: byte-level BPE (GPT-2 + fairseq dict.txt, or HF
vocab.json + merges.txt, or an HF tokenizer.json), WordPiece (BERT vocab.txt) and fairseq symbol
vocabularies (a dict.txt of plain symbols: protein, character or pre-tokenized models).

Every id this package returns is a model id (a row of the embedding matrix). Text is always
text: a literal "<mask>" or "[CLS]" inside a string is tokenized as characters, as fairseq
does; special ids come only from `encode`'s layout. A symbol vocabulary is fairseq's exception:
its text is a sequence of dictionary symbols, so "<mask>" written out is the <mask> symbol there,
as `Dictionary.encode_line` reads it.

readers.py    the vocabulary files of each format, read and checked
engines.py    the `tokenizers` and `tiktoken` engines built on them; GPT-2's byte table
layout.py     fairseq's `<s> A </s></s> B </s>` and truncation to a max_length
formats.py    each vocabulary format read into a vocabulary and its engine (`Tokenizer.from_*`);
              HF's tokenizer.json written
tokenizer.py  `Tokenizer`: text <-> model ids, the vocabulary's roles, word starts, saving
loading.py    `load_tokenizer`: the format a directory holds, checked against the other files there
training.py   `train_tokenizer` (byte-level BPE) and `train_wordpiece`
"""

from roberta.tokenizer.engines import (
    BYTE_TO_CHAR,
    CHAR_TO_BYTE,
    FAIRSEQ_SPACE,
    GPT2_PATTERN,
    MADEUP_WORD,
    SPACE_MARKER,
    THREAD_CHUNK,
    Engine,
    bert_normalizer,
    bytes_to_unicode,
)
from roberta.tokenizer.layout import Truncation
from roberta.tokenizer.loading import TOKENIZER_FILES, check_tokenizer_out, load_tokenizer
from roberta.tokenizer.readers import BYTE_LEVEL_SPECIALS, FAIRSEQ_SPECIALS, ROLES, WORDPIECE_SPECIALS
from roberta.tokenizer.tokenizer import Tokenizer
from roberta.tokenizer.training import train_tokenizer, train_wordpiece

__all__ = [
    "BYTE_LEVEL_SPECIALS",
    "BYTE_TO_CHAR",
    "CHAR_TO_BYTE",
    "Engine",
    "FAIRSEQ_SPACE",
    "FAIRSEQ_SPECIALS",
    "GPT2_PATTERN",
    "MADEUP_WORD",
    "ROLES",
    "SPACE_MARKER",
    "THREAD_CHUNK",
    "TOKENIZER_FILES",
    "Tokenizer",
    "Truncation",
    "WORDPIECE_SPECIALS",
    "bert_normalizer",
    "bytes_to_unicode",
    "check_tokenizer_out",
    "load_tokenizer",
    "train_tokenizer",
    "train_wordpiece",
]
