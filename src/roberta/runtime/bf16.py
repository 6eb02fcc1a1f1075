"""bf16 inference with the matrix products' weights held in bf16, applied from outside the model
(as `int8.quantize_model` is) by the hub while it runs bf16 in eval mode.

Autocast casts every fp32 weight to bf16 at each call. Its cast cache, which would keep those
copies for the life of an autocast context, is not used under `torch.inference_mode`, where the hub
runs (torch 2.13: a Linear called three times in one context cast its weight three times), so
each forward of the base shape cast 85.5M weights again (29.7 ms on an AMX host), over half of a
one-sentence `embed` (1,698 us a token against 795 held, fp32 1,667), which made a single served
sentence slower in bf16 than in fp32 (benchmarks/results/2026-11-27-2225-serve-profile.md).
Held in bf16 once, they are not cast again. The products are autocast's to the bit: its cast of
an fp32 weight is the same rounding, done once.

Held: every `nn.Linear`'s weight and bias (the encoder's, the heads'), and the masked-LM
projection's, a bf16 copy of the tied token embedding (the embedding's lookup keeps reading the
fp32 one). Embeddings, LayerNorm and everything autocast runs in fp32 stay fp32, and the hub's
outputs come back float32 as before. The fp32 weights are kept (the masters): `state_dict()`
gives them while held, so a checkpoint saved from a held model is its fp32 one, and `release`
puts them back, exactly.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from roberta.model import LMHead


def _held_names(module: nn.Module) -> tuple[str, ...]:
    return ("weight", "bias") if isinstance(module, (nn.Linear, LMHead)) else ()


class HeldWeights:
    """The bf16 copies of one model's product weights, and its fp32 masters while they are held."""

    def __init__(self, model: nn.Module):
        self.model = model
        # (module, name, fp32, tied): the fp32 data of a parameter now holding bf16 data, or for a
        # tied weight (`tied`) its own parameter, which a bf16 copy stands in for in that module.
        self._held: list[tuple[nn.Module, str, Tensor, bool]] = []
        self._hooks: list = []

    @property
    def held(self) -> bool:
        return bool(self._held)

    def hold(self) -> None:
        """Hold every product weight in bf16 (a no-op when they are held already)."""
        if self.held:
            return
        tied = {id(m.weight) for m in self.model.modules() if isinstance(m, nn.Embedding)}
        done: dict[int, Tensor] = {}  # a parameter shared by two modules is cast once
        for module in self.model.modules():
            names = [n for n in _held_names(module) if getattr(module, n, None) is not None]
            for name in names:
                parameter = getattr(module, name)
                if id(parameter) in tied:  # the embedding's lookup keeps the fp32 weight
                    copy = nn.Parameter(parameter.detach().to(torch.bfloat16), requires_grad=False)
                    self._held.append((module, name, parameter, True))
                    setattr(module, name, copy)
                elif parameter.dtype == torch.float32 or id(parameter) in done:
                    master = done.setdefault(id(parameter), parameter.data)
                    self._held.append((module, name, master, False))
                    parameter.data = parameter.data.to(torch.bfloat16)
            if names:
                # A partial, not a bound method: torch marks the hook it is given, and a deep copy
                # of the model copies it with this object.
                self._hooks.append(module.register_state_dict_post_hook(functools.partial(_fp32_state, self)))

    def release(self) -> None:
        """The fp32 weights back in place, the very tensors held before (a no-op when none are held)."""
        for module, name, fp32, tied in self._held:
            if tied:
                setattr(module, name, fp32)
            else:
                getattr(module, name).data = fp32.to(getattr(module, name).device)
        for hook in self._hooks:
            hook.remove()
        self._held, self._hooks = [], []


def _fp32_state(held: HeldWeights, module: nn.Module, state: dict, prefix: str, _metadata) -> None:
    """`state_dict()` of a held module: its fp32 masters, as if nothing were held."""
    for m, name, fp32, _ in held._held:
        if m is module and prefix + name in state:
            state[prefix + name] = fp32.detach()
