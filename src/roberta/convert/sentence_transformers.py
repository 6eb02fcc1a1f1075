"""sentence-transformers directories: read one as a sentence encoder (a distillation teacher, the
anchor `roberta evaluate sts` measures ours against), and write the modules that make an HF export
of our sentence encoder load in `SentenceTransformer(dir)` with its pooling.

A sentence-transformers directory is an HF model directory plus `modules.json`, the chain its
vectors come from: the transformer, `1_Pooling/config.json` (which pooling), optionally
`2_Dense/` (a linear map) and `Normalize`. The library itself is imported only here and only when
such a directory is read: it is an extra (`pip install 'roberta[embed]'`), never needed to train.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from roberta.errors import UserError
from roberta.io import write_json

MODULES = "modules.json"
IDENTITY = "torch.nn.modules.linear.Identity"  # a Dense module's activation, where it has none
# Texts per call of the library's encode, which sorts each call's texts by length so that a batch
# holds texts of like length: large enough for that, small enough for the bar to move.
ENCODE_CHUNK = 2048
# Texts our reading of a teacher's tokenizer must split as the library does: case, accents,
# punctuation, digits, a long word, a non-Latin script.
TOKENIZER_CHECK = (
    "The Naïve CAFÉ's menu: 3.14 pounds, 42% off!",
    "unbelievably well-organised multi-lingual tokenisation",
    "Größe, Ærø, Zürich; 東京 and Москва",
)


@contextmanager
def quiet_transformers():
    """transformers without its warnings and progress bars (loading weights) for the block."""
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def is_sentence_transformer(path: str | Path) -> bool:
    return (Path(path) / MODULES).is_file()


# A module named by the library's own package is the library's class; anything else is Python code
# shipped with the directory, which sentence-transformers 3-5 imported from a local directory
# without being asked.
LIBRARY = "sentence_transformers."
# Keys under which transformers and sentence-transformers find code of the directory's own
# (`auto_map`), or are told to run it (`trust_remote_code`).
CODE_KEYS = ("auto_map", "trust_remote_code")


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not readable JSON ({str(e).splitlines()[0][:120]})") from None


def _code_key(value: object, where: str) -> str | None:
    """The first `CODE_KEYS` entry in a JSON value (a trust_remote_code only where true), by its path."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in CODE_KEYS and (key == "auto_map" or item is True):
                return f"{where}{key}"
            found = _code_key(item, f"{where}{key}.")
            if found:
                return found
    elif isinstance(value, list):
        return next(
            (f for k, item in enumerate(value) if (f := _code_key(item, f"{where}{k}.")) is not None), None
        )
    return None


def check_no_code(path: Path) -> None:
    """Refuse a sentence-transformers directory that names code of its own, before the library reads
    it: a module outside the library's package in modules.json, a module path leaving the directory,
    or an `auto_map` / `trust_remote_code: true` in any of its JSON configs. Nothing shipped with a
    model runs."""
    modules = _read_json(path / MODULES)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise UserError(f"{path / MODULES}: expected a list of module objects")
    folders = [path]
    for k, module in enumerate(modules):
        kind, folder = module.get("type"), module.get("path", "")
        if not (isinstance(kind, str) and kind.startswith(LIBRARY)):
            raise UserError(
                f"{path / MODULES}: module {k} is {kind!r}, not one of sentence-transformers' own "
                "classes: code shipped with a model is never run"
            )
        if not isinstance(folder, str) or Path(folder).is_absolute() or ".." in Path(folder).parts:
            raise UserError(f"{path / MODULES}: module {k}'s path {folder!r} leaves the directory")
        folders.append(path / folder)
    for config in sorted({c for folder in folders for c in folder.glob("*.json") if c.is_file()}):
        if config.stat().st_size > (1 << 20):  # vocabularies (tokenizer.json), not configs
            continue
        key = _code_key(_read_json(config), "")
        if key is not None:
            raise UserError(
                f"{config}: field {key!r} asks for code shipped with the model, which is never run "
                "(use a model of the library's own classes)"
            )


