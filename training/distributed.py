"""Data parallelism: one process per device, started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK in
the environment); NCCL on CUDA, gloo on CPU. Alone, the same code runs as rank 0 of 1."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Processes:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def pick_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        from pipeline.config import ConfigError

        raise ConfigError("config key train.device: cuda, but no CUDA device is visible here; use auto or cpu")
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def init(requested_device: str) -> Processes:
    device = pick_device(requested_device)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Processes(0, 1, device)
    local_rank = int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Processes(dist.get_rank(), world_size, device)


def teardown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def gather(value: Any, processes: Processes) -> list[Any]:
    """Every rank's value, in rank order, on every rank."""
    if processes.world_size == 1:
        return [value]
    gathered: list[Any] = [None] * processes.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def barrier(processes: Processes) -> None:
    if processes.world_size > 1:
        dist.barrier()
