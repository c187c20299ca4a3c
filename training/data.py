"""Streaming a dataset split from Parquet into torch batches through Petastorm.

Petastorm hands back one row group at a time as numpy columns; this module re-cuts those into
fixed-size batches, shuffles with a seeded generator, and never holds more than a row group or two
in memory, whatever the size of the split.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline import contract

TOKEN_COLUMNS = (contract.INPUT_IDS, contract.ATTENTION_MASK, contract.LABEL)


@dataclass(frozen=True)
class ReaderSpec:
    split_dir: Path
    batch_size: int
    shuffle: bool
    seed: int = 0
    rank: int = 0  # this process's shard of the row groups
    world_size: int = 1
    num_workers: int = 1
    drop_last: bool = False


def _reader(spec: ReaderSpec, epoch: int):
    from petastorm import make_batch_reader

    return make_batch_reader(
        spec.split_dir.resolve().as_uri(),
        schema_fields=list(TOKEN_COLUMNS),
        num_epochs=1,
        shuffle_row_groups=spec.shuffle,
        seed=spec.seed + epoch,  # a different, reproducible row-group order every epoch
        cur_shard=spec.rank if spec.world_size > 1 else None,
        shard_count=spec.world_size if spec.world_size > 1 else None,
        workers_count=spec.num_workers,
        reader_pool_type="thread",
    )


def iter_batches(spec: ReaderSpec, epoch: int = 0) -> Iterator[dict[str, torch.Tensor]]:
    """Yield {"input_ids", "attention_mask", "label"} tensors of batch_size rows (the last may be short)."""
    rng = np.random.default_rng([spec.seed, epoch, spec.rank])
    pending: list[dict[str, np.ndarray]] = []
    pending_rows = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # petastorm 0.12 uses pyarrow APIs that warn on every call
        with _reader(spec, epoch) as reader:
            for group in reader:
                columns = {name: np.asarray(getattr(group, name)) for name in TOKEN_COLUMNS}
                if spec.shuffle:
                    order = rng.permutation(len(columns[contract.LABEL]))
                    columns = {name: values[order] for name, values in columns.items()}
                pending.append(columns)
                pending_rows += len(columns[contract.LABEL])
                while pending_rows >= spec.batch_size:
                    merged = _concat(pending)
                    yield _to_tensors({k: v[: spec.batch_size] for k, v in merged.items()})
                    pending = [{k: v[spec.batch_size :] for k, v in merged.items()}]
                    pending_rows -= spec.batch_size
    if pending_rows and not spec.drop_last:
        yield _to_tensors(_concat(pending))


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def _to_tensors(columns: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {
        contract.INPUT_IDS: torch.from_numpy(np.ascontiguousarray(columns[contract.INPUT_IDS], dtype=np.int64)),
        contract.ATTENTION_MASK: torch.from_numpy(np.ascontiguousarray(columns[contract.ATTENTION_MASK], dtype=np.int64)),
        contract.LABEL: torch.from_numpy(np.ascontiguousarray(columns[contract.LABEL], dtype=np.int64)),
    }
