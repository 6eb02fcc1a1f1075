"""The options of the task families with both a `finetune` and an `evaluate` sub-verb: token
tagging, Winograd schemas and multiple choice; and of `evaluate glue|squad|sts`."""

from __future__ import annotations

from dataclasses import dataclass

from roberta.options.declare import model_option, option
from roberta.options.finetune import GLUE_TASKS_HELP
from roberta.options.inference import POOLS

WINOGRANDE_SIZES = ("xs", "s", "m", "l", "xl")
# The Winograd ranking losses: fairseq's cross-entropy over the candidates, or Kocijan et al. 2019's
# margin loss (`tasks.candidate_scoring.Loss` takes its defaults and rules from WscOptions).
LOSSES = ("cross-entropy", "margin")


@dataclass(frozen=True)
class TagColumnsOptions:
    """Where a tagged file's words and tags are, and how its tags read."""

    tag_column: int = option(
        -1,
        "CoNLL files: the column of the tags, 0-based, -1 the last (default -1; CoNLL-2003's NER "
        "tags are column 3, its POS tags column 1)",
        metavar="N",
    )
    word_column: int = option(0, "CoNLL files: the column of the words (default {default})", metavar="N")
    tokens_field: str = option(
        "tokens", "JSONL/Parquet: the list of words (default {default})", metavar="NAME"
    )
    tags_field: str = option("tags", "JSONL/Parquet: the list of tags (default {default})", metavar="NAME")
    scheme: str = option(
        "iob2",
        "the tags' scheme: iob2 (default), iob1, iobes, or none (plain labels such as parts of "
        "speech: scored by token accuracy)",
        metavar="S",
    )


@dataclass(frozen=True)
class TagFilesOptions:
    train: str = option(None, "tagged training file", required=True, metavar="FILE")
    dev: str = option(None, "tagged dev file (picks RUN/best/)", required=True, metavar="FILE")
    test: str | None = option(None, "tagged test file, scored beside dev", metavar="FILE")


@dataclass(frozen=True)
class TagTrainingOptions:
    """What `finetune tag` alone takes: the labels, how they meet sub-tokens, the recipe."""

    labels: str | None = option(
        None, "the labels in the head's order (default: training's)", metavar="A,B,..."
    )
    unseen_tags_as: str | None = option(
        None, "read a dev/test tag training never saw as LABEL (e.g. O)", metavar="LABEL"
    )
    label_all_tokens: bool = option(
        False, "train every sub-token of a word on its label (B- continuing as I-), not only the first"
    )
    stride: int | None = option(
        None, "sub-tokens shared by the windows of a long sentence (default: a quarter)", metavar="N"
    )
    head: str = option("tagger", "name of the tagging head (default {default})")
    # HF's token-classification recipe (examples/pytorch/token-classification/run_ner.py: LR 5e-5,
    # 3 epochs), at batch 32, with the paper's fine-tuning optimizer (tasks.finetune.COMMON_DEFAULTS).
    lr: float = option(5e-5, "peak learning rate (default {default})")
    batch_size: int = option(32, "sentences per update (default {default})")
    epochs: float = option(3.0, "epochs (default {default:g})")


@dataclass(frozen=True)
class EvaluateTagOptions:
    gold: str = option(None, "the tagged reference", required=True, metavar="FILE")
    predictions: str = option(None, "the same sentences, tagged", required=True, metavar="FILE")


@dataclass(frozen=True)
class TagLabelsOptions:
    labels: str | None = option(None, "names of numeric tags in JSONL/Parquet rows", metavar="A,B,...")


@dataclass(frozen=True)
class WscOptions:
    data: str = option(None, "SuperGLUE WSC: train.jsonl, val.jsonl", required=True, metavar="DIR")
    wsc273: str | None = option(
        None, "WSCollection.xml: WSC273 accuracy at each evaluation too", metavar="FILE"
    )
    loss: str = option("cross-entropy", "cross-entropy (fairseq's, default) or margin")
    # fairseq's margin defaults: alpha 1, beta 0.
    margin_alpha: float = option(1.0, "margin loss: the hinge's weight (default {default:g})")
    margin_beta: float = option(0.0, "margin loss: the margin (default {default:g})")

    CHOICES = {"loss": LOSSES}
    RANGES = {"margin_alpha": ">=0"}


