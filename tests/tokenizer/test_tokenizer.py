"""Tokenizer: fairseq's ids for GPT-2 BPE + dict.txt, the same ids from HF files and from tiktoken,
exact round trips, encode layouts, WordPiece, training, and errors that name the file and line."""

import gzip
import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
import tiktoken

from roberta import cli
from roberta.errors import UserError
from roberta.tokenizer import BYTE_TO_CHAR, GPT2_PATTERN, Tokenizer, load_tokenizer, train_tokenizer

HARD_STRINGS = [
    "",
    " ",
    "   ",
    "\n",
    "\n\n",
    "\r\n",
    "\t",
    "a\r\nb",
    " leading",
    "trailing  ",
    "a  b   c",
    "  \n  x  \n",
    "Hello world!",
    "don't I'll we've 'S",
    "e\u0301 n\u0303 \u0301alone",
    "👨‍👩‍👧 🇫🇷 😀😀",
    "日本語のテキスト 中文 한국어",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010fffd",
    "\x00\x01\x7f\u00a0\u3000\u2028\ufeff",
    "ﬁ ß İ ı",
    "123 4567 8901234",
    "<s> <mask> </s> <pad>",
    "[CLS] [SEP]",
    "<|endoftext|>",
    "madeupword0000",
    "‘quotes’ — “dashes” …",
    "a" * 500,
    " " * 300 + "x",
]


def random_unicode(count: int, seed: int = 0) -> list[str]:
    """Strings mixing ASCII, accents, combining marks, CJK, emoji, odd spaces and any scalar value."""
    rng = random.Random(seed)
    ranges = [
        (0x20, 0x7E),
        (0xA0, 0x17F),
        (0x300, 0x36F),
        (0x4E00, 0x9FFF),
        (0x1F300, 0x1FAFF),
        (0x0, 0x10FFFF),
    ]
    spaces = [" ", " ", "  ", "\n", "\t", "\r\n", "\u00a0", "\u3000"]
    out = []
    for _ in range(count):
        chars = []
        for _ in range(rng.randint(0, 40)):
            if rng.random() < 0.2:
                chars.append(rng.choice(spaces))
                continue
            lo, hi = rng.choice(ranges)
            c = rng.randint(lo, hi)
            chars.append(chr(c if not 0xD800 <= c <= 0xDFFF else 0x20))
        out.append("".join(chars))
    return out


@pytest.fixture(scope="module")
def gpt2(shared_data: Path) -> Tokenizer:
    return load_tokenizer(shared_data / "gpt2_bpe")


@pytest.fixture(scope="module")
def hf(shared_data: Path) -> Tokenizer:
    return load_tokenizer(shared_data / "roberta_base_tokenizer")


def words(n: int) -> str:
    """A text of exactly n GPT-2 tokens."""
    return " ".join(["word"] * n)


# ---------------------------------------------------------------- fairseq's ids and layouts


def test_gpt2_dict_gives_fairseq_ids(gpt2):
    assert gpt2.encode("Hello world!") == [0, 31414, 232, 328, 2]
    assert gpt2.vocab_size == 50265
    assert (gpt2.bos_id, gpt2.pad_id, gpt2.eos_id, gpt2.unk_id, gpt2.mask_id) == (0, 1, 2, 3, 50264)
    assert gpt2.id_to_token(31414) == "Hello" and gpt2.token_to_id("Ġworld") == 232
    assert gpt2.id_to_token(50263) == "madeupword0002"
    assert gpt2.engine == "tiktoken"
    assert gpt2.tokenize_ids("Hello world!", engine="tokenizers") == [31414, 232, 328]


