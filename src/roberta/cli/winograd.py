"""`roberta finetune wsc|winogrande|commonsenseqa|choice`, `evaluate winograd` and `predict --task
WSC|WinoGrande|CommonsenseQA`: Winograd schemas through the masked LM, and multiple choice through
a ranking head (the path RACE takes too). Registered by cli/finetune.py and cli/evaluate.py."""

from __future__ import annotations

import argparse

from roberta.cli.common import Handler, add_options, options_from, print_figures
from roberta.errors import UserError
from roberta.options.tasks import (
    ChoiceFilesOptions,
    ChoiceOptions,
    EvaluateWinogradOptions,
    WinograndeLossOptions,
    WinograndeOptions,
    Wsc273Options,
    WscLossOptions,
    WscOptions,
)


def _finetune_wsc(p: argparse.ArgumentParser) -> Handler:
    """Winograd schemas (SuperGLUE WSC) by the masked LM, the paper's way

    Reads DIR/train.jsonl and DIR/val.jsonl (SuperGLUE WSC). Each schema's pronoun is replaced by
    <mask>s and every candidate (the query span, and the noun phrases of the sentence) scored by
    the mean log-probability of its tokens there; the query of a true schema must outscore the
    others: fairseq's cross-entropy over the candidates (default) or Kocijan et al.'s margin loss.
    Trains the checkpoint's masked-LM head (one without is refused). Dev accuracy on val (and on
    WSC273 with --wsc273) after each epoch; the best val accuracy is kept as RUN/best/.
    """
    from roberta.cli.finetune import _finetune_options

    add_options(p, WscOptions, Wsc273Options, WscLossOptions)
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from pathlib import Path

        from roberta.tasks.candidate_scoring import WSC_RECIPE, Loss, plan_wsc
        from roberta.tasks.winograd import winograd_sets

        data, wsc273 = Path(options_from(args, WscOptions).data), options_from(args, Wsc273Options).wsc273
        ranking = options_from(args, WscLossOptions)
        loss = Loss(ranking.loss, ranking.margin_alpha, ranking.margin_beta)

        def plan(job, model, tokenizer, source):
            from roberta.tasks.winograd_data import read_superglue_wsc

            train, _ = read_superglue_wsc(data / "train.jsonl", labelled=True)
            held_out = winograd_sets(wsc273, None, data / "val.jsonl")
            sets = {"val": held_out.pop("superglue"), **held_out}
            return plan_wsc(train, sets, loss, job, model, tokenizer, source)

        _run(args, plan, WSC_RECIPE)

    return run


def _run(args, plan, recipe) -> None:
    from roberta.cli.finetune import _run_finetune

    _run_finetune(args, plan, recipe)


def _plan_choice(head: str, layout, read_splits):
    def plan(job, model, tokenizer, source):
        from roberta.tasks.choice import plan_choice

        return plan_choice(head, layout, read_splits(), job, model, tokenizer, source)

    return plan


def _finetune_winogrande(p: argparse.ArgumentParser) -> Handler:
    """WinoGrande: a ranking head on its two filled-in sentences, or fairseq's masked-LM scoring

    Reads DIR/train_SIZE.jsonl and DIR/dev.jsonl (WinoGrande 1.1). --method head (default): writes
    each option into the sentence's blank, scores the two sentences on <s> with the head
    `winogrande` and trains softmax over them (LR 1e-5, batch 32, 10 epochs, 10% warmup). --method
    lm: fairseq's `winogrande` task, the right option scored against the other by the masked LM at
    the blank, with the margin loss (alpha 5, beta 0.4, fairseq's) or --loss cross-entropy. Dev
    accuracy each epoch, the best kept as RUN/best/; `roberta predict --task WinoGrande` writes the
    test file's leaderboard predictions with either.
    """
    from roberta.cli.finetune import _finetune_options

    add_options(p, WinograndeOptions, WinograndeLossOptions)
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from pathlib import Path

        from roberta.tasks.choice import WINOGRANDE, WINOGRANDE_RECIPE, read_winogrande

        o = options_from(args, WinograndeOptions)
        data = Path(o.data)
        train, dev = data / f"train_{o.size}.jsonl", data / "dev.jsonl"
        if o.method == "lm":
            from roberta.tasks.candidate_scoring import Loss

            ranking = options_from(args, WinograndeLossOptions)
            loss = Loss(ranking.loss, ranking.margin_alpha, ranking.margin_beta)

            def plan(job, model, tokenizer, source):
                from roberta.tasks.candidate_scoring import plan_wsc
                from roberta.tasks.winograd_data import read_winogrande_schemas

                sets = {"dev": (read_winogrande_schemas(dev), True)}
                return plan_wsc(read_winogrande_schemas(train), sets, loss, job, model, tokenizer, source)

        else:
            plan = _plan_choice(
                "winogrande",
                WINOGRANDE,
                lambda: {"train": read_winogrande(train), "dev": read_winogrande(dev)},
            )
        _run(args, plan, WINOGRANDE_RECIPE)

    return run


