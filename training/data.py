"""Streaming a dataset split from Parquet into torch batches, in an order this module owns.

The plan comes from the manifest alone: the split's files (only those: anything else in the
directory is not the dataset), their row groups in order, their row counts. Global row group i is
the i-th row group of the files taken in manifest order; rank r of W owns the row groups i with
i mod W == r and reads them in an order that is a pure function of (seed, epoch) (no shuffle: file
order). A seeded shuffle buffer of `num_shuffle_row_groups` row groups mixes rows across row groups,
and batches are consecutive `batch_size`-row slices of that stream. The batch sequence depends only
on (manifest, seed, epoch, rank, world size, batch size), so a position (epoch, batch) is enough to
resume exactly (earlier row groups are not even read), and every rank computes, from the manifest,
how many batches every other rank has: all take the same number, never a DDP hang.

What is read is asked of a row-group source (training/backends: Petastorm, the default, or
pyarrow.fs), `num_workers` row groups at a time ahead of the batches, and checked against the
manifest: a file whose size differs from its manifest entry, or a row group with other row counts,
is refused with an error naming the file.
"""
from __future__ import annotations

import contextlib
import math
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from pipeline import contract, storage
from pipeline.errors import ShardlineError
from training.backends import SourceFile, open_source

# Columns each task trains on; the id column is read only when sample ids are recorded.
TASK_COLUMNS = {
    "classification": (contract.INPUT_IDS, contract.ATTENTION_MASK, contract.LABEL),
    "causal_lm": (contract.INPUT_IDS, contract.ATTENTION_MASK, contract.POSITION_IDS, contract.SEGMENT_IDS),
}
Batch = dict  # column name -> torch.Tensor (the id column, when read, is a list of str)


class DatasetChangedError(ShardlineError):
    """A data file no longer matches the manifest that published it."""


@dataclass(frozen=True)
class ReaderSpec:
    split_dir: str
    files: tuple[SourceFile, ...]  # the manifest's files in read order: the plan needs no I/O
    batch_size: int
    columns: tuple[str, ...]
    shuffle: bool
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    num_workers: int = 1  # row groups read in parallel, ahead of the batches
    num_shuffle_row_groups: int = 4  # row groups mixed together by the in-memory shuffle buffer
    pin_memory: bool = False  # page-locked host batches, so host-to-GPU copies can be asynchronous
    backend: str = "petastorm"  # the row-group source (training/backends)
    verify_checksums: bool = True  # sha256 of each file against the manifest, once per process, before its first read

    @property
    def row_group_rows(self) -> tuple[int, ...]:
        return tuple(rows for file in self.files for rows in file.row_group_rows)

    def locate(self, index: int) -> tuple[SourceFile, int]:
        """Global row group index -> (its file, its index inside the file)."""
        for file in self.files:
            if index < len(file.row_group_rows):
                return file, index
            index -= len(file.row_group_rows)
        raise IndexError(f"{self.split_dir} has no row group {index}")


def split_spec(dataset_dir: str, manifest: contract.Manifest, split: str, **options) -> ReaderSpec:
    dataset_dir = str(dataset_dir)
    stats = manifest.splits[split]
    if stats.num_row_groups and not stats.files:
        raise ValueError(
            f"{dataset_dir}: the manifest (schema {manifest.schema_version}) lists no files for split {split}; "
            f"the reader needs schema {contract.SCHEMA_VERSION}: rebuild it with `shardline preprocess --force`"
        )
    files = tuple(
        SourceFile(uri, entry.bytes, tuple(entry.row_group_rows), entry.sha256)
        for uri, entry in zip(manifest.split_files(dataset_dir, split), stats.files)
    )
    listed = [rows for file in files for rows in file.row_group_rows]
    if stats.row_group_rows and listed != list(stats.row_group_rows):
        raise ValueError(
            f"{dataset_dir}: the manifest's {split} files hold row groups of {listed} rows but its row_group_rows "
            f"says {stats.row_group_rows}; the manifest is inconsistent: rebuild the dataset"
        )
    return ReaderSpec(split_dir=contract.split_dir(dataset_dir, split), files=files, **options)


@dataclass(frozen=True)
class RowGroupPlan:
    """One rank's epoch: which row groups it reads, in what order, and how many batches."""

    order: tuple[int, ...]  # global row-group indexes, in read order
    windows: tuple[tuple[int, ...], ...]  # order cut into shuffle windows
    rows: int  # rows this rank holds
    num_batches: int  # batches per epoch, the same on every rank


def plan_epoch(spec: ReaderSpec, epoch: int) -> RowGroupPlan:
    sizes = spec.row_group_rows
    if len(sizes) < spec.world_size:
        raise ValueError(
            f"{spec.split_dir} has {len(sizes)} row groups for {spec.world_size} processes; every rank needs "
            "at least one: rebuild it with preprocess.shard.divisible_by a multiple of the process count, or train with fewer processes"
        )
    indexes = list(range(len(sizes)))
    if spec.shuffle:
        random.Random(spec.seed * 100_003 + epoch).shuffle(indexes)
    order = tuple(i for i in indexes if i % spec.world_size == spec.rank)
    size = spec.num_shuffle_row_groups
    windows = tuple(order[start:start + size] for start in range(0, len(order), size))
    rows_per_rank = [sum(sizes[r::spec.world_size]) for r in range(spec.world_size)]
    num_batches = min(math.ceil(rows / spec.batch_size) for rows in rows_per_rank)
    return RowGroupPlan(order, windows, rows_per_rank[spec.rank], num_batches)


