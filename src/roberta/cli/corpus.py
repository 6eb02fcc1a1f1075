"""`roberta demo`, `train-tokenizer` and `prepare`: from text files to a tokenizer and a corpus."""

from __future__ import annotations

import argparse

from roberta.cli.common import Handler, text_corpus_options, text_corpus_settings
from roberta.errors import UserError


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


def _prepare(p: argparse.ArgumentParser) -> Handler:
    """encode text files into a binarized corpus directory for pretraining

    Text files (plain, .gz, .jsonl, .parquet, .arrow, datasets.save_to_disk folders) -> token
    memmap + sentence/document offsets + meta.json, with a validation split held out by whole
    documents. In text files a line is a sentence and a blank line ends a document; a JSON or
    Arrow record is a document, the lines of its --text-field its sentences.
    """
    text_corpus_options(p, out_help="corpus directory to create")
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
            **text_corpus_settings(args),
            shard_bytes=args.shard_mb << 20,
            workers=args.workers,
            valid_fraction=args.valid_fraction,
            seed=args.seed,
            line_is_document=args.line_is_document,
            overwrite=args.overwrite,
        )
        print(out)

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
    text_corpus_options(p, out_help="directory to create (must not exist, or be empty)")
    p.add_argument("--vocab-size", type=int, required=True, help="at most this many ids, specials included")
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
        settings = text_corpus_settings(args)
        if args.kind == "wordpiece":
            from roberta.tokenizer.training import train_wordpiece

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


VERBS = {"demo": _demo, "train-tokenizer": _train_tokenizer, "prepare": _prepare}
