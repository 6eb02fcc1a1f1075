"""Winograd schemas as the masked LM scores them: SuperGLUE WSC's JSONL, the original collection's
XML (WSC273), WinoGrande's JSONL and GLUE WNLI's pairs, each read into `Schema`s.

A `Schema` is a text cut at its pronoun (`prefix`, `suffix`), the candidate asked about (`query`)
and the other candidates: the model fills the pronoun's place with `<mask>`s, one per token of a
candidate, and scores the candidate by its tokens' log-probabilities there (candidate_scoring.py).

SuperGLUE's spans are word indices into `text.split(" ")`. A few do not sit exactly where their
index says (punctuation or a possessive attached, a newline in the text, case, and val row 42's
pronoun one word early): as fairseq's `wsc_utils.jsonl_iterator` does, a span is looked for near
its index, comparing words without the punctuation around them, case and a possessive 's. The
pronoun (span2) must be found within `WINDOW` words of its index, or the row is refused; the
candidate (span1) is scored by its text wherever it is, so one not found (three test rows name
people the text never writes together) is only counted.
"""

from __future__ import annotations

import re
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from roberta.errors import UserError
from roberta.inputs.rows import read_records
from roberta.tasks.noun_phrases import PRONOUNS, bare, candidates_for, join_words

WINDOW = 3  # words either side of a span's index where its text is looked for
WSC273 = 273  # the first 273 schemas of the collection are WSC273


@dataclass(frozen=True)
class Schema:
    """One question for the masked LM: the text is `prefix + space + <candidate> + suffix`."""

    id: str  # SuperGLUE's idx, WinoGrande's qID, the schema's number in the collection
    prefix: str
    space: str  # " " where a space separates the pronoun from what precedes it, else ""
    suffix: str
    query: str | None  # the candidate asked about (SuperGLUE's span1; the right answer otherwise)
    candidates: tuple[str, ...]  # the others it must outscore
    label: bool | None  # SuperGLUE: is the query the referent? (None: unlabelled); True otherwise
    line: int = 0


@dataclass
class Placement:
    """How the spans of a SuperGLUE file were found: at their index, moved, or not found."""

    rows: int = 0
    inexact: int = 0  # spans found whose words differ from their text (punctuation, case, 's)
    moved: list[str] = field(default_factory=list)  # "line N: span2 'it' index 30 -> 31"
    unplaced: list[str] = field(default_factory=list)  # span1s scored by their text alone

    def summary(self) -> str:
        return (
            f"{self.rows} rows: {self.inexact} spans found with other punctuation, case or 's than their "
            f"text, {len(self.moved)} near (not at) their index, "
            f"{len(self.unplaced)} candidate spans not found in their text"
        )


def find_span(words: list[str], text: str, index: int) -> int | None:
    """The word index nearest `index` (within WINDOW) where `text`'s words stand, compared
    without the punctuation around them, case and a possessive 's; None where it is not."""
    wanted = [_key(w) for w in text.split()]
    for offset in sorted(range(-WINDOW, WINDOW + 1), key=lambda d: (abs(d), -d)):
        start = index + offset
        if 0 <= start and start + len(wanted) <= len(words):
            if [_key(w) for w in words[start : start + len(wanted)]] == wanted:
                return start
    return None


def _key(word: str) -> str:
    return re.sub(r"(?:'s|’s)$", "", bare(word))


def cut_at(words: list[str], index: int, pronoun: str) -> tuple[str, str, str]:
    """(prefix, space, suffix) of the text with the pronoun at word `index` taken out; what is
    attached to the pronoun's word (a quote before, a comma after) stays in the text."""
    word = words[index]
    at = word.lower().find(pronoun.lower())
    lead, rest = (word[:at], word[at + len(pronoun) :]) if at >= 0 else ("", word[len(bare(word)) :])
    text = join_words([*words[:index], lead + "\x00" + rest, *words[index + 1 :]])
    prefix, suffix = text.split("\x00")
    if lead or not prefix.endswith(" "):
        return prefix, "", suffix
    return prefix[:-1], " ", suffix


