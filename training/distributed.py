"""Data parallelism: one process per device, started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK in
the environment; directly, on several nodes, or by Spark's TorchDistributor); NCCL on CUDA, gloo on
CPU. Alone, the same code runs as rank 0 of 1.

Two process groups. The default one (train.process_group_timeout_s) carries training's collectives,
where every rank does the same work, so a rank missing for that long is hung or dead and the job
should fail. The long-wait group (gloo, train.eval_timeout_s) carries only the waits for work that
takes one rank longer than the others: the reduction at the end of a sharded validation pass (a
rank that finished its share waits for the slowest one), and rank 0 saving a checkpoint or finding
the one to resume. Every rank leaves such a wait together, so the next training collective starts
with every rank present."""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Processes:
    rank: int
    world_size: int
    device: torch.device
    long_wait_group: Any = None  # the gloo group for waits on one rank's longer work (see the module docstring)

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


def use_deterministic_kernels() -> None:
    """Bitwise-repeatable steps on CUDA: cuBLAS on a fixed workspace, no kernel that accumulates with
    atomics (attention's and scatter's backward among them), no cuDNN autotuning."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts: before any matmul
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def init(requested_device: str, timeout_s: float = 1800.0, eval_timeout_s: float = 6 * 3600.0) -> Processes:
    device = pick_device(requested_device)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Processes(0, 1, device)
    local_rank = int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(seconds=timeout_s))
    long_wait_group = dist.new_group(backend="gloo", timeout=timedelta(seconds=eval_timeout_s))
    return Processes(dist.get_rank(), world_size, device, long_wait_group)


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


def wait_for_main(processes: Processes) -> None:
    """Every rank waits here until rank 0 is done with work it does alone (a checkpoint save to an
    object store, verifying the checkpoint to resume), on the long-wait group: that work, however
    slow, is not a hang for the default group's timeout to catch."""
    if processes.world_size > 1:
        dist.barrier(group=processes.long_wait_group)


def every_rank(value: float) -> list[float]:
    """Every rank's value, in rank order, on every rank: one all_reduce of a float64 vector on the
    default group (a non-finite value stays in its own slot). Alone: [value]."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [value]
    on_gpu = dist.get_backend() == "nccl"
    values = torch.zeros(dist.get_world_size(), dtype=torch.float64,
                         device=torch.device("cuda", torch.cuda.current_device()) if on_gpu else "cpu")
    values[dist.get_rank()] = value
    dist.all_reduce(values)
    return values.tolist()


def sum_over_ranks(values: torch.Tensor, processes: Processes | None) -> torch.Tensor:
    """values (a CPU tensor) summed over every rank, on the long-wait group; alone, values itself."""
    if processes is None or processes.world_size == 1:
        return values
    dist.all_reduce(values, group=processes.long_wait_group)
    return values
