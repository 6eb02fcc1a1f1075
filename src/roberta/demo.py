"""`roberta demo`: the whole pipeline, offline, in about twenty minutes on a CPU.

1. a corpus from text every Python installation has: the standard library's docstrings
   (read with `ast` from the source files, in sorted order, so nothing is imported or run);
2. a byte-level BPE tokenizer trained on it (8K ids);
3. the corpus prepared (binarized, 2% of modules held out for validation);
4. pretraining with the CPU recipe, configs/pretrain-cpu-20min.toml: the tiny preset narrowed
   to 2 layers x 128, initialised at std 0.05, no dropout, 40% of tokens masked, batches of
   8 x 128 tokens, peak LR 1.5e-3;
5. fill-mask on a few docstring-like sentences, and where the curves and checkpoint are.

Why so small: on a CPU the budget is a few TFLOPs, and a post-LN encoder first sits on the
unigram plateau (it predicts the commonest token everywhere) until its attention starts to use
context. The recipe is the best of a measured search (benchmarks/experiments/recipe-search.md, "A
recipe for 20 CPU minutes"). The model is a toy; the pipeline is the real one.
"""

from __future__ import annotations

import ast
import re
import shutil
import sysconfig
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from roberta.train.config import JobConfig

# Source trees that are tests, tools or vendored code rather than library documentation.
SKIPPED_DIRS = {
    "site-packages",
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "turtledemo",
    "ensurepip",
    "__pycache__",
}
# The CPU recipe (benchmarks/experiments/recipe-search.md); the demo adds only what is
# about its own run: where it evaluates and checkpoints.
RECIPE = Path(__file__).resolve().parents[2] / "configs" / "pretrain-cpu-20min.toml"
SENTENCES = [
    "Return the number <mask> items in the list.",
    "If the file does not exist, an exception <mask> raised.",
    "Raise ValueError <mask> the value is negative.",
    "This function returns <mask> new object.",
    "The default value <mask> None.",
    "Return the <mask> of the list.",
]


def stdlib_documents() -> list[list[str]]:
    """One document per standard-library module: its docstrings, one paragraph per line."""
    root = Path(sysconfig.get_paths()["stdlib"])
    documents = []
    for path in sorted(root.rglob("*.py")):
        if SKIPPED_DIRS & set(path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        paragraphs = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                paragraphs += _paragraphs(ast.get_docstring(node) or "")
        if paragraphs:
            documents.append(paragraphs)
    return documents


def _paragraphs(docstring: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", docstring):
        text = " ".join(block.split())
        if len(text.split()) >= 3:  # 'Args:' headers and lone names carry no sentences
            out.append(text)
    return out


def write_corpus(path: Path) -> int:
    text = "\n\n".join("\n".join(doc) for doc in stdlib_documents()) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return len(text.encode())


def unigram_baseline(corpus: Path, tokenizer: Path) -> tuple[str, float]:
    """The commonest training token and its share of the held-out tokens (masks fall uniformly)."""
    import numpy as np

    from roberta.data.corpus import Corpus
    from roberta.tokenizer import load_tokenizer

    data = Corpus(corpus)
    top = data.train.most_frequent_token()
    share = float(np.mean(data.valid.tokens(0, data.valid.num_tokens) == top))
    return load_tokenizer(tokenizer).decode([top]).strip(), share


def _demo_job(config: str | Path, steps: int | None, seed: int) -> JobConfig:
    """The recipe's job, `steps` long (the recipe's own length if None): three evaluations, one
    checkpoint at the end."""
    from roberta.tasks.pretrain import load_pretrain_job

    job = load_pretrain_job(config, [f"--train.max_steps={steps}"] if steps is not None else [])
    steps = job.train.max_steps
    return load_pretrain_job(
        config,
        [
            f"--train.max_steps={steps}",
            f"--train.eval_every={-(-steps // 3)}",
            f"--train.checkpoint_every={steps}",
            "--train.eval_batches=20",
            "--train.keep_last=1",
            f"--train.seed={seed}",
        ],
    )


def run_demo(
    seed: int = 0, out: str | Path = "demo-run", steps: int | None = None, config: str | Path = RECIPE
) -> None:
    """The five stages; `steps` shortens the recipe (its schedule is scaled to fit)."""
    from roberta.data.prepare import prepare
    from roberta.hub import load
    from roberta.tasks.pretrain import pretrain
    from roberta.tokenizer import train_tokenizer

    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    text, tokenizer, corpus, run = (
        out / "stdlib-docstrings.txt",
        out / "tokenizer",
        out / "corpus",
        out / "run",
    )

    print(f"[1/5] corpus: docstrings of the Python standard library -> {text}")
    size = write_corpus(text)
    print(f"      {size / 1e6:.1f} MB of text")
    print(f"[2/5] byte-level BPE tokenizer, 8K ids -> {tokenizer}")
    shutil.rmtree(tokenizer, ignore_errors=True)
    train_tokenizer([text], tokenizer, vocab_size=8192)
    print(f"[3/5] prepare (binarize, hold out 2% of modules) -> {corpus}")
    prepare([text], tokenizer, corpus, workers=2, valid_fraction=0.02, seed=seed, overwrite=True)

    job = _demo_job(config, steps, seed)
    steps = job.train.max_steps
    m = job.model
    print(
        f"[4/5] pretrain: {Path(config).name} ({m.num_layers} x {m.hidden_size}, seq {job.data.seq_len}, "
        f"batch {job.train.batch_size}, {job.data.mask_prob:.0%} masked), {steps} steps -> {run}"
    )
    shutil.rmtree(run, ignore_errors=True)
    result = pretrain(job, corpus, run, tokenizer=tokenizer)
    figures = ", ".join(f"{k} {v:.3g}" for k, v in result.valid.items())
    print(f"      held-out: {figures}")
    token, share = unigram_baseline(corpus, tokenizer)
    print(f"      (a model that learned nothing predicts {token!r} everywhere: accuracy {share:.3g})")

    print("[5/5] fill-mask with the trained model (top 3):")
    roberta = load(result.checkpoint)
    for sentence in SENTENCES:
        guesses = ", ".join(
            f"{token.strip()!r} {score:.2f}" for _, score, token in roberta.fill_mask(sentence, topk=3)
        )
        print(f"      {sentence:<56} {guesses}")
    print(f"\ncurves:     {run / 'curves.png'}")
    print(f"checkpoint: {result.checkpoint}")
    print(f"metrics:    {run / 'metrics.jsonl'}  (TensorBoard: {run / 'tensorboard'})")
    print(f"demo took {(time.perf_counter() - started) / 60:.1f} minutes")
