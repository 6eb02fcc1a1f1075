"""The options of `finetune TASK` and `distill TASK` beside the job's sections: where a run starts,
the run's own, each task's data, and the losses' settings (which the tasks' dataclasses take from
here, checked by the same rules)."""

from __future__ import annotations

from dataclasses import dataclass

from roberta.options.declare import check, model_option, option, required
from roberta.options.inference import POOLS

GLUE_TASKS_HELP = "CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE or WNLI"
# What a sentence-transformers teacher's pass over the texts runs in (roberta.runtime.precision).
TEACHER_PRECISIONS = ("auto", "fp32", "bf16")
SQUAD_VERSIONS = ("1.1", "2.0")  # `qa.examples.VERSIONS`, which reads and checks them
SIMCSE_TEMPERATURE = 0.05  # Gao et al. 2021, for unsupervised and supervised SimCSE alike
# Where `distill embed --new-student` starts (tasks.embed_student_pruned).
STUDENT_INITS = ("auto", "pruned", "static")


@dataclass(frozen=True)
class StartOptions:
    """Where `finetune TASK` starts."""

    model: str = model_option(
        "checkpoint to start from: ours, an HF directory, or fairseq model.pt", older=("--init",)
    )
    init_task: str | None = option(None, "start from a fine-tuned body (e.g. MNLI RUN/best), a new head")


@dataclass(frozen=True)
class RunOptions:
    """The run's options, which `finetune` and `distill` share: its directory, job and members."""

    out: str = required("run directory: checkpoints/, best/, metrics.jsonl, results.json", None)
    config: str | None = option(None, "job TOML whose fields replace the task's defaults")
    eval_every: int | None = option(
        None, "evaluate on dev (and keep the best) every N updates (default: at the end of each epoch)"
    )
    seeds: int = option(1, "run N seeds (RUN/seedK) and report the median (default {default})")
    sweep: bool = option(False, "the paper's grid: batch {{16, 32}} x LR {{1e-5, 2e-5, 3e-5}}")
    resume: bool = option(
        False,
        "continue the run in --out from its latest checkpoint (with --seeds/--sweep: every member; "
        "finished ones are reported as they are)",
    )
    overwrite: bool = option(
        False, "replace what --out holds (removed only once the whole command has been checked)"
    )

    RANGES = {"eval_every": ">=1", "seeds": ">=1"}


@dataclass(frozen=True)
class GlueDataOptions:
    """What `finetune glue` and `distill glue` read."""

    task: str = required(GLUE_TASKS_HELP, "T")
    data: str = required("the task's GLUE directory (train.tsv, dev.tsv)", "DIR")


@dataclass(frozen=True)
class ClassifyDataOptions:
    """What `finetune classify` and `distill classify` read, and their recipe (`tasks.classify`
    takes its defaults from here)."""

    train: str = required("training file", None)
    dev: str = required("dev file (its labels must all occur in --train)", None)
    text_column: str = required("column of the text", None)
    pair_column: str | None = option(None, "column of the second text of a pair")
    label_column: str = required("column of the label (a class name, or a number)", None)
    regression: bool = option(False, "labels are numbers to predict (one output, MSE)")
    head: str = option("classifier", "name of the head in the checkpoint (default {default})")
    lr: float = option(2e-5, "peak learning rate (default {default})")
    batch_size: int = option(16, "examples per update (default {default})")


@dataclass(frozen=True)
class SquadOptions:
    version: str = required("SQuAD version of the files", None)
    train: str = required("official training JSON, e.g. train-v1.1.json")
    dev: str = required("official dev JSON, e.g. dev-v1.1.json")
    stride: int = option(128, "context tokens shared by consecutive windows (default {default})")
    max_query: int = option(64, "question tokens kept (default {default})")

    CHOICES = {"version": SQUAD_VERSIONS}
    RANGES = {"stride": ">=0", "max_query": ">=1"}


@dataclass(frozen=True)
class RaceOptions:
    data: str = required("RACE directory: train/ dev/ [test/]", "DIR")
    max_qa: int = option(128, "question + option tokens kept (default {default})")

    RANGES = {"max_qa": ">=1"}


