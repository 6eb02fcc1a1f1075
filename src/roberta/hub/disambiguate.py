"""fairseq's `disambiguate_pronoun` on the hub: which candidate a marked pronoun refers to, by the
masked LM's scores of each candidate at the pronoun's place (tasks/candidate_scoring.py).

    roberta.disambiguate("The trophy would not fit in the suitcase because [it] was too big.",
                         ["the trophy", "the suitcase"])      # -> "the trophy"
    roberta.disambiguate("The _trophy_ would not fit in the suitcase because [it] was too big.")
                                                                # -> True (fairseq's query form)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from roberta.checkpoint import require_lm_head
from roberta.errors import UserError
from roberta.runtime.precision import autocast
from roberta.tasks.candidate_scoring import score_schemas
from roberta.tasks.noun_phrases import candidates_for
from roberta.tasks.winograd_data import Schema

if TYPE_CHECKING:
    from roberta.hub.interface import Roberta


def parse_marked(sentence: str) -> tuple[Schema, list[str], int, str | None]:
    """The sentence cut at its one `[pronoun]` (a schema without candidates yet), its words
    without the marks, the pronoun's word index, and the `_query_` it marks, if any."""
    if not isinstance(sentence, str) or sentence.count("[") != 1 or sentence.count("]") != 1:
        raise UserError(
            f"disambiguate: mark the pronoun with one pair of brackets ('because [it] was') in {sentence!r}"
        )
    query = None
    marked = re.findall(r"_([^_]+)_", sentence)
    if len(marked) > 1 or sentence.count("_") not in (0, 2):
        raise UserError(f"disambiguate: mark at most one query as _the query_, in {sentence!r}")
    if marked:
        query = marked[0].strip()
        sentence = sentence.replace("_", "")
    before, rest = sentence.split("[", 1)
    pronoun, after = rest.split("]", 1)
    if not pronoun.strip() or "]" in before or "[" in after:
        raise UserError(f"disambiguate: no pronoun between the brackets of {sentence!r}")
    prefix = before.rstrip(" ")
    words = (before + pronoun + after).split(" ")
    index = len(before.split(" ")) - 1
    schema = Schema("0", prefix, " " if before.endswith(" ") and prefix else "", after, query, (), None)
    return schema, words, index, query


def disambiguate(
    hub: Roberta, sentence: str, candidates: Sequence[str] | None = None, return_scores: bool = False
):
    """The candidate the `[pronoun]` of `sentence` refers to: the one the masked LM scores highest
    at the pronoun (the mean log-probability of its tokens at `<mask>`s in its place). Without
    `candidates`, the sentence's noun phrases (noun_phrases.py, as fairseq mined spaCy's). With a
    `_query_` marked instead, fairseq's form: True when the query scores at least every other
    noun phrase. `return_scores`: [(candidate, score)] in the candidates' order instead."""
    require_lm_head(hub.model, "disambiguate")
    schema, words, index, query = parse_marked(sentence)
    if candidates is not None and query is not None:
        raise UserError("disambiguate: give candidates or mark a _query_, not both")
    if candidates is None:
        candidates = candidates_for(words, index, query)
    candidates = [c.strip() for c in candidates]
    if not all(candidates) or (query is None and not candidates):
        raise UserError(f"disambiguate: no candidates to choose from in {sentence!r}")
    texts = [query, *candidates] if query is not None else candidates
    schema = Schema("0", schema.prefix, schema.space, schema.suffix, texts[0], tuple(texts[1:]), None)
    was_training = hub.training
    with autocast(hub.precision, hub.device):  # in bf16 the hub holds bf16 weights: autocast's products
        scores = score_schemas(hub.model.eval(), hub.tokenizer, [schema])[0]
    hub.train(was_training)
    if return_scores:
        return list(zip(texts, scores))
    if query is not None:
        return all(scores[0] >= s for s in scores[1:])
    return texts[max(range(len(texts)), key=lambda i: scores[i])]
