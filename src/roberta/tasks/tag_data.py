"""Tagged sentences as users keep them: CoNLL column files (a word and its tags a line, a blank line
between sentences, `-DOCSTART-` lines between documents) and JSONL / Parquet / Arrow rows of
`tokens` + `tags` (the `datasets` convention; tags as names, or as numbers with the label names
given). Every refusal names the file, the line (or row) and the field.

    train = read_tagged("conll2003/train.txt", TagColumns(tag_column=3))
    labels = label_set([train], "iob2")     # O first, then the others sorted
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from roberta.errors import UserError
from roberta.inputs.arrow import RECORD_SUFFIXES
from roberta.inputs.rows import read_lines, read_records
from roberta.options.tasks import TagColumnsOptions
from roberta.validation import check_value

# The prefixes each scheme's tags may carry ("none": tags are plain labels, parts of speech say).
PREFIXES = {"iob2": "BI", "iob1": "BI", "iobes": "BIES"}
DOCSTART = "-DOCSTART-"


@dataclass(frozen=True)
class TaggedSentence:
    words: tuple[str, ...]
    tags: tuple[str, ...]
    line: int  # the line (or row) it starts on, for messages


@dataclass(frozen=True)
class TagColumns:
    """Where the words and tags are: CoNLL's columns (0-based; -1 the last), records' fields,
    and the names of numeric tags (index order)."""

    word_column: int = 0
    tag_column: int = -1
    tokens_field: str = "tokens"
    tags_field: str = "tags"
    label_names: tuple[str, ...] = ()


def check_scheme(scheme: str) -> str:
    """`scheme` if `--scheme` declares it (TagColumnsOptions), else a UserError."""
    return check_value(TagColumnsOptions, "scheme", scheme, "tagging")


def read_tagged(
    path: str | Path, columns: TagColumns = TagColumns(), tagged: bool = True
) -> list[TaggedSentence]:
    """The sentences of a CoNLL file, or of a .jsonl / .parquet / .arrow file's rows; without
    `tagged`, words only (tags empty: a file to tag)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", *RECORD_SUFFIXES):
        sentences = _read_rows(path, columns, tagged)
    else:
        sentences = _read_conll(path, columns, tagged)
    if not sentences:
        raise UserError(f"{path}: holds no sentences")
    return sentences


def _read_conll(path: Path, columns: TagColumns, tagged: bool) -> list[TaggedSentence]:
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    start, width, width_line = 0, None, 0

    def close() -> None:
        if words:
            sentences.append(TaggedSentence(tuple(words), tuple(tags), start))
            words.clear()
            tags.clear()

    for number, line in read_lines(path):
        fields = line.split()
        if not fields:
            close()
            continue
        if fields[0] == DOCSTART:
            close()
            continue
        if width is None:
            width, width_line = len(fields), number
            for name, index in (("word", columns.word_column), ("tag", columns.tag_column)):
                if tagged or name == "word":
                    _check_column(path, number, name, index, width)
        elif len(fields) != width:
            raise UserError(
                f"{path}:{number}: {len(fields)} columns, expected {width} as on line {width_line}"
            )
        if not words:
            start = number
        words.append(fields[columns.word_column])
        if tagged:
            tags.append(fields[columns.tag_column])
    close()
    return sentences


def _check_column(path: Path, number: int, name: str, index: int, width: int) -> None:
    if not -width <= index < width:
        raise UserError(
            f"{path}:{number}: field '{name}' is column {index}, but the line has {width} columns "
            f"(0..{width - 1}, or -1 for the last)"
        )


def _read_rows(path: Path, columns: TagColumns, tagged: bool) -> list[TaggedSentence]:
    fields = [columns.tokens_field, *([columns.tags_field] if tagged else [])]
    sentences = []
    for number, record in read_records(path, fields):
        words = _words(path, number, columns.tokens_field, record[columns.tokens_field])
        tags: tuple[str, ...] = ()
        if tagged:
            tags = _tags(path, number, columns, record[columns.tags_field])
            if len(tags) != len(words):
                raise UserError(
                    f"{path}:{number}: field '{columns.tags_field}' has {len(tags)} tags for "
                    f"{len(words)} tokens"
                )
        sentences.append(TaggedSentence(words, tags, number))
    return sentences


def _words(path: Path, number: int, field: str, value) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise UserError(
            f"{path}:{number}: field '{field}' must be a list of words, not {type(value).__name__}"
        )
    if not value:
        raise UserError(f"{path}:{number}: field '{field}' is empty: a sentence with no tokens")
    for k, word in enumerate(value):
        if not isinstance(word, str) or not word.strip():
            raise UserError(f"{path}:{number}: field '{field}'[{k}] must be a non-blank word, not {word!r}")
    return tuple(value)


