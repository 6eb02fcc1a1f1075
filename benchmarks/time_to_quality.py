"""Time to quality: our tiny model against HF transformers' RobertaForMaskedLM, same everything else.

Both models pretrain on the books + wiki corpus (a byte-level BPE of 8K trained on it, held-out
documents for validation) with the same recipe: the tiny shape (4 x 512, FFN 2048, or narrowed
with --shape), the same batches and masks (our loader, one seed), the same AdamW and
learning-rate schedule, the same training-time budget. The host may be shared and noisy, so the
two runs alternate in slices of `--slice` seconds and both see the same load. After every slice
each is evaluated on the same held-out sequences (evaluation time is not charged to the
budget): masked-token loss and accuracy.

The difference is the model code: ours computes the last layer and scores the vocabulary only
at masked positions (HF computes every position), runs one fused QKV matrix product and no
padding mask when there is no padding.

The recipe knobs (--dropout, --mask-prob, --lr, --batch, --warmup-fraction, --shape, --init-std,
--position-init, a shorter first phase with --short-seq-len/--short-fraction) change what both
sides train with; evaluation is the same for every recipe (8 x 128-token held-out sequences per
batch, 15% masked), so runs with different recipes compare. `--sides ours --clock cpu --threads 1`
is the recipe search: one side, a budget in this process' CPU seconds, so two searches can share
the two cores.

    .venv/bin/python benchmarks/time_to_quality.py --minutes 20                    # the tiny preset
    .venv/bin/python benchmarks/time_to_quality.py --shape tiny:2x128 --batch 8   # what a CPU can train
    .venv/bin/python benchmarks/time_to_quality.py --shape tiny:2x128 --batch 8 --lr 1.5e-3 --init-std 0.05 \
        --position-init sinusoidal --dropout 0 --mask-prob 0.4  # configs/pretrain-cpu-20min.toml
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from roberta.config import RobertaConfig
from roberta.data.loader import DataConfig, PretrainDataset, PretrainLoader
from roberta.data.masking import IGNORE_INDEX, MaskingConfig
from roberta.model import RobertaModel
from roberta.tasks.pretrain import mlm_loss, sinusoidal_positions
from roberta.train.config import OptimSection, ScheduleSection
from roberta.train.optim import build_optimizer, learning_rate, set_learning_rate

ROOT = Path(__file__).resolve().parents[1]
SCHEDULE_UNITS = 10_000  # the budget's time is cut into this many schedule "steps"
EVAL_SEQ_LEN = 128


@dataclass
class Contender:
    name: str
    model: torch.nn.Module
    loss: callable  # (model, batch) -> mean masked-LM loss
    masked_logits: callable  # (model, batch) -> logits [N, V] at the masked positions
    optimizer: torch.optim.Optimizer = None
    batches: object = None
    short_batches: object = None  # the sequence-length schedule's first phase, if any
    step: int = 0
    tokens: int = 0
    seconds: float = 0.0
    history: list[dict] = field(default_factory=list)


def ours_loss(model: RobertaModel, batch: dict) -> torch.Tensor:
    """As `roberta pretrain` computes it (`tasks.pretrain.mlm_loss`), per masked token."""
    return mlm_loss(model, batch)["mlm"] / batch["labels"].ne(IGNORE_INDEX).sum()


def ours_logits(model: RobertaModel, batch: dict) -> torch.Tensor:
    """As `roberta pretrain` computes them: the real tokens only, the last layer and the LM head at the
    masked positions."""
    return model.lm_logits(
        model(batch["tokens"], select=batch["labels"].ne(IGNORE_INDEX), unpad=True).last_hidden_state
    )


def hf_loss(model, batch: dict) -> torch.Tensor:
    ids = batch["tokens"]
    return model(input_ids=ids, attention_mask=ids.ne(1).long(), labels=batch["labels"]).loss


def hf_logits(model, batch: dict) -> torch.Tensor:
    ids = batch["tokens"]
    logits = model(input_ids=ids, attention_mask=ids.ne(1).long()).logits
    return logits[batch["labels"].ne(IGNORE_INDEX)]


def hf_model(config: RobertaConfig):
    from transformers import RobertaConfig as HFConfig
    from transformers import RobertaForMaskedLM

    hf = HFConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        intermediate_size=config.ffn_size,
        max_position_embeddings=config.max_positions,
        pad_token_id=config.padding_idx,
        bos_token_id=0,
        eos_token_id=2,
        type_vocab_size=1,
        layer_norm_eps=config.layer_norm_eps,
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.attention_dropout,
        initializer_range=config.init_std,
        tie_word_embeddings=True,
    )
    model = RobertaForMaskedLM(hf)
    assert model.config._attn_implementation == "sdpa"  # the same attention kernel as ours
    return model


@torch.no_grad()
def evaluate(c: Contender, batches: list[dict]) -> tuple[float, float]:
    c.model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for batch in batches:
        logits = c.masked_logits(c.model, batch).float()
        targets = batch["labels"][batch["labels"].ne(IGNORE_INDEX)]
        loss_sum += F.cross_entropy(logits, targets, reduction="sum").item()
        correct += int((logits.argmax(-1) == targets).sum())
        count += targets.numel()
    c.model.train()
    return loss_sum / count, correct / count


def train_slice(
    c: Contender,
    seconds: float,
    budget: float,
    peak: float,
    schedule: ScheduleSection,
    short_until: float = 0.0,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    started = time.perf_counter()
    while time.perf_counter() - started < seconds and c.seconds < budget:
        t0 = clock()
        batch = next(c.short_batches if c.seconds < short_until else c.batches)
        progress = int(SCHEDULE_UNITS * c.seconds / budget)
        set_learning_rate(c.optimizer, learning_rate(progress, peak, schedule, SCHEDULE_UNITS))
        loss = c.loss(c.model, batch)
        if not math.isfinite(loss.item()):
            raise SystemExit(f"{c.name}: non-finite loss at step {c.step}")
        loss.backward()
        c.optimizer.step()
        c.optimizer.zero_grad(set_to_none=True)
        c.step += 1
        c.tokens += int(batch["tokens"].ne(1).sum())
        c.seconds += clock() - t0


def ensure_data(corpus_text: Path, work: Path, vocab_size: int) -> tuple[Path, Path]:
    """The tokenizer and the prepared corpus (built once into `work`)."""
    from roberta.data.prepare import prepare
    from roberta.tokenizer import train_tokenizer

    tokenizer, corpus = work / f"tokenizer-{vocab_size // 1024}k", work / f"corpus-{vocab_size // 1024}k"
    if not tokenizer.exists():
        train_tokenizer([corpus_text], tokenizer, vocab_size)
    if not corpus.exists():
        prepare([corpus_text], tokenizer, corpus, workers=2)
    return tokenizer, corpus


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    data_root = Path(os.environ.get("ROBERTA_DATA", ROOT.parent / "shared" / "data"))
    p.add_argument("--minutes", type=float, default=20.0, help="training-time budget per model (default 20)")
    p.add_argument(
        "--slice", type=float, default=60.0, help="seconds each model trains before the other (default 60)"
    )
    p.add_argument("--corpus", type=Path, default=data_root / "corpus")
    p.add_argument(
        "--work", type=Path, default=ROOT / "runs" / "bench", help="tokenizer + prepared corpus cache"
    )
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup-fraction", type=float, default=0.06)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--shape",
        default="tiny",
        metavar="PRESET[:LAYERSxWIDTH[xHEADS]]",
        help="model shape: a preset, optionally narrowed, e.g. tiny:2x128 (heads = width/64 unless given, "
        "FFN = 4 x width)",
    )
    p.add_argument("--dropout", type=float, help="hidden and attention dropout (default: the preset's)")
    p.add_argument(
        "--mask-prob",
        type=float,
        default=0.15,
        help="training masking rate (default 0.15); evaluation always masks 15%% of 128-token sequences",
    )
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument(
        "--init-std", type=float, help="std of the normal initialisation (default: the preset's, 0.02)"
    )
    p.add_argument(
        "--position-init",
        choices=("normal", "sinusoidal"),
        default="normal",
        help="the learned position embeddings start as the other weights do (normal) or as the original "
        "Transformer's sinusoids at the same std (still learned: the architecture is unchanged)",
    )
    p.add_argument(
        "--short-seq-len", type=int, help="train on sequences this long first (same tokens per batch)"
    )
    p.add_argument("--short-fraction", type=float, default=0.0, help="share of the budget on --short-seq-len")
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="what the budget counts: wall seconds, or this process' CPU seconds (with --threads 1, "
        "a recipe search that shares the host with other jobs; default wall)",
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        help="save our trained model here (a checkpoint with the tokenizer: fine-tune it, serve it)",
    )
    p.add_argument("--sides", default="ours,hf", help="who trains: ours, hf or both (default ours,hf)")
    p.add_argument(
        "--out", type=Path, help="result.json + curves.png (default benchmarks/time_to_quality/SHAPE)"
    )
    args = p.parse_args()
    args.out = args.out or ROOT / "benchmarks" / "time_to_quality" / args.shape.replace(":", "-")
    torch.set_num_threads(args.threads)

    tokenizer, corpus = ensure_data(args.corpus, args.work, 8192)
    data = DataConfig(seq_len=args.seq_len, masking=MaskingConfig(mask_prob=args.mask_prob))
    train_set = PretrainDataset(corpus, config=data, micro_batch_size=args.batch, seed=args.seed)
    # One held-out set for every recipe: 8 x 128-token sequences per batch, 15% masked.
    valid_set = PretrainDataset(
        corpus, split="valid", config=DataConfig(seq_len=EVAL_SEQ_LEN), micro_batch_size=8, seed=args.seed
    )
    valid = [b for _, b in zip(range(args.eval_batches), PretrainLoader(valid_set, epochs=1))]

    config = model_config(
        args.shape,
        args.dropout,
        train_set.specials.vocab_size,
        max(args.seq_len, EVAL_SEQ_LEN),
        args.init_std,
    )
    contenders = []
    for side in args.sides.split(","):
        torch.manual_seed(args.seed)
        if side == "ours":
            contenders.append(Contender("ours", RobertaModel(config), ours_loss, ours_logits))
            positions = contenders[-1].model.embed_positions.weight
        elif side == "hf":
            contenders.append(Contender("HF transformers", hf_model(config), hf_loss, hf_logits))
            positions = contenders[-1].model.roberta.embeddings.position_embeddings.weight
        else:
            p.error(f"--sides: unknown side {side!r}")
        if args.position_init == "sinusoidal":
            sinusoidal_positions(positions, config.padding_idx, config.init_std)
    optim = OptimSection(lr=args.lr, weight_decay=args.weight_decay)
    for c in contenders:
        c.model.train()
        c.optimizer = build_optimizer(c.model, optim)

    # The schedule runs on training time, not steps: warmup over the first warmup_fraction of the
    # budget, then linear decay to 0 at its end, for both. Whoever is faster takes more steps
    # under the same learning-rate curve; no step count has to be guessed on a noisy host.
    schedule = ScheduleSection(kind="linear", warmup_steps=round(args.warmup_fraction * SCHEDULE_UNITS))
    for c in contenders:
        c.batches = iter(PretrainLoader(train_set))  # the same batches and masks, in the same order
        if args.short_seq_len:
            short = PretrainDataset(
                corpus,
                config=DataConfig(seq_len=args.short_seq_len, masking=data.masking),
                micro_batch_size=args.batch * args.seq_len // args.short_seq_len,
                seed=args.seed,
            )
            c.short_batches = iter(PretrainLoader(short))
    budget = args.minutes * 60
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    started = time.time()
    for c in contenders:
        loss, acc = evaluate(c, valid)
        c.history.append({"seconds": 0.0, "step": 0, "tokens": 0, "loss": loss, "accuracy": acc})
    while any(c.seconds < budget for c in contenders):
        for c in contenders:
            if c.seconds >= budget:
                continue
            train_slice(c, args.slice, budget, args.lr, schedule, args.short_fraction * budget, clock)
            loss, acc = evaluate(c, valid)
            c.history.append(
                {"seconds": c.seconds, "step": c.step, "tokens": c.tokens, "loss": loss, "accuracy": acc}
            )
            print(
                f"{c.name:>16}: {c.seconds / 60:5.1f} min, step {c.step:5d}, "
                f"{c.tokens / c.seconds:6.0f} tok/s, valid loss {loss:.3f}, masked-token accuracy {acc:.2%}",
                flush=True,
            )

    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "command": "benchmarks/time_to_quality.py "
        + " ".join(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()),
        "wall_minutes": (time.time() - started) / 60,
        "warmup_fraction": args.warmup_fraction,
        "valid_masked_tokens": sum(int(b["labels"].ne(IGNORE_INDEX).sum()) for b in valid),
        "unigram_baseline_accuracy": unigram_baseline(train_set, valid),
        "runs": {c.name: c.history for c in contenders},
    }
    if args.checkpoint:
        from roberta.checkpoint import save
        from roberta.tokenizer import load_tokenizer

        ours = next(c for c in contenders if c.name == "ours")
        save(args.checkpoint, ours.model.eval(), load_tokenizer(tokenizer))
    (args.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out / "curves.png")
    for c in contenders:
        last = c.history[-1]
        print(
            f"{c.name}: {last['step']} steps, {last['tokens']} tokens in {last['seconds'] / 60:.1f} min, "
            f"valid loss {last['loss']:.3f}, accuracy {last['accuracy']:.2%}"
        )
    print(f"unigram baseline accuracy {result['unigram_baseline_accuracy']:.2%}; written {args.out}")


def model_config(
    shape: str, dropout: float | None, vocab_size: int, seq_len: int, init_std: float | None = None
) -> RobertaConfig:
    preset, _, narrowed = shape.partition(":")
    sizes = {}
    if narrowed:
        layers, width, *heads = (int(n) for n in narrowed.lower().split("x"))
        heads = heads[0] if heads else max(1, width // 64)
        sizes = {"num_layers": layers, "hidden_size": width, "num_heads": heads, "ffn_size": 4 * width}
    if dropout is not None:
        sizes |= {"dropout": dropout, "attention_dropout": dropout}
    if init_std is not None:
        sizes["init_std"] = init_std
    return RobertaConfig.preset(preset, vocab_size=vocab_size, max_positions=seq_len + 2, **sizes)


def unigram_baseline(train_set: PretrainDataset, valid: list[dict]) -> float:
    """Accuracy of always predicting the most frequent training token: what 'learned nothing' scores."""
    top = train_set.split.most_frequent_token()
    targets = torch.cat([b["labels"][b["labels"].ne(IGNORE_INDEX)] for b in valid])
    return float((targets == top).float().mean())


def plot(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for name, rows in result["runs"].items():
        minutes = [r["seconds"] / 60 for r in rows]
        axes[0].plot(minutes, [r["loss"] for r in rows], marker="o", markersize=3, label=name)
        axes[1].plot(minutes, [100 * r["accuracy"] for r in rows], marker="o", markersize=3, label=name)
    axes[1].axhline(
        100 * result["unigram_baseline_accuracy"], color="grey", linestyle=":", label="unigram baseline"
    )
    axes[0].set(title="held-out masked-LM loss", xlabel="training minutes (2-core CPU)", ylabel="nats")
    axes[1].set(title="held-out masked-token accuracy", xlabel="training minutes (2-core CPU)", ylabel="%")
    for ax in axes:
        ax.legend()
    fig.subplots_adjust(wspace=0.3, bottom=0.15)
    tmp = out.with_name(out.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=90)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
