"""The `roberta` command: one verb per stage of the pipeline.

Each verb is a `_<verb>(parser)` function whose docstring is its --help: it declares its options
and returns its handler (VERBS below lists them). Handlers import their module lazily so that
`roberta --help` stays instant. A `UserError` or
an `OSError` (a file or place that cannot be used) anywhere becomes one line on stderr and exit
status 2.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import warnings
from collections.abc import Callable

from roberta.errors import UserError

# Large CPU tensors on transparent huge pages: torch reads this once, at its first allocation, so it
# is set before anything imports torch. A base@128 CPU training step has 13x fewer page faults and
# runs 6-9% faster; the numbers are the same (benchmarks/experiments/huge-pages.md). THP_MEM_ALLOC_ENABLE=0
# turns it off.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

# What a command runs, given its parsed arguments.
Handler = Callable[[argparse.Namespace], None]

GLUE_TASKS_HELP = "CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE or WNLI"


def _demo(p: argparse.ArgumentParser) -> Handler:
    """the whole pipeline in ~20 CPU minutes: corpus, tokenizer, prepare, pretrain, fill-mask

    Builds a corpus from the Python standard library's docstrings, trains a byte-level BPE
    tokenizer, prepares the corpus, pretrains a small RoBERTa with the CPU recipe
    (configs/pretrain-cpu-20min.toml) and a progress bar, then prints fill-mask predictions and
    where curves.png and the checkpoint are.
    """
    p.add_argument("--seed", type=int, default=0, help="seed for weights, data order and masks (default 0)")
    p.add_argument("--out", default="demo-run", help="working directory (default ./demo-run)")
    p.add_argument(
        "--steps",
        type=int,
        help="training steps (default: the recipe's train.max_steps; "
        "fewer shorten the run, the schedule scaled to fit)",
    )
    p.add_argument("--config", help="the pretraining recipe (default: configs/pretrain-cpu-20min.toml)")

    def run(args: argparse.Namespace) -> None:
        from roberta.demo import RECIPE, run_demo

        run_demo(seed=args.seed, out=args.out, steps=args.steps, config=args.config or RECIPE)

    return run


def _text_corpus_options(p: argparse.ArgumentParser, out_help: str) -> None:
    """What `prepare` and `train-tokenizer` share: they read text files the same way."""
    p.add_argument(
        "inputs",
        nargs="+",
        help="text files (plain, .gz, .jsonl, .parquet, .arrow), datasets.save_to_disk folders, "
        "or directories of such files",
    )
    p.add_argument("--out", required=True, help=out_help)
    p.add_argument(
        "--text-field",
        "--jsonl-text-field",
        dest="text_field",
        default="text",
        help="text field of .jsonl records, column of .parquet/.arrow files (default text)",
    )
    p.add_argument(
        "--errors",
        choices=["strict", "replace"],
        default="strict",
        help="invalid UTF-8: stop with an error (strict, default) or substitute U+FFFD (replace)",
    )
    _progress_option(p)


def _text_corpus_settings(args: argparse.Namespace) -> dict:
    """The keyword arguments of `prepare` and `train_tokenizer` that `_text_corpus_options` declares."""
    return {"text_field": args.text_field, "errors": args.errors, "progress": not args.no_progress}


def _line_file_options(p: argparse.ArgumentParser, input_help: str, out_help: str) -> None:
    """What `embed` and `predict` share: one text (or pair) per line in, one result per line out."""
    p.add_argument("--input", required=True, help=input_help)
    p.add_argument("--out", required=True, help=out_help)
    p.add_argument(
        "--truncate", action="store_true", help="cut texts longer than the model's positions (default: error)"
    )
    _progress_option(p)


def _progress_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _prepare(p: argparse.ArgumentParser) -> Handler:
    """encode text files into a binarized corpus directory for pretraining

    Text files (plain, .gz, .jsonl, .parquet, .arrow, datasets.save_to_disk folders) -> token
    memmap + sentence/document offsets + meta.json, with a validation split held out by whole
    documents. In text files a line is a sentence and a blank line ends a document; a JSON or
    Arrow record is a document, the lines of its --text-field its sentences.
    """
    _text_corpus_options(p, out_help="corpus directory to create")
    p.add_argument("--tokenizer", required=True, help="tokenizer directory (see `roberta train-tokenizer`)")
    p.add_argument("--workers", type=int, default=None, help="encoding processes (default: all cores)")
    p.add_argument(
        "--valid-fraction", type=float, default=0.01, help="share of documents held out (default 0.01)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the validation draw (default 0)")
    p.add_argument("--line-is-document", action="store_true", help="every non-blank line is a document")
    p.add_argument(
        "--shard-mb", type=int, default=1024, help="input megabytes per output shard (default 1024)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")

    def run(args: argparse.Namespace) -> None:
        from roberta.data.prepare import prepare

        out = prepare(
            args.inputs,
            args.tokenizer,
            args.out,
            **_text_corpus_settings(args),
            shard_bytes=args.shard_mb << 20,
            workers=args.workers,
            valid_fraction=args.valid_fraction,
            seed=args.seed,
            line_is_document=args.line_is_document,
            overwrite=args.overwrite,
        )
        print(out)

    return run


def _convert(p: argparse.ArgumentParser) -> Handler:
    """convert a checkpoint between roberta, HF transformers and fairseq formats (checked)

    Reads SRC (our checkpoint directory, an HF save_pretrained directory, or a fairseq model.pt /
    its directory), writes DST in the chosen format, then runs both models on a probe batch and
    prints the largest difference; above --tolerance nothing is written.
    """
    p.add_argument("src", help="checkpoint to read: directory, or a fairseq model.pt")
    p.add_argument("dst", help="directory to write (replaced atomically if it holds a checkpoint)")
    p.add_argument(
        "--to",
        choices=["roberta", "hf", "fairseq"],
        default="roberta",
        help="format of DST (default roberta)",
    )
    p.add_argument(
        "--tolerance", type=float, default=1e-5, help="largest allowed output difference (default 1e-5)"
    )

    def run(args: argparse.Namespace) -> None:
        from roberta.convert import convert

        convert(args.src, args.dst, to=args.to, tolerance=args.tolerance)

    return run


def _train_tokenizer(p: argparse.ArgumentParser) -> Handler:
    """train a byte-level BPE (vocab.json + merges.txt) or a WordPiece (vocab.txt) tokenizer

    Trains on text files (plain, .gz, .jsonl, .parquet, Arrow, datasets folders; directories
    expanded), reading sentences as `roberta prepare` does. Byte-level BPE (default) writes
    vocab.json + merges.txt with <s>=0 <pad>=1 </s>=2 <unk>=3 and <mask> as the last id;
    --kind wordpiece writes BERT's vocab.txt + tokenizer_config.json with [CLS]=0 [PAD]=1 [SEP]=2
    [UNK]=3 and [MASK] last, cased unless --uncased. OUT is written to a temporary directory, then
    renamed.
    """
    _text_corpus_options(p, out_help="directory to create (must not exist, or be empty)")
    p.add_argument("--vocab-size", type=int, required=True, help="number of ids, specials included")
    p.add_argument("--min-frequency", type=int, default=2, help="fewest occurrences for a merge (default 2)")
    p.add_argument("--kind", choices=["bpe", "wordpiece"], default="bpe", help="the model (default bpe)")
    case = p.add_mutually_exclusive_group()
    case.add_argument(
        "--cased",
        dest="lowercase",
        action="store_false",
        default=False,
        help="wordpiece: keep case (default)",
    )
    case.add_argument("--uncased", dest="lowercase", action="store_true", help="wordpiece: lowercase text")
    p.add_argument(
        "--strip-accents",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="wordpiece: remove accents (default: only with --uncased, as BERT)",
    )

    def run(args: argparse.Namespace) -> None:
        settings = _text_corpus_settings(args)
        if args.kind == "wordpiece":
            from roberta.wordpiece import train_wordpiece

            tokenizer = train_wordpiece(
                args.inputs,
                args.out,
                args.vocab_size,
                args.min_frequency,
                lowercase=args.lowercase,
                strip_accents=args.strip_accents,
                **settings,
            )
        elif args.lowercase or args.strip_accents is not None:
            raise UserError("--cased, --uncased and --strip-accents apply to --kind wordpiece only")
        else:
            from roberta.tokenizer import train_tokenizer

            tokenizer = train_tokenizer(
                args.inputs, args.out, args.vocab_size, args.min_frequency, **settings
            )
        print(f"{args.out}: {tokenizer.vocab_size} tokens, fingerprint {tokenizer.fingerprint()}")

    return run


def _pretrain(p: argparse.ArgumentParser) -> Handler:
    """pretrain RoBERTa on a prepared corpus (one CPU, one GPU, or torchrun DDP/FSDP)

    Trains on a corpus made by `roberta prepare`, writing RUN/checkpoints/, metrics.jsonl,
    tensorboard/ and curves.png. Any job field can be overridden as --section.key=value (e.g.
    --train.max_steps=1000 --optim.lr=1e-3). Under torchrun every rank runs this same command.
    """
    p.add_argument(
        "--config", help="job TOML, e.g. configs/pretrain-tiny.toml (default: the paper's base recipe)"
    )
    p.add_argument("--data", required=True, help="prepared corpus directory")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument(
        "--tokenizer", help="tokenizer directory saved into checkpoints (default: found in/beside --data)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its latest checkpoint (a finished one goes on if "
        "train.max_steps grew)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace what --out holds (a run, or anything else), once the command has been checked",
    )
    p.add_argument(
        "--init-from", help="start from a checkpoint (ours, HF or fairseq) instead of random weights"
    )
    p.add_argument(
        "--scale", type=float, help="shrink batch, steps and warmup together (same as --train.scale)"
    )
    _pretrain_distill_options(p)
    p.set_defaults(overrides=[])

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.pretrain import load_pretrain_job, pretrain
        from roberta.tasks.pretrain_distill import parse_layers
        from roberta.train import distributed

        extra = [f"--train.scale={args.scale}"] if args.scale is not None else []
        job = load_pretrain_job(args.config, [*args.overrides, *extra])
        result = pretrain(
            job,
            args.data,
            args.out,
            tokenizer=args.tokenizer,
            resume=args.resume,
            overwrite=args.overwrite,
            init_from=args.init_from,
            init_layers=parse_layers(args.init_layers) if args.init_layers else None,
            distill=_pretrain_distillation(args),
        )
        if int(os.environ.get("RANK", "0")) == 0:
            figures = ", ".join(f"{k} {v:.4g}" for k, v in result.valid.items())
            print(f"step {result.step}: {figures}\ncheckpoint: {result.checkpoint}")
        distributed.shutdown()

    return run


def _pretrain_distill_options(p: argparse.ArgumentParser) -> None:
    """`pretrain --teacher`: DistilBERT's distillation terms beside the masked-LM loss, and its
    student made of some of the teacher's layers."""
    # The defaults are PretrainDistillation's, written out: building the parser imports no torch.
    p.add_argument(
        "--init-layers",
        metavar="I,J",
        help="keep only these layers of --init-from (0-based, e.g. 0,2: DistilBERT's every other layer)",
    )
    p.add_argument(
        "--teacher", help="distil from this checkpoint (same tokenizer): its soft masked-LM targets"
    )
    p.add_argument("--temperature", type=float, help="softmax temperature of the soft targets (default 2)")
    p.add_argument(
        "--soft-weight",
        type=float,
        help="weight of the soft-target loss, the masked-LM loss's being 1 (default 2.5)",
    )
    p.add_argument(
        "--cosine-weight",
        type=float,
        help="weight of the cosine loss between last hidden states (default 0.5 where the "
        "teacher's width is the student's, else 0)",
    )


