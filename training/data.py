"""Streaming a dataset split from Parquet into torch batches, in an order this module owns.

Petastorm 0.12.1 returns row groups in a different order on every run once it has more than one
worker, so each rank opens `num_streams` single-worker Petastorm readers (one shard each of
`world_size * num_streams`) whose row-group order is a pure function of the seed and the epoch, and
merges them round-robin. A seeded shuffle buffer of a few row groups mixes rows across row groups.
The resulting batch sequence depends only on (manifest, seed, epoch, rank, world size, batch size),
so a position (epoch, batch) is enough to resume exactly, and every rank can compute, from the
manifest alone, how many batches every other rank has: all take the same number, never a DDP hang.
"""
from __future__ import annotations

import contextlib
import math
import queue
import random
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from pipeline import contract

# Columns each task trains on; the id column is read only when sample ids are recorded.
TASK_COLUMNS = {
    "classification": (contract.INPUT_IDS, contract.ATTENTION_MASK, contract.LABEL),
    "causal_lm": (contract.INPUT_IDS, contract.ATTENTION_MASK, contract.POSITION_IDS, contract.SEGMENT_IDS),
}
Batch = dict  # column name -> torch.Tensor (the id column, when read, is a list of str)


@dataclass(frozen=True)
class ReaderSpec:
    split_dir: Path
    row_group_rows: tuple[int, ...]  # from the manifest, in file order: the plan needs no I/O
    batch_size: int
    columns: tuple[str, ...]
    shuffle: bool
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    num_workers: int = 1  # single-worker Petastorm streams read in parallel
    num_shuffle_row_groups: int = 4  # row groups mixed together by the in-memory shuffle buffer
    pin_memory: bool = False  # page-locked host batches, so host-to-GPU copies can be asynchronous


def split_spec(dataset_dir: Path, manifest: contract.Manifest, split: str, **options) -> ReaderSpec:
    return ReaderSpec(
        split_dir=contract.split_dir(dataset_dir, split),
        row_group_rows=tuple(manifest.splits[split].row_group_rows),
        **options,
    )


@dataclass(frozen=True)
class RowGroupPlan:
    """One rank's epoch: which row groups each stream reads, in what order, and how many batches."""

    streams: tuple[tuple[int, ...], ...]  # row-group indexes per stream, in read order
    order: tuple[int, ...]  # the merged read order (round-robin over the streams)
    rows: int  # rows this rank holds
    num_batches: int  # batches per epoch, the same on every rank


def num_streams(spec: ReaderSpec) -> int:
    # Petastorm refuses a shard with no row group; fewer streams is the only way to honour that.
    return max(1, min(spec.num_workers, len(spec.row_group_rows) // spec.world_size))


def stream_seed(spec: ReaderSpec, epoch: int) -> int | None:
    return spec.seed * 100_003 + epoch if spec.shuffle else None


def plan_epoch(spec: ReaderSpec, epoch: int) -> RowGroupPlan:
    sizes = spec.row_group_rows
    if len(sizes) < spec.world_size:
        raise ValueError(
            f"{spec.split_dir} has {len(sizes)} row groups for {spec.world_size} processes; every rank needs "
            "at least one: rebuild it with preprocess.shard.divisible_by a multiple of the process count, or train with fewer processes"
        )
    per_stream = num_streams(spec)
    shard_count = spec.world_size * per_stream
    # Exactly Petastorm 0.12's sharding: shuffle all indexes with random.Random(seed), keep i % shards == shard.
    indexes = list(range(len(sizes)))
    seed = stream_seed(spec, epoch)
    if seed is not None:
        random.Random(seed).shuffle(indexes)
    streams = tuple(
        tuple(i for i in indexes if i % shard_count == s * spec.world_size + spec.rank) for s in range(per_stream)
    )
    order = tuple(i for round_ in _zip_longest(streams) for i in round_)
    rows_per_rank = [sum(sizes[r::spec.world_size]) for r in range(spec.world_size)]
    num_batches = min(math.ceil(rows / spec.batch_size) for rows in rows_per_rank)
    return RowGroupPlan(streams, order, rows_per_rank[spec.rank], num_batches)


def _zip_longest(streams: tuple[tuple[int, ...], ...]) -> Iterator[tuple[int, ...]]:
    for depth in range(max(len(s) for s in streams)):
        yield tuple(s[depth] for s in streams if depth < len(s))


def _column_to_numpy(column: pa.ChunkedArray) -> np.ndarray:
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if pa.types.is_list(array.type):
        lengths = np.diff(array.offsets.to_numpy())
        if len(lengths) and (lengths != lengths[0]).any():
            raise ValueError(f"column has lists of lengths {sorted(set(lengths.tolist()))}; the contract says one length")
        return array.flatten().to_numpy(zero_copy_only=False).reshape(len(array), -1)
    return array.to_numpy(zero_copy_only=False)


class _ArrowColumnsResults:
    """Petastorm's results reader, minus its per-row `np.vstack(list.tolist())`: list columns come
    out of Arrow as one reshape (the stock one is the reader's bottleneck on token columns)."""

    batched_output = True

    def read_next(self, workers_pool, schema, ngram):
        from petastorm.workers_pool import EmptyResultError

        try:
            table = workers_pool.get_results()
        except EmptyResultError:
            raise StopIteration from None
        return {name: _column_to_numpy(table.column(name)) for name in table.column_names}


def _open_stream(spec: ReaderSpec, stream: int, epoch: int):
    from petastorm import make_batch_reader

    shards = spec.world_size * num_streams(spec)
    reader = make_batch_reader(
        spec.split_dir.resolve().as_uri(),
        schema_fields=list(spec.columns),
        num_epochs=1,
        shuffle_row_groups=False,  # the seeded shard shuffle already fixed the order; workers must not change it
        seed=stream_seed(spec, epoch),
        cur_shard=stream * spec.world_size + spec.rank,
        shard_count=shards,
        workers_count=1,  # one worker per stream: Petastorm 0.12 keeps order only then
        reader_pool_type="thread",
    )
    reader._results_queue_reader = _ArrowColumnsResults()  # petastorm<0.13 (pinned): see the class
    return reader


def iter_row_groups(spec: ReaderSpec, plan: RowGroupPlan, epoch: int) -> Iterator[dict[str, np.ndarray]]:
    """The rank's row groups in plan.order, read through the parallel single-worker streams."""
    with contextlib.ExitStack() as stack, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # petastorm 0.12 calls pyarrow APIs that warn on every call
        readers = [stack.enter_context(_open_stream(spec, s, epoch)) for s in range(len(plan.streams))]
        stream_of = {i: s for s, indexes in enumerate(plan.streams) for i in indexes}
        for index in plan.order:
            group = next(readers[stream_of[index]])
            rows = _rows(group)
            if rows != spec.row_group_rows[index]:
                raise RuntimeError(
                    f"{spec.split_dir}: row group {index} has {rows} rows but the manifest says "
                    f"{spec.row_group_rows[index]}; the dataset changed after its manifest was written, rebuild it"
                )
            yield group


def iter_windows(spec: ReaderSpec, plan: RowGroupPlan, epoch: int) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray | None]]:
    """The shuffle buffer: num_shuffle_row_groups row groups at a time, with a seeded row order
    (None when not shuffling). The order is drawn for every window, so skipping some keeps the rest."""
    rng = np.random.default_rng([spec.seed, epoch, spec.rank])
    window: list[dict[str, np.ndarray]] = []
    for position, group in enumerate(iter_row_groups(spec, plan, epoch), start=1):
        window.append(group)
        if len(window) == spec.num_shuffle_row_groups or position == len(plan.order):
            merged = _concat(window)
            window = []
            yield merged, rng.permutation(_rows(merged)) if spec.shuffle else None


