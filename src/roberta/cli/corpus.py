"""`roberta demo`, `train-tokenizer` and `prepare`: from text files to a tokenizer and a corpus."""

from __future__ import annotations

import argparse

from roberta.cli.common import Handler, add_options, options_from
from roberta.errors import UserError
from roberta.options.corpus import DemoOptions, PrepareOptions, TextCorpusOptions, TrainTokenizerOptions


def _demo(p: argparse.ArgumentParser) -> Handler:
    """the whole pipeline in ~20 CPU minutes: corpus, tokenizer, prepare, pretrain, fill-mask

    Builds a corpus from the Python standard library's docstrings, trains a byte-level BPE
    tokenizer, prepares the corpus, pretrains a small RoBERTa with the CPU recipe
    (configs/pretrain-cpu-20min.toml) and a progress bar, then prints fill-mask predictions and
    where curves.png and the checkpoint are.
    """
    add_options(p, DemoOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.demo import RECIPE, run_demo

        o = options_from(args, DemoOptions)
        run_demo(seed=o.seed, out=o.out, steps=o.steps, config=o.config or RECIPE)

    return run


def _prepare(p: argparse.ArgumentParser) -> Handler:
    """encode text files into a binarized corpus directory for pretraining

    Text files (plain, .gz, .jsonl, .parquet, .arrow, datasets.save_to_disk folders) -> token
    memmap + sentence/document offsets + meta.json, with a validation split held out by whole
    documents. In text files a line is a sentence and a blank line ends a document; a JSON or
    Arrow record is a document, the lines of its --text-field its sentences.
    """
    add_options(p, TextCorpusOptions, PrepareOptions)

    def run(args: argparse.Namespace) -> None:
        from roberta.data.prepare import prepare

        text, o = options_from(args, TextCorpusOptions), options_from(args, PrepareOptions)
        out = prepare(
            list(text.inputs),
            o.tokenizer,
            o.out,
            **text.settings(),
            shard_bytes=o.shard_mb << 20,
            workers=o.workers,
            valid_fraction=o.valid_fraction,
            seed=o.seed,
            line_is_document=o.line_is_document,
            overwrite=o.overwrite,
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
    add_options(p, TextCorpusOptions, TrainTokenizerOptions)

    def run(args: argparse.Namespace) -> None:
        text, o = options_from(args, TextCorpusOptions), options_from(args, TrainTokenizerOptions)
        sized = (list(text.inputs), o.out, o.vocab_size, o.min_frequency)
        if o.kind == "wordpiece":
            from roberta.tokenizer.training import train_wordpiece

            case = {"lowercase": o.lowercase, "strip_accents": o.strip_accents}
            tokenizer = train_wordpiece(*sized, **case, **text.settings())
        elif o.lowercase or o.strip_accents is not None:
            raise UserError("--cased, --uncased and --strip-accents apply to --kind wordpiece only")
        else:
            from roberta.tokenizer import train_tokenizer

            tokenizer = train_tokenizer(*sized, **text.settings())
        print(f"{o.out}: {tokenizer.vocab_size} tokens, fingerprint {tokenizer.fingerprint()}")

    return run


VERBS = {"demo": _demo, "train-tokenizer": _train_tokenizer, "prepare": _prepare}