def _pretrain_distillation(args: argparse.Namespace):
    """`--teacher` and its weights as a PretrainDistillation; None without a teacher."""
    from roberta.tasks.pretrain_distill import PretrainDistillation

    weights = {
        "temperature": args.temperature,
        "soft_weight": args.soft_weight,
        "cosine_weight": args.cosine_weight,
    }
    given = {k: v for k, v in weights.items() if v is not None}
    if given and not args.teacher:
        raise UserError("--temperature, --soft-weight and --cosine-weight need --teacher")
    return PretrainDistillation(args.teacher, **given) if args.teacher else None


def _load_hub(args: argparse.Namespace):
    """The checkpoint as a hub, on --device, with --batch-tokens."""
    from roberta.hub import check_device, load

    if args.batch_tokens < 1:
        raise UserError(f"--batch-tokens must be at least 1, not {args.batch_tokens}")
    device = check_device(args.device)  # before the minutes a large checkpoint takes to read
    if args.int8:
        from roberta.int8 import require_cpu

        require_cpu(device)
    roberta = load(args.checkpoint, args.checkpoint_file).to(device)
    roberta.batch_tokens = args.batch_tokens
    return roberta


def _hub_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "checkpoint", help="our checkpoint directory, an HF directory, or a fairseq directory / model.pt"
    )
    p.add_argument("--checkpoint-file", help="the .pt file inside a fairseq directory (default model.pt)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument(
        "--batch-tokens",
        type=int,
        default=2048,
        help="padded tokens per batch; inputs are sorted by length so batches hold little padding "
        "(default 2048)",
    )
    p.add_argument(
        "--int8",
        action="store_true",
        help="CPU only: run the Linear layers in int8 (dynamic quantization; the speed-up depends on "
        "the CPU's int8 support), after printing to stderr how close int8 comes to fp32 on the input's "
        "first batch (embed: cosine of the vectors; predict, fill-mask: share of equal top-1 predictions)",
    )