@dataclass
class SentenceEncoder:
    """A sentence-transformers model read from its directory, with what distillation caches by."""

    path: Path
    model: object  # sentence_transformers.SentenceTransformer

    @classmethod
    def load(cls, path: str | Path) -> SentenceEncoder:
        """The model in `path`, refused in one line unless it is a sentence-transformers directory
        the library loads (offline: nothing is downloaded)."""
        path = Path(path)
        if not path.is_dir():
            raise UserError(f"{path}: no such directory (a sentence-transformers model directory)")
        if not is_sentence_transformer(path):
            raise UserError(
                f"{path}: not a sentence encoder: no {MODULES} (a sentence-transformers model directory, "
                "e.g. all-MiniLM-L6-v2's, names the modules its vectors come from)"
            )
        check_no_code(path)
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise UserError(
                f"{path}: reading a sentence-transformers model needs its library: "
                "pip install 'roberta[embed]' (sentence-transformers)"
            ) from None
        try:
            with quiet_transformers():  # a refusal after the load stays one line
                model = SentenceTransformer(
                    str(path), device="cpu", local_files_only=True, trust_remote_code=False
                )
        except Exception as e:  # the library's errors are many and unlike each other: one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"{path}: sentence-transformers cannot load it: {first[:200]}") from None
        return cls(path, model)

    @property
    def dim(self) -> int:
        model = self.model  # the method's name changed in sentence-transformers 6
        get = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(get())

    def fingerprint(self) -> str:
        """sha256 of every file of the directory (names and bytes): what decides its vectors."""
        digest = hashlib.sha256()
        for file in sorted(p for p in self.path.rglob("*") if p.is_file()):
            digest.update(str(file.relative_to(self.path)).encode())
            with open(file, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        return digest.hexdigest()

    @property
    def max_length(self) -> int:
        """The longest input, in tokens, the model reads (its max_seq_length)."""
        return int(self.model.max_seq_length)

    def tokenizer(self):
        """Its transformer's tokenizer read as ours (a roberta Tokenizer), refused in one line where
        roberta reads none of its files, or reads them to other ids than the library does."""
        from roberta.tokenizer import load_tokenizer

        # The library has loaded the model, so modules.json is a list of modules, the transformer first.
        directory = self.path / json.loads((self.path / MODULES).read_text())[0].get("path", "")
        try:
            ours = load_tokenizer(directory)
        except UserError as e:
            raise UserError(
                f"{self.path}: roberta cannot read the teacher's tokenizer ({e}); give --model (the "
                "student), a checkpoint with a tokenizer of its own"
            ) from None
        theirs = self.model.tokenizer(list(TOKENIZER_CHECK), add_special_tokens=False)["input_ids"]
        for text, want, got in zip(TOKENIZER_CHECK, theirs, ours.tokenize_ids_batch(list(TOKENIZER_CHECK))):
            if list(want) != list(got):
                raise UserError(
                    f"{directory}: roberta reads the teacher's tokenizer to other ids than the library "
                    f"({text!r}); give --model (the student), a checkpoint with a tokenizer of its own"
                )
        return ours

    def encode(
        self,
        texts: list[str],
        progress: bool = True,
        batch_size: int = 64,
        what: str = "sentences",
        precision: str = "fp32",
    ) -> np.ndarray:
        """The model's vectors of `texts`, [N, dim] float32, in the order given, under a bar that
        says what the teacher is encoding (the library's own bar reads 'Batches'); `precision`
        (fp32 or bf16) is the autocast its products run under."""
        from tqdm import tqdm

        from roberta.runtime.precision import autocast

        parts = [np.zeros((0, self.dim), dtype=np.float32)]
        with (
            tqdm(total=len(texts), desc=f"teacher: {what}", unit=" texts", disable=not progress) as bar,
            autocast(precision, torch.device("cpu")),
        ):
            for start in range(0, len(texts), ENCODE_CHUNK):
                chunk = texts[start : start + ENCODE_CHUNK]
                vectors = self.model.encode(
                    chunk, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
                )
                parts.append(np.asarray(vectors, dtype=np.float32))
                bar.update(len(chunk))
        return np.concatenate(parts)


def write_modules(directory: Path, pool: str, hidden_size: int, max_length: int, dense=None) -> None:
    """The files that make the HF model in `directory` a sentence-transformers model with our
    embedding head: the transformer, its pooling and, for a head with a map onto another width,
    that map (`dense`: the nn.Linear, written as the library's Dense module with no activation)."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    for folder in ("1_Pooling", *(["2_Dense"] if dense is not None else [])):
        (directory / folder).mkdir()
    write_json(
        directory / "sentence_bert_config.json", {"max_seq_length": max_length, "do_lower_case": False}
    )
    write_json(
        directory / "1_Pooling" / "config.json",
        {
            "word_embedding_dimension": hidden_size,
            "pooling_mode_cls_token": pool == "cls",
            "pooling_mode_mean_tokens": pool == "mean",
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        },
    )
    if dense is not None:
        from roberta.checkpoint import save_safetensors

        modules.append(
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
        )
        write_json(
            directory / "2_Dense" / "config.json",
            {
                "in_features": dense.in_features,
                "out_features": dense.out_features,
                "bias": True,
                "activation_function": IDENTITY,
            },
        )
        weights = {
            "linear.weight": dense.weight.detach().contiguous(),
            "linear.bias": dense.bias.detach().contiguous(),
        }
        save_safetensors(weights, directory / "2_Dense" / "model.safetensors")
    write_json(directory / MODULES, modules)


def read_embedding_head(directory: Path, config) -> nn.Module | None:
    """The embedding head a sentence-transformers directory describes, weights loaded, where its
    chain is one an `EmbeddingHead` computes: the transformer, a `<s>` or mean pooling, and
    optionally a Dense map without activation. None for a plain HF directory or another chain
    (max pooling, a Normalize step...): the model is then read without its pooling."""
    from roberta.checkpoint import read_safetensors
    from roberta.io import read_json
    from roberta.model import EmbeddingHead

    if not is_sentence_transformer(directory):
        return None
    modules = _read_json(directory / MODULES)  # a list, as the library writes it
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise UserError(f"{directory / MODULES}: expected a list of module objects")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Dense"]):
        return None
    pooling = read_json(directory / modules[1]["path"] / "config.json")
    for key, on in pooling.items():  # a "true" string would be read as no pooling at all
        if key.startswith("pooling_mode_") and not isinstance(on, bool):
            raise UserError(
                f"{directory / modules[1]['path'] / 'config.json'}: field {key!r} must be true or false, "
                f"not {json.dumps(on)[:40]}"
            )
    modes = {key for key, on in pooling.items() if key.startswith("pooling_mode_") and on is True}
    pool = {frozenset({"pooling_mode_cls_token"}): "cls", frozenset({"pooling_mode_mean_tokens"}): "mean"}
    if frozenset(modes) not in pool:
        return None
    dense = read_json(directory / modules[2]["path"] / "config.json") if len(modules) == 3 else None
    for key, kind in (("bias", bool), ("out_features", int), ("activation_function", str)):
        if dense is not None and key in dense and not isinstance(dense[key], kind):
            raise UserError(
                f"{directory / modules[2]['path'] / 'config.json'}: field {key!r} must be a "
                f"{kind.__name__}, not {json.dumps(dense[key])[:40]}"
            )
    if dense is not None and (dense.get("activation_function") != IDENTITY or dense.get("bias") is False):
        return None
    head = EmbeddingHead(config, pool[frozenset(modes)], dense["out_features"] if dense else None)
    if dense is not None:
        weights = read_safetensors(directory / modules[2]["path"] / "model.safetensors")
        head.proj.load_state_dict({"weight": weights["linear.weight"], "bias": weights["linear.bias"]})
    return head
