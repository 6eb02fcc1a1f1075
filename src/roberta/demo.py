"""`roberta demo`: the whole pipeline, offline, in about seven minutes on two CPU cores.

1. a corpus from text every Python installation has: the standard library's docstrings
   (read with `ast` from the source files, in sorted order, so nothing is imported or run);
2. a byte-level BPE tokenizer trained on it (8K ids);
3. the corpus prepared (binarized, 2% of modules held out for validation);
4. the tiny preset pretrained, shrunk to what a CPU can train in minutes: 2 layers x 128,
   128-token sequences, batches of 8, no dropout, peak learning rate 1e-3 after 50 steps;
5. fill-mask on a few docstring-like sentences, and where the curves and checkpoint are.

Why so small: on two CPU cores the budget is a few TFLOPs, and a post-LN encoder first sits on
the unigram plateau (it predicts the commonest token everywhere) until its attention starts to
use context. In a four-minute shape search on the demo corpus (benchmarks/RESULTS.md, "The demo's
shape") only 2 x 128 at batch 8 and a peak learning rate of 1e-3 left the plateau: many small steps
beat few big ones here. The model is a toy; the pipeline is the real one.
"""

from __future__ import annotations

import ast
import re
import shutil
import sysconfig
import time
from pathlib import Path

# Source trees that are tests, tools or vendored code rather than library documentation.
SKIPPED_DIRS = {"site-packages", "test", "tests", "idlelib", "lib2to3", "turtledemo", "ensurepip", "__pycache__"}
DEMO_JOB = [
    "--model.preset=tiny",
    "--model.hidden_size=128",
    "--model.num_layers=2",
    "--model.num_heads=2",
    "--model.ffn_size=512",
    "--model.dropout=0.0",
    "--model.attention_dropout=0.0",
    "--data.seq_len=128",
    "--optim.lr=1e-3",
    "--schedule.warmup_steps=50",
    "--train.batch_size=8",
    "--train.micro_batch_size=8",
    "--train.device=cpu",
    "--train.precision=fp32",
    "--train.log_every=25",
    "--train.keep_last=1",
]
DEMO_STEPS = 3500
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


def run_demo(seed: int = 0, out: str | Path = "demo-run", steps: int = DEMO_STEPS) -> None:
    from roberta.data.prepare import prepare
    from roberta.hub import load
    from roberta.tokenizer import train_tokenizer
    from roberta.tasks.pretrain import load_pretrain_job, pretrain

    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    text, tokenizer, corpus, run = out / "stdlib-docstrings.txt", out / "tokenizer", out / "corpus", out / "run"

    print(f"[1/5] corpus: docstrings of the Python standard library -> {text}")
    size = write_corpus(text)
    print(f"      {size / 1e6:.1f} MB of text")
    print(f"[2/5] byte-level BPE tokenizer, 8K ids -> {tokenizer}")
    shutil.rmtree(tokenizer, ignore_errors=True)
    train_tokenizer([text], tokenizer, vocab_size=8192)
    print(f"[3/5] prepare (binarize, hold out 2% of modules) -> {corpus}")
    prepare([text], tokenizer, corpus, workers=2, valid_fraction=0.02, seed=seed, overwrite=True)

    print(f"[4/5] pretrain: tiny preset shrunk to 2 x 128, seq 128, batch 8, {steps} steps -> {run}")
    shutil.rmtree(run, ignore_errors=True)
    job = load_pretrain_job(
        None,
        [*DEMO_JOB, f"--train.max_steps={steps}", f"--train.eval_every={-(-steps // 3)}",
         f"--train.checkpoint_every={steps}", "--train.eval_batches=20", f"--train.seed={seed}"],
    )
    result = pretrain(job, corpus, run, tokenizer=tokenizer)
    figures = ", ".join(f"{k} {v:.3g}" for k, v in result.valid.items())
    print(f"      held-out: {figures}")
    token, share = unigram_baseline(corpus, tokenizer)
    print(f"      (a model that learned nothing predicts {token!r} everywhere: accuracy {share:.3g})")

    print("[5/5] fill-mask with the trained model (top 3):")
    roberta = load(result.checkpoint)
    for sentence in SENTENCES:
        guesses = ", ".join(f"{token.strip()!r} {score:.2f}" for _, score, token in roberta.fill_mask(sentence, topk=3))
        print(f"      {sentence:<56} {guesses}")
    print(f"\ncurves:     {run / 'curves.png'}")
    print(f"checkpoint: {result.checkpoint}")
    print(f"metrics:    {run / 'metrics.jsonl'}  (TensorBoard: {run / 'tensorboard'})")
    print(f"demo took {(time.perf_counter() - started) / 60:.1f} minutes")