@dataclass(frozen=True)
class WinograndeOptions:
    data: str = option(None, "WinoGrande: train_SIZE.jsonl, dev.jsonl", required=True, metavar="DIR")
    size: str = option("xs", "training size (default {default})")
    method: str = option("head", "ranking head or masked LM")
    loss: str = option("margin", "--method lm: margin (default) or cross-entropy")
    margin_alpha: float = option(5.0, "--method lm: hinge weight (default {default:g})")
    margin_beta: float = option(0.4, "--method lm: margin (default {default})")

    CHOICES = {"size": WINOGRANDE_SIZES, "method": ("head", "lm"), "loss": LOSSES}
    RANGES = {"margin_alpha": ">=0"}


@dataclass(frozen=True)
class CommonsenseQAOptions:
    train: str = option(None, "training JSONL (train_rand_split.jsonl)", required=True, metavar="FILE")
    dev: str = option(None, "dev JSONL with answers (dev_rand_split.jsonl)", required=True, metavar="FILE")


@dataclass(frozen=True)
class ChoiceOptions:
    train: str = option(None, "training file", required=True, metavar="FILE")
    dev: str = option(None, "dev file", required=True, metavar="FILE")
    question_column: str = option("question", "column of the question (default {default})")
    options_column: str = option(
        "options",
        "column holding the list of options, or several columns, comma-separated (default {default})",
    )
    answer_column: str = option("answer", "column of the answer (default {default})")
    head: str = option("choice", "name of the ranking head (default {default})")


@dataclass(frozen=True)
class EvaluateWinogradOptions:
    model: str = model_option("checkpoint with a masked-LM head")
    wsc273: str | None = option(None, "WSCollection.xml (its first 273 schemas)", metavar="FILE")
    winogrande: str | None = option(None, "WinoGrande JSONL with answers (dev.jsonl)", metavar="FILE")
    superglue: str | None = option(None, "SuperGLUE WSC JSONL with labels (val.jsonl)", metavar="FILE")
    wnli: str | None = option(None, "GLUE WNLI TSV with labels (dev.tsv), read as schemas", metavar="FILE")


@dataclass(frozen=True)
class EvaluateGlueOptions:
    # Checked by the handler, so that building the parser imports no task module.
    task: str = option(None, GLUE_TASKS_HELP, required=True, metavar="T")
    dev: str = option(
        None, "labelled GLUE file, e.g. RTE/dev.tsv or MNLI/dev_matched.tsv", required=True, metavar="FILE"
    )
    predictions: str = option(
        None, "predictions TSV with a row for every dev index", required=True, metavar="FILE"
    )


@dataclass(frozen=True)
class EvaluateSquadOptions:
    version: str = option(None, "SQuAD version of the dev file", required=True)
    dev: str = option(None, "official dataset JSON, e.g. dev-v2.0.json", required=True, metavar="FILE")
    predictions: str = option(None, "predictions JSON {{id: text}}", required=True, metavar="FILE")
    null_odds: str | None = option(
        None,
        "v2.0 only: JSON {{id: null score - best span score}}, as the official --na-prob-file",
        metavar="FILE",
    )

    CHOICES = {"version": ("1.1", "2.0")}


@dataclass(frozen=True)
class EvaluateStsOptions:
    model: str = model_option("our checkpoint, an HF or fairseq one, or a sentence-transformers directory")
    data: str = option(None, "scored pairs, e.g. STS-B/dev.tsv", required=True, metavar="FILE")
    columns: str = option(
        "sentence1,sentence2,score",
        "the two texts' columns and the score's (default {default})",
        metavar="A,B,SCORE",
    )
    pool: str | None = option(None, "our checkpoints: pool the last layer this way")

    CHOICES = {"pool": POOLS}