def test_pair_layouts(gpt2):
    a, b, c = (
        gpt2.tokenize_ids("Hello world!"),
        gpt2.tokenize_ids("How are you?"),
        gpt2.tokenize_ids(" Fine."),
    )
    assert gpt2.encode("Hello world!", "How are you?") == [0, *a, 2, 2, *b, 2]
    assert gpt2.encode("Hello world!", "How are you?", no_separator=True) == [0, *a, 2, *b, 2]
    assert gpt2.encode("Hello world!", "How are you?", " Fine.") == [0, *a, 2, 2, *b, 2, 2, *c, 2]


def text_lengths(ids: list[int]) -> list[int]:
    """Token counts of the texts in `<s> A </s></s> B </s>`."""
    return [len(part.split()) for part in " ".join(map(str, ids[1:-1])).split(" 2 2")]


def test_truncation_strategies(gpt2):
    assert len(gpt2.tokenize_ids(words(10))) == 10
    # longest_first takes tokens from the longer text; on a tie the later text gives first.
    assert text_lengths(gpt2.encode(words(10), words(4), max_length=12)) == [4, 4]
    assert text_lengths(gpt2.encode(words(5), words(5), max_length=13)) == [5, 4]
    assert text_lengths(gpt2.encode(words(5), words(5), max_length=11)) == [4, 3]
    assert text_lengths(gpt2.encode(words(10), words(4), max_length=12, truncation="only_first")) == [4, 4]
    assert text_lengths(gpt2.encode(words(10), words(6), max_length=14, truncation="only_second")) == [10, 0]
    assert gpt2.encode(words(10), max_length=5) == [0, *gpt2.tokenize_ids(words(3)), 2]
    assert gpt2.encode(words(3), words(3), max_length=100, truncation=None) == gpt2.encode(words(3), words(3))
    with pytest.raises(UserError, match="truncating only the second"):
        gpt2.encode(words(10), words(2), max_length=12, truncation="only_second")
    with pytest.raises(UserError, match="exceed max_length=8"):
        gpt2.encode(words(10), max_length=8, truncation=None)
    with pytest.raises(UserError, match="no room"):
        gpt2.encode("a", "b", max_length=3)


def test_batch_equals_one_by_one(gpt2):
    texts = ["Hello world!", "", words(30), *HARD_STRINGS[10:20]]
    pairs = [t[::-1] for t in texts]
    assert gpt2.tokenize_ids_batch(texts) == [gpt2.tokenize_ids(t) for t in texts]
    assert gpt2.encode_batch(texts) == [gpt2.encode(t) for t in texts]
    assert gpt2.encode_batch(texts, pairs, max_length=20) == [
        gpt2.encode(t, p, max_length=20) for t, p in zip(texts, pairs)
    ]
    assert gpt2.encode_batch(texts, pairs, no_separator=True) == [
        gpt2.encode(t, p, no_separator=True) for t, p in zip(texts, pairs)
    ]
    ids, lengths = gpt2.tokenize_ids_flat(texts)
    assert ids.dtype == np.int32 and lengths.tolist() == [len(gpt2.tokenize_ids(t)) for t in texts]
    assert ids.tolist() == [i for t in texts for i in gpt2.tokenize_ids(t)]


# ---------------------------------------------------------------- round trips, word starts, offsets


def test_decode_inverts_encode_for_any_text(gpt2, hf):
    strings = HARD_STRINGS + random_unicode(400, seed=0)
    for tok in (gpt2, hf):
        for engine in ("tiktoken", "tokenizers"):
            assert tok.tokenize_ids_batch(strings, engine=engine) == gpt2.tokenize_ids_batch(strings)
        for text, ids in zip(strings, tok.encode_batch(strings)):
            assert tok.decode(ids) == text
    assert gpt2.decode(gpt2.encode("a", "b"), skip_special_tokens=False) == "<s>a</s></s>b</s>"
    assert gpt2.decode(gpt2.encode("😀")[1:2]) == "\ufffd"  # a cut character is replaced, not an error