def _fill_mask(p: argparse.ArgumentParser) -> Handler:
    """the most likely tokens for the one <mask> in a text

    Prints the --topk fillings of the single <mask> in TEXT (fairseq's fill_mask: the space before
    <mask> belongs to the predicted token), one per line: probability, token, filled text.
    """
    _hub_options(p)
    p.add_argument("text", help='text holding exactly one <mask>, e.g. "The capital of France is <mask>."')
    p.add_argument("--topk", type=int, default=5, help="how many fillings (default 5)")

    def run(args: argparse.Namespace) -> None:
        from roberta.checkpoint import require_lm_head

        roberta = _load_hub(args)
        require_lm_head(roberta.model, "fill-mask")  # before --int8 prints its comparison
        if args.int8:
            from roberta.int8 import quantize_for_fill_mask

            quantize_for_fill_mask(roberta, args.text)
        for filled, score, token in roberta.fill_mask(args.text, topk=args.topk):
            print(f"{score:.4f}\t{token!r}\t{filled}")

    return run


def _embed(p: argparse.ArgumentParser) -> Handler:
    """one vector per line of a text file (or row of a Parquet/Arrow file), into a .npy file

    Embeds each line of --input (row k of --out is line k+1) with the chosen layer and pooling; a
    .parquet or .arrow file gives one vector per row, of the column --columns names (default text).
    Lines are read in chunks and sorted by length within a chunk, so files larger than memory stream
    through; --out is written under a temporary name and renamed when complete.
    """
    _hub_options(p)
    _line_file_options(
        p,
        input_help="UTF-8 text file, one text per line, or a .parquet / .arrow file",
        out_help=".npy file to write (float32, [lines, hidden])",
    )
    p.add_argument(
        "--columns",
        metavar="NAME",
        help="the text column of a .parquet / .arrow --input, by name (default text)",
    )
    p.add_argument(
        "--layer", type=int, default=-1, help="0 = embeddings, 1..L = layers, -1 = last (default -1)"
    )
    p.add_argument(
        "--pool", choices=["cls", "mean"], default="cls", help="<s> vector or mean over tokens (default cls)"
    )

    def run(args: argparse.Namespace) -> None:
        from roberta.infer import embed_file

        _run_line_file(args, embed_file, "vectors", layer=args.layer, pool=args.pool, columns=args.columns)

    return run