@dataclass(frozen=True)
class EmbedDataOptions:
    """What `finetune embed` and `distill embed` read: sentences, the dev pairs, the pooling."""

    text: tuple[str, ...] = option(
        (), "sentences, one a line: text files or directories, JSONL, Parquet", nargs="+", metavar="PATH"
    )
    max_sentences: int | None = option(None, "the first N sentences of --text only", metavar="N")
    dev: str = required("scored pairs for dev evaluation, e.g. STS-B/dev.tsv")
    dev_columns: str = option(
        "sentence1,sentence2,score",
        "--dev's columns: the two texts and the score (default {default})",
        metavar="A,B,SCORE",
    )
    pool: str | None = option(
        None, "the sentence vector: <s>, or the mean over tokens (default: the checkpoint's own, else mean)"
    )

    CHOICES = {"pool": POOLS}
    RANGES = {"max_sentences": ">=1"}


@dataclass(frozen=True)
class EmbedPairsOptions:
    """`finetune embed`'s pairs and its contrastive loss."""

    pairs: str | None = option(None, "pairs of texts to train on (instead of --text)", metavar="FILE")
    text_column: str = option("sentence1", "--pairs: column of the first text")
    pair_column: str = option("sentence2", "--pairs: column of the second text")
    score_column: str | None = option(None, "--pairs: column of a similarity score (CoSENT on their order)")
    negative_column: str | None = option(None, "--pairs: column of a hard negative for the first text")
    temperature: float = option(SIMCSE_TEMPERATURE, "InfoNCE's temperature (SimCSE's {default}, the default)")

    RANGES = {"temperature": ">0"}


@dataclass(frozen=True)
class DistillLoss:
    """The teacher and how its soft labels mix with the gold ones (Hinton et al. 2015); checked
    when made, from the command line or from Python (`tasks.distill.Distillation`)."""

    teacher: str = required("fine-tuned checkpoint holding the task's head (RUN/best)", None)
    temperature: float = option(2.0, "softmax temperature T (default {default:g})")
    # The weight of the soft loss on labelled examples; 1 - alpha goes to the gold loss.
    alpha: float = option(0.5, "weight of the soft loss, 1 - alpha the gold's (default {default})")

    RANGES = {"temperature": ">0", "alpha": "[0,1]"}

    def __post_init__(self) -> None:
        check(self, "distill")


def student_model(tokenizer: str, **cli) -> object:
    """The checkpoint `distill` starts its student from: `--model`, once `--student`."""
    help = f"checkpoint to start the student from (any shape, {tokenizer} tokenizer)"
    return model_option(help, older=("--student",), **cli)


@dataclass(frozen=True)
class StudentOptions:
    """Where `distill glue|classify` starts its student, and the unlabeled text it learns from too."""

    model: str = student_model("same")
    transfer: str | None = option(
        None,
        "unlabeled examples distilled too, in the task's format (glue: a TSV in the task's layout; "
        "classify: a file with --text-column and --pair-column), a label column absent or ignored",
        metavar="FILE",
    )


@dataclass(frozen=True)
class DistillEmbedOptions:
    """`distill embed`'s teacher and where its student starts: a checkpoint, or made from the teacher."""

    teacher: str = required("a sentence-transformers model directory", "DIR")
    model: str | None = student_model("any", default=None, group="student")
    new_student: str | None = option(
        None,
        "make the student from the teacher, e.g. 2x128: its vocabulary, FFN 4x (the recommended start)",
        metavar="LAYERSxWIDTH",
        group="student",
    )
    student_init: str = option(
        "auto",
        "--new-student's weights: pruned (cut from the teacher's last layers: its most active channels, "
        "heads and neurons; BERT and RoBERTa teachers), static (the teacher's token vectors as the "
        "embeddings, random layers, a head per 64 of width), auto (pruned where the teacher allows, "
        "else static; default)",
    )
    teacher_precision: str = option(
        "auto",
        "what the teacher's pass over the texts runs in: fp32, bf16 (autocast: 2.4x faster on passages "
        "with AMX, vectors within 1e-4 cosine of fp32's), or auto (default): bf16 on a CPU with native "
        "bf16 units (AMX, AVX512-BF16), else fp32; ROBERTA_PRECISION decides auto where it is set",
    )

    EXCLUSIVE = {"student": True}
    CHOICES = {"student_init": STUDENT_INITS, "teacher_precision": TEACHER_PRECISIONS}
