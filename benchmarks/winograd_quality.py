"""Winograd and CommonsenseQA figures of a pretrained checkpoint beside a random init of its shape.

For each init (the checkpoint, then a random init: its config and tokenizer, seed 0), through the
`roberta` command as a user runs it:

  zero-shot   `roberta evaluate winograd`: WSC273, WinoGrande dev (1,267) and SuperGLUE WSC val by
              the masked LM's candidate scoring, no training;
  fine-tuned  `roberta finetune wsc` (SuperGLUE WSC train -> val, WSC273 at each evaluation),
              `finetune winogrande --size SIZE` (-> dev), `finetune commonsenseqa` (-> dev), each on a
              short CPU budget (the steps or epochs given), the last evaluation and the best reported.

Majority baselines are counted from the files here: SuperGLUE val predicted all `false` (train's
majority); WSC273 always the first answer; WinoGrande always option 1 and always option 2;
CommonsenseQA always the letter most frequent in train. Prints a Markdown table and the JSON.

    flock /tmp/roberta-cpu.lock .venv/bin/python benchmarks/winograd_quality.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import harness


def roberta(*argv: str, threads: int) -> str:
    command = [str(Path(sys.executable).with_name("roberta")), *argv]
    print("$ roberta " + " ".join(argv), flush=True)
    result = subprocess.run(command, env=harness.thread_env(threads), capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def random_init(checkpoint: Path, work: Path) -> Path:
    import torch

    from roberta import checkpoint as ckpt
    from roberta.model import RobertaModel

    target = work / "random-init"
    if not ckpt.is_checkpoint(target):
        model, tokenizer = ckpt.load(checkpoint)
        torch.manual_seed(0)
        ckpt.save(target, RobertaModel(model.config), tokenizer)
    return target


def baselines(data: Path) -> dict[str, float]:
    """Majority baselines, counted from the files (percent)."""
    rows = lambda path: [json.loads(x) for x in path.read_text().splitlines() if x.strip()]  # noqa: E731
    wsc = data / "wsc" / "superglue"
    train_labels = Counter(r["label"] for r in rows(wsc / "train.jsonl"))
    majority = train_labels.most_common(1)[0][0]
    val = rows(wsc / "val.jsonl")
    import xml.etree.ElementTree as ET

    schemas = list(ET.parse(data / "wsc" / "wsc273" / "WSCollection.xml").getroot().iter("schema"))[:273]
    first = sum("A" in (s.findtext("correctAnswer") or "") for s in schemas)
    dev = rows(data / "winogrande" / "dev.jsonl")
    csqa_train = Counter(r["answerKey"] for r in rows(data / "commonsenseqa" / "train_rand_split.jsonl"))
    letter = csqa_train.most_common(1)[0][0]
    csqa_dev = rows(data / "commonsenseqa" / "dev_rand_split.jsonl")
    return {
        "superglue_val": 100.0 * sum(r["label"] == majority for r in val) / len(val),
        "wsc273": 100.0 * first / len(schemas),
        "winogrande_1": 100.0 * sum(r["answer"] == "1" for r in dev) / len(dev),
        "winogrande_2": 100.0 * sum(r["answer"] == "2" for r in dev) / len(dev),
        "commonsenseqa": 100.0 * sum(r["answerKey"] == letter for r in csqa_dev) / len(csqa_dev),
        "commonsenseqa_letter": letter,
    }


def finetuned(run: Path) -> dict:
    """The best (by the run's metric) and the last evaluation's figures, "set/figure" named."""
    results = json.loads((run / "results.json").read_text())
    step = results["evaluations"][-1]["step"]
    last = [r for r in results["evaluations"] if r["step"] == step]
    figures = (
        {k: v for r in last for k, v in r.items()}
        if len(last) == 1
        else {f"{r['split']}/{k}": v for r in last for k, v in r.items()}
    )
    return {"best": results["best"], "last": figures}


def measure(name: str, init: Path, args: argparse.Namespace) -> dict:
    data, work, threads = args.data, args.work, args.threads
    wsc273 = data / "wsc" / "wsc273" / "WSCollection.xml"
    out: dict = {}
    zero = roberta(
        "evaluate", "winograd", "--model", str(init), "--wsc273", str(wsc273),
        "--winogrande", str(data / "winogrande" / "dev.jsonl"),
        "--superglue", str(data / "wsc" / "superglue" / "val.jsonl"), threads=threads,
    )  # fmt: skip
    out["zero_shot"] = json.loads(zero)
    common = ["--overwrite", "--train.device=cpu", "--train.log_every=1000000"]
    run = work / f"{name}-wsc"
    roberta(
        "finetune", "wsc", "--data", str(data / "wsc" / "superglue"), "--wsc273", str(wsc273),
        "--init", str(init), "--out", str(run), "--eval-every", str(args.wsc_eval_every),
        f"--train.max_steps={args.wsc_steps}", f"--optim.lr={args.wsc_lr}", *common, threads=threads,
    )  # fmt: skip
    out["wsc"] = finetuned(run)
    run = work / f"{name}-winogrande"
    roberta(
        "finetune", "winogrande", "--data", str(data / "winogrande"), "--size", args.winogrande_size,
        "--init", str(init), "--out", str(run), f"--train.epochs={args.winogrande_epochs}",
        f"--optim.lr={args.lr}", *common, threads=threads,
    )  # fmt: skip
    out["winogrande"] = finetuned(run)
    run = work / f"{name}-commonsenseqa"
    csqa = data / "commonsenseqa"
    roberta(
        "finetune", "commonsenseqa", "--train", str(csqa / "train_rand_split.jsonl"),
        "--dev", str(csqa / "dev_rand_split.jsonl"), "--init", str(init), "--out", str(run),
        f"--train.epochs={args.csqa_epochs}", f"--optim.lr={args.lr}", *common, threads=threads,
    )  # fmt: skip
    out["commonsenseqa"] = finetuned(run)
    return out


def _pick(r: dict, where: str) -> float:
    """A figure by its path: "zero_shot.wsc273.accuracy", "wsc.last.val/accuracy"..."""
    for key in where.split("."):
        r = r[key]
    return r


def table(results: dict, base: dict) -> str:
    wg = f"{base['winogrande_1']:.1f} / {base['winogrande_2']:.1f}"
    csqa = f"{base['commonsenseqa']:.1f} (always {base['commonsenseqa_letter']})"
    sg, wsc = f"{base['superglue_val']:.1f}", f"{base['wsc273']:.1f}"
    tuned = "fine-tuned: last (best)"
    rows = [
        ("WSC273 (273)", "zero-shot", wsc, "zero_shot.wsc273.accuracy", None),
        ("WinoGrande dev (1,267)", "zero-shot", wg, "zero_shot.winogrande.accuracy", None),
        ("SuperGLUE WSC val (104)", "zero-shot", sg, "zero_shot.superglue.accuracy", None),
        ("SuperGLUE WSC val (104)", tuned, sg, "wsc.last.val/accuracy", "wsc.best.value"),
        ("WSC273 (273)", "after WSC fine-tuning: last", wsc, "wsc.last.wsc273/accuracy", None),
        ("WinoGrande dev (1,267)", tuned, wg, "winogrande.last.accuracy", "winogrande.best.value"),
        ("CommonsenseQA dev (1,221)", tuned, csqa, "commonsenseqa.last.accuracy", "commonsenseqa.best.value"),
    ]
    lines = [
        "| set | measure | majority baseline | " + " | ".join(results) + " |",
        "|---|---|---|" + "---|" * len(results),
    ]
    for label, measure, baseline, last, best in rows:
        cells = [
            f"{_pick(r, last):.1f}" + (f" ({_pick(r, best):.1f})" if best else "") for r in results.values()
        ]
        lines.append(f"| {label} | {measure} | {baseline} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--init", type=Path, help="checkpoint (default: the one runs/cpu-recipe/READY names)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--lr", type=float, default=5e-4, help="WinoGrande and CommonsenseQA peak LR (default 5e-4)"
    )
    p.add_argument("--wsc-lr", type=float, default=1e-4, help="WSC peak LR (default 1e-4)")
    p.add_argument("--wsc-steps", type=int, default=600, help="WSC updates of 16 schemas (default 600)")
    p.add_argument("--wsc-eval-every", type=int, default=50)
    p.add_argument("--winogrande-size", default="m")
    p.add_argument("--winogrande-epochs", type=float, default=3)
    p.add_argument("--csqa-epochs", type=float, default=2)
    harness.add_data_and_work(p, harness.ROOT / "runs" / "bench" / "winograd", "scratch directory")
    p.add_argument("--json", type=Path, help="write the figures here")
    args = p.parse_args()
    if args.init is None:
        args.init = Path((harness.ROOT / "runs" / "cpu-recipe" / "READY").read_text().strip())
    args.work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"{harness.machine()}; {harness.versions()}; init {args.init}", flush=True)
    inits = {"pretrained": args.init, "random init": random_init(args.init, args.work)}
    results = {}
    for name, init in inits.items():
        results[name] = measure(name.replace(" ", "-"), init, args)
        print(json.dumps(results[name]), flush=True)
    base = baselines(args.data)
    print(table(results, base))
    if args.json:
        args.json.write_text(json.dumps({"results": results, "baselines": base}, indent=2) + "\n")
    print(f"done in {harness.elapsed(started)}")


if __name__ == "__main__":
    main()