def _predict(p: argparse.ArgumentParser) -> Handler:
    """classify each row of a TSV, Parquet or Arrow file with a checkpoint's classification head

    Runs the classification head --head on the text (or text pair) of each row of --input: a TSV
    file, or a .parquet / .arrow file whose text column(s) --columns names (default text). --out
    gets a header and per row the predicted label index and each class's probability (a one-output
    regression head: its score); written under a temporary name, then renamed.
    """
    _hub_options(p)
    p.add_argument("--head", help="classification head name (required without --task)")
    p.add_argument(
        "--task",
        metavar="T",
        help="a GLUE task: read --input as its test TSV and write the leaderboard "
        "file (index, label name; a score for STS-B) with the head named T, which must have T's "
        "number of outputs (no --head, --columns or --header with it)",
    )
    _line_file_options(
        p,
        input_help="TSV file (tab-separated, no quoting), or a .parquet / .arrow file",
        out_help="TSV file to write",
    )
    # No default: with --task a --columns given is refused, not ignored.
    p.add_argument(
        "--columns",
        help="text column, or two for a pair: 0-based indices or header names, e.g. 0 or 1,2 or "
        "sentence1,sentence2 (names imply --header; default 0). A .parquet / .arrow file's columns "
        "are picked by name only (default text)",
    )
    p.add_argument("--header", action="store_true", help="the first line is a header, not a row")

    def run(args: argparse.Namespace) -> None:
        from roberta.infer import predict_file

        if args.task:
            _predict_task(args)
            return
        if not args.head:
            raise UserError("predict: give --head (or --task for a GLUE test file)")
        _run_line_file(
            args, predict_file, "predictions", head=args.head, columns=args.columns, header=args.header
        )

    return run