def iter_batches(spec: ReaderSpec, epoch: int = 0, start_batch: int = 0) -> Iterator[Batch]:
    """Yield the epoch's batches from batch index start_batch on (earlier ones are read, not built).

    Each batch is gathered straight from its window in shuffled order (one copy per batch); rows left
    over at a window's end open the next batch."""
    plan = plan_epoch(spec, epoch)
    emitted, carry = 0, None
    windows = iter_windows(spec, plan, epoch)
    for merged, order in windows:
        rows, position = _rows(merged), 0
        while emitted < plan.num_batches:
            need = spec.batch_size - (_rows(carry) if carry else 0)
            if rows - position < need:
                break
            if emitted >= start_batch:
                yield _to_batch(_join(carry, _take(merged, order, position, position + need)), spec.pin_memory)
            emitted, carry, position = emitted + 1, None, position + need
        if emitted >= plan.num_batches:
            windows.close()  # the rest of this rank's rows are beyond the batches every rank shares
            return
        if position < rows:  # fewer rows left than a batch: they start the next one
            carry = _join(carry, _take(merged, order, position, rows))
    if carry and emitted < plan.num_batches and emitted >= start_batch:
        yield _to_batch(carry, spec.pin_memory)


def _rows(columns: dict[str, np.ndarray]) -> int:
    return len(next(iter(columns.values())))


def _take(columns: dict[str, np.ndarray], order: np.ndarray | None, start: int, stop: int) -> dict[str, np.ndarray]:
    if order is None:
        return {name: values[start:stop] for name, values in columns.items()}
    rows = order[start:stop]
    return {name: np.take(values, rows, axis=0) for name, values in columns.items()}  # faster than values[rows]


def _join(first: dict[str, np.ndarray] | None, second: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return second if not first else _concat([first, second])


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(parts) == 1:
        return parts[0]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def _to_batch(columns: dict[str, np.ndarray], pin_memory: bool) -> Batch:
    """Token columns stay int32/int8 as stored (embeddings take int32; half the bytes to copy);
    labels become int64, which cross_entropy requires."""
    batch: Batch = {}
    for name, values in columns.items():
        if name == contract.ID_COLUMN:
            batch[name] = [str(v) for v in values]
            continue
        values = values.astype(np.int64) if name == contract.LABEL else np.require(values, requirements=["C", "W"])
        tensor = torch.from_numpy(values)
        batch[name] = tensor.pin_memory() if pin_memory else tensor
    return batch


class BackgroundBatches:
    """Runs iter_batches on a thread, a few batches ahead, and counts how long the consumer waited."""

    def __init__(self, spec: ReaderSpec, epoch: int, start_batch: int = 0, num_prefetch: int = 4):
        self.wait_seconds = 0.0
        self._queue: queue.Queue = queue.Queue(maxsize=num_prefetch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(spec, epoch, start_batch), daemon=True)
        self._thread.start()

    _DONE = object()

    def _produce(self, spec: ReaderSpec, epoch: int, start_batch: int) -> None:
        try:
            for batch in iter_batches(spec, epoch, start_batch):
                if not self._put(batch):
                    return
            self._put(self._DONE)
        except BaseException as error:  # handed to the consumer, which re-raises it
            self._put(error)

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> BackgroundBatches:
        return self

    def __next__(self) -> Batch:
        started = time.perf_counter()
        item = self._queue.get()
        self.wait_seconds += time.perf_counter() - started
        if item is self._DONE:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
