"""The training path on the GPU: bf16 against fp32, the attention kernel, throughput beside HF."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import harness
from gpu_parts.common import (
    PRECISION,
    Plan,
    Stepper,
    datasheet_tflops,
    device_of,
    guarded,
    motif_batch,
    on_device,
    one_line,
    peak_memory_mb,
    release,
    require,
    reset_peak_memory,
    seq_len_of,
    shape_config,
    synchronize,
)

# --- 2. bf16 against fp32 ----------------------------------------------------------------------


def part_precision(plan: Plan, work: Path) -> dict:
    """The same pretraining run in fp32 and under bf16 autocast: one init, the same batches, the
    trainer's AdamW and schedule (linear warmup over 10% of the steps, then decay). Dropout is off
    so that the two differ by precision alone."""
    import torch

    from pretrain_step import ours_loss
    from roberta.model import RobertaModel
    from roberta.train.config import ScheduleSection
    from roberta.train.optim import learning_rate, set_learning_rate

    device = device_of(plan)
    config = shape_config(plan.precision_shape, plan.vocab, dropout=0.0, attention_dropout=0.0)
    seq_len, steps, lr = seq_len_of(plan.precision_shape), plan.precision_steps, plan.precision_lr
    schedule = ScheduleSection(warmup_steps=max(1, steps // 10))
    torch.manual_seed(0)
    initial = RobertaModel(config).state_dict()
    losses = {}
    for precision in ("fp32", PRECISION):
        model = RobertaModel(config)
        model.load_state_dict(initial)
        stepper = Stepper.of(model.to(device), ours_loss, precision, device, lr=lr)
        losses[precision] = []
        for step in range(steps):
            set_learning_rate(stepper.optimizer, learning_rate(step, lr, schedule, steps))
            batch = on_device(motif_batch(1000 + step, plan.precision_batch, seq_len, plan.vocab), device)
            losses[precision].append(float(stepper.step(batch)))
        del model, stepper
        release(device)
    figures = precision_checks(losses["fp32"], losses[PRECISION])
    figures["shape"] = f"{plan.precision_shape}, batch {plan.precision_batch}, {steps} steps, peak LR {lr:g}"
    figures["losses"] = losses
    return figures


def precision_checks(fp32: list[float], bf16: list[float]) -> dict:
    """Bounds on bf16's drift from fp32, and whether they hold.

    Step 1 (the same weights, the same batch) differs by rounding alone: bf16 keeps 8 significant
    bits (a relative step of 2^-8 = 0.4%), the products accumulate in fp32 and the loss is taken in
    fp32, so the loss may move by a few such steps: at most 1% of it. After that the runs follow
    different trajectories (each rounding difference changes the next weights), so only the
    curve, not each step, must agree: the mean of the last 10% of steps within 5% of fp32's plus
    0.05 nats, the spread mixed-precision training reports for final losses against fp32
    (Micikevicius et al. 2018; Kalamkar et al. 2019, bf16) and well under what a wrong cast does
    (a loss that stalls or diverges differs by whole nats). Both runs must learn (the last window
    under 90% of the first loss), else agreeing would show nothing."""
    window = max(1, len(fp32) // 10)
    tail32, tail16 = sum(fp32[-window:]) / window, sum(bf16[-window:]) / window
    first_bound, tail_bound = 0.01 * fp32[0], 0.05 * tail32 + 0.05
    finite = all(math.isfinite(x) for x in fp32 + bf16)
    return {
        "first_loss": {
            "fp32": fp32[0],
            "bf16": bf16[0],
            "difference": abs(bf16[0] - fp32[0]),
            "bound": first_bound,
        },
        "last_window_mean": {
            "steps": window,
            "fp32": tail32,
            "bf16": tail16,
            "difference": abs(tail16 - tail32),
            "bound": tail_bound,
        },
        "summary": f"loss {fp32[0]:.3f} -> fp32 {tail32:.3f} / bf16 {tail16:.3f} (bound ±{tail_bound:.3f})",
        "checks": {
            "every loss finite": finite,
            "step 1 within 1% (rounding only)": finite and abs(bf16[0] - fp32[0]) <= first_bound,
            "last window within 5% + 0.05 nats": finite and abs(tail16 - tail32) <= tail_bound,
            "both runs learn": finite and max(tail32, tail16) < 0.9 * fp32[0],
        },
    }


# --- 3. the attention kernel -------------------------------------------------------------------

SDPA_OPS = {  # the forward op each SDPA backend dispatches to, as the profiler names it
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "memory-efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_attention_math": "math",
}


def part_attention(plan: Plan, work: Path) -> dict:
    """Which SDPA kernel a training step (forward + backward, bf16 autocast, dropout on) takes in
    three batches: full (no mask: flash expected on a GPU), and padded with the layers unpadded
    (pretraining's default) or not (a key-padding mask either way: memory-efficient expected).
    Per case: the kernels the profiler saw, and each backend forced alone (`sdpa_kernel`): ok, or
    why SDPA refused. The last layer in training computes the masked queries only by SDPA's math
    written out (model.attention: dropout drawn for every query), so SDPA runs layers - 1 times.
    On a CPU, bf16 training writes out every layer's attention, and no SDPA kernel runs."""
    import torch

    from roberta.model import RobertaModel

    device = device_of(plan)
    config = shape_config(plan.attention_shape, plan.vocab)
    seq_len = seq_len_of(plan.attention_shape)
    torch.manual_seed(0)
    model = RobertaModel(config).to(device).train()
    cases = {
        "no padding": (False, True),
        "padding, unpadded": (True, True),
        "padding, not unpadded": (True, False),
    }
    figures = {}
    for case, (padded, unpad) in cases.items():
        batch = on_device(motif_batch(0, plan.attention_batch, seq_len, plan.vocab, padded), device)
        figures[case] = attention_case(model, batch, unpad, device)
    figures["summary"] = "; ".join(f"{case}: {figures[case]['kernel']}" for case in cases)
    if device.type == "cuda":
        fused = {"flash", "memory-efficient", "cudnn"}
        checks = {
            f"{case}: a fused SDPA kernel (not math) ran": bool(set(figures[case]["kernels"]) & fused)
            for case in cases
        }
    else:
        # A CPU's fused kernels take no dropout; bf16 training there writes the attention out
        # (bf16 products, its own dropout masks: model.attention), so no SDPA kernel runs.
        checks = {
            f"{case}: no SDPA kernel (attention written out)": not figures[case]["kernels"] for case in cases
        }
    figures["checks"] = checks
    return figures


def attention_case(model, batch: dict, unpad: bool, device) -> dict:
    import torch
    from torch.nn.attention import SDPBackend

    from roberta.tasks.pretrain import MaskedLM, mlm_loss
    from roberta.train.precision import autocast

    def step() -> None:
        with autocast(PRECISION, device):
            loss = mlm_loss(model, batch, MaskedLM(unpad=unpad))["mlm"]
        loss.backward()
        model.zero_grad(set_to_none=True)

    step()  # warm-up: kernel selection and the allocator, outside the profile
    # The CPU side's op names say which backend SDPA dispatched to, on a GPU too; tracing the
    # device's kernels (CUPTI) would add nothing to that and one more thing that can fail.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        step()
        synchronize(device)
    names: dict[str, int] = {}
    for event in profile.events():
        names[event.name] = names.get(event.name, 0) + 1
    ops = {name: n for name, n in names.items() if name in SDPA_OPS}
    backends = {
        b.name: forced(step, b)
        for b in (
            SDPBackend.FLASH_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION,
            SDPBackend.CUDNN_ATTENTION,
            SDPBackend.MATH,
        )
    }
    used = sorted({SDPA_OPS[name] for name in ops})
    return {
        "kernel": " + ".join(used) or "none seen",
        "kernels": used,
        "sdpa_calls": ops,
        "forced_backends": backends,
        "padding_share": round(float(batch["tokens"].eq(1).float().mean()), 3),
    }


def forced(step: Callable[[], None], backend) -> str:
    """'ok' if a step runs with SDPA restricted to `backend`, else why it would not."""
    import warnings

    from torch.nn.attention import sdpa_kernel

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(backend):
                step()
            return "ok"
        except RuntimeError as error:
            # SDPA warns each backend's reason for refusing, then raises "No available kernel".
            reasons = [re.sub(r"\s*\(Triggered internally.*?\)", "", str(w.message)).strip() for w in caught]
            return " ".join(dict.fromkeys(reasons))[:300] or one_line(error)[:300]


# --- 4. pretraining throughput beside HF --------------------------------------------------------


def part_throughput(plan: Plan, work: Path) -> dict:
    require("transformers")
    figures = {spec: guarded(shape_throughput, spec, plan, work) for spec in plan.throughput_shapes}
    figures["summary"] = "; ".join(
        f"{spec}: {figures[spec]['error']}"
        if "error" in figures[spec]
        else f"{spec}: ours {figures[spec]['tokens_per_s']['ours']['median']:,.0f} tokens/s, "
        f"{figures[spec]['ratio']['median']:.2f}x HF"
        for spec in plan.throughput_shapes
    )
    figures["checks"] = {f"{spec} measured": "error" not in figures[spec] for spec in plan.throughput_shapes}
    return figures


@dataclass(frozen=True)
class Side:
    name: str
    build: Callable[[], object]  # a fresh model on the device, the shared initial weights
    loss: Callable  # (model, batch) -> the mean masked-LM loss
    flops_per_token: Callable[[int, int], float]  # (tokens, masked) of a step -> training FLOPs / token


@dataclass(frozen=True)
class Search:
    """The doubling search's outcome: the largest micro-batch that took two steps, the peak memory
    at each size tried, and what stopped it."""

    fits: int
    peak_mb: dict[int, float | None]
    stopped_by: str


def shape_throughput(spec: str, plan: Plan, work: Path) -> dict:
    """Both sides' largest micro-batch alone on the device, then both resident at the smaller of
    the two (the same shapes), alternated in slices of `slice_steps` steps."""
    import copy

    import torch
    import transformers

    from pretrain_step import hf_loss, ours_loss
    from roberta.convert import export_hf
    from roberta.model import RobertaModel

    device = device_of(plan)
    config, seq_len = shape_config(spec, plan.vocab), seq_len_of(spec)
    torch.manual_seed(0)
    initial = RobertaModel(config)
    hf_dir = export_hf(work / f"hf-{spec}", initial)
    transformers.logging.set_verbosity_error()
    sides = [
        Side(
            "ours",
            lambda: copy.deepcopy(initial).to(device),
            ours_loss,
            lambda tokens, masked: harness.training_flops(config, seq_len, tokens, masked, masked) / tokens,
        ),
        Side(
            "HF",
            lambda: transformers.RobertaForMaskedLM.from_pretrained(hf_dir).to(device),
            hf_loss,
            lambda tokens, masked: harness.training_flops(config, seq_len, tokens, tokens) / tokens,
        ),
    ]
    searches = {side.name: largest_micro_batch(side, seq_len, plan, device) for side in sides}
    micro = min(s.fits for s in searches.values())
    timed = None
    try:
        timed = alternated(sides, micro, seq_len, plan, device)
    except torch.OutOfMemoryError:
        pass  # each side fitted alone; side by side, the other's weights and AdamW state take room too
    if timed is None:  # out here, so that the failed try's models (its traceback's) are gone
        release(device)
        micro //= 2
        timed = alternated(sides, micro, seq_len, plan, device)
    rates, batches = timed
    tokens, masked = micro * seq_len, sum(int(b["labels"].ne(-100).sum()) for b in batches) / len(batches)
    peak, note = datasheet_tflops(device)
    row = harness.compared(spec, "tokens/s", rates["ours"], rates["HF"])
    return {
        "model": f"{config.num_layers} x {config.hidden_size}, vocab {config.vocab_size}",
        "micro_batch": micro,
        "seq_len": seq_len,
        "largest_micro_batch": {name: s.fits for name, s in searches.items()},
        "search_stopped_by": {name: s.stopped_by for name, s in searches.items()},
        "peak_memory_mb": {name: s.peak_mb.get(micro) for name, s in searches.items()},
        "tokens_per_s": {"ours": asdict(row.ours), "HF": asdict(row.baseline)},
        "ratio": asdict(row.ratios),
        "mfu": {
            side.name: None
            if peak is None
            else row_median(row, side.name) * side.flops_per_token(tokens, masked) / (peak * 1e12)
            for side in sides
        },
        "mfu_note": note,
    }


def alternated(sides: list[Side], micro: int, seq_len: int, plan: Plan, device) -> tuple[dict, list[dict]]:
    """Each side's tokens/s per slice, both resident, in slices of `slice_steps` steps on the same
    two batches; and the batches."""
    if micro < 1:
        raise RuntimeError("side by side, not even a micro-batch of 1 fits")
    steppers = {side.name: Stepper.of(side.build(), side.loss, PRECISION, device) for side in sides}
    batches = [on_device(motif_batch(seed, micro, seq_len, plan.vocab), device) for seed in range(2)]
    for stepper in steppers.values():
        stepper.step(batches[0])  # warm-up, not timed
    rates = harness.alternate(
        {name: lambda s=s: s.tokens_per_s(batches, plan.slice_steps) for name, s in steppers.items()},
        plan.slices,
    )
    return rates, batches


def row_median(row: harness.Row, side: str) -> float:
    return (row.ours if side == "ours" else row.baseline).median


def largest_micro_batch(side: Side, seq_len: int, plan: Plan, device) -> Search:
    """Double the micro-batch from 1 while two steps fit (AdamW's state is made in the first),
    alone on the device, up to the plan's cap or step time."""
    import torch

    stepper = Stepper.of(side.build(), side.loss, PRECISION, device)
    fits, peaks, stopped_by, size = 0, {}, "the plan's cap", 1
    while size <= plan.max_micro_batch:
        batch = on_device(motif_batch(size, size, seq_len, plan.vocab), device)
        reset_peak_memory(device)
        started = time.perf_counter()
        try:
            stepper.step(batch)
            stepper.step(batch)
            synchronize(device)
        except torch.OutOfMemoryError:
            stopped_by = "out of memory"
        stepper.optimizer.zero_grad(set_to_none=True)
        if stopped_by == "out of memory":
            break
        fits, peaks[size] = size, peak_memory_mb(device)
        print(f"  {side.name}: micro-batch {size} fits, peak {peaks[size]} MB", flush=True)
        if (time.perf_counter() - started) / 2 > plan.max_probe_step_s:
            stopped_by = f"a step over {plan.max_probe_step_s:g} s"
            break
        size *= 2
    del stepper, batch
    release(device)
    if not fits:
        raise RuntimeError(f"{side.name}: not even a micro-batch of 1 x {seq_len} fits")
    return Search(fits, peaks, stopped_by)
