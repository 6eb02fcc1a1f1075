"""The options of the task families with both a `finetune` and an `evaluate` sub-verb: token
tagging, Winograd schemas and multiple choice; then of the `evaluate` verbs."""

from __future__ import annotations

from dataclasses import dataclass

from roberta.options.declare import model_option, option, required
from roberta.options.finetune import GLUE_TASKS_HELP, SQUAD_VERSIONS
from roberta.options.inference import POOLS

WINOGRANDE_SIZES = ("xs", "s", "m", "l", "xl")
TAG_SCHEMES = ("iob2", "iob1", "iobes", "none")
# The Winograd ranking losses: fairseq's cross-entropy over the candidates, or Kocijan et al. 2019's
# margin loss (`tasks.candidate_scoring.Loss` takes its defaults and rules from WscLossOptions).
LOSSES = ("cross-entropy", "margin")


def ranking_loss_options(name: str, kind: str, alpha: float, beta: float, applies: str = "") -> type:
    """The Winograd ranking loss's options (--loss, --margin-alpha, --margin-beta), declared once
    for `finetune wsc` and `finetune winogrande --method lm`, with a verb's defaults (`kind` the
    loss's); `applies` begins their help when they apply only sometimes."""

    @dataclass(frozen=True)
    class RankingLossOptions:
        loss: str = option(kind, applies + "the ranking loss: cross-entropy or margin (default {default})")
        margin_alpha: float = option(alpha, applies + "margin loss: the hinge's weight (default {default:g})")
        margin_beta: float = option(beta, applies + "margin loss: the margin (default {default:g})")

        CHOICES = {"loss": LOSSES}
        RANGES = {"margin_alpha": ">=0"}

    RankingLossOptions.__name__ = RankingLossOptions.__qualname__ = name
    return RankingLossOptions


# fairseq's `wsc` task: cross-entropy with --wsc-cross-entropy, else the margin loss with alpha 1, beta 0.
WscLossOptions = ranking_loss_options("WscLossOptions", "cross-entropy", 1.0, 0.0)
# fairseq's WinoGrande recipe (examples/roberta/wsc/README.md): the margin loss, alpha 5, beta 0.4.
WinograndeLossOptions = ranking_loss_options("WinograndeLossOptions", "margin", 5.0, 0.4, "--method lm: ")


@dataclass(frozen=True)
class TagColumnsOptions:
    """How `finetune tag` and `evaluate tag` read a tagged file: where its words and tags are, how
    its tags read, and their names in their ids' order."""

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
    labels: str | None = option(
        None,
        "the labels in id order: the head's (finetune tag; default: the training data's), the names of "
        "numeric tags in JSONL/Parquet rows",
        metavar="A,B,...",
    )
    scheme: str = option(
        "iob2",
        "the tags' scheme: iob2 (default), iob1, iobes, or none (plain labels such as parts of "
        "speech: scored by token accuracy)",
        metavar="S",
    )

    CHOICES = {"scheme": TAG_SCHEMES}


@dataclass(frozen=True)
class TagFilesOptions:
    train: str = required("tagged training file")
    dev: str = required("tagged dev file (picks RUN/best/)")
    test: str | None = option(None, "tagged test file, scored beside dev", metavar="FILE")


@dataclass(frozen=True)
class TagTrainingOptions:
    """What `finetune tag` alone takes: how the labels meet sub-tokens, the head, the recipe."""

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
class Wsc273Options:
    """WSC273, which `evaluate winograd` scores, and `finetune wsc` at each evaluation too."""

    wsc273: str | None = option(
        None, "WSCollection.xml: its first 273 schemas (finetune wsc: at each evaluation)", metavar="FILE"
    )


@dataclass(frozen=True)
class WscOptions:
    data: str = required("SuperGLUE WSC: train.jsonl, val.jsonl", "DIR")


@dataclass(frozen=True)
class WinograndeOptions:
    data: str = required("WinoGrande: train_SIZE.jsonl, dev.jsonl", "DIR")
    size: str = option("xs", "training size (default {default})")
    method: str = option("head", "ranking head or masked LM")

    CHOICES = {"size": WINOGRANDE_SIZES, "method": ("head", "lm")}


@dataclass(frozen=True)
class ChoiceFilesOptions:
    """What `finetune commonsenseqa` and `finetune choice` read."""

    train: str = required("training file (CommonsenseQA: its train_rand_split.jsonl)")
    dev: str = required("dev file with answers (CommonsenseQA: dev_rand_split.jsonl)")


@dataclass(frozen=True)
class ChoiceOptions:
    """`finetune choice`'s columns and head."""

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
    winogrande: str | None = option(None, "WinoGrande JSONL with answers (dev.jsonl)", metavar="FILE")
    superglue: str | None = option(None, "SuperGLUE WSC JSONL with labels (val.jsonl)", metavar="FILE")
    wnli: str | None = option(None, "GLUE WNLI TSV with labels (dev.tsv), read as schemas", metavar="FILE")


@dataclass(frozen=True)
class EvaluateGlueOptions:
    # Checked by the handler, so that building the parser imports no task module.
    task: str = required(GLUE_TASKS_HELP, "T")
    dev: str = required("labelled GLUE file, e.g. RTE/dev.tsv or MNLI/dev_matched.tsv")
    predictions: str = required("predictions TSV with a row for every dev index")


@dataclass(frozen=True)
class EvaluateSquadOptions:
    version: str = required("SQuAD version of the dev file", None)
    dev: str = required("official dataset JSON, e.g. dev-v2.0.json")
    predictions: str = required("predictions JSON {{id: text}}")
    null_odds: str | None = option(
        None,
        "v2.0 only: JSON {{id: null score - best span score}}, as the official --na-prob-file",
        metavar="FILE",
    )

    CHOICES = {"version": SQUAD_VERSIONS}


@dataclass(frozen=True)
class EvaluateStsOptions:
    model: str = model_option("our checkpoint, an HF or fairseq one, or a sentence-transformers directory")
    data: str = required("scored pairs, e.g. STS-B/dev.tsv")
    columns: str = option(
        "sentence1,sentence2,score",
        "the two texts' columns and the score's (default {default})",
        metavar="A,B,SCORE",
    )
    pool: str | None = option(None, "our checkpoints: pool the last layer this way")

    CHOICES = {"pool": POOLS}


@dataclass(frozen=True)
class EvaluateTagOptions:
    gold: str = required("the tagged reference")
    predictions: str = required("the same sentences, tagged")
