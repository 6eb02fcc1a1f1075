"""`roberta finetune TASK`, `distill TASK` and `probe`: runs that start from a checkpoint, with the
run options they share (`--out`, `--config`, `--seeds`, `--sweep`, `--resume`, `--overwrite`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from roberta.cli import tag as tag_cli
from roberta.cli import winograd as winograd_cli
from roberta.cli.common import Handler, add_commands, add_options, options_from
from roberta.options import ProbeOptions
from roberta.options.finetune import (
    ClassifyDataOptions,
    DistillEmbedOptions,
    DistillLoss,
    EmbedDataOptions,
    EmbedPairsOptions,
    GlueDataOptions,
    RaceOptions,
    RunOptions,
    SquadOptions,
    StartOptions,
    StudentOptions,
)
from roberta.options.retrieval import DistillLeverOptions

if TYPE_CHECKING:
    from roberta.tasks.classify import Sentences
    from roberta.tasks.finetune import Recipe


def _finetune(p: argparse.ArgumentParser) -> None:
    """fine-tune a checkpoint on a task: GLUE, your own classification data, SQuAD, RACE, embeddings

    Fine-tunes with the same trainer as pretraining: dev evaluation, the best dev checkpoint kept as
    RUN/best/, RUN/results.json, exact --resume. Job fields are overridden as --section.key=value
    (e.g. --optim.lr=2e-5 --train.batch_size=32 --train.epochs=3).
    """
    add_commands(p, "task_family", "TASK", FINETUNE_TASKS)


def _finetune_options(p: argparse.ArgumentParser) -> None:
    """Options every `roberta finetune TASK` takes: where it starts, and the run's."""
    add_options(p, StartOptions)
    _run_options(p)


def _run_options(p: argparse.ArgumentParser) -> None:
    """The run's options, which `finetune` and `distill` share, and its `--section.key=value`
    overrides."""
    add_options(p, RunOptions)
    p.set_defaults(overrides=[])


def _run_finetune(args: argparse.Namespace, plan_task, recipe: Recipe, start=None) -> None:
    """The task's recipe, the --config file and the overrides, then every member (one run, --seeds
    or --sweep) planned with `plan_task(job, model, tokenizer, source)` and run from `start`
    (default: --model, --init-task); prints the summary."""
    from roberta.io import to_json
    from roberta.tasks.finetune import Start, finetune, recipe_job

    run = options_from(args, RunOptions)
    job = recipe_job(recipe, run.config, args.overrides, eval_every=run.eval_every)
    if start is None:
        begin = options_from(args, StartOptions)
        start = Start(begin.model, begin.init_task)
    summary = finetune(
        job,
        run.out,
        start,
        plan_task,
        seeds=run.seeds,
        sweep=run.sweep,
        resume=run.resume,
        overwrite=run.overwrite,
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
    add_options(p, GlueDataOptions)


def _classify_data_options(p: argparse.ArgumentParser) -> None:
    """What `finetune classify` and `distill classify` read, and their recipe."""
    add_options(p, ClassifyDataOptions)


def _glue_sentences(args: argparse.Namespace) -> Sentences:
    from roberta.tasks.glue import glue_sentences

    return glue_sentences(args.task, args.data)


def _classify_sentences(args: argparse.Namespace) -> Sentences:
    from roberta.tasks.classify import own_sentences

    o = options_from(args, ClassifyDataOptions)
    columns = (o.text_column, o.pair_column, o.label_column)
    return own_sentences(o.train, o.dev, *columns, o.regression, o.head, o.lr, o.batch_size)


def _sentences_recipe(sentences: Sentences) -> Recipe:
    """A sentence task's recipe: its LR and batch (GLUE's per task, --lr and --batch-size for your
    own data), 10 epochs."""
    from roberta.tasks.finetune import Recipe

    return Recipe(sentences.lr, sentences.batch_size)


def _run_sentences(args: argparse.Namespace, sentences: Sentences) -> None:
    """`finetune glue|classify`: the sentence task fine-tuned from --init."""
    from roberta.tasks.classify import plan_sentences

    def plan(job, model, tokenizer, source):
        return plan_sentences(sentences.read(), job, model, tokenizer, source)

    _run_finetune(args, plan, _sentences_recipe(sentences))


def _finetune_squad(p: argparse.ArgumentParser) -> Handler:
    """SQuAD v1.1 / v2.0 extractive QA from the official JSON files

    Fine-tunes a span head (v2.0: and an answerable classifier on <s>, losses summed) on windows
    over the contexts with the paper's recipe (LR 1.5e-5, batch 48, 2 epochs, max length 384), keeps
    the best dev F1 as RUN/best/ and writes its dev answers to RUN/predictions.json (v2.0: at the
    null threshold best on dev, with RUN/null_odds.json).
    """
    add_options(p, SquadOptions)
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from functools import partial

        from roberta.tasks.squad import SQUAD_RECIPE, plan_squad

        o = options_from(args, SquadOptions)
        plan = partial(plan_squad, o.version, o.train, o.dev, stride=o.stride, max_query=o.max_query)
        _run_finetune(args, plan, SQUAD_RECIPE)

    return run


def _finetune_race(p: argparse.ArgumentParser) -> Handler:
    """RACE multiple-choice reading comprehension from its directories

    Reads DIR/train, DIR/dev and, if present, DIR/test (each with high/ and middle/ RACE files),
    scores each (passage, question + option) on <s> and trains softmax over the 4 options with the
    paper's recipe (LR 1e-5, batch 16, 4 epochs, max length 512); accuracy overall, middle and high
    on dev and test, the best dev accuracy kept as RUN/best/.
    """
    add_options(p, RaceOptions)
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from functools import partial

        from roberta.tasks.race import RACE_RECIPE, plan_race

        o = options_from(args, RaceOptions)
        _run_finetune(args, partial(plan_race, o.data, o.max_qa), RACE_RECIPE)

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
    add_options(p, EmbedDataOptions, EmbedPairsOptions)
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from functools import partial

        from roberta.similarity.pairs import Columns
        from roberta.tasks.embed import EMBED_RECIPE, plan_embedding

        o = options_from(args, EmbedPairsOptions)
        columns = Columns(o.text_column, o.pair_column, o.score_column, o.negative_column)
        data, pool = _embed_data(args, pairs=o.pairs, columns=columns)
        _run_finetune(args, partial(plan_embedding, data, pool, o.temperature), EMBED_RECIPE)

    return run


def _embed_data(args: argparse.Namespace, pairs=None, columns=None):
    """What `finetune embed` and `distill embed` read, from their options, and the pooling."""
    from roberta.similarity.pairs import Columns
    from roberta.tasks.embed import EmbedData

    o = options_from(args, EmbedDataOptions)
    dev_columns = Columns.parse(o.dev_columns, "--dev-columns")
    return EmbedData(o.dev, o.text, pairs, columns or Columns(), dev_columns, o.max_sentences), o.pool


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
    fine-tuned checkpoint with the head named after the task) into --model with the task's recipe
    (LR, batch, 10 epochs), keeping the best dev checkpoint as RUN/best/.
    """
    _glue_data_options(p)
    _distill_options(p)
    return lambda args: _run_distill(args, _glue_sentences(args))


def _distill_classify(p: argparse.ArgumentParser) -> Handler:
    """your own sentence(-pair) classification or regression data (CSV, TSV, JSONL, Parquet)

    Reads --train and --dev as `finetune classify` does and distills --teacher (fine-tuned on the same
    labels, its head named --head) into --model.
    """
    _classify_data_options(p)
    _distill_options(p)
    return lambda args: _run_distill(args, _classify_sentences(args))


def _distill_options(p: argparse.ArgumentParser) -> None:
    """Options every `roberta distill TASK` takes: the two models, the loss, the run's."""
    add_options(p, DistillLoss, StudentOptions)
    _run_options(p)