def _predict_task(args: argparse.Namespace) -> None:
    """`predict --task`: a GLUE test TSV into its leaderboard file."""
    from roberta.tasks.glue import get_task, predict_test_file

    # The task fixes the head (named after it) and the columns (its test file's header).
    given = [
        option
        for option, value in (("--head", args.head), ("--columns", args.columns), ("--header", args.header))
        if value
    ]
    if given:
        raise UserError(
            f"predict: {given[0]} means nothing with --task (it reads the task's test columns "
            f"with the head named {args.task!r})"
        )
    task = get_task(args.task)
    print(
        f"{args.out}: {predict_test_file(_load_hub(args), task, args.input, args.out, args.int8)} predictions"
    )


def _run_line_file(args: argparse.Namespace, run_file: Callable[..., int], noun: str, **options) -> None:
    """`embed` or `predict` on --input: the options `_hub_options` and `_line_file_options` declare,
    then the count of rows written."""
    rows = run_file(
        _load_hub(args),
        input=args.input,
        out=args.out,
        truncate=args.truncate,
        progress=not args.no_progress,
        int8=args.int8,
        **options,
    )
    print(f"{args.out}: {rows} {noun}")


def _finetune(p: argparse.ArgumentParser) -> None:
    """fine-tune a checkpoint on a task: GLUE, your own classification data, SQuAD, RACE

    Fine-tunes with the same trainer as pretraining: dev evaluation, the best dev checkpoint kept as
    RUN/best/, RUN/results.json, exact --resume. Job fields are overridden as --section.key=value
    (e.g. --optim.lr=2e-5 --train.batch_size=32 --train.epochs=3).
    """
    _add_commands(p, "task_family", "TASK", FINETUNE_TASKS)


def _evaluate(p: argparse.ArgumentParser) -> None:
    """score a predictions file with a benchmark's official metrics

    Prints one JSON object with the benchmark's official metrics for a predictions file.
    """
    _add_commands(p, "task_family", "TASK", EVALUATE_TASKS)


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

    if args.eval_every is not None and args.eval_every < 1:
        raise UserError(f"--eval-every must be at least 1, not {args.eval_every}")
    extra = [*extra, *([f"--train.eval_every={args.eval_every}"] if args.eval_every else [])]
    job = load_finetune_job(args.config, args.overrides, lr, batch_size, epochs, extra=extra)
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


# A sentence task's data as `finetune` and `distill` take it: (read, read_unlabelled, LR, batch size).
# read() gives (SentenceTask, training examples, training file, dev sets by name as (examples, file));
# read_unlabelled(FILE) the examples of a file in the task's format, its labels ignored.
Sentences = tuple[Callable[[], tuple], Callable[[str], list], float, int]


def _glue_sentences(args: argparse.Namespace) -> Sentences:
    """--task's data in --data, and the task's recipe."""
    from functools import partial
    from pathlib import Path

    from roberta.tasks.glue import get_task, read_split, read_task_dir, sentence_task

    task = get_task(args.task)

    def read() -> tuple:
        return sentence_task(task), *read_task_dir(task, Path(args.data))

    return read, partial(read_split, task, labelled=False), task.lr, task.batch_size


