"""The options of `demo`, `train-tokenizer` and `prepare`: from text files to a tokenizer and a
corpus."""

from __future__ import annotations

from dataclasses import dataclass

from roberta.options.declare import argument, option, required


@dataclass(frozen=True)
class DemoOptions:
    seed: int = option(0, "seed for weights, data order and masks (default {default})")
    out: str = option("demo-run", "working directory (default ./{default})")
    steps: int | None = option(
        None,
        "training steps (default: the recipe's train.max_steps; fewer shorten the run, the schedule "
        "scaled to fit)",
    )
    config: str | None = option(None, "the pretraining recipe (default: configs/pretrain-cpu-20min.toml)")


@dataclass(frozen=True)
class TextCorpusOptions:
    """What `prepare` and `train-tokenizer` share: they read text files the same way."""

    inputs: tuple[str, ...] = argument(
        "text files (plain, .gz, .jsonl, .parquet, .arrow), datasets.save_to_disk folders, "
        "or directories of such files",
        nargs="+",
    )
    text_field: str = option(
        "text",
        "text field of .jsonl records, column of .parquet/.arrow files (default {default})",
        older=("--jsonl-text-field",),
    )
    errors: str = option(
        "strict", "invalid UTF-8: stop with an error (strict, default) or substitute U+FFFD (replace)"
    )
    no_progress: bool = option(False, "no progress bar")

    CHOICES = {"errors": ("strict", "replace")}

    def settings(self) -> dict:
        """The keyword arguments of `prepare` and `train_tokenizer` these options give."""
        return {"text_field": self.text_field, "errors": self.errors, "progress": not self.no_progress}


@dataclass(frozen=True)
class PrepareOptions:
    out: str = required("corpus directory to create", None)
    tokenizer: str = required("tokenizer directory (see `roberta train-tokenizer`)", None)
    workers: int | None = option(None, "encoding processes (default: all cores)")
    valid_fraction: float = option(0.01, "share of documents held out (default {default})")
    seed: int = option(0, "seed of the validation draw (default {default})")
    line_is_document: bool = option(False, "every non-blank line is a document")
    shard_mb: int = option(1024, "input megabytes per output shard (default {default})")
    overwrite: bool = option(False, "replace --out if it exists")

    RANGES = {"workers": ">=1", "valid_fraction": "[0,1)", "shard_mb": ">=1"}


@dataclass(frozen=True)
class TrainTokenizerOptions:
    out: str = required("directory to create (must not exist, or be empty)", None)
    vocab_size: int = required("at most this many ids, specials included", None)
    min_frequency: int = option(2, "fewest occurrences for a merge (default {default})")
    kind: str = option("bpe", "the model (default {default})")
    lowercase: bool = option(
        False,
        "wordpiece: lowercase text",
        flag="--uncased",
        negative=("--cased", "wordpiece: keep case (default)"),
    )
    strip_accents: bool | None = option(
        None, "wordpiece: remove accents (default: only with --uncased, as BERT)"
    )

    CHOICES = {"kind": ("bpe", "wordpiece")}
