"""Winograd and CommonsenseQA from files to figures and leaderboard files: zero-shot scoring of any
masked LM on WSC273 / WinoGrande dev / SuperGLUE WSC val, and the test-set submissions
(SuperGLUE WSC, WinoGrande, CommonsenseQA, GLUE WNLI from a WSC model).

    zero_shot("runs/x/checkpoints/step-N", wsc273="WSCollection.xml", winogrande="dev.jsonl")
    # {"wsc273": {"accuracy": 51.3, "count": 273}, "winogrande": {...}}
"""

from __future__ import annotations

from pathlib import Path

from roberta.checkpoint import require_lm_head
from roberta.errors import UserError
from roberta.io import atomic_write
from roberta.tasks.candidate_scoring import accuracy, score_schemas
from roberta.tasks.choice import (
    COMMONSENSEQA,
    LETTERS,
    WINOGRANDE,
    predict_options,
    read_commonsenseqa,
    read_winogrande,
)
from roberta.tasks.winograd_data import (
    blank_schema,
    read_superglue_wsc,
    read_winogrande_schemas,
    read_wnli,
    read_wsc273,
)

COMMONSENSEQA_HEAD, WINOGRANDE_HEAD = "commonsenseqa", "winogrande"


def winograd_sets(
    wsc273: str | Path | None = None,
    winogrande: str | Path | None = None,
    superglue: str | Path | None = None,
    allow_none: bool = False,
) -> dict[str, tuple[list, bool]]:
    """The held-out sets given, read: name -> (schemas, strict)."""
    sets = {}
    if superglue:
        sets["superglue"] = (read_superglue_wsc(superglue, labelled=True)[0], False)
    if wsc273:
        sets["wsc273"] = (read_wsc273(wsc273), True)
    if winogrande:
        sets["winogrande"] = (read_winogrande_schemas(winogrande), True)
    if not sets and not allow_none:
        raise UserError("give at least one of --wsc273, --winogrande, --superglue, --wnli")
    return sets


def zero_shot(
    model_path: str | Path,
    wsc273: str | Path | None = None,
    winogrande: str | Path | None = None,
    superglue: str | Path | None = None,
    wnli: str | Path | None = None,
) -> dict[str, dict]:
    """Each set's accuracy (percent) and count by candidate scoring with `model_path`'s masked LM,
    as it is: a pretraining checkpoint, a WSC-fine-tuned one, an HF or fairseq model. WNLI (a
    labelled GLUE file): its pairs as schemas (`read_wnli`), those no pronoun explains counted as
    predicted 0, as `predict --task WNLI-WSC` writes them."""
    from roberta.convert import load_any

    # The files first: a bad one costs no model load.
    sets = winograd_sets(wsc273, winogrande, superglue, allow_none=wnli is not None)
    pairs = read_wnli(wnli, labelled=True) if wnli else None
    model, tokenizer = load_any(model_path)
    require_lm_head(model, "evaluate winograd (candidates are scored by the masked LM)")
    model.eval()
    figures = {
        name: accuracy(schemas, score_schemas(model, tokenizer, schemas, progress=name), strict)
        for name, (schemas, strict) in sets.items()
    }
    if pairs is not None:
        schemas, unaligned = pairs
        scores = score_schemas(model, tokenizer, schemas, progress="wnli")
        scored = accuracy(schemas, scores, False) if schemas else None
        right = (scored["accuracy"] * len(schemas) / 100 if scored else 0) + sum(
            not label for _, label in unaligned
        )
        count = len(schemas) + len(unaligned)
        figures["wnli"] = {"accuracy": 100.0 * right / count, "count": count, "unaligned": len(unaligned)}
    return figures


def predict_wsc(roberta, input: str | Path, out: str | Path) -> int:
    """SuperGLUE's WSC submission (`WSC.jsonl`: {"idx": N, "label": "True"|"False"} a line) for a
    test file, by candidate scoring with the hub's masked LM."""
    require_lm_head(roberta.model, "predict --task WSC")
    schemas, _ = read_superglue_wsc(input, labelled=False)
    scores = score_schemas(roberta.model.eval(), roberta.tokenizer, schemas, progress="WSC")
    with atomic_write(out) as f:
        for schema, (query, *others) in zip(schemas, scores):
            label = all(query >= c for c in others)
            f.write(f'{{"idx": {int(schema.id)}, "label": "{label}"}}\n')
    return len(schemas)


def predict_winogrande(roberta, input: str | Path, out: str | Path) -> int:
    """WinoGrande's leaderboard file: the predicted option ("1" or "2") of each test row, a line
    each, in the file's order: by the ranking head `winogrande` where the checkpoint has it
    (`finetune winogrande`), else by the masked LM's scores at the blank (`--method lm`; option 1
    on a tie)."""
    examples = read_winogrande(input, labelled=False)
    if WINOGRANDE_HEAD in roberta.model.heads:
        predictions = predict_options(roberta, WINOGRANDE_HEAD, examples, WINOGRANDE)
    else:
        require_lm_head(roberta.model, "predict --task WinoGrande without a `winogrande` head")
        schemas = [blank_schema(e, 0, None) for e in examples]
        scores = score_schemas(roberta.model.eval(), roberta.tokenizer, schemas, progress="WinoGrande")
        predictions = [0 if first >= second else 1 for first, second in scores]
    with atomic_write(out) as f:
        f.writelines(f"{p + 1}\n" for p in predictions)
    return len(examples)


def predict_commonsenseqa(roberta, input: str | Path, out: str | Path) -> int:
    """CommonsenseQA's leaderboard file: `id,letter` a line (the test file's order), by the ranking
    head `commonsenseqa`."""
    examples = read_commonsenseqa(input, labelled=False)
    predictions = predict_options(roberta, COMMONSENSEQA_HEAD, examples, COMMONSENSEQA)
    with atomic_write(out) as f:
        f.writelines(f"{e.id},{LETTERS[p]}\n" for e, p in zip(examples, predictions))
    return len(examples)


def predict_wnli(roberta, input: str | Path, out: str | Path) -> int:
    """GLUE's WNLI leaderboard file (`index<TAB>prediction`, 0 or 1) from a WSC model, as the
    paper made it: each pair read as a schema (`read_wnli`) and predicted 1 when the candidate
    that sentence2 puts in the pronoun's place scores at least every noun phrase of sentence1;
    a pair no pronoun explains (sentence2 a paraphrase) is predicted 0, WNLI's majority."""
    from roberta.tasks.glue import get_task, write_predictions

    require_lm_head(roberta.model, "predict --task WNLI-WSC")
    schemas, unaligned = read_wnli(input, labelled=False)
    scores = score_schemas(roberta.model.eval(), roberta.tokenizer, schemas, progress="WNLI")
    predicted = {s.id: int(all(q >= c for c in others)) for s, (q, *others) in zip(schemas, scores)}
    predicted.update({index: 0 for index, _ in unaligned})
    order = [index for index in _indices(input)]
    write_predictions(get_task("WNLI"), out, order, [predicted[i] for i in order])
    return len(order)


def _indices(path: str | Path) -> list[str]:
    from roberta.inputs.rows import read_tsv, table_records

    return [r["index"] for _, r in table_records(Path(path), read_tsv(Path(path)), ["index"])]


PREDICTORS = {
    "wnli-wsc": predict_wnli,
    "wsc": predict_wsc,
    "winogrande": predict_winogrande,
    "commonsenseqa": predict_commonsenseqa,
}