def read_superglue_wsc(path: str | Path, labelled: bool) -> tuple[list[Schema], Placement]:
    """SuperGLUE WSC's JSONL (text, target{span1_index, span1_text, span2_index, span2_text}, idx,
    and a JSON boolean label where `labelled`); candidates are the text's noun phrases."""
    path = Path(path)
    columns = ["text", "target", "idx", *(["label"] if labelled else [])]
    schemas, placement = [], Placement()
    for line, record in read_records(path, columns):
        schemas.append(_superglue_row(path, line, record, labelled, placement))
    if not schemas:
        raise UserError(f"{path}: no rows")
    placement.rows = len(schemas)
    if placement.moved or placement.unplaced:
        found = "; ".join([*placement.moved, *placement.unplaced][:3])
        warnings.warn(f"{path}: {placement.summary()} ({found})", stacklevel=2)
    return schemas, placement


def _superglue_row(path: Path, line: int, record: dict, labelled: bool, placement: Placement) -> Schema:
    where = f"{path}:{line}"
    text, target = record["text"], record["target"]
    if not isinstance(text, str) or not text.strip():
        raise UserError(f"{where}: field 'text' must be a non-empty string")
    if not isinstance(target, dict):
        raise UserError(f"{where}: field 'target' must be an object")
    words = text.split(" ")
    spans = {}
    for k in ("1", "2"):
        index, span = target.get(f"span{k}_index"), target.get(f"span{k}_text")
        if type(index) is not int or not isinstance(span, str) or not span.strip():
            raise UserError(f"{where}: target.span{k}_index must be a number and target.span{k}_text a text")
        if not 0 <= index < len(words):
            raise UserError(f"{where}: target.span{k}_index {index} is outside the text's {len(words)} words")
        spans[k] = (index, " ".join(span.split()))
    (q_index, query), (p_index, pronoun) = spans["1"], spans["2"]
    found = find_span(words, pronoun, p_index)
    if found is None:
        raise UserError(
            f"{where}: target.span2_text {pronoun!r} is nowhere near target.span2_index {p_index} "
            f"(word {p_index} is {words[p_index]!r})"
        )
    if found != p_index:
        placement.moved.append(f"line {line}: span2 {pronoun!r} index {p_index} -> {found}")
    q_found = find_span(words, query, q_index)
    if q_found is None:
        placement.unplaced.append(f"line {line}: span1 {query!r} at index {q_index}")
    elif q_found != q_index:
        placement.moved.append(f"line {line}: span1 {query!r} index {q_index} -> {q_found}")
    placement.inexact += sum(
        at is not None and " ".join(words[at : at + len(span.split())]) != span
        for at, span in ((found, pronoun), (q_found, query))
    )
    query_at = None if q_found is None else (q_found, q_found + len(query.split()))
    prefix, space, suffix = cut_at(words, found, pronoun)
    return Schema(
        id=str(record["idx"]),
        prefix=prefix,
        space=space,
        suffix=suffix,
        query=query,
        candidates=tuple(candidates_for(words, found, query, query_at)),
        label=_boolean(record["label"], where) if labelled else None,
        line=line,
    )


def _boolean(value: object, where: str) -> bool:
    # The SuperGLUE files write JSON booleans; some copies write "true"/"false".
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise UserError(f"{where}: field 'label' must be true or false, not {value!r}")


def read_wsc273(path: str | Path, limit: int = WSC273) -> list[Schema]:
    """The first `limit` schemas of the Winograd collection's XML (WSCollection.xml): txt1, pron,
    txt2, two answers and the correct one (A or B); the right answer is the query."""
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        raise UserError(f"{path}:{e.position[0]}: invalid XML ({e})") from None
    schemas = []
    for number, node in enumerate(root.iter("schema"), start=1):
        if number > limit:
            break
        where = f"{path}: schema {number}"
        txt1, pron, txt2 = (
            " ".join((node.findtext(f"text/{k}") or "").split()) for k in ("txt1", "pron", "txt2")
        )
        answers = [" ".join((a.text or "").split()) for a in node.iter("answer")]
        correct = re.sub(r"[^A-Z]", "", (node.findtext("correctAnswer") or "").upper())
        if not pron or len(answers) != 2 or not all(answers):
            raise UserError(f"{where}: needs a pron and two answers")
        if correct not in ("A", "B"):
            raise UserError(f"{where}: correctAnswer {node.findtext('correctAnswer')!r} is not A or B")
        right = "AB".index(correct)
        words = [*txt1.split(), "\x00", *txt2.split()]
        prefix, suffix = join_words(words).split("\x00")
        schemas.append(
            Schema(
                str(number),
                prefix.rstrip(" "),
                " " if txt1 else "",
                suffix,
                answers[right],
                (answers[1 - right],),
                True,
            )
        )
    if len(schemas) < limit:
        raise UserError(f"{path}: {len(schemas)} schemas, expected at least {limit}")
    return schemas