def _classify_sentences(args: argparse.Namespace) -> Sentences:
    """--train and --dev read by their columns, the label set from --train, and --lr, --batch-size."""
    from roberta.tasks.classify import label_set, own_data_task, read_labelled_file

    columns = dict(text_column=args.text_column, pair_column=args.pair_column)

    def read() -> tuple:
        labelled = dict(columns, label_column=args.label_column, regression=args.regression)
        train = read_labelled_file(args.train, **labelled)
        dev = read_labelled_file(args.dev, **labelled)
        task = own_data_task(args.head, () if args.regression else label_set(train, args.train))
        return task, train, args.train, {"dev": (dev, args.dev)}

    return read, lambda path: read_labelled_file(path, **columns), args.lr, args.batch_size


def _run_sentences(args: argparse.Namespace, sentences: Sentences) -> None:
    """`finetune glue|classify`: the sentence task fine-tuned from --init."""
    from roberta.tasks.classify import plan_sentences

    read, _, lr, batch_size = sentences

    def plan(job, model, tokenizer, source):
        return plan_sentences(*read(), job, model, tokenizer, source)

    _run_finetune(args, plan, lr, batch_size)


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

        from roberta.tasks.squad import SQUAD_BATCH, SQUAD_EPOCHS, SQUAD_LR, plan_squad
        from roberta.tasks.squad_data import SQUAD_MAX_LENGTH

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


def _evaluate_glue(p: argparse.ArgumentParser) -> Handler:
    """score a GLUE predictions TSV against a labelled dev file

    Matches the rows of --predictions (the GLUE server's TSV: a header, then index<TAB>prediction,
    the label name as in the data files or a score for STS-B) to --dev by index and prints the
    task's official metrics as one JSON object: accuracy; F1 and accuracy for MRPC and QQP; Matthews
    correlation (mcc) for CoLA; Pearson and Spearman for STS-B. A correlation that is undefined
    (every prediction, or every label, the same) is null, with a warning; MCC of constant
    predictions and F1 with no positive class anywhere are 0, as scikit-learn has them.
    """
    # Checked by the handler, so that building the parser imports no task module.
    p.add_argument("--task", required=True, metavar="T", help=GLUE_TASKS_HELP)
    p.add_argument(
        "--dev",
        required=True,
        metavar="FILE",
        help="labelled GLUE file, e.g. RTE/dev.tsv or MNLI/dev_matched.tsv",
    )
    p.add_argument(
        "--predictions", required=True, metavar="FILE", help="predictions TSV with a row for every dev index"
    )

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.glue import evaluate_predictions, get_task

        _print_figures(evaluate_predictions(get_task(args.task), args.dev, args.predictions))

    return run


def _evaluate_squad(p: argparse.ArgumentParser) -> Handler:
    """score SQuAD v1.1/v2.0 predictions with the official metrics

    Scores --predictions (the official format: a JSON object {question id: answer text}, "" for no
    answer) against the official --dev JSON exactly as the official v1.1 / v2.0 evaluation scripts
    do, and prints one JSON object of percentages: exact_match, f1, total, missing (questions
    without a prediction, scored 0); for v2.0 also HasAns_*/NoAns_* and, with --null-odds,
    best_exact/best_f1 and the thresholds that reach them.
    """
    p.add_argument("--version", required=True, choices=["1.1", "2.0"], help="SQuAD version of the dev file")
    p.add_argument("--dev", required=True, metavar="FILE", help="official dataset JSON, e.g. dev-v2.0.json")
    p.add_argument("--predictions", required=True, metavar="FILE", help="predictions JSON {id: text}")
    p.add_argument(
        "--null-odds",
        metavar="FILE",
        help="v2.0 only: JSON {id: null score - best span score}, as the official --na-prob-file",
    )

    def run(args: argparse.Namespace) -> None:
        from roberta.tasks.squad_data import evaluate_squad

        _print_figures(evaluate_squad(args.dev, args.predictions, args.version, args.null_odds))

    return run


def _print_figures(figures: dict) -> None:
    """`evaluate`'s one JSON object; a figure that is no number (an undefined correlation, an
    infinite threshold) is null (`io.to_json`)."""
    from roberta.io import to_json

    print(to_json(figures))


