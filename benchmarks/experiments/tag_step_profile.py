"""Where a tagging fine-tuning step's time goes on a CPU, ours beside HF's: `make bench`'s CoNLL
row (the tiny shape 4 x 512 at GPT-2's 50k vocabulary, random init, batch 32 of CoNLL-2003's first
training sentences in random order), in-process. Ours: `tasks.tag._loss` (unpadded layers, the last
layer at labelled sub-tokens only) and the trainer's fused AdamW; HF: `RobertaForTokenClassification`
on the same sentences padded as `DataCollatorForTokenClassification` pads them, torch's AdamW as
`Trainer` builds it (fused on CPU). Each step's parts timed (batch, forward, backward, update) over
--steps steps, the sides alternating per step; then a torch.profiler table of --profile steps.

    .venv/bin/python benchmarks/experiments/tag_step_profile.py --precision fp32 --steps 12
    .venv/bin/python benchmarks/experiments/tag_step_profile.py --precision bf16 --profile ours
    ... --dense (ours without row updates of the embedding), --no-buckets (without bf16's row buckets)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def windows(count: int):
    from roberta.tagging.encoding import encode_words, make_windows, token_labels
    from roberta.tasks.tag_data import label_ids, label_set, read_tagged
    from roberta.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(DATA / "gpt2_bpe")
    sentences = read_tagged(DATA / "conll2003" / "train.txt")[:count]
    labels = label_set(sentences, "iob2")
    encoded = encode_words(tokenizer, [s.words for s in sentences])
    ids = label_ids("train.txt", sentences, labels)
    per_token = [token_labels(e, i) for e, i in zip(encoded, ids)]
    found = make_windows(encoded, tokenizer.bos_id, tokenizer.eos_id, 512, 127, per_token)
    return tokenizer, labels, found


class Ours:
    def __init__(self, config, state, labels, tokenizer, precision, rows=True):
        from roberta.model import RobertaModel, build_head
        from roberta.train.config import OptimSection
        from roberta.train.optim import build_optimizer

        self.model = RobertaModel(config)
        self.model.load_state_dict(state)
        self.model.add_head("tagger", build_head(config, {"kind": "tagging", "num_labels": len(labels)}))
        self.model.train()
        self.model.embed_tokens.sparse = rows  # the trainer's row updates (optim.AdamW)
        optim = OptimSection(lr=5e-5, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.1)
        self.optimizer = build_optimizer(self.model, optim)
        self.pad_id, self.precision = tokenizer.pad_id, precision

    def batch(self, chosen):
        from roberta.runtime.batching import pad
        from roberta.tagging.encoding import IGNORE

        return {
            "tokens": pad([w.tokens for w in chosen], self.pad_id),
            "labels": pad([w.labels for w in chosen], IGNORE),
        }

    def forward(self, batch):
        from roberta.tagging.encoding import IGNORE
        from roberta.tasks.tag import _loss
        from roberta.train.precision import autocast

        with autocast(self.precision, torch.device("cpu")):
            out = _loss("tagger", self.pad_id, self.model, batch)
        return out["loss"].float() / int(batch["labels"].ne(IGNORE).sum())


class HF:
    def __init__(self, hf_dir, labels, precision):
        import transformers

        transformers.logging.set_verbosity_error()
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
        self.model = transformers.AutoModelForTokenClassification.from_pretrained(
            hf_dir, num_labels=len(labels)
        ).train()
        decay = [p for n, p in self.model.named_parameters() if p.ndim >= 2]
        rest = [p for n, p in self.model.named_parameters() if p.ndim < 2]
        groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
        self.optimizer = torch.optim.AdamW(groups, lr=5e-5, betas=(0.9, 0.98), eps=1e-6, fused=True)
        self.collator = transformers.DataCollatorForTokenClassification(self.tokenizer)
        self.precision = precision

    def batch(self, chosen):
        rows = [
            {
                "input_ids": w.tokens.tolist(),
                "attention_mask": [1] * len(w.tokens),
                "labels": w.labels.tolist(),
            }
            for w in chosen
        ]
        return self.collator(rows)

    def forward(self, batch):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16"):
            return self.model(**batch).loss


def step(side, chosen) -> dict[str, float]:
    times = {}
    started = time.perf_counter()
    batch = side.batch(chosen)
    times["batch"] = time.perf_counter() - started
    t = time.perf_counter()
    loss = side.forward(batch)
    times["forward"] = time.perf_counter() - t
    t = time.perf_counter()
    loss.backward()
    times["backward"] = time.perf_counter() - t
    t = time.perf_counter()
    side.optimizer.step()
    side.optimizer.zero_grad(set_to_none=True)
    times["update"] = time.perf_counter() - t
    times["step"] = time.perf_counter() - started
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--sentences", type=int, default=192)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sides", default="ours,hf")
    p.add_argument("--profile", choices=("ours", "hf", "none"), default="none")
    p.add_argument("--dense", action="store_true", help="ours without the row updates of the embedding")
    p.add_argument("--no-buckets", action="store_true", help="ours without bf16's row buckets")
    p.add_argument("--work", type=Path, default=Path("runs/bench/tag-profile"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    from roberta.convert import export_hf
    from roberta.model import RobertaModel
    from time_to_quality import model_config

    if args.no_buckets:
        import roberta.padding
        import roberta.tasks.tag

        roberta.padding.bucket_rows = roberta.tasks.tag.bucket_rows = lambda n: n
    tokenizer, labels, found = windows(args.sentences)
    torch.manual_seed(0)
    base = RobertaModel(model_config("tiny", None, tokenizer.vocab_size, 512))
    hf_dir = args.work / "model-hf"
    export_hf(hf_dir, base, tokenizer)
    sides = {}
    for name in args.sides.split(","):
        torch.manual_seed(1)
        sides[name] = (
            Ours(base.config, base.state_dict(), labels, tokenizer, args.precision, not args.dense)
            if name == "ours"
            else HF(hf_dir, labels, args.precision)
        )
    rng = np.random.default_rng(0)
    order = rng.permutation(len(found))
    batches = [
        [found[i] for i in order[k : k + args.batch]]
        for k in range(0, len(order) - args.batch + 1, args.batch)
    ]
    tokens = statistics.mean(sum(len(w.tokens) for w in b) for b in batches)
    print(f"{len(batches)} batches of {args.batch}, {tokens:.0f} real tokens each; {args.precision}")
    for side in sides.values():  # warm-up
        step(side, batches[0])
    times = {name: [] for name in sides}
    for k in range(args.steps):
        for name, side in sides.items():
            times[name].append(step(side, batches[k % len(batches)]))
    for name, rows in times.items():
        parts = {key: statistics.median(r[key] for r in rows) * 1000 for key in rows[0]}
        print(f"{name}: " + ", ".join(f"{key} {v:.1f} ms" for key, v in parts.items()))
    if args.profile != "none":
        from torch.profiler import ProfilerActivity, profile

        side = sides[args.profile]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for k in range(4):
                step(side, batches[k % len(batches)])
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
