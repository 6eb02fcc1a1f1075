"""Fine-tuning, embedding and serving beside HF."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import harness
from gpu_parts.common import (
    HERE,
    Plan,
    base_models,
    datasheet_tflops,
    device_of,
    guarded,
    require,
    synchronize,
    synthetic_data,
    texts,
)

# --- 7. fine-tuning, embed and serve beside HF ---------------------------------------------------


def part_finetune(plan: Plan, work: Path) -> dict:
    """finetune_throughput.py's two sides on the synthetic GLUE files at the plan's shape, on the
    plan's device: ours `roberta finetune glue` (timed by its trainer's clock), HF `Trainer`
    (its train_runtime), each a whole one-epoch run in its own process."""
    require("transformers", "accelerate")
    import finetune_throughput

    data = synthetic_data(plan, work)
    ours_dir, hf_dir, config = base_models(plan, work)
    figures = {
        task.name: guarded(
            task_throughput,
            finetune_throughput.glue_setup(task, data, work / "finetune"),
            ours_dir,
            hf_dir,
            config,
            plan,
            work,
        )
        for task in finetune_throughput.tasks(plan.finetune_examples)
    }
    names = list(figures)
    figures["summary"] = "; ".join(
        f"{name}: {figures[name]['error']}"
        if "error" in figures[name]
        else f"{name}: ours {figures[name]['examples_per_s']['ours']['median']:.1f} examples/s, "
        f"{figures[name]['ratio']['median']:.2f}x HF Trainer"
        for name in names
    )
    figures["checks"] = {f"{name} measured": "error" not in figures[name] for name in names}
    return figures


def task_throughput(setup, ours_dir: Path, hf_dir: Path, config, plan: Plan, work: Path) -> dict:
    import finetune_throughput

    runs = work / "finetune" / "runs"
    env = harness.thread_env(plan.threads)
    precision = "bf16" if plan.device == "cuda" else "fp32"  # on a GPU both sides run bf16

    def ours() -> float:
        out = runs / f"{setup.task.name}-ours"
        argv = finetune_throughput.ours_argv(setup, ours_dir, out, precision)
        # ours_argv names the venv's `roberta` and the CPU; the device machine has no venv, and a
        # later override wins.
        argv = [
            sys.executable,
            "-m",
            "roberta.cli",
            *argv[1:],
            f"--train.device={plan.device}",
            "--overwrite",
        ]
        harness.require_success(harness.run_measured(argv, env), "roberta finetune")
        return len(setup.lengths) / finetune_throughput.ours_seconds(out, sum(setup.lengths))

    def hf() -> float:
        out = runs / f"{setup.task.name}-hf"
        spec = json.loads(
            finetune_throughput.hf_argv(setup, hf_dir, out, "random", plan.threads, precision)[-1]
        )
        argv = [
            sys.executable,
            str(HERE / "gpu_check.py"),
            "--hf-finetune",
            json.dumps({**spec, "device": plan.device}),
        ]
        answer = harness.require_success(harness.run_measured(argv, env), "HF Trainer").stdout
        result = json.loads(answer.strip().splitlines()[-1])
        return result["examples"] / result["seconds"]

    rates = harness.alternate({"ours": ours, "HF Trainer": hf}, plan.finetune_repeats)
    row = harness.compared(setup.task.name, "examples/s", rates["ours"], rates["HF Trainer"])
    mean = sum(setup.lengths) / len(setup.lengths)
    peak, note = datasheet_tflops(device_of(plan))
    per_example = harness.training_flops(config, round(mean), sum(setup.lengths)) / len(setup.lengths)
    return {
        "examples": len(setup.lengths),
        "mean_tokens": round(mean, 1),
        "batch": setup.task.batch,
        "examples_per_s": {"ours": asdict(row.ours), "HF Trainer": asdict(row.baseline)},
        "ratio": asdict(row.ratios),
        "mfu": None
        if peak is None
        else {
            name: spread.median * per_example / (peak * 1e12)
            for name, spread in (("ours", row.ours), ("HF Trainer", row.baseline))
        },
        "mfu_note": note,
    }


def hf_finetune(spec: dict) -> None:
    """The --hf-finetune child: finetune_throughput.hf_run on the spec's device. Its recipe
    (harness.hf_trainer_recipe) is the CPU bench's; on a GPU the same recipe runs there, in bf16
    as ours does."""
    import finetune_throughput

    if spec["device"] == "cuda":
        cpu_recipe = harness.hf_trainer_recipe
        harness.hf_trainer_recipe = lambda *a, **k: {**cpu_recipe(*a, **k), "use_cpu": False, "bf16": True}
    finetune_throughput.hf_run(spec)


def part_embed(plan: Plan, work: Path) -> dict:
    """embed_throughput.py's `ours` (`Roberta.embed`: length-sorted batches, real tokens only)
    beside its length-sorted HF loop, fp32 both (the hub runs as loaded), tokenization included,
    the texts cut into slices alternated between the two."""
    require("transformers")
    import torch
    import transformers

    import embed_throughput
    from roberta import load

    device = device_of(plan)
    ours_dir, hf_dir, _ = base_models(plan, work)
    hub = load(ours_dir, map_location=device)
    hub.batch_tokens = plan.embed_batch_tokens
    hf_model = transformers.RobertaModel.from_pretrained(hf_dir, add_pooling_layer=False).to(device).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)

    def hf_cls(batch) -> torch.Tensor:
        return hf_model(**batch.to(device)).last_hidden_state[:, 0]

    systems = {
        "ours": lambda t: embed_throughput.ours(hub, t),
        "HF": lambda t: embed_throughput.run_sorted(hf_tokenizer, t, plan.hf_batch, hf_cls),
    }
    paragraphs = texts(plan, plan.embed_texts, 20, 250, seed=1)
    agreement = float(
        (systems["ours"](paragraphs[:4]).cpu() - systems["HF"](paragraphs[:4]).cpu()).abs().max()
    )
    slices = [paragraphs[k :: plan.slices] for k in range(plan.slices)]

    def rate(system: Callable, chunks) -> float:
        chunk = next(chunks)
        synchronize(device)
        started = time.perf_counter()
        system(chunk)
        synchronize(device)
        return len(chunk) / (time.perf_counter() - started)

    chunks = {name: iter(slices) for name in systems}  # each side embeds every slice once
    rates = harness.alternate(
        {name: lambda n=name: rate(systems[n], chunks[n]) for name in systems}, plan.slices
    )
    row = harness.compared("embed", "sentences/s", rates["ours"], rates["HF"])
    return {
        "texts": len(paragraphs),
        "hf_batch": plan.hf_batch,
        "batch_tokens": plan.embed_batch_tokens,
        "max_abs_difference_from_hf": agreement,
        "sentences_per_s": {"ours": asdict(row.ours), "HF": asdict(row.baseline)},
        "ratio": asdict(row.ratios),
        "summary": f"ours {row.ours.median:.1f} sentences/s, {row.ratios.median:.2f}x HF",
        "checks": {"ours gives HF's vectors (max |difference| < 1e-3)": agreement < 1e-3},
    }


def part_serve(plan: Plan, work: Path) -> dict:
    """`roberta serve` on the plan's device, /embed of single sentences under each client count,
    by serve_load.py's loopback load (requests back to back, for `serve_seconds`)."""
    require("starlette", "uvicorn")
    sys.path.insert(0, str(HERE / "experiments"))
    import serve_load

    ours_dir, _, _ = base_models(plan, work)
    with socket.socket() as s:
        s.bind((serve_load.HOST, 0))
        port = s.getsockname()[1]
    argv = [sys.executable, "-m", "roberta.cli", "serve", str(ours_dir), "--port", str(port)]
    argv += ["--device", plan.device, "--max-batch-tokens", str(plan.embed_batch_tokens)]
    system = serve_load.System("ours", argv, port, {"embed": ("/embed", lambda t: {"text": t})})
    sentences = texts(plan, 256, 5, 40, seed=2)
    system.start()
    figures = {}
    try:
        for clients in plan.serve_clients:
            tally = serve_load.load(
                port, serve_load.picker(system, "embed", sentences), clients, plan.serve_seconds
            )
            figures[f"{clients} clients"] = {
                "requests_per_s": len(tally.latencies) / tally.seconds,
                "p50_ms": serve_load.percentile(tally.latencies, 50) * 1e3 if tally.latencies else None,
                "p99_ms": serve_load.percentile(tally.latencies, 99) * 1e3 if tally.latencies else None,
                "errors": tally.errors,
            }
    finally:
        system.stop()
    cells = list(figures)
    figures["summary"] = ", ".join(f"{c}: {figures[c]['requests_per_s']:.1f} requests/s" for c in cells)
    figures["checks"] = {
        f"{c}: answered, no errors": figures[c]["requests_per_s"] > 0 and not figures[c]["errors"]
        for c in cells
    }
    return figures