def _serve(p: argparse.ArgumentParser) -> Handler:
    """serve a checkpoint over HTTP: JSON endpoints, dynamic batching, a web page at /

    Serves /fill-mask, /embed, /predict, /answer, /v1/embeddings (OpenAI's form), /health and /info,
    and a page at / to try them. Requests that arrive together run as length-sorted batches through
    the hub's calls (the same answers as one-by-one calls). A request asking for more than
    --max-items, --max-request-tokens or --max-answers gets 413 naming the limit. Binds to
    127.0.0.1: --host 0.0.0.0 exposes the server to the network, and it has no authentication.
    SIGTERM or Ctrl-C stops it after answering the requests in flight.
    """
    from roberta.serve.options import add_to_parser, from_arguments

    add_to_parser(p)

    def run(args: argparse.Namespace) -> None:
        from roberta.serve.server import serve

        serve(from_arguments(args))

    return run


def _export(p: argparse.ArgumentParser) -> Handler:
    """export a checkpoint to ONNX (encoder and every head), checked against our logits

    Writes OUT/ with encoder.onnx (dynamic batch and sequence axes; every layer's hidden states),
    lm_head.onnx, one graph per task head, onnx.json and the tokenizer, then runs them with
    onnxruntime on a padded batch of real text and prints the largest difference from our PyTorch
    outputs; above --tolerance it fails and OUT is not written. --int8 adds onnxruntime's dynamic
    int8 quantization of each graph (*.int8.onnx), printing its agreement with fp32.
    `roberta serve OUT --runtime onnx` serves it.
    """
    p.add_argument("checkpoint", help="our checkpoint, an HF or fairseq directory")
    p.add_argument("out", help="directory to write (replaced atomically if it holds an export)")
    p.add_argument("--to", choices=["onnx"], default="onnx", help="format (default onnx)")
    p.add_argument(
        "--int8", action="store_true", help="also write int8 graphs (onnxruntime dynamic quantization)"
    )
    p.add_argument(
        "--tolerance", type=float, default=1e-4, help="largest allowed output difference (default 1e-4)"
    )

    def run(args: argparse.Namespace) -> None:
        from roberta.onnx_export import export_onnx

        export_onnx(args.checkpoint, args.out, int8=args.int8, tolerance=args.tolerance)

    return run


def _distill(p: argparse.ArgumentParser) -> None:
    """distill a fine-tuned teacher into a smaller student on a task: GLUE, your own data

    The student (any checkpoint with the teacher's tokenizer) learns from the teacher's soft labels
    at temperature T (KL scaled by T^2; squared error to its score for regression) mixed with the
    gold labels (weight 1 - alpha), on the task's training set and on unlabeled --transfer text
    (soft labels only). The teacher's logits are computed once and cached at RUN/teacher-logits.npy.
    Same trainer, run directory, RUN/best/, --resume and overrides as `roberta finetune`.
    """
    _add_commands(p, "task_family", "TASK", DISTILL_TASKS)


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

    read, read_unlabelled, lr, batch_size = sentences
    settings = Distillation(args.teacher, args.temperature, args.alpha)

    def plan(job, model, tokenizer, source):
        task, train, train_path, dev = read()
        transfer = read_unlabelled(args.transfer) if args.transfer else []
        return plan_distillation(
            task, train, train_path, dev, transfer, settings, job, model, tokenizer, source
        )

    _run_finetune(args, plan, lr, batch_size, start=Start(args.student))


# --- verbs: one function each, registered in VERBS below -------------------------------------


