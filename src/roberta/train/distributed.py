"""Processes, devices and data parallelism, applied to a plain model from outside.

`torchrun` sets RANK/WORLD_SIZE/LOCAL_RANK; without them the run is one process. gloo on CPU,
NCCL on GPU. DDP is the default; FSDP2 (`fully_shard`, one unit per encoder layer plus the
root holding embeddings and the tied LM head) is for models whose optimizer state does not fit.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from roberta import checkpoint
from roberta.errors import UserError
from roberta.model import RobertaModel


@dataclass(frozen=True)
class Placement:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup(device: str = "auto") -> Placement:
    """Join the torchrun process group if there is one, and pick this process's device."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("train.device = 'cuda' but no CUDA device is visible")
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if device == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        torch_device = torch.device("cuda", local_rank)
    else:
        torch_device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device == "cuda" else "gloo")
    return Placement(rank=rank, world_size=world_size, device=torch_device)


def wrap(module: nn.Module, layers: nn.ModuleList, parallel: str, placement: Placement) -> nn.Module:
    """The module the loop runs: `module` itself, DDP around it, or sharded in place (FSDP2:
    one unit per encoder layer in `layers`, the root holding the rest)."""
    if placement.world_size == 1:
        return module
    if parallel == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(placement.device.type, (placement.world_size,))
        for layer in layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(module, mesh=mesh)
        return module
    from torch.nn.parallel import DistributedDataParallel

    ids = [placement.device.index] if placement.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids)


@contextlib.contextmanager
def gradient_sync(module: nn.Module, enabled: bool):
    """Skip the all-reduce on accumulation micro-steps; only the last one communicates."""
    if hasattr(module, "no_sync"):  # DDP
        with contextlib.nullcontext() if enabled else module.no_sync():
            yield
    elif hasattr(module, "set_requires_gradient_sync"):  # FSDP2
        module.set_requires_gradient_sync(enabled)
        yield
    else:
        yield


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(values)
    return values


def all_gather(obj) -> list:
    if not dist.is_initialized():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


# Optimizer and model state across ranks: FSDP2 shards them, the checkpoint holds them whole.


def optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer, parallel: str) -> dict:
    if parallel == "fsdp" and torch.distributed.is_initialized():
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(module, optimizer, options=options)
    return optimizer.state_dict()


def load_optimizer(module: nn.Module, optimizer, state: dict, parallel: str, placement: Placement) -> None:
    if parallel == "fsdp" and placement.world_size > 1:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(module, optimizer, state, options=StateDictOptions(full_state_dict=True))
        return
    optimizer.load_state_dict(state)


def full_model(
    module: nn.Module, model: RobertaModel, add_heads: Callable[[RobertaModel], None], parallel: str
) -> RobertaModel:
    """A plain, unsharded model holding the current weights (what `checkpoint.save` writes)."""
    if not (parallel == "fsdp" and torch.distributed.is_initialized()):
        return model
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    full = {k.removeprefix("model."): v for k, v in full.items()}
    with torch.random.fork_rng(devices=[]):  # initialising the copy must not move the training RNG
        plain = RobertaModel(model.config)
        add_heads(plain)
    if torch.distributed.get_rank() == 0:
        plain.load_state_dict(full)
    # A body read without a masked-LM head keeps saying so: its stand-in head is not a trained one.
    return checkpoint.mark_without_lm_head(plain, checkpoint.without_lm_head(model))
