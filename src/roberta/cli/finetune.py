"""`roberta finetune TASK`, `distill TASK` and `probe`: runs that start from a checkpoint, with the
run options they share (`--out`, `--config`, `--seeds`, `--sweep`, `--resume`, `--overwrite`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from roberta.cli import tag as tag_cli
from roberta.cli import winograd as winograd_cli
from roberta.cli.common import GLUE_TASKS_HELP, Handler, add_commands, add_options, options_from
from roberta.options import ProbeOptions

if TYPE_CHECKING:
    from roberta.tasks.classify import Sentences


def _finetune(p: argparse.ArgumentParser) -> None:
    """fine-tune a checkpoint on a task: GLUE, your own classification data, SQuAD, RACE, embeddings

    Fine-tunes with the same trainer as pretraining: dev evaluation, the best dev checkpoint kept as
    RUN/best/, RUN/results.json, exact --resume. Job fields are overridden as --section.key=value
    (e.g. --optim.lr=2e-5 --train.batch_size=32 --train.epochs=3).
    """
    add_commands(p, "task_family", "TASK", FINETUNE_TASKS)


def _finetune_options(p: argparse.ArgumentParser) -> None:
    """Options every `roberta finetune TASK` takes: where it starts, and the run's."""
    p.add_argument(
        "--init", required=True, help="checkpoint to start from: ours, an HF directory, or fairseq model.pt"
    )
    p.add_argument(
        "--init-task",
        help="start from this fine-tuned checkpoint (e.g. MNLI RUN/best) instead of --init: its body, "
        "a new head",
    )
    _run_options(p)