def test_word_start_marks_first_pieces(gpt2):
    ids = gpt2.encode("Hello antidisestablishment world\n", "again")
    pieces = "<s> Hello Ġant idis establishment Ġworld Ċ </s> </s> again </s>".split()
    assert [gpt2.id_to_token(i) for i in ids] == pieces
    # First token and specials start words; so does the token after a special ("again", no leading space).
    starts = [True, True, True, False, False, True, False, True, True, True, True]
    assert gpt2.word_start(ids).tolist() == starts
    assert gpt2.word_start(np.array(ids[3:6])).tolist() == [True, False, True]
    assert gpt2.word_start([]).tolist() == []
    batch = np.array([ids[:5], ids[5:10]])
    assert gpt2.word_start(batch).tolist() == [
        gpt2.word_start(ids[:5]).tolist(),
        gpt2.word_start(ids[5:10]).tolist(),
    ]
    table = gpt2.word_start_table
    assert (
        table.shape == (50265,) and table[[0, 2, 232, 50263, 50264]].all() and not table[[31414, 328]].any()
    )


def test_offsets_point_into_the_text(gpt2):
    text = "Hello  wörld, 😀!"
    ids, offsets = gpt2.tokenize_with_offsets(text)
    assert ids == gpt2.tokenize_ids(text)
    # Character spans without the leading space; both pieces of the emoji's four bytes span the emoji.
    assert [text[s:e] for s, e in offsets] == ["Hello", "", "w", "ör", "ld", ",", "😀", "😀", "!"]


# ---------------------------------------------------------------- independent checks on real text