def read_winogrande_schemas(path: str | Path, labels: str | Path | None = None) -> list[Schema]:
    """WinoGrande's JSONL (sentence with one "_", option1, option2, answer "1"/"2", or the answers
    in `labels`, one a line) as schemas: the right option is the query, the other the candidate."""
    from roberta.tasks.choice import read_winogrande

    return [blank_schema(e, e.label, True) for e in read_winogrande(path, labels, labelled=True)]


def blank_schema(example, query: int, label: bool | None) -> Schema:
    """A WinoGrande example (a `choice.ChoiceExample`) cut at its "_": option `query` (0 or 1) is
    the query, the other the candidate."""
    sentence = example.question
    before = sentence[: sentence.index("_")]
    options = example.options
    return Schema(
        example.id,
        before.rstrip(" "),
        " " if before.endswith(" ") else "",
        sentence[len(before) + 1 :],
        options[query],
        (options[1 - query],),
        label,
        example.line,
    )


def align_wnli(sentence1: str, sentence2: str) -> tuple[list[str], int, str] | None:
    """How a WNLI pair reads as a schema: sentence2 is a stretch of sentence1 with a pronoun
    replaced by a candidate. (sentence1's words, the pronoun's word index, the candidate), found as
    the pronoun whose replacement leaves the most words of sentence2 matching sentence1 on both
    sides (words compared without punctuation and case); None when no pronoun explains it."""
    w1, w2 = sentence1.split(), sentence2.split()
    k1, k2 = [_key(w) for w in w1], [_key(w) for w in w2]
    best: tuple[int, int, list[str]] | None = None
    for p in range(len(w1)):
        if bare(w1[p]) not in PRONOUNS:
            continue
        # sentence2 ends with the words right after the pronoun, and starts with those before it
        # (not all of them: the candidate may stand right before the pronoun, as in 'Mat Grice, he').
        after = next(
            n
            for n in range(min(len(k2), len(k1) - p - 1), -1, -1)
            if k2[len(k2) - n :] == k1[p + 1 : p + 1 + n]
        )
        head = k2[: len(k2) - after]
        before = next(m for m in range(min(p, len(head) - 1), -1, -1) if head[:m] == k1[p - m : p])
        candidate = w2[before : len(w2) - after]
        if candidate and len(candidate) <= 8 and (best is None or before + after > best[0]):
            best = (before + after, p, candidate)
    if best is None:
        return None
    text = re.sub(r"^[\"'(]+|[\"'),.;:!?]+$", "", " ".join(best[2]))
    return w1, best[1], text


def read_wnli(path: str | Path, labelled: bool) -> tuple[list[Schema], list[tuple[str, bool | None]]]:
    """GLUE WNLI's TSV (index, sentence1, sentence2[, label]) as schemas (`align_wnli`: the query is
    the candidate sentence2 puts in the pronoun's place, the others sentence1's noun phrases), and
    the (index, label) of the pairs no pronoun explains (sentence2 a paraphrase: not scored)."""
    from roberta.inputs.rows import read_tsv, table_records

    path = Path(path)
    columns = ["index", "sentence1", "sentence2", *(["label"] if labelled else [])]
    schemas, unaligned = [], []
    for line, record in table_records(path, read_tsv(path), columns):
        if labelled and record["label"] not in ("0", "1"):
            raise UserError(f"{path}:{line}: field 'label' {record['label']!r} is not 0 or 1")
        label = record["label"] == "1" if labelled else None
        found = align_wnli(record["sentence1"], record["sentence2"])
        if found is None:
            unaligned.append((record["index"], label))
            continue
        words, p, query = found
        prefix, space, suffix = cut_at(words, p, bare(words[p]))
        others = tuple(candidates_for(words, p, query))
        schemas.append(Schema(record["index"], prefix, space, suffix, query, others, label, line))
    if not schemas and not unaligned:
        raise UserError(f"{path}: no rows")
    return schemas, unaligned