def _finetune_commonsenseqa(p: argparse.ArgumentParser) -> Handler:
    """CommonsenseQA with fairseq's `Q: ... A: ...` input and a ranking head

    Reads --train and --dev (CommonsenseQA's JSONL: train_rand_split.jsonl, dev_rand_split.jsonl),
    writes each of the 5 choices as `<s> Q: question </s> A: choice </s>`, scores them on <s> with
    the head `commonsenseqa` and trains softmax over the 5 (fairseq's recipe: LR 1e-5, batch 16,
    ~3000 updates as 5 epochs, 5% warmup, weight decay 0.01); dev accuracy each epoch, the best kept
    as RUN/best/. `roberta predict --task CommonsenseQA` writes the test predictions.
    """
    from roberta.cli.finetune import _finetune_options

    add_options(p, ChoiceFilesOptions)
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.choice import COMMONSENSEQA, COMMONSENSEQA_RECIPE, read_commonsenseqa

        o = options_from(args, ChoiceFilesOptions)

        def splits():
            return {"train": read_commonsenseqa(o.train), "dev": read_commonsenseqa(o.dev)}

        _run(args, _plan_choice("commonsenseqa", COMMONSENSEQA, splits), COMMONSENSEQA_RECIPE)

    return run


def _finetune_choice(p: argparse.ArgumentParser) -> Handler:
    """your own multiple-choice data (CSV, TSV, JSONL, Parquet): a question, N options, the answer

    Reads --train and --dev, each row a question, its options (one column holding a list, or one
    column per option) and the answer (the right option's text, its letter A.. or its 0-based
    index); every row has as many options. Each option is written `<s> question </s></s> option
    </s>`, scored on <s> by the ranking head --head, softmax over the options (LR 1e-5, batch 16,
    5 epochs); the best dev accuracy is kept as RUN/best/.
    """
    from roberta.cli.finetune import _finetune_options

    add_options(p, ChoiceFilesOptions, ChoiceOptions)
    _finetune_options(p)

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.choice import CHOICE_RECIPE, OWN, read_choice_file

        files, o = options_from(args, ChoiceFilesOptions), options_from(args, ChoiceOptions)
        columns = [c.strip() for c in o.options_column.split(",") if c.strip()]

        def splits():
            train = read_choice_file(files.train, o.question_column, columns, o.answer_column)
            count = len(train[0].options)
            dev = read_choice_file(files.dev, o.question_column, columns, o.answer_column, count)
            return {"train": train, "dev": dev}

        _run(args, _plan_choice(o.head, OWN, splits), CHOICE_RECIPE)

    return run


def _evaluate_winograd(p: argparse.ArgumentParser) -> Handler:
    """a masked LM on Winograd schemas, zero-shot: WSC273, WinoGrande dev, SuperGLUE WSC val

    Scores each schema's candidates at its pronoun with --model's masked LM (any checkpoint with one:
    a pretraining step, a WSC-fine-tuned RUN/best, HF or fairseq) and prints one JSON object: per set
    given, the accuracy in percent and the count. WSC273 and WinoGrande: right when the right answer
    scores more than the other; SuperGLUE WSC: the query predicted true when it scores at least
    every candidate noun phrase of the sentence.
    """
    add_options(p, EvaluateWinogradOptions, Wsc273Options)

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.winograd import zero_shot

        o, wsc273 = options_from(args, EvaluateWinogradOptions), options_from(args, Wsc273Options).wsc273
        print_figures(zero_shot(o.model, wsc273, o.winogrande, o.superglue, o.wnli))

    return run


PREDICT_TASKS = {
    "wsc": "WSC",
    "wnli-wsc": "WNLI-WSC",
    "winogrande": "WinoGrande",
    "commonsenseqa": "CommonsenseQA",
}


def predict_task(args: argparse.Namespace) -> bool:
    """`predict --task WSC|WNLI-WSC|WinoGrande|CommonsenseQA`: the test file's leaderboard file; False for
    another task (GLUE's, handled by the caller)."""
    if args.task.lower() not in PREDICT_TASKS:
        return False
    from roberta.cli.common import load_hub, say_precision
    from roberta.tasks.winograd import PREDICTORS

    fp32_only = "is not available (fp32 only)"
    given = (
        ("--head", args.head, "means nothing"),
        ("--columns", args.columns, "means nothing"),
        ("--header", args.header, "means nothing"),
        ("--int8", args.int8, fp32_only),
        (f"--precision {args.precision}", args.precision not in ("auto", "fp32"), fp32_only),
    )
    for option, value, what in given:
        if value:
            raise UserError(f"predict: {option} {what} with --task {args.task}")
    args.precision = "fp32"  # candidate and option scores decide near-ties: fp32 whatever the CPU
    count = PREDICTORS[args.task.lower()](load_hub(args), args.input, args.out)
    print(f"{args.out}: {count} predictions")
    say_precision(args)
    return True


FINETUNE_TASKS = {
    "wsc": _finetune_wsc,
    "winogrande": _finetune_winogrande,
    "commonsenseqa": _finetune_commonsenseqa,
    "choice": _finetune_choice,
}
EVALUATE_TASKS = {"winograd": _evaluate_winograd}