def independent_gpt2_ids(shared_data: Path):
    """GPT-2 BPE built here from the files alone, as tiktoken builds r50k (ranks = encoder.json ids),
    with fairseq's dict.txt mapping: a check that shares no code with roberta.tokenizer."""
    folder = shared_data / "gpt2_bpe"
    encoder = json.loads((folder / "encoder.json").read_text(encoding="utf-8"))
    char_to_byte = {c: b for b, c in BYTE_TO_CHAR.items()}
    ranks = {
        bytes(char_to_byte[c] for c in token): i for token, i in encoder.items() if token != "<|endoftext|>"
    }
    encoding = tiktoken.Encoding("gpt2-test", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    lines = (folder / "dict.txt").read_text(encoding="utf-8").splitlines()
    to_model = np.full(len(encoder), 3, dtype=np.int64)
    for index, line in enumerate(lines):
        symbol = line.split(" ")[0]
        if symbol.isdigit():
            to_model[int(symbol)] = 4 + index
    return encoding, to_model


def corpus_lines(shared_data: Path) -> list[list[str]]:
    """Every line (split at \\n only, so CRs stay in) of WikiText-2 raw test and the books+wiki corpus, by
    file."""
    files = [
        shared_data / "wikitext-2-raw" / "wiki.test.raw",
        *sorted((shared_data / "corpus").glob("*/*.txt")),
    ]
    assert len(files) == 1 + 146 + 29
    return [f.read_bytes().decode("utf-8").split("\n") for f in files]


def test_both_engines_equal_independent_tiktoken_on_all_corpus_text(gpt2, shared_data):
    """Every line of the 79 MB books+wiki corpus and of WikiText-2 raw test: the `tokenizers` engine
    and the tiktoken fast path (ranks in merge order, mapped to model ids) against tiktoken built here
    (ranks = encoder.json ids) + dict.txt. About 90 s of CPU time, 45 s on two idle cores."""
    encoding, to_model = independent_gpt2_ids(shared_data)
    lines = [line for file_lines in corpus_lines(shared_data) for line in file_lines]
    total = 0
    for start in range(0, len(lines), 50_000):
        batch = lines[start : start + 50_000]
        expected = np.fromiter(
            itertools.chain.from_iterable(encoding.encode_ordinary_batch(batch, num_threads=2)), np.int64
        )
        expected = to_model[expected]
        reference, lengths = gpt2.tokenize_ids_flat(batch, engine="tokenizers")
        assert np.array_equal(reference, expected)
        fast, fast_lengths = gpt2.tokenize_ids_flat(batch)
        assert np.array_equal(fast, expected) and np.array_equal(fast_lengths, lengths)
        total += len(expected)
    assert len(lines) == 242_712 and total == 18_228_494


def test_fast_engine_equals_independent_tiktoken_on_wikitext(gpt2, hf, shared_data):
    encoding, to_model = independent_gpt2_ids(shared_data)
    lines = corpus_lines(shared_data)[0]
    assert len(lines) == 2892
    expected = [to_model[ids].tolist() for ids in encoding.encode_ordinary_batch(lines)]
    assert gpt2.tokenize_ids_batch(lines) == expected
    assert hf.tokenize_ids_batch(lines) == expected


def test_hf_files_give_the_gpt2_dict_ids(gpt2, hf):
    assert hf.vocab_size == gpt2.vocab_size
    assert all(hf.id_to_token(i) == gpt2.id_to_token(i) for i in range(gpt2.vocab_size))
    assert (hf.bos_id, hf.pad_id, hf.eos_id, hf.unk_id, hf.mask_id) == (0, 1, 2, 3, 50264)
    assert hf.encode("Hello world!") == [0, 31414, 232, 328, 2]
    assert hf.fingerprint() == gpt2.fingerprint()


def test_fingerprint_is_stable(gpt2):
    # A corpus records this value; a change here would orphan every corpus made before it.
    assert gpt2.fingerprint() == "ae5976edd43908eafd02c1f1977ac865d9fb488f362cf49f4c717d78c76a49d5"


def test_save_and_load_keep_layout_and_ids(gpt2, hf, tmp_path):
    for tok, names in ((gpt2, {"encoder.json", "vocab.bpe", "dict.txt"}), (hf, {"vocab.json", "merges.txt"})):
        folder = tmp_path / tok.kind
        tok.save(folder)
        assert {p.name for p in folder.iterdir()} == names
        again = load_tokenizer(folder)
        assert again.kind == tok.kind and again.fingerprint() == tok.fingerprint()
        assert again.encode("Hello world!") == [0, 31414, 232, 328, 2]


# -------------------------------------------------------------- the tiktoken fast path and when it is refused


def write_bpe(folder: Path, vocab: list[str], merges: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    return folder


def test_a_token_made_by_two_merges_falls_back_to_tokenizers(tmp_path):
    """tiktoken ranks tokens, BPE ranks pairs: 'abc' made by merge 2 (a bc) and merge 4 (ab c) would get
    priority 2 for both in tiktoken, and 'abcd' would become [abc, d] instead of BPE's [ab, cd]."""
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = [*specials, *BYTE_TO_CHAR.values(), "ab", "bc", "abc", "cd", "<mask>"]
    merges = ["a b", "b c", "a bc", "c d", "ab c"]
    tok = Tokenizer.from_hf(*[write_bpe(tmp_path, vocab, merges) / n for n in ("vocab.json", "merges.txt")])
    assert tok.engine == "tokenizers"
    assert [tok.id_to_token(i) for i in tok.tokenize_ids("abcd")] == ["ab", "cd"]
    assert [tok.id_to_token(i) for i in tok.tokenize_ids("abc")] == ["abc"]
    with pytest.raises(ValueError, match="tiktoken engine is not available"):
        tok.tokenize_ids("abcd", engine="tiktoken")
    # What tiktoken would have done with the same ranks:
    ranks = {bytes([b]): r for r, b in enumerate(BYTE_TO_CHAR)}
    for merge in merges:
        ranks.setdefault(merge.replace(" ", "").encode(), len(ranks))
    fast = tiktoken.Encoding("x", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    assert [fast.decode_single_token_bytes(r) for r in fast.encode_ordinary("abcd")] == [b"abc", b"d"]


# ---------------------------------------------------------------- training


def test_train_tokenizer_specials_round_trip_and_engines_agree(shared_data, tmp_path):
    wiki = sorted((shared_data / "corpus" / "wiki").glob("*.txt"))
    train_text = wiki[0].read_text(encoding="utf-8")[:1_500_000]
    held_out = wiki[1].read_text(encoding="utf-8").split("\n")[:3000]
    # A made-up word per file shows that each file, and the chosen .jsonl field, was read.
    (tmp_path / "a.txt").write_text(train_text[:500_000] + "\n" + "zorblax " * 50, encoding="utf-8")
    with gzip.open(tmp_path / "b.txt.gz", "wt", encoding="utf-8") as f:
        f.write(train_text[500_000:1_000_000] + "\n" + "quuxify " * 50)
    records = [{"body": p, "text": "wrongfield " * 50} for p in train_text[1_000_000:].split("\n\n")]
    records.append({"body": "flimflam " * 50})
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    out = tmp_path / "tok"
    tok = train_tokenizer(
        [tmp_path / "a.txt", tmp_path / "b.txt.gz", tmp_path / "c.jsonl"],
        out,
        4000,
        min_frequency=2,
        text_field="body",
        progress=False,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.txt",
        "b.txt.gz",
        "c.jsonl",
        "tok",
    ]  # no temp dir left
    assert sorted(p.name for p in out.iterdir()) == ["merges.txt", "vocab.json"]
    assert tok.vocab_size == 4000 and tok.mask_id == 3999
    assert [tok.id_to_token(i) for i in (0, 1, 2, 3, 3999)] == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    assert (tok.bos_id, tok.pad_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.engine == "tiktoken"
    assert tok.tokenize_ids_batch(held_out) == tok.tokenize_ids_batch(held_out, engine="tokenizers")
    strings = HARD_STRINGS + random_unicode(200, seed=1)
    assert tok.tokenize_ids_batch(strings) == tok.tokenize_ids_batch(strings, engine="tokenizers")
    assert all(
        tok.decode(ids) == s for s, ids in zip(strings + held_out, tok.encode_batch(strings + held_out))
    )
    assert load_tokenizer(out).fingerprint() == tok.fingerprint()
    assert [len(tok.tokenize_ids(f" {word}")) for word in ("zorblax", "quuxify", "flimflam")] == [1, 1, 1]
    assert len(tok.tokenize_ids(" wrongfield")) > 1  # the .jsonl field not asked for was not read


def test_train_tokenizer_cli(tmp_path, capsys):
    text = tmp_path / "t.txt"
    rng = random.Random(0)
    text.write_text(
        "\n".join(
            " ".join(rng.choice(["alpha", "beta", "gamma", "delta"]) + rng.choice("xyzw") for _ in range(12))
            for _ in range(300)
        ),
        encoding="utf-8",
    )
    options = "--vocab-size 300 --no-progress".split()
    args = ["train-tokenizer", str(text), "--out", str(tmp_path / "tok"), *options]
    assert cli.main(args) == 0
    tok = load_tokenizer(tmp_path / "tok")
    assert tok.vocab_size == 300 and tok.id_to_token(299) == "<mask>"
    assert tok.tokenize_ids(" alpha") == [tok.token_to_id("Ġalpha")]
    assert cli.main(args) == 2  # --out exists and is not empty
    assert "already exists" in capsys.readouterr().err
    assert cli.main([*args[:4], "--vocab-size", "100"]) == 2
    assert "too small" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\nbad \xff byte\n")
    assert cli.main(["train-tokenizer", str(bad), "--out", str(tmp_path / "bad"), *options]) == 2
    assert "bad.txt: line 2: invalid UTF-8" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt", "t.txt", "tok"]  # nothing half-written


# ---------------------------------------------------------------- WordPiece


def test_wordpiece_vocab(tmp_path):
    tokens = "[PAD] [UNK] [CLS] [SEP] [MASK] Hello hello world ##s un ##believ ##able ! ,".split()
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    tok = load_tokenizer(tmp_path)
    assert tok.kind == "wordpiece" and tok.vocab_size == len(tokens)
    assert (tok.bos_id, tok.pad_id, tok.eos_id, tok.unk_id, tok.mask_id) == (2, 0, 3, 1, 4)
    ids = tok.encode("Hello unbelievable worlds!", "HELLO")
    pieces = "[CLS] Hello un ##believ ##able world ##s ! [SEP] [SEP] [UNK] [SEP]".split()
    assert [tok.id_to_token(i) for i in ids] == pieces
    starts = [True, True, True, False, False, True, False, True, True, True, True, True]
    assert tok.word_start(ids).tolist() == starts
    assert tok.decode(ids) == "Hello unbelievable worlds!"  # [UNK] is special: skipped
    assert (
        tok.decode(ids, skip_special_tokens=False)
        == "[CLS] Hello unbelievable worlds! [SEP] [SEP] [UNK] [SEP]"
    )
    assert tok.tokenize_with_offsets("Hello unbelievable") == (
        [5, 9, 10, 11],
        [(0, 5), (6, 8), (8, 14), (14, 18)],
    )
    lower = Tokenizer.from_wordpiece(tmp_path / "vocab.txt", lowercase=True)
    assert lower.tokenize_ids("HELLO World") == [6, 7]
    lower.save(tmp_path / "saved")
    assert load_tokenizer(tmp_path / "saved").tokenize_ids("HELLO") == [6]
    assert lower.fingerprint() != tok.fingerprint()


# ---------------------------------------------------------------- errors name the file and line


def test_missing_and_malformed_files(shared_data, tmp_path):
    src = shared_data / "gpt2_bpe"
    with pytest.raises(UserError, match="nope.txt: file not found"):
        Tokenizer.from_gpt2(src / "encoder.json", src / "vocab.bpe", tmp_path / "nope.txt")
    bad = tmp_path / "dict.txt"
    bad.write_text("13 850314647\n262 800385005\nmalformed\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"dict.txt:3: expected '<symbol> <count>'"):
        Tokenizer.from_gpt2(src / "encoder.json", src / "vocab.bpe", bad)
    bad.write_text("13 1\n13 2\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"dict.txt:2: duplicate symbol '13'"):
        Tokenizer.from_gpt2(src / "encoder.json", src / "vocab.bpe", bad)
    bad.write_text("13 1\n99999 2\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"dict.txt:2: GPT-2 id 99999 is not in encoder.json"):
        Tokenizer.from_gpt2(src / "encoder.json", src / "vocab.bpe", bad)

    vocab = ["<s>", "<pad>", "</s>", "<unk>", *BYTE_TO_CHAR.values(), "ab", "<mask>"]
    folder = write_bpe(tmp_path / "hf", vocab, ["a b", "a c d"])
    with pytest.raises(UserError, match=r"merges.txt:3: expected 'left right'"):
        load_tokenizer(folder)
    write_bpe(folder, vocab, ["a b", "x yz"])
    with pytest.raises(UserError, match=r"merges.txt:3: token 'yz' is not in the vocabulary"):
        load_tokenizer(folder)
    (folder / "vocab.json").write_text('{"<s>": 0,\n "a": }', encoding="utf-8")
    with pytest.raises(UserError, match=r"vocab.json:2: invalid JSON"):
        load_tokenizer(folder)
    write_bpe(folder, vocab[:-1], ["a b"])
    with pytest.raises(UserError, match=r"vocab.json: no <mask> token"):
        load_tokenizer(folder)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no tokenizer files"):
        load_tokenizer(tmp_path / "empty")
    (tmp_path / "wp").mkdir()
    (tmp_path / "wp" / "vocab.txt").write_text("[PAD]\n[UNK]\n\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"vocab.txt:3: empty token"):
        load_tokenizer(tmp_path / "wp")