def _run_options(p: argparse.ArgumentParser) -> None:
    """The run's options, which `finetune` and `distill` share: its directory, job and members."""
    p.add_argument(
        "--out", required=True, help="run directory: checkpoints/, best/, metrics.jsonl, results.json"
    )
    p.add_argument("--config", help="job TOML whose fields replace the task's defaults")
    p.add_argument(
        "--eval-every",
        type=int,
        help="evaluate on dev (and keep the best) every N updates (default: at the end of each epoch)",
    )
    p.add_argument(
        "--seeds", type=int, default=1, help="run N seeds (RUN/seedK) and report the median (default 1)"
    )
    p.add_argument(
        "--sweep", action="store_true", help="the paper's grid: batch {16, 32} x LR {1e-5, 2e-5, 3e-5}"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its latest checkpoint (with --seeds/--sweep: every member; "
        "finished ones are reported as they are)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace what --out holds (removed only once the whole command has been checked)",
    )
    p.set_defaults(overrides=[])


def _run_finetune(
    args: argparse.Namespace,
    plan_task,
    lr: float,
    batch_size: int,
    epochs: float = 10,
    extra: tuple = (),
    start=None,
) -> None:
    """The task's recipe (its LR, batch, epochs), the --config file and the overrides, then every
    member (one run, --seeds or --sweep) planned with `plan_task(job, model, tokenizer, source)`
    and run from `start` (default: --init, --init-task); prints the summary."""
    from roberta.io import to_json
    from roberta.tasks.finetune import Start, finetune, load_finetune_job

    job = load_finetune_job(
        args.config, args.overrides, lr, batch_size, epochs, extra=extra, eval_every=args.eval_every
    )
    summary = finetune(
        job,
        args.out,
        start or Start(args.init, args.init_task),
        plan_task,
        seeds=args.seeds,
        sweep=args.sweep,
        resume=args.resume,
        overwrite=args.overwrite,
    )
    print(to_json(summary, indent=2))


def _finetune_glue(p: argparse.ArgumentParser) -> Handler:
    """a GLUE task from its standard TSV files, with the paper's recipe

    Reads DIR/train.tsv and the dev file(s) (MNLI: dev_matched.tsv and dev_mismatched.tsv) in GLUE's
    layouts and fine-tunes with the paper's recipe for the task (LR, batch, 10 epochs, 6% warmup,
    weight decay 0.1), evaluating on dev every epoch and keeping the best as RUN/best/.
    """
    _glue_data_options(p)
    _finetune_options(p)
    return lambda args: _run_sentences(args, _glue_sentences(args))


def _finetune_classify(p: argparse.ArgumentParser) -> Handler:
    """your own sentence(-pair) classification or regression data (CSV, TSV, JSONL, Parquet)

    Reads --train and --dev (CSV, TSV, JSONL or Parquet by suffix; columns by header, key or name).
    Labels may be strings: the label set is read from the training file and kept with the head, so
    `roberta predict` prints label names. --regression trains one output with MSE.
    """
    _classify_data_options(p)
    _finetune_options(p)
    return lambda args: _run_sentences(args, _classify_sentences(args))


def _glue_data_options(p: argparse.ArgumentParser) -> None:
    """What `finetune glue` and `distill glue` read."""
    p.add_argument("--task", required=True, metavar="T", help=GLUE_TASKS_HELP)
    p.add_argument(
        "--data", required=True, metavar="DIR", help="the task's GLUE directory (train.tsv, dev.tsv)"
    )


def _classify_data_options(p: argparse.ArgumentParser) -> None:
    """What `finetune classify` and `distill classify` read, and their recipe."""
    p.add_argument("--train", required=True, help="training file")
    p.add_argument("--dev", required=True, help="dev file (its labels must all occur in --train)")
    p.add_argument("--text-column", required=True, help="column of the text")
    p.add_argument("--pair-column", help="column of the second text of a pair")
    p.add_argument("--label-column", required=True, help="column of the label (a class name, or a number)")
    p.add_argument(
        "--regression", action="store_true", help="labels are numbers to predict (one output, MSE)"
    )
    p.add_argument(
        "--head", default="classifier", help="name of the head in the checkpoint (default classifier)"
    )
    p.add_argument("--lr", type=float, default=2e-5, help="peak learning rate (default 2e-5)")
    p.add_argument("--batch-size", type=int, default=16, help="examples per update (default 16)")


def _glue_sentences(args: argparse.Namespace) -> Sentences:
    from roberta.tasks.glue import glue_sentences

    return glue_sentences(args.task, args.data)


def _classify_sentences(args: argparse.Namespace) -> Sentences:
    from roberta.tasks.classify import own_sentences

    columns = (args.text_column, args.pair_column, args.label_column)
    return own_sentences(args.train, args.dev, *columns, args.regression, args.head, args.lr, args.batch_size)


def _run_sentences(args: argparse.Namespace, sentences: Sentences) -> None:
    """`finetune glue|classify`: the sentence task fine-tuned from --init."""
    from roberta.tasks.classify import plan_sentences

    def plan(job, model, tokenizer, source):
        return plan_sentences(*sentences.read(), job, model, tokenizer, source)

    _run_finetune(args, plan, sentences.lr, sentences.batch_size)


def _finetune_squad(p: argparse.ArgumentParser) -> Handler:
    """SQuAD v1.1 / v2.0 extractive QA from the official JSON files

    Fine-tunes a span head (v2.0: and an answerable classifier on <s>, losses summed) on windows
    over the contexts with the paper's recipe (LR 1.5e-5, batch 48, 2 epochs, max length 384), keeps
    the best dev F1 as RUN/best/ and writes its dev answers to RUN/predictions.json (v2.0: at the
    null threshold best on dev, with RUN/null_odds.json).
    """
    p.add_argument("--version", required=True, choices=["1.1", "2.0"], help="SQuAD version of the files")
    p.add_argument(
        "--train", required=True, metavar="FILE", help="official training JSON, e.g. train-v1.1.json"
    )
    p.add_argument("--dev", required=True, metavar="FILE", help="official dev JSON, e.g. dev-v1.1.json")
    p.add_argument(
        "--stride", type=int, default=128, help="context tokens shared by consecutive windows (default 128)"
    )
    p.add_argument("--max-query", type=int, default=64, help="question tokens kept (default 64)")
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from functools import partial

        from roberta.qa.windows import SQUAD_MAX_LENGTH
        from roberta.tasks.squad import SQUAD_BATCH, SQUAD_EPOCHS, SQUAD_LR, plan_squad

        files = (args.version, args.train, args.dev)
        plan = partial(plan_squad, *files, stride=args.stride, max_query=args.max_query)
        max_length = f"--data.max_length={SQUAD_MAX_LENGTH}"
        _run_finetune(args, plan, SQUAD_LR, SQUAD_BATCH, SQUAD_EPOCHS, (max_length,))

    return run


def _finetune_race(p: argparse.ArgumentParser) -> Handler:
    """RACE multiple-choice reading comprehension from its directories

    Reads DIR/train, DIR/dev and, if present, DIR/test (each with high/ and middle/ RACE files),
    scores each (passage, question + option) on <s> and trains softmax over the 4 options with the
    paper's recipe (LR 1e-5, batch 16, 4 epochs, max length 512); accuracy overall, middle and high
    on dev and test, the best dev accuracy kept as RUN/best/.
    """
    p.add_argument("--data", required=True, metavar="DIR", help="RACE directory: train/ dev/ [test/]")
    p.add_argument("--max-qa", type=int, default=128, help="question + option tokens kept (default 128)")
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from functools import partial

        from roberta.tasks.race import RACE_BATCH, RACE_EPOCHS, RACE_LR, plan_race

        _run_finetune(args, partial(plan_race, args.data, args.max_qa), RACE_LR, RACE_BATCH, RACE_EPOCHS)

    return run


def _finetune_embed(p: argparse.ArgumentParser) -> Handler:
    """a sentence encoder: contrastive training on sentences (SimCSE) or pairs (CoSENT)

    Trains the checkpoint into a sentence encoder whose cosines rank --dev's pairs (sentence1,
    sentence2, score: STS-B's dev.tsv) by Spearman, the best kept as RUN/best/. From --text
    (sentences, one a line: text files, a directory of them, JSONL or Parquet records): unsupervised
    SimCSE, each sentence twice through dropout as its own positive, the batch's others as
    negatives. From --pairs (CSV, TSV, JSONL, Parquet): with --score-column, CoSENT on the scores'
    order; without, each pair's second text is the first's positive (with --negative-column, a
    hard negative too). The pooling (--pool) is stored in the checkpoint as its `embedding` head:
    `roberta embed`, the hub, `serve` and the HF export use it.
    """
    _embed_data_options(p)
    p.add_argument("--pairs", metavar="FILE", help="pairs of texts to train on (instead of --text)")
    p.add_argument("--text-column", default="sentence1", help="--pairs: column of the first text")
    p.add_argument("--pair-column", default="sentence2", help="--pairs: column of the second text")
    p.add_argument("--score-column", help="--pairs: column of a similarity score (CoSENT on their order)")
    p.add_argument("--negative-column", help="--pairs: column of a hard negative for the first text")
    p.add_argument(
        "--temperature", type=float, default=0.05, help="InfoNCE's temperature (SimCSE's 0.05, the default)"
    )
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from functools import partial

        from roberta.tasks.embed import EMBED_BATCH, EMBED_EPOCHS, EMBED_LR, Columns, plan_embedding

        columns = Columns(args.text_column, args.pair_column, args.score_column, args.negative_column)
        data = _embed_data(args, pairs=args.pairs, columns=columns)
        plan = partial(plan_embedding, data, args.pool, args.temperature)
        # SimCSE's positives differ by dropout alone: a checkpoint trained without any gets 0.1.
        extra = (*EMBED_DEFAULTS, "--model.dropout=0.1", "--model.attention_dropout=0.1")
        _run_finetune(args, plan, EMBED_LR, EMBED_BATCH, EMBED_EPOCHS, extra)

    return run


# Sentences are short, and a batch of similar lengths would make its negatives easy to tell apart.
EMBED_DEFAULTS = ("--data.max_length=128", "--data.group_by_length=false")


def _embed_data_options(p: argparse.ArgumentParser) -> None:
    """What `finetune embed` and `distill embed` read: sentences, the dev pairs, the pooling."""
    p.add_argument(
        "--text",
        nargs="+",
        metavar="PATH",
        help="sentences, one a line: text files or directories, JSONL, Parquet",
    )
    p.add_argument("--max-sentences", type=int, metavar="N", help="the first N sentences of --text only")
    p.add_argument(
        "--dev", required=True, metavar="FILE", help="scored pairs for dev evaluation, e.g. STS-B/dev.tsv"
    )
    p.add_argument(
        "--dev-columns",
        default="sentence1,sentence2,score",
        metavar="A,B,SCORE",
        help="--dev's columns: the two texts and the score (default sentence1,sentence2,score)",
    )
    p.add_argument(
        "--pool",
        choices=["cls", "mean"],
        help="the sentence vector: <s>, or the mean over tokens (default: the checkpoint's own, else mean)",
    )


def _embed_data(args: argparse.Namespace, pairs=None, columns=None):
    """What `finetune embed` and `distill embed` read, from their options."""
    from roberta.tasks.embed import Columns, EmbedData

    dev_columns = Columns.parse(args.dev_columns, "--dev-columns")
    text = tuple(args.text or ())
    return EmbedData(args.dev, text, pairs, columns or Columns(), dev_columns, args.max_sentences)


def _distill(p: argparse.ArgumentParser) -> None:
    """distill a teacher into a smaller student: GLUE, your own data, a sentence encoder

    The student (any checkpoint with the teacher's tokenizer) learns from the teacher's soft labels
    at temperature T (KL scaled by T^2; squared error to its score for regression) mixed with the
    gold labels (weight 1 - alpha), on the task's training set and on unlabeled --transfer text
    (soft labels only). The teacher's logits are computed once and cached at RUN/teacher-logits.npy.
    Same trainer, run directory, RUN/best/, --resume and overrides as `roberta finetune`.
    """
    add_commands(p, "task_family", "TASK", DISTILL_TASKS)


def _distill_glue(p: argparse.ArgumentParser) -> Handler:
    """a GLUE task from its standard TSV files, with the task's fine-tuning recipe

    Reads DIR/train.tsv and the dev file(s) as `finetune glue` does and distills --teacher (a
    fine-tuned checkpoint with the head named after the task) into --student with the task's recipe
    (LR, batch, 10 epochs), keeping the best dev checkpoint as RUN/best/.
    """
    _glue_data_options(p)
    _distill_options(p, "a TSV in the task's layout (its label column absent or ignored)")
    return lambda args: _run_distill(args, _glue_sentences(args))


def _distill_classify(p: argparse.ArgumentParser) -> Handler:
    """your own sentence(-pair) classification or regression data (CSV, TSV, JSONL, Parquet)

    Reads --train and --dev as `finetune classify` does and distills --teacher (fine-tuned on the same
    labels, its head named --head) into --student.
    """
    _classify_data_options(p)
    _distill_options(p, "a file with --text-column (and --pair-column); a label column is ignored")
    return lambda args: _run_distill(args, _classify_sentences(args))


def _distill_options(p: argparse.ArgumentParser, transfer_help: str) -> None:
    """Options every `roberta distill TASK` takes: the two models, the loss, the run's."""
    p.add_argument(
        "--teacher", required=True, help="fine-tuned checkpoint holding the task's head (RUN/best)"
    )
    p.add_argument(
        "--student", required=True, help="checkpoint to start the student from (any shape, same tokenizer)"
    )
    p.add_argument("--temperature", type=float, default=2.0, help="softmax temperature T (default 2)")
    p.add_argument(
        "--alpha", type=float, default=0.5, help="weight of the soft loss, 1 - alpha the gold's (default 0.5)"
    )
    p.add_argument("--transfer", metavar="FILE", help=f"unlabeled examples distilled too: {transfer_help}")
    _run_options(p)


def _run_distill(args: argparse.Namespace, sentences: Sentences) -> None:
    """`distill glue|classify`: the sentence task distilled into --student."""
    from roberta.tasks.distill import Distillation, plan_distillation
    from roberta.tasks.finetune import Start

    settings = Distillation(args.teacher, args.temperature, args.alpha)

    def plan(job, model, tokenizer, source):
        task, train, train_path, dev = sentences.read()
        transfer = sentences.read_unlabelled(args.transfer) if args.transfer else []
        return plan_distillation(
            task, train, train_path, dev, transfer, settings, job, model, tokenizer, source
        )

    _run_finetune(args, plan, sentences.lr, sentences.batch_size, start=Start(args.student))


def _distill_embed(p: argparse.ArgumentParser) -> Handler:
    """a sentence encoder from a sentence-transformers teacher (e.g. all-MiniLM-L6-v2)

    Trains --student (any checkpoint, any tokenizer) to give --teacher's vector for each sentence of
    --text (squared distance), through a linear map where their widths differ, both stored in the
    student's `embedding` head. --new-student 2x128 makes the student instead: the teacher's
    vocabulary, each token's embedding the teacher's vector of that token cut to the width by PCA.
    The teacher (a sentence-transformers model directory, read offline) encodes the sentences once,
    cached at RUN/teacher-vectors.npy. --dev's pairs pick RUN/best/ by Spearman, as in `finetune embed`.
    """
    _embed_data_options(p)
    p.add_argument("--teacher", required=True, metavar="DIR", help="a sentence-transformers model directory")
    student = p.add_mutually_exclusive_group(required=True)
    student.add_argument("--student", help="checkpoint to start the student from (any shape, any tokenizer)")
    student.add_argument(
        "--new-student",
        metavar="LAYERSxWIDTH",
        help="make the student from the teacher, e.g. 2x128: its vocabulary, its token vectors as the "
        "embeddings, a head per 64 of width, FFN 4x (the recommended start)",
    )
    _run_options(p)

    def run(args: argparse.Namespace) -> None:
        from functools import partial

        from roberta.tasks.embed import (
            DISTILL_EMBED_LR,
            EMBED_BATCH,
            EMBED_EPOCHS,
            plan_embedding_distillation,
        )
        from roberta.tasks.embed_student import NewStudent, StudentShape
        from roberta.tasks.finetune import Start

        start = (
            Start(args.student)
            if args.new_student is None
            else NewStudent(args.teacher, StudentShape.parse(args.new_student))
        )
        plan = partial(plan_embedding_distillation, _embed_data(args), args.teacher, args.pool)
        _run_finetune(args, plan, DISTILL_EMBED_LR, EMBED_BATCH, EMBED_EPOCHS, EMBED_DEFAULTS, start=start)

    return run


def _probe(p: argparse.ArgumentParser) -> Handler:
    """fine-tune every checkpoint of a pretraining run (and a random init) on GLUE tasks: the curve

    Fine-tunes a random init of the run's shape and each chosen checkpoint of RUN on a small GLUE
    suite, one fixed recipe per task and several seeds, and writes RUN/probe/probe.json (every cell),
    probe.md (each task's median over seeds x 100, their GLUE-style average, STS-B zero-shot and the
    held-out masked-token accuracy) and probe.png (the scores against tokens seen). Cells already in
    probe.json are kept: a rerun trains nothing new and a killed probe continues.
    """
    add_options(p, ProbeOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.probe import TASKS, probe

        o = options_from(args, ProbeOptions)
        tasks = TASKS if o.tasks is None else tuple(t.strip() for t in o.tasks.split(",") if t.strip())
        probe(o.run, o.glue, tasks, o.seeds, o.checkpoints, o.limit, not o.no_progress)
        print(f"{o.run}/probe: probe.json, probe.md, probe.png")

    return run


FINETUNE_TASKS = {
    "glue": _finetune_glue,
    "classify": _finetune_classify,
    "squad": _finetune_squad,
    "race": _finetune_race,
    "embed": _finetune_embed,
    "tag": tag_cli.finetune_tag,
    **winograd_cli.FINETUNE_TASKS,
}
DISTILL_TASKS = {"glue": _distill_glue, "classify": _distill_classify, "embed": _distill_embed}
VERBS = {"finetune": _finetune, "distill": _distill, "probe": _probe}
