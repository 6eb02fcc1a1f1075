"""Which precision a model runs in: fp32, bf16 autocast, or int8 for CPU inference.

`auto` is the fastest choice that keeps our numbers. A CUDA GPU with bf16 runs bf16 autocast. So
does a CPU with native bf16 units, AMX (`amx_bf16`, Intel Xeon from Sapphire Rapids on) or
AVX512-BF16: there a bf16 matrix product runs several times faster than fp32's. A CPU without
them emulates bf16 and runs it 17-25x slower than fp32 (benchmarks/experiments/bf16-cpu.md), so
`auto` is fp32 there. bf16 is autocast only: the weights, the optimizer's state and every
checkpoint stay fp32, and what autocast keeps in fp32 (losses, reductions) stays there, as on GPUs.

`ROBERTA_PRECISION=fp32` (or `bf16`) in the environment decides what `auto` means, for every verb
and job on the machine, where the hardware's answer is not wanted (a reproducible fp32 run on a
bf16 host, a test suite that compares numbers to the last digit). An explicit choice (`--precision
bf16`, `--train.precision=fp32`) always wins over both.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from roberta.errors import UserError
from roberta.options import INFERENCE_PRECISIONS

TRAINING = ("auto", "fp32", "bf16", "fp16")
# On a CPU, bf16 (and int8) pay for their casts only on wide enough matrix products: on an AMX host
# the CPU recipe's 2 x 128 model pretrained 2.5x slower in bf16 than in fp32 and the base shape (768)
# 1.7x faster (docs/precision.md); issue #48's figures from another such host had a 512-wide model
# 1.6x faster. Narrower models stay fp32.
MIN_CPU_WIDTH = 512
INFERENCE = INFERENCE_PRECISIONS
ENVIRONMENT = "ROBERTA_PRECISION"


@dataclass(frozen=True)
class CpuUnits:
    """The CPU's matrix and vector units that decide its fastest precision."""

    amx_bf16: bool = False
    avx512_bf16: bool = False
    amx_int8: bool = False
    avx512_vnni: bool = False

    @property
    def native_bf16(self) -> bool:
        return self.amx_bf16 or self.avx512_bf16

    def names(self) -> list[str]:
        """The units present, by their /proc/cpuinfo flag names ("none" where none is)."""
        found = [name for name, present in vars(self).items() if present]
        return found or ["none"]


@functools.cache
def cpu_units() -> CpuUnits:
    """This CPU's units, as torch's kernels see them (its own checks), else from /proc/cpuinfo."""
    flags = _cpuinfo_flags()
    check = getattr(torch.cpu, "_is_amx_tile_supported", None)
    amx = check() if check is not None else "amx_bf16" in flags
    check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    avx512_bf16 = check() if check is not None else "avx512_bf16" in flags
    check = getattr(torch.cpu, "_is_vnni_supported", None)
    vnni = check() if check is not None else "avx512_vnni" in flags
    return CpuUnits(
        amx_bf16=bool(amx) and ("amx_bf16" in flags or not flags),
        avx512_bf16=bool(avx512_bf16),
        amx_int8=bool(amx) and ("amx_int8" in flags or not flags),
        avx512_vnni=bool(vnni),
    )


def _cpuinfo_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: torch's checks alone decide
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def choose_precision(
    requested: str,
    device_type: str,
    units: CpuUnits,
    cuda_bf16: bool = False,
    environment: str | None = None,
    serving: bool = False,
    width: int | None = None,
) -> str:
    """What `requested` runs as on a device: itself unless it is `auto`; `auto` is
    `environment` (ROBERTA_PRECISION) when given, else bf16 on a CUDA GPU with bf16 or on a CPU with
    native bf16 units for a model at least MIN_CPU_WIDTH wide (`width`: its hidden size), else
    fp32. `serving` (`roberta serve`): int8 on a CPU with AMX's int8 units (oneDNN's kernels), which
    answered more requests than bf16 there at 1 client (19-22%) and at 32 (1-5%; docs/precision.md).
    A pure function of what it is told, so each case is testable."""
    if requested != "auto":
        return requested
    if environment:
        if environment not in ("fp32", "bf16"):
            raise UserError(f"{ENVIRONMENT}={environment!r}: give fp32 or bf16 (or leave it unset)")
        return environment
    if device_type == "cuda":
        return "bf16" if cuda_bf16 else "fp32"
    if device_type != "cpu" or (width is not None and width < MIN_CPU_WIDTH):
        return "fp32"
    if serving and units.amx_int8:
        return "int8"
    return "bf16" if units.native_bf16 else "fp32"


def resolve(requested: str, device: torch.device, serving: bool = False, width: int | None = None) -> str:
    """`choose_precision` for this machine: its units, its GPU, its environment."""
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    environment = os.environ.get(ENVIRONMENT)
    return choose_precision(requested, device.type, cpu_units(), cuda_bf16, environment, serving, width)


def inference_precision(
    requested: str,
    int8: bool,
    device: torch.device,
    runtime: str = "torch",
    serving: bool = False,
    width: int | None = None,
) -> str:
    """An inference verb's `--precision` (and the older `--int8`, which is `--precision int8`) as
    it runs on `device` with `runtime` for a model `width` wide (`serving`: for `roberta serve`);
    UserError for a choice that cannot run there."""
    if requested not in INFERENCE:
        raise UserError(f"--precision {requested!r} unknown; choose one of {', '.join(INFERENCE)}")
    if int8 and requested not in ("auto", "int8"):
        raise UserError(f"--int8 and --precision {requested} ask for two precisions: give one")
    if int8:
        return "int8"
    if runtime == "onnx":
        if requested == "bf16":
            raise UserError("--precision bf16: an ONNX export runs its fp32 graphs (or its int8 ones)")
        return "int8" if requested == "int8" else "fp32"
    return resolve(requested, device, serving, width)


def reason(requested: str, chosen: str, device: torch.device, width: int | None = None) -> str:
    """Why `chosen` runs, for the logs and run records: "bf16 (auto: this CPU's units: amx_bf16, ...)"."""
    if requested != "auto":
        return chosen
    if os.environ.get(ENVIRONMENT):
        return f"{chosen} (auto: {ENVIRONMENT}={os.environ[ENVIRONMENT]})"
    if device.type == "cuda":
        return f"{chosen} (auto: {'a' if chosen == 'bf16' else 'no'} bf16 GPU)"
    units = ", ".join(cpu_units().names())
    if width is not None and width < MIN_CPU_WIDTH and cpu_units().native_bf16:
        return f"{chosen} (auto: a {width}-wide model runs fastest in fp32, even with this CPU's {units})"
    return f"{chosen} (auto: this CPU's units: {units})"


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype a precision's matrix products run in (int8's dynamic quantization aside: fp32)."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The autocast a precision runs under (none for fp32 and int8)."""
    if compute_dtype(precision) == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=compute_dtype(precision))