# `roberta finetune TASK` and `roberta evaluate TASK`: one function per task family.
def _probe(p: argparse.ArgumentParser) -> Handler:
    """fine-tune every checkpoint of a pretraining run (and a random init) on GLUE tasks: the curve

    Fine-tunes a random init of the run's shape and each chosen checkpoint of RUN on a small GLUE
    suite, one fixed recipe per task and several seeds, and writes RUN/probe/probe.json (every cell),
    probe.md (each task's median over seeds x 100, their GLUE-style average, STS-B zero-shot and the
    held-out masked-token accuracy) and probe.png (the scores against tokens seen). Cells already in
    probe.json are kept: a rerun trains nothing new and a killed probe continues.
    """
    p.add_argument("run", help="a pretraining run directory (RUN/checkpoints/step-N)")
    p.add_argument("--glue", required=True, metavar="DIR", help="the folder holding the GLUE task folders")
    p.add_argument("--tasks", help="GLUE tasks, comma-separated (default SST-2,MRPC,STS-B,RTE,CoLA)")
    p.add_argument(
        "--seeds", type=int, default=3, help="fine-tuning seeds per cell; the median is reported (default 3)"
    )
    p.add_argument(
        "--checkpoints", default="all", help="all, last, or step-N names, comma-separated (default all)"
    )
    p.add_argument("--limit", type=int, help="at most N training examples per task (quick looks)")
    _progress_option(p)

    def run(args: argparse.Namespace) -> None:
        from roberta.probe import TASKS, probe

        tasks = TASKS if args.tasks is None else tuple(t.strip() for t in args.tasks.split(",") if t.strip())
        probe(args.run, args.glue, tasks, args.seeds, args.checkpoints, args.limit, not args.no_progress)
        print(f"{args.run}/probe: probe.json, probe.md, probe.png")

    return run


# A command is a function that declares its options on the parser it is given and returns the
# function that runs it (None for a group of subcommands); its docstring is its --help: the first
# line the summary in the list of commands, the rest the description.
FINETUNE_TASKS = {
    "glue": _finetune_glue,
    "classify": _finetune_classify,
    "squad": _finetune_squad,
    "race": _finetune_race,
}
DISTILL_TASKS = {"glue": _distill_glue, "classify": _distill_classify}
EVALUATE_TASKS = {"glue": _evaluate_glue, "squad": _evaluate_squad}
VERBS = {
    "demo": _demo,
    "train-tokenizer": _train_tokenizer,
    "prepare": _prepare,
    "convert": _convert,
    "pretrain": _pretrain,
    "finetune": _finetune,
    "distill": _distill,
    "evaluate": _evaluate,
    "fill-mask": _fill_mask,
    "embed": _embed,
    "predict": _predict,
    "probe": _probe,
    "serve": _serve,
    "export": _export,
}


def _add_commands(parser: argparse.ArgumentParser, dest: str, metavar: str, commands: dict) -> None:
    subparsers = parser.add_subparsers(dest=dest, metavar=metavar, required=True)
    for name, declare in commands.items():
        summary, _, description = inspect.cleandoc(declare.__doc__).partition("\n\n")
        p = subparsers.add_parser(name, help=summary, description=" ".join(description.split()))
        handler = declare(p)
        if handler is not None:
            p.set_defaults(handler=handler)


class _Parser(argparse.ArgumentParser):
    """Usage mistakes read like every other refusal: one line naming the command, exit status 2.
    (argparse prints the whole usage block first; `--help` still shows it.)"""

    def error(self, message: str):
        raise UserError(f"{message} (see '{self.prog} --help')")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="roberta", description="RoBERTa pretraining, fine-tuning, conversion and inference."
    )
    _add_commands(parser, "verb", "VERB", VERBS)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"roberta: warning: {message}", file=sys.stderr)


def describe_os_error(e: OSError) -> str:
    """'<file>: <reason>' in one line; for a failed rename the file is the destination, the
    name the user gave (the source is a temporary that is already gone)."""
    reason = e.strerror or str(e) or type(e).__name__
    name = e.filename2 if e.filename2 is not None else e.filename
    return reason if name is None else f"{name}: {reason}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        # Verbs that take `--section.key=value` overrides declare `overrides`; for all others an
        # unknown argument is still an error.
        args, unknown = parser.parse_known_args(argv)
        if unknown and not hasattr(args, "overrides"):
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        if unknown:
            args.overrides = [*args.overrides, *unknown]
        with warnings.catch_warnings():
            # Library warnings (a truncated text, say) read as one line on the command line.
            warnings.showwarning = _one_line_warning
            args.handler(args)
    except UserError as e:
        print(f"roberta: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        # A file the user named, or the place it lives, cannot be used (permission, no space,
        # a directory where a file belongs...): the environment's fault, not a bug, so one line.
        print(f"roberta: error: {describe_os_error(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("roberta: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
