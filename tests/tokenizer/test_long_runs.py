"""Pathological text is text: a whitespace run of a million characters (any kind of whitespace), a
word of a megabyte, mixed scripts. GPT-2's pre-tokenizer regex gives up on a whitespace run of about
a million characters in tiktoken ("Max stack size exceeded for backtracking"); such a run is cut
into pieces before the regex (`engines.cut_long_runs`), and a text without one encodes exactly as
the `tokenizers` engine encodes it whole."""

from __future__ import annotations

import random
import sys

import pytest

from data_fixtures import write_byte_tokenizer
from roberta.tokenizer import load_tokenizer
from roberta.tokenizer.engines import RUN_LIMIT, cut_long_runs

# Every character Python or the regex (Unicode's White_Space) calls whitespace.
WHITESPACE = sorted({chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()} | {"\x85"})
MILLION = 1_000_000


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(write_byte_tokenizer(tmp_path_factory.mktemp("tok")))


def whole(tok, text: str) -> list[int]:
    """The `tokenizers` engine on the whole text: no cut."""
    return tok._reference.encode(text, add_special_tokens=False).ids


def test_the_fixture_runs_on_tiktoken_whose_regex_gives_up_on_a_million_spaces(tok):
    assert tok.engine == "tiktoken"
    with pytest.raises(ValueError, match="Max stack size exceeded"):
        tok._tiktoken.encode_to_numpy("x" + " " * MILLION + "y")  # what tokenize_ids calls


def test_a_million_spaces_encode_as_the_reference_encodes_them_whole(tok):
    text = "Hello" + " " * MILLION + "world"
    ids = tok.tokenize_ids(text)
    assert ids == tok.tokenize_ids(text, engine="tokenizers") == whole(tok, text)
    ids_with_offsets, offsets = tok.tokenize_with_offsets(text)
    reference = tok._reference.encode(text, add_special_tokens=False)
    # A space's span is trimmed to nothing (RoBERTa's offsets); every other token's is the whole text's.
    spans = [(k, span) for k, span in enumerate(offsets) if span[0] < span[1]]
    assert ids_with_offsets == ids and spans == [
        (k, s) for k, s in enumerate(reference.offsets) if s[0] < s[1]
    ]
    assert spans[-1][1][1] == len(text)


@pytest.mark.parametrize("kind", WHITESPACE, ids=[f"U+{ord(c):04X}" for c in WHITESPACE])
def test_a_million_characters_of_each_kind_of_whitespace_encode(tok, kind):
    text = "Hello" + kind * MILLION + "world"
    ids = tok.tokenize_ids(text)
    # The fixture's vocabulary merges no whitespace: a token per byte of it, as the whole text gives.
    assert len(ids) == 10 + len(kind.encode()) * MILLION
    assert ids[:5] == whole(tok, "Hello") and ids[-5:] == whole(tok, "world")


def test_one_run_of_every_kind_of_whitespace_mixed_and_several_runs_in_a_batch(tok):
    mixed = "".join(WHITESPACE) * (MILLION // len(WHITESPACE) + 1)
    texts = [
        "a" + mixed + "b",
        "short text",
        mixed,
        "x" + " " * (RUN_LIMIT + 1) + "y" + "\u2003" * (3 * RUN_LIMIT),
    ]
    found = tok.tokenize_ids_batch(texts)
    assert [tok.decode(ids) for ids in found] == texts
    assert found[1] == whole(tok, "short text")
    assert found == [tok.tokenize_ids(t, engine="tokenizers") for t in texts]


def test_a_megabyte_word_and_mixed_scripts_encode_as_the_reference_does(tok):
    for text in ("a" * MILLION, ("naïve東京Москва😀ελλάδα" + "x" * 7) * (MILLION // 25)):
        ids = tok.tokenize_ids(text)
        assert ids == whole(tok, text) and tok.decode(ids) == text


def test_text_without_a_long_run_is_never_cut_and_its_ids_are_the_whole_texts(tok):
    rng = random.Random(0)
    parts = ["word", " ", "  ", "\n\n", "\t", "\u3000", "über", "東京", "!?", " " * 1000]
    text = "".join(rng.choice(parts) for _ in range(5_000)) + "x" + " " * RUN_LIMIT + "end"
    assert cut_long_runs(text) == [] and cut_long_runs(" " * RUN_LIMIT) == []
    assert tok.tokenize_ids(text) == whole(tok, text)
    assert cut_long_runs("a" + " " * (2 * RUN_LIMIT + 1)) == [1 + RUN_LIMIT, 1 + 2 * RUN_LIMIT]