def iter_batches(spec: ReaderSpec, epoch: int = 0, start_batch: int = 0) -> Iterator[Batch]:
    """Yield the epoch's batches from batch index start_batch on.

    Batch k is rows [k * batch_size, (k + 1) * batch_size) of the rank's stream (its windows in plan
    order, each in its seeded row order), so a window that holds none of the wanted rows is not read;
    its row order is still drawn, which keeps the later windows' orders the same."""
    plan = plan_epoch(spec, epoch)
    sizes = spec.row_group_rows
    first, end = start_batch * spec.batch_size, min(plan.num_batches * spec.batch_size, plan.rows)
    rng = np.random.default_rng([spec.seed, epoch, spec.rank])
    wanted, offset = [], 0  # (window, row order, first row, end row), rows counted within the window
    for window in plan.windows:
        rows = sum(sizes[i] for i in window)
        order = rng.permutation(rows) if spec.shuffle else None
        if max(first, offset) < min(end, offset + rows):
            wanted.append((window, order, max(first, offset) - offset, min(end, offset + rows) - offset))
        offset += rows
    reads = RowGroupReads(spec, [i for window, *_ in wanted for i in window if sizes[i]])
    try:
        parts, pending = [], 0
        for window, order, position, stop in wanted:
            merged = _concat([reads.next() for i in window if sizes[i]])
            while position < stop:
                take = min(spec.batch_size - pending, stop - position)
                parts.append(_take(merged, order, position, position + take))
                pending, position = pending + take, position + take
                if pending == spec.batch_size:
                    yield _to_batch(_concat(parts), spec.pin_memory)
                    parts, pending = [], 0
        if parts:  # the epoch's last rows, fewer than a batch
            yield _to_batch(_concat(parts), spec.pin_memory)
    finally:
        reads.close()


class RowGroupReads:
    """The given row groups (global indexes), read through the spec's backend by `num_workers`
    threads, up to 2 x num_workers ahead, handed out in order by next(), each checked against the
    manifest."""

    def __init__(self, spec: ReaderSpec, indexes: Sequence[int]):
        self._spec = spec
        self._todo = iter(indexes)
        self._pending: deque[Future] = deque()
        self._checked: set[str] = set()
        self._source = open_source(spec.backend, spec.files) if indexes else None
        self._pool = ThreadPoolExecutor(max_workers=spec.num_workers, thread_name_prefix="shardline-reader")
        for _ in range(2 * spec.num_workers):
            self._submit_next()

    def _submit_next(self) -> None:
        index = next(self._todo, None)
        if index is not None:
            self._pending.append(self._pool.submit(self._read, index))

    def next(self) -> dict[str, np.ndarray]:
        future = self._pending.popleft()
        self._submit_next()
        return future.result()

    def _read(self, index: int) -> dict[str, np.ndarray]:
        file, row_group = self._spec.locate(index)
        if file.uri not in self._checked:
            check_file(file, self._spec.verify_checksums)
            self._checked.add(file.uri)
        columns = self._source.read(file, row_group, self._spec.columns)
        rows, expected = _rows(columns), file.row_group_rows[row_group]
        if rows != expected:
            raise DatasetChangedError(
                f"{file.uri}: row group {row_group} has {rows} rows but the manifest says {expected}; "
                "the dataset changed after its manifest was written, rebuild it"
            )
        return columns

    def close(self) -> None:
        for future in self._pending:
            future.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._source is not None:
            self._source.close()


# Files whose sha256 this process already verified: each is hashed once per run, not once per epoch.
_VERIFIED: set[tuple[str, str]] = set()
_VERIFIED_LOCK = threading.Lock()


def check_file(file: SourceFile, verify_checksum: bool = True) -> None:
    """Refuse a file that is missing, whose size is not the manifest's, or (with verify_checksum,
    once per process) whose sha256 is not: a truncated or bit-flipped shard stops the reader with
    its name before any of its rows reach training."""
    found = storage.info(file.uri)
    if found is None:
        raise DatasetChangedError(f"{file.uri} is listed in the manifest but is missing; rebuild the dataset")
    if found.size != file.bytes:
        raise DatasetChangedError(
            f"{file.uri} is {found.size} bytes but the manifest says {file.bytes}: the file changed after the "
            "dataset was published; rebuild it (`shardline preprocess --force`)"
        )
    key = (file.uri, file.sha256)
    if not verify_checksum or not file.sha256 or key in _VERIFIED:
        return
    digest = storage.sha256(file.uri)
    if digest != file.sha256:
        raise DatasetChangedError(
            f"{file.uri} has sha256 {digest[:16]}… but the manifest says {file.sha256[:16]}…: the file is corrupt or "
            "changed after the dataset was published; rebuild it (`shardline preprocess --force`)"
        )
    with _VERIFIED_LOCK:
        _VERIFIED.add(key)


def _rows(columns: dict[str, np.ndarray]) -> int:
    return len(next(iter(columns.values())))


def _take(columns: dict[str, np.ndarray], order: np.ndarray | None, start: int, stop: int) -> dict[str, np.ndarray]:
    if order is None:
        return {name: values[start:stop] for name, values in columns.items()}
    rows = order[start:stop]
    return {name: np.take(values, rows, axis=0) for name, values in columns.items()}  # faster than values[rows]


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
            with contextlib.closing(iter_batches(spec, epoch, start_batch)) as batches:  # closing stops the reads
                for batch in batches:
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
