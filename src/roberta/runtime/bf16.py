"""bf16 inference with the matrix products' weights held in bf16, applied from outside the model
(as `int8.quantize_model` is) by the hub while it runs bf16 in eval mode.

Autocast casts every fp32 weight to bf16 at each call. Its cast cache, which would keep those
copies for the life of an autocast context, is not used under `torch.inference_mode`, where the hub
runs (torch 2.13: a Linear called three times in one context cast its weight three times), so
each forward of the base shape cast 85.5M weights again: 28 ms of a 44 ms one-sentence `embed` on
an AMX host, which made a single served sentence slower in bf16 than in fp32
(benchmarks/experiments/bf16_infer_profile.py; docs/precision.md). Held in bf16 once, they are
not cast again. The products are autocast's to the bit: its cast of an fp32 weight is the same
rounding, done once.

Held: every `nn.Linear`'s weight and bias (the encoder's, the heads'), and the masked-LM
projection's, a bf16 copy of the tied token embedding (the embedding's lookup keeps reading the
fp32 one). Embeddings, LayerNorm and everything autocast runs in fp32 stay fp32, and the hub's
outputs come back float32 as before. The fp32 weights are kept (the masters): `state_dict()`
gives them while held, so a checkpoint saved from a held model is its fp32 one, and `release`
puts them back, exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from roberta.model import LMHead


def _held_names(module: nn.Module) -> tuple[str, ...]:
    return ("weight", "bias") if isinstance(module, (nn.Linear, LMHead)) else ()


class HeldWeights:
    """The bf16 copies of one model's product weights, and its fp32 masters while they are held."""

    def __init__(self, model: nn.Module):
        self.model = model
        self._masters: dict[int, tuple[nn.Parameter, Tensor]] = {}  # id(parameter) -> (it, fp32 data)
        self._swapped: list[tuple[nn.Module, str, nn.Parameter]] = []  # a tied weight's own parameter
        self._hooks: list = []

    @property
    def held(self) -> bool:
        return bool(self._masters or self._swapped)

    def hold(self) -> None:
        """Hold every product weight in bf16 (a no-op when they are held already)."""
        if self.held:
            return
        tied = {id(m.weight) for m in self.model.modules() if isinstance(m, nn.Embedding)}
        for module in self.model.modules():
            names = [n for n in _held_names(module) if getattr(module, n, None) is not None]
            for name in names:
                parameter = getattr(module, name)
                if parameter.dtype != torch.float32:
                    continue
                if id(parameter) in tied:  # the embedding's lookup keeps the fp32 weight
                    copy = nn.Parameter(parameter.detach().to(torch.bfloat16), requires_grad=False)
                    self._swapped.append((module, name, parameter))
                    setattr(module, name, copy)
                elif id(parameter) not in self._masters:
                    self._masters[id(parameter)] = (parameter, parameter.data)
                    parameter.data = parameter.data.to(torch.bfloat16)
            if names:
                # A function of its own: torch marks the hook it is given, which a bound method refuses.
                self._hooks.append(module.register_state_dict_post_hook(lambda *a: self._fp32_state(*a)))

    def release(self) -> None:
        """The fp32 weights back in place, the very tensors held before (a no-op when none are held)."""
        for parameter, master in self._masters.values():
            parameter.data = master.to(parameter.device)
        for module, name, parameter in self._swapped:
            setattr(module, name, parameter)
        for hook in self._hooks:
            hook.remove()
        self._masters, self._swapped, self._hooks = {}, [], []

    def _fp32_state(self, module: nn.Module, state: dict, prefix: str, _metadata) -> None:
        """`state_dict()` of a held module: its fp32 masters, as if nothing were held."""
        originals = {name: parameter for m, name, parameter in self._swapped if m is module}
        for name in _held_names(module):
            key = prefix + name
            if key not in state:
                continue
            if name in originals:
                state[key] = originals[name].detach()
            elif id(current := getattr(module, name)) in self._masters:
                state[key] = self._masters[id(current)][1]
