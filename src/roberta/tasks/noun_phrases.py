"""Candidate noun phrases of a sentence, by word lists and a few rules (no tagger).

fairseq's WSC task mines candidates with spaCy's noun chunks (examples/roberta/wsc/wsc_utils.py);
spaCy's English models are not on PyPI and nothing here downloads at run time, so candidates come
from these rules instead, over the sentence's space-separated words:

1. A phrase starts at a determiner or possessive ("the", "his", "Emma's"...), at a number, or at
   a capitalized word that is no function word ("Mark", "Mr. Singer", "Horses" at the start).
2. It goes on through the words that follow while they are not function words (pronouns,
   prepositions, conjunctions, auxiliaries, frequent verbs), not adverbs in -ly, not verbs in
   -ed / -ing unless another content word follows ("the rolling puffs", not "the trains rushing"),
   at most 4 words past its start; punctuation attached to a word ends the phrase there.
3. A possessor is a candidate of its own: "Emma's mother" gives "Emma's mother" and "Emma".
4. Pronouns are never candidates; the caller drops the phrases that overlap the pronoun or the
   query (`candidates_for`), as fairseq's `filter_noun_chunks` does.

What it finds on SuperGLUE WSC's training rows is measured in docs/winograd.md.
"""

from __future__ import annotations

import re

PRONOUNS = frozenset(
    """i me my mine myself you your yours yourself yourselves he him his himself she her hers herself it
    its itself we us our ours ourselves they them their theirs themselves who whom whose which what that
    this these those one ones someone somebody something anyone anybody anything everyone everybody
    everything nobody nothing each other""".split()
)
DETERMINERS = frozenset(
    """the a an this that these those his her their my our your its some any every each no another
    many several few both all most""".split()
)
FUNCTION_WORDS = PRONOUNS | frozenset(
    """about above across after against along among around as at before behind below beneath beside
    between beyond but by despite down during except for from in inside into like near of off on onto
    out outside over past since than through throughout till to toward towards under until up upon
    with within without and or nor so yet because although though if unless when whenever where while
    whether then there here not never very too also just only even still already again now soon once
    is am are was were be been being has have had having do does did done can could will would shall
    should may might must ought let said says say told tell asked ask got get gets made make makes
    went go goes came come comes saw see sees took take takes gave give gives knew know knows thought
    think thinks felt feel feels kept keep left leave put ran run sat stood found find wanted want
    tried try liked like loved love hated hate how why yes oh well more less much better best
    worse such""".split()
)
TITLES = frozenset("mr. mrs. ms. dr. st. prof. sr. jr. mt. gen. col. capt. lt. sgt. rev.".split())
# Tokens that attach to the word before them when words are joined back into text.
_CLITICS = ("'s", "'re", "n't", "'ll", "'ve", "'d", "'m", "'")
_CLOSING = set(".,;:!?)]}%")
MAX_WORDS = 5  # a phrase's words, its start included
_EDGE = re.compile(r"^[\"'(\[{`]+|[\"')\]}.,;:!?`]+$")
_CLITIC_S = ("'s", "’s", "'")  # a possessive written as a word of its own: "Singer 's heels"
_POSSESSIVE = re.compile(r"(?:'s|s'|’s)$", re.IGNORECASE)


def join_words(words: list[str]) -> str:
    """Space-separated words back into text: punctuation and clitics ("'s", "n't") attach to the
    word before them, as a detokenizer would join SuperGLUE's "Singer 's heels" or "safe ."."""
    out = ""
    for word in words:
        if not word:
            continue
        attach = all(c in _CLOSING for c in word) or word.lower() in _CLITICS
        out += word if (not out or attach) else " " + word
    return out


def bare(word: str) -> str:
    """A word without the punctuation around it, lowercased: how words are compared."""
    return _EDGE.sub("", word).lower()


def _ends_phrase(word: str) -> bool:
    # Punctuation after the word (a comma, a full stop) ends the phrase; a title's dot does not.
    return word.lower() not in TITLES and bool(re.search(r"[.,;:!?\")\]]$", word))


def _is_content(word: str, first: bool) -> bool:
    b = bare(word)
    if not b or b in FUNCTION_WORDS or not re.search(r"[a-z0-9]", b):
        return False
    return first or not b.endswith("ly")


def _starts(words: list[str], i: int) -> bool:
    b = bare(words[i])
    if b in DETERMINERS or _POSSESSIVE.search(b) or b.isdigit():
        return True
    return words[i][:1].isupper() and _is_content(words[i], True)


def noun_phrases(words: list[str]) -> list[tuple[int, int]]:
    """The candidate phrases of a sentence's words as [start, end) word ranges, in order."""
    found: list[tuple[int, int]] = []
    i = 0
    while i < len(words):
        if not _starts(words, i):
            i += 1
            continue
        end = i + 1
        while (
            end < len(words)
            and end - i < MAX_WORDS
            and not _ends_phrase(words[end - 1])
            and (_is_content(words[end], False) or words[end] in _CLITIC_S)
            and bare(words[end]) not in DETERMINERS
            and _continues(words, end)
        ):
            end += 1
        # A determiner alone is no phrase; a possessor is one on its own, its phrase goes on.
        if not (end == i + 1 and bare(words[i]) in DETERMINERS):
            found.append((i, end))
        for k in range(i, end - 1):
            if words[k + 1] in _CLITIC_S:
                found.append((i, k + 1))
            elif _POSSESSIVE.search(bare(words[k])):
                found.append((i, k + 1))
        i = end
    return sorted(set(found))


def _continues(words: list[str], k: int) -> bool:
    # A verb form in -ed/-ing belongs to the phrase only as an adjective: another content word follows.
    b = bare(words[k])
    if not re.search(r"(?:ed|ing)$", b) or len(b) <= 4:
        return True
    return (
        k + 1 < len(words) and not _ends_phrase(words[k]) and _is_content(words[k + 1], False)
    ) and not re.search(r"(?:ed|ing)$", bare(words[k + 1]))


def phrase_text(words: list[str], start: int, end: int) -> str:
    """The phrase as it reads, without the punctuation at its edges nor a last word's possessive 's."""
    text = re.sub(r"^[\"'(\[{`]+|[\"')\]}.,;:!?`]+$", "", join_words(words[start:end]))
    return _POSSESSIVE.sub("", text)


def candidates_for(
    words: list[str], pronoun: int, query: str | None, query_at: tuple[int, int] | None = None
) -> list[str]:
    """The sentence's candidates for the pronoun at word `pronoun`: its noun phrases less those
    that are pronouns, overlap the pronoun or the query's words (`query_at`), or whose text holds or
    is held in the query's (fairseq's `exact_match=False`); each text once, first occurrence first."""
    wanted = (query or "").lower()
    seen: set[str] = set()
    out = []
    for start, end in noun_phrases(words):
        if start <= pronoun < end or (query_at and start < query_at[1] and query_at[0] < end):
            continue
        text = phrase_text(words, start, end)
        low = text.lower()
        if not low or low in PRONOUNS or all(bare(w) in PRONOUNS for w in text.split()):
            continue
        if wanted and (low in wanted or wanted in low):
            continue
        if low not in seen:
            seen.add(low)
            out.append(text)
    return out
