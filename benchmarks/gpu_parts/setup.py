"""The environment, the data every later part reads, and the suite's GPU tests."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import harness
from gpu_parts.common import Plan, base_models, datasheet_tflops, device_of, synthetic_data

# --- the environment ---------------------------------------------------------------------------


def part_environment(plan: Plan, work: Path) -> dict:
    """What the run ran on: torch, CUDA, the GPUs, the bf16 peak MFU divides by."""
    import torch

    device = device_of(plan)
    cuda = device.type == "cuda"
    count = torch.cuda.device_count() if cuda else 0
    peak, note = datasheet_tflops(device)
    return {
        "device": plan.device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "gpus": [torch.cuda.get_device_name(i) for i in range(count)],
        "gpu_memory_gib": [
            round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1) for i in range(count)
        ],
        "bf16_supported": torch.cuda.is_bf16_supported() if cuda else None,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "datasheet_bf16_tflops": peak,
        "peak_note": note,
        "summary": ", ".join(torch.cuda.get_device_name(i) for i in range(count)) or plan.device,
    }


def part_data(plan: Plan, work: Path) -> dict:
    """What the later parts read, made once before them: the synthetic data and the base checkpoint."""
    from roberta.tokenizer import load_tokenizer

    data = synthetic_data(plan, work)
    _, _, config = base_models(plan, work)
    tokenizer = load_tokenizer(data / "gpt2_bpe")
    corpus_mb = sum(f.stat().st_size for f in (data / "corpus").glob("*.bin")) / 2**20
    return {
        "tokenizer_vocab": tokenizer.vocab_size,
        "corpus_mb": round(corpus_mb, 2),
        "model": f"{config.num_layers} x {config.hidden_size}, vocab {config.vocab_size}",
        "summary": f"BPE of {tokenizer.vocab_size} ids, {plan.finetune_shape} checkpoint",
        "checks": {"the tokenizer has the plan's vocabulary": tokenizer.vocab_size == plan.vocab},
    }


# --- 1. the suite's GPU tests ----------------------------------------------------------------


def part_tests(plan: Plan, work: Path) -> dict:
    """`pytest -m gpu`: outcomes from its JUnit XML. A module that cannot be imported here for a
    missing package (the device machine has no playwright) is listed, not counted as a failure."""
    junit = work / "tests-junit.xml"
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"]
    argv += ["--continue-on-collection-errors", f"--junitxml={junit}", *plan.test_paths]
    proc = subprocess.run(argv, cwd=harness.ROOT, capture_output=True, text=True)
    print(proc.stdout[-5000:], proc.stderr[-2000:], flush=True)
    if not junit.exists():
        raise RuntimeError(f"pytest exited {proc.returncode} without a report: {proc.stderr[-500:]}")
    figures = junit_outcomes(junit)
    figures["exit_code"] = proc.returncode
    figures["summary"] = (
        f"{figures['passed']} passed, {figures['failed']} failed, {figures['errors']} errors, "
        f"{figures['skipped']} skipped"
        + (f"; {len(figures['not_collected'])} modules not collected" if figures["not_collected"] else "")
    )
    figures["checks"] = {
        "no GPU test failed": figures["failed"] == 0 and figures["errors"] == 0,
        "the GPU tests ran (not skipped) where CUDA is visible": plan.device != "cuda"
        or figures["passed"] > 0,
    }
    return figures


def junit_outcomes(path: Path) -> dict:
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    failing, not_collected = [], {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        error, failure = case.find("error"), case.find("failure")
        if error is not None and error.get("message") == "collection failure":
            reason = [line for line in (error.text or "").splitlines() if line.startswith("E ")]
            reason = reason[-1][1:].strip() if reason else "collection failure"
            if "ModuleNotFoundError" not in reason:
                counts["errors"] += 1
                failing.append(f"{case.get('name')}: {reason}")
            not_collected[case.get("name")] = reason
        elif failure is not None or error is not None:
            counts["failed" if failure is not None else "errors"] += 1
            failing.append(name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {**counts, "failing": failing, "not_collected": not_collected}
