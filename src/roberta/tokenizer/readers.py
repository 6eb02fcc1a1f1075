"""Reading a tokenizer's vocabulary files, one function per format, each checked as it is read: GPT-2
encoder.json + vocab.bpe with fairseq's dict.txt, HF vocab.json + merges.txt, an HF tokenizer.json,
a fairseq dict.txt of plain symbols, BERT's vocab.txt with its tokenizer_config.json.

Every reader returns a `VocabularyFiles`: the tokens in model-id order, each special role's id, and
the file bytes exactly as read, so that a tokenizer saved again is the same files. A bad file is a
`UserError` naming the file, and the line or field where there is one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from roberta.errors import UserError

ROLES = ("bos", "pad", "eos", "unk", "mask")
BYTE_LEVEL_SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>", "mask": "<mask>"}
WORDPIECE_SPECIALS = {"bos": "[CLS]", "pad": "[PAD]", "eos": "[SEP]", "unk": "[UNK]", "mask": "[MASK]"}
# fairseq's Dictionary holds these four before dict.txt's first line (ids 0..3).
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


@dataclass(frozen=True)
class VocabularyFiles:
    """What one format's files say. `vocab` is the engine's token -> id, which is the model's id
    except for GPT-2, whose engine ids (encoder.json's) `engine_to_model` maps to dict.txt's order."""

    tokens: list[str]  # in model-id order
    roles: dict[str, int]  # bos, pad, eos, unk, mask -> model id
    vocab: dict[str, int]
    files: dict[str, bytes]  # file name -> the bytes read, for `Tokenizer.save`
    merges: list[tuple[str, str]] = field(default_factory=list)
    engine_to_model: np.ndarray | None = None
    lowercase: bool = False  # WordPiece's do_lower_case and strip_accents
    strip_accents: bool = False


# ---------------------------------------------------------------- one format each


def read_gpt2(encoder_json: Path, vocab_bpe: Path, dict_txt: Path) -> VocabularyFiles:
    """GPT-2 BPE files + fairseq dict.txt, ids exactly as fairseq: <s> <pad> </s> <unk>, dict.txt,
    <mask>."""
    raw = [read_bytes(p) for p in (encoder_json, vocab_bpe, dict_txt)]
    encoder = read_vocab_json(encoder_json, raw[0])
    merges = _read_merges(vocab_bpe, raw[1], encoder)
    symbols = read_fairseq_dict(dict_txt, raw[2])
    gpt2_tokens = sorted(encoder, key=encoder.__getitem__)
    tokens = ["<s>", "<pad>", "</s>", "<unk>"]
    gpt2_to_model = np.full(len(encoder), 3, dtype=np.int64)  # a GPT-2 id missing from dict.txt is <unk>
    for number, symbol in enumerate(symbols, start=1):
        # dict.txt names GPT-2 ids as decimal strings; any other symbol is a literal token.
        if is_gpt2_id(symbol):
            if int(symbol) >= len(encoder):
                raise UserError(
                    f"{dict_txt}:{number}: GPT-2 id {symbol} is not in {encoder_json.name} "
                    f"(ids 0..{len(encoder) - 1})"
                )
            gpt2_to_model[int(symbol)] = len(tokens)
            tokens.append(gpt2_tokens[int(symbol)])
        else:
            tokens.append(symbol)
    tokens.append("<mask>")
    if len(set(tokens)) != len(tokens):
        raise UserError(f"{dict_txt}: a symbol appears twice once GPT-2 ids are turned into tokens")
    roles = {role: tokens.index(name) for role, name in BYTE_LEVEL_SPECIALS.items()}
    files = {"encoder.json": raw[0], "vocab.bpe": raw[1], "dict.txt": raw[2]}
    return VocabularyFiles(tokens, roles, encoder, files, merges, engine_to_model=gpt2_to_model)


def read_hf(vocab_json: Path, merges_txt: Path) -> VocabularyFiles:
    """HF byte-level BPE files (RoBERTa's vocab.json + merges.txt); ids are vocab.json's."""
    raw = [read_bytes(p) for p in (vocab_json, merges_txt)]
    vocab = read_vocab_json(vocab_json, raw[0])
    merges = _read_merges(merges_txt, raw[1], vocab)
    roles = _roles(vocab_json, vocab, BYTE_LEVEL_SPECIALS)
    files = {"vocab.json": raw[0], "merges.txt": raw[1]}
    return VocabularyFiles(sorted(vocab, key=vocab.__getitem__), roles, vocab, files, merges)


def read_saved_tokenizer_json(path: Path) -> tuple[str, VocabularyFiles]:
    """A tokenizer.json saved alone: ("hf", RoBERTa's byte-level BPE) or ("wordpiece", BERT's WordPiece)."""
    raw = read_bytes(path)
    obj, vocab = read_tokenizer_json(path, raw)
    if obj["model"].get("type") == "WordPiece":
        read = "wordpiece", read_wordpiece_tokenizer_json(path, obj, vocab)
    else:
        read = "hf", read_roberta_tokenizer_json(path, raw, obj, vocab)
    library_reads(path, raw)
    return read


def read_roberta_tokenizer_json(path: Path, raw: bytes, obj: dict, vocab: dict[str, int]) -> VocabularyFiles:
    """The tokenizer.json that transformers 5.x saves alone (`raw`, read as `obj` and `vocab` by
    `read_tokenizer_json`) for RoBERTa: byte-level BPE, ids as its model.vocab (and added_tokens)
    give them."""
    require_roberta_bpe(path, obj)
    merges = tokenizer_json_merges(path, obj["model"], vocab)
    roles = _roles(path, vocab, BYTE_LEVEL_SPECIALS)
    return VocabularyFiles(
        sorted(vocab, key=vocab.__getitem__), roles, vocab, {"tokenizer.json": raw}, merges
    )


def read_wordpiece_tokenizer_json(path: Path, obj: dict, vocab: dict[str, int]) -> VocabularyFiles:
    """A BERT WordPiece tokenizer.json (what transformers 5.x and sentence-transformers save alone for
    a BERT model): its vocabulary, case and accents from its BertNormalizer, kept as the vocab.txt and
    tokenizer_config.json they amount to, so the model saves, exports and reloads as any WordPiece
    model. Only BERT's normalizer, pre-tokenizer and '##' pieces are read: any other would give
    other ids than the engine built here."""
    model, normalizer, pre = obj["model"], obj.get("normalizer") or {}, obj.get("pre_tokenizer") or {}
    expected = {
        "normalizer.type": (normalizer.get("type"), "BertNormalizer"),
        "normalizer.clean_text": (normalizer.get("clean_text"), True),
        "normalizer.handle_chinese_chars": (normalizer.get("handle_chinese_chars"), True),
        "pre_tokenizer.type": (pre.get("type"), "BertPreTokenizer"),
        "model.continuing_subword_prefix": (model.get("continuing_subword_prefix"), "##"),
        "model.max_input_chars_per_word": (model.get("max_input_chars_per_word"), 100),
    }
    for name, (found, want) in expected.items():
        if found != want:
            raise UserError(
                f"{path}: {name} is {json.dumps(found)}, not {json.dumps(want)}; "
                "only BERT's WordPiece is read"
            )
    check_types(path, obj)
    tokens = sorted(vocab, key=vocab.__getitem__)
    broken = next((t for t in tokens if not t.strip() or "\n" in t or "\r" in t), None)
    if broken is not None:
        raise UserError(f"{path}: model.vocab holds the token {broken!r}, which no vocab.txt line can")
    lowercase = normalizer["lowercase"]  # type-checked by read_tokenizer_json
    strip = lowercase if normalizer.get("strip_accents") is None else normalizer["strip_accents"]
    roles = _roles(path, vocab, BYTE_LEVEL_SPECIALS, WORDPIECE_SPECIALS)
    files = {
        "vocab.txt": "".join(t + "\n" for t in tokens).encode("utf-8"),
        "tokenizer_config.json": _case_config(lowercase, strip),
    }
    return VocabularyFiles(tokens, roles, vocab, files, lowercase=lowercase, strip_accents=strip)


def read_symbol_dict(path: Path) -> VocabularyFiles:
    """A fairseq dict.txt of plain symbols (no BPE), ids as fairseq's Dictionary gives them:
    <s> <pad> </s> <unk>, dict.txt's symbols, <mask>."""
    raw = read_bytes(path)
    symbols = read_fairseq_dict(path, raw)
    if not symbols:
        raise UserError(f"{path}: no symbols (an empty dict.txt)")
    numbers = gpt2_ids(symbols)
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
    tokens = fairseq_ids(symbols)
    vocab = {t: i for i, t in enumerate(tokens)}
    roles = {role: vocab[name] for role, name in BYTE_LEVEL_SPECIALS.items()}
    return VocabularyFiles(tokens, roles, vocab, {"dict.txt": raw})


def read_wordpiece(vocab_txt: Path, lowercase: bool | None, strip_accents: bool | None) -> VocabularyFiles:
    """BERT WordPiece vocab.txt; roles from [CLS] [SEP] [PAD] [UNK] [MASK] or <s> ....

    Case and accents as the tokenizer_config.json beside it records them, or as given (a value the
    file contradicts is refused); `strip_accents=None` follows `lowercase`, as in BERT. A choice
    other than the default that no file records is written as a tokenizer_config.json of its own."""
    raw = read_bytes(vocab_txt)
    vocab = _read_wordpiece_vocab(vocab_txt, raw)
    recorded, config_raw = _read_wordpiece_config(vocab_txt.with_name("tokenizer_config.json"))
    lowercase = bool(_agreed(recorded, "do_lower_case", lowercase, vocab_txt))
    strip = _agreed(recorded, "strip_accents", strip_accents, vocab_txt)
    strip = lowercase if strip is None else strip
    roles = _roles(vocab_txt, vocab, BYTE_LEVEL_SPECIALS, WORDPIECE_SPECIALS)
    files = {"vocab.txt": raw}
    if config_raw is not None:
        files["tokenizer_config.json"] = config_raw
    elif lowercase or strip:
        files["tokenizer_config.json"] = _case_config(lowercase, strip)
    tokens = sorted(vocab, key=vocab.__getitem__)
    return VocabularyFiles(tokens, roles, vocab, files, lowercase=lowercase, strip_accents=strip)


# ---------------------------------------------------------------- the files' parts


def read_bytes(path: Path) -> bytes:
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


def read_vocab_json(path: Path, data: bytes) -> dict[str, int]:
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


def read_fairseq_dict(path: Path, data: bytes) -> list[str]:
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


def _case_config(lowercase: bool, strip_accents: bool) -> bytes:
    """A tokenizer_config.json recording a WordPiece vocabulary's case and accents, as BERT's does."""
    return (json.dumps({"do_lower_case": lowercase, "strip_accents": strip_accents}) + "\n").encode()


def _read_wordpiece_config(path: Path) -> tuple[dict[str, bool | None], bytes | None]:
    """do_lower_case and strip_accents of a BERT tokenizer_config.json ({} without one), and its bytes."""
    if not path.is_file():
        return {}, None
    raw = read_bytes(path)
    config = _read_json_object(path, raw)
    for name in ("do_lower_case", "strip_accents"):
        if config.get(name) is not None and type(config[name]) is not bool:
            raise UserError(
                f"{path}: field {name!r} is {json.dumps(config[name])}, expected true, false or null"
            )
    return {
        "do_lower_case": config.get("do_lower_case") or False,
        "strip_accents": config.get("strip_accents"),
    }, raw


def _agreed(recorded: dict[str, bool | None], name: str, asked: bool | None, vocab: Path) -> bool | None:
    """The value asked for, else the recorded one; where both are given they must agree."""
    found = recorded.get(name)
    if asked is not None and found is not None and found != asked:
        raise UserError(
            f"{vocab.with_name('tokenizer_config.json')}: field {name!r} is {json.dumps(found)}, but "
            f"{json.dumps(asked)} was asked for: {vocab} was built for the recorded choice "
            "(load it as recorded, or train a vocabulary for the other)"
        )
    return asked if asked is not None else found


def fairseq_ids(symbols: list[str]) -> list[str]:
    """Tokens in fairseq's id order: the four specials, dict.txt's symbols, then <mask>, which
    fairseq's masked_lm task adds unless dict.txt already lists it (`add_symbol` keeps that id)."""
    return [*FAIRSEQ_SPECIALS, *symbols, *(["<mask>"] if "<mask>" not in symbols else [])]


def is_gpt2_id(symbol: str) -> bool:
    return symbol.isascii() and symbol.isdigit()


def gpt2_ids(symbols: list[str]) -> int:
    """How many symbols are GPT-2 BPE ids, if they are most of a dict.txt (a GPT-2 dictionary), else 0."""
    numbers = sum(map(is_gpt2_id, symbols))
    return numbers if 2 * numbers > len(symbols) else 0


# The fields of a tokenizer.json that decide ids, by the component's type, with the JSON types the
# `tokenizers` library accepts for them ("?": may be missing or null): a "lowercase": "yes" is refused
# by the library, and must not be read here as some other choice.
FIELD_TYPES = {
    "BertNormalizer": {
        "clean_text": "bool",
        "handle_chinese_chars": "bool",
        "strip_accents": "bool?",
        "lowercase": "bool",
    },
    "ByteLevel": {"add_prefix_space": "bool?", "trim_offsets": "bool?", "use_regex": "bool?"},
    "BertPreTokenizer": {},
    "BPE": {
        "dropout": "number?",
        "unk_token": "str?",
        "continuing_subword_prefix": "str?",
        "end_of_word_suffix": "str?",
        "fuse_unk": "bool?",
        "byte_fallback": "bool?",
        "ignore_merges": "bool?",
    },
    "WordPiece": {"unk_token": "str", "continuing_subword_prefix": "str", "max_input_chars_per_word": "int"},
}
ADDED_TOKEN_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")
_JSON_TYPES = {
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "int": ("an integer", lambda v: type(v) is int and v >= 0),
    "number": ("a number", lambda v: type(v) in (int, float)),
}


def check_types(path: Path, obj: dict) -> None:
    """Each field of `FIELD_TYPES` of the normalizer, pre-tokenizer and model, and each added token's
    flags, of the type the `tokenizers` library reads it as (UserError naming the field otherwise)."""
    for part in ("normalizer", "pre_tokenizer", "model"):
        component = obj.get(part)
        if not isinstance(component, dict):
            continue
        for name, rule in FIELD_TYPES.get(component.get("type"), {}).items():
            _check_type(path, f"{part}.{name}", component, name, rule)
    for k, token in enumerate(obj.get("added_tokens") or []):
        for flag in ADDED_TOKEN_FLAGS:
            if isinstance(token, dict):
                _check_type(path, f"added_tokens[{k}].{flag}", token, flag, "bool?")


def _check_type(path: Path, field: str, component: dict, name: str, rule: str) -> None:
    optional, kind = rule.endswith("?"), rule.rstrip("?")
    value = component.get(name)
    if (value is None and optional) or (value is not None and _JSON_TYPES[kind][1](value)):
        return
    found = "missing" if name not in component else json.dumps(value)[:40]
    raise UserError(f"{path}: field {field!r} must be {_JSON_TYPES[kind][0]}, not {found}")


def library_reads(path: Path, data: bytes) -> None:
    """The `tokenizers` library's own reading of the file: what it refuses is refused here too."""
    import tokenizers

    try:
        tokenizers.Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # noqa: BLE001 - the library raises a bare Exception for a bad file
        raise UserError(f"{path}: the tokenizers library cannot read it ({str(e)[:120]})") from None


def read_tokenizer_json(path: Path, data: bytes) -> tuple[dict, dict[str, int]]:
    """An HF tokenizer.json → (the object, token → id over model.vocab and added_tokens, ids 0..n-1).
    The readers of each kind check its fields (`check_types`), then the library reads it whole
    (`library_reads`)."""
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


def tokenizer_json_merges(path: Path, model: dict, vocab: dict[str, int]) -> list[tuple[str, str]]:
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


def require_roberta_bpe(path: Path, obj: dict) -> None:
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
    check_types(path, obj)
    if pre.get("add_prefix_space", False) or not pre.get("use_regex", True):
        raise UserError(
            f"{path}: pre_tokenizer has add_prefix_space={pre.get('add_prefix_space')}, "
            f"use_regex={pre.get('use_regex', True)}; RoBERTa's are false and true"
        )
    if obj.get("normalizer") is not None:
        raise UserError(
            f"{path}: normalizer is {json.dumps(obj['normalizer'])[:60]}; RoBERTa's byte-level BPE has none"
        )
    for name, plain in (
        ("dropout", None),
        ("continuing_subword_prefix", ""),
        ("end_of_word_suffix", ""),
        ("byte_fallback", False),
        ("ignore_merges", False),  # true: a word in the vocabulary is one token, merges or not
    ):
        if model.get(name) not in (plain, None):
            raise UserError(f"{path}: model.{name} is {model[name]!r}; RoBERTa's BPE has none")