def _run_distill(args: argparse.Namespace, sentences: Sentences) -> None:
    """`distill glue|classify`: the sentence task distilled into the student --model."""
    from roberta.tasks.distill import Distillation, plan_distillation
    from roberta.tasks.finetune import Start

    loss = options_from(args, DistillLoss)
    settings = Distillation(loss.teacher, loss.temperature, loss.alpha)
    student = options_from(args, StudentOptions)

    def plan(job, model, tokenizer, source):
        transfer = sentences.read_unlabelled(student.transfer) if student.transfer else []
        return plan_distillation(sentences.read(), transfer, settings, job, model, tokenizer, source)

    _run_finetune(args, plan, _sentences_recipe(sentences), start=Start(student.model))


def _distill_embed(p: argparse.ArgumentParser) -> Handler:
    """a sentence encoder from a sentence-transformers teacher (e.g. all-MiniLM-L6-v2)

    Trains --model (the student: any checkpoint, any tokenizer) to give --teacher's vector for each
    sentence of --text, or both texts of each of --pairs (squared distance), through a linear map
    where their widths differ, both stored in the student's `embedding` head; --similarity-weight
    adds the teacher's in-batch similarity structure. --new-student 2x128 makes the student instead:
    the teacher's vocabulary, each token's embedding the teacher's vector of that token cut to the
    width by PCA. The teacher (a sentence-transformers model directory, read offline) encodes the
    texts once, cached at RUN/teacher-vectors.npy. --dev's pairs pick RUN/best/ by Spearman, as in
    `finetune embed`.
    """
    add_options(p, EmbedDataOptions, DistillEmbedOptions, DistillLeverOptions)
    _run_options(p)

    def run(args: argparse.Namespace) -> None:
        from functools import partial

        from roberta.similarity.pairs import Columns
        from roberta.tasks.embed import DISTILL_EMBED_RECIPE
        from roberta.tasks.embed_distill import Similarity, plan_embedding_distillation
        from roberta.tasks.embed_student import StudentShape
        from roberta.tasks.embed_student_pruned import student_start
        from roberta.tasks.finetune import Start

        o, lever = options_from(args, DistillEmbedOptions), options_from(args, DistillLeverOptions)
        data, pool = _embed_data(args, lever.pairs, Columns(lever.text_column, lever.pair_column))
        if o.new_student is None:
            start = Start(o.model)
        else:
            shape = StudentShape.parse(o.new_student)
            start = student_start(o.teacher, shape, o.student_init, data, pool or "mean")
        similarity = Similarity(lever.similarity_weight, lever.similarity_temperature, lever.topic_batches)
        plan = partial(
            plan_embedding_distillation,
            data,
            o.teacher,
            pool,
            similarity=similarity,
            teacher_precision=o.teacher_precision,
        )
        _run_finetune(args, plan, DISTILL_EMBED_RECIPE, start=start)

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
        from roberta.evaluation.probe import TASKS, probe

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