def _tags(path: Path, number: int, columns: TagColumns, value) -> tuple[str, ...]:
    field = columns.tags_field
    if not isinstance(value, (list, tuple)):
        raise UserError(
            f"{path}:{number}: field '{field}' must be a list of tags, not {type(value).__name__}"
        )
    tags = []
    for k, tag in enumerate(value):
        if isinstance(tag, int) and not isinstance(tag, bool):
            if not columns.label_names:
                raise UserError(
                    f"{path}:{number}: field '{field}'[{k}] is the number {tag}: give the label names "
                    "in index order (--labels O,B-PER,I-PER,...)"
                )
            if not 0 <= tag < len(columns.label_names):
                raise UserError(
                    f"{path}:{number}: field '{field}'[{k}] is {tag}, outside the {len(columns.label_names)} "
                    "names of --labels"
                )
            tag = columns.label_names[tag]
        if not isinstance(tag, str) or not tag:
            raise UserError(f"{path}:{number}: field '{field}'[{k}] must be a tag name, not {tag!r}")
        tags.append(tag)
    return tuple(tags)


def check_tags(
    path: str | Path, sentences: Sequence[TaggedSentence], scheme: str, field: str = "tag"
) -> None:
    """Every tag is O or carries one of the scheme's prefixes and a type ("B-PER"); "none" takes any."""
    if scheme == "none":
        return
    prefixes = PREFIXES[scheme]
    for sentence in sentences:
        for k, tag in enumerate(sentence.tags):
            if tag == "O" or (len(tag) > 2 and tag[0] in prefixes and tag[1] == "-"):
                continue
            allowed = ", ".join(f"{p}-TYPE" for p in prefixes)
            raise UserError(
                f"{path}:{_line(path, sentence, k)}: field '{field}' is {tag!r}, not a tag of the "
                f"{scheme.upper()} scheme (O, {allowed}); --scheme none takes tags as plain labels"
            )


def _line(path: str | Path, sentence: TaggedSentence, k: int) -> int:
    """The line of word k: CoNLL's k lines after the sentence's first, a row's own line."""
    conll = Path(path).suffix.lower() not in (".jsonl", *RECORD_SUFFIXES)
    return sentence.line + k if conll else sentence.line


def label_set(train: Sequence[TaggedSentence], scheme: str, given: Sequence[str] = ()) -> list[str]:
    """The labels in head order: `given`, else the training data's, O first and then sorted by type
    and prefix (B- before I-). With an IOB scheme, each B-X brings its I-X."""
    if given:
        if len(set(given)) != len(given):
            raise UserError(f"--labels names a label twice: {', '.join(given)}")
        return list(given)
    found = {tag for sentence in train for tag in sentence.tags}
    if scheme != "none":
        found |= {"I" + tag[1:] for tag in found if tag.startswith("B-")}
    rest = sorted(found - {"O"}, key=lambda tag: (tag[2:], tag[0]) if scheme != "none" else (tag, ""))
    return (["O"] if "O" in found or scheme != "none" else []) + rest


def label_ids(
    path: str | Path,
    sentences: Sequence[TaggedSentence],
    labels: Sequence[str],
    unseen_as: str | None = None,
    field: str = "tag",
) -> list[list[int]]:
    """Each sentence's tags as label ids; a tag outside `labels` is refused (naming file, line and
    field) unless `unseen_as` names the label it is read as."""
    index = {label: i for i, label in enumerate(labels)}
    out = []
    for sentence in sentences:
        ids = []
        for k, tag in enumerate(sentence.tags):
            if tag not in index:
                if unseen_as is None:
                    raise UserError(
                        f"{path}:{_line(path, sentence, k)}: field '{field}' is {tag!r}, a tag the "
                        f"training data never has (labels: {', '.join(labels)}); "
                        "--unseen-tags-as O reads such tags as O"
                    )
                tag = unseen_as
            ids.append(index[tag])
        out.append(ids)
    return out


def evaluate_tagged(
    gold_path: str | Path, predicted_path: str | Path, columns: TagColumns, scheme: str = "iob2"
) -> dict[str, float]:
    """`entity_scores` (token accuracy alone with scheme "none") of a tagged file against the gold
    one: the same sentences, the same words, in the same order."""
    from roberta.tagging.metric import entity_scores

    check_scheme(scheme)
    gold, predicted = read_tagged(gold_path, columns), read_tagged(predicted_path, columns)
    for path, sentences in ((gold_path, gold), (predicted_path, predicted)):
        check_tags(path, sentences, scheme)
    if len(gold) != len(predicted):
        raise UserError(f"{predicted_path}: {len(predicted)} sentences, but {gold_path} has {len(gold)}")
    for g, p in zip(gold, predicted):
        if g.words != p.words:
            k = next(
                (k for k, (a, b) in enumerate(zip(g.words, p.words)) if a != b),
                min(len(g.words), len(p.words)),
            )
            raise UserError(
                f"{predicted_path}:{_line(predicted_path, p, k)}: field 'word' differs from {gold_path}:"
                f"{_line(gold_path, g, k)} (the files must hold the same sentences)"
            )
    figures = entity_scores([g.tags for g in gold], [p.tags for p in predicted])
    return {"accuracy": figures["accuracy"]} if scheme == "none" else figures
