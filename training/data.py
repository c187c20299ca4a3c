"""Streaming a dataset split from Parquet into torch batches, in an order this module owns.

The plan is in sample space and comes from the manifest alone: the split's files (only those:
anything else in the directory is not the dataset), their row groups in order, their row counts.
An epoch's global order is a pure function of (manifest, seed, epoch), the same for any process
count: the row groups are shuffled by (seed, epoch), cut into windows of `num_shuffle_row_groups`
row groups, and the rows of each window are permuted by (seed, epoch, window); the global stream is
the windows one after another (unshuffled: every row in file order).

A global batch is `batch_size x world_size x grad_accum_steps` consecutive samples of that stream.
Micro-batch k of rank r is samples [(k W + r) B, (k W + r + 1) B) of the stream, so optimizer step s
trains, over all ranks, on exactly samples [s G, (s + 1) G), whatever B, W and A make up G: every
rank gets the same number of full batches on any dataset (no multiple of row groups per rank; fewer
row groups than ranks is fine), the epoch leaves out fewer than G samples (its last ones, other ones
each epoch), and a position "samples consumed in the epoch" resumes on another process count.

The tradeoff: ranks interleave at row granularity, so a rank reads every window its rows touch, up
to min(W, window rows / B) times the data it trains on (each rank reads about the whole split). For
token rows (a few hundred bytes each) that reading is small next to the compute on them; the
alternative, whole row groups per rank, is what made ranks uneven and resume inelastic.

Seeking is instant: the row-group order and each window's permutation are drawn from their own
seeds, so starting at (epoch, sample) reads only the windows holding the remaining samples and
draws nothing for the earlier ones. `StatefulLoader` is what the training loop sees: batches,
`num_batches` per epoch and a position (`state_dict()` / `load_state_dict()`); it reads on one
background thread that runs on into the next epoch, so an epoch starts warm. `iter_batches(spec)`
is one epoch of one rank in the foreground (evaluation: unshuffled, every row, the last batch short).

What is read is asked of a row-group source (training/backends: Petastorm, the default where installed, or
pyarrow.fs), `num_workers` row groups at a time ahead of the batches, and checked against the
manifest: a file whose size differs from its manifest entry, or a row group with other row counts,
is refused with an error naming the file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

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
    batch_size: int  # rows per micro-batch, per rank
    columns: tuple[str, ...]
    shuffle: bool
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    grad_accum_steps: int = 1  # micro-batches per optimizer step: part of the global batch
    drop_last: bool = False  # leave out the epoch's last partial global batch (training); False: every row, one rank
    num_workers: int = 1  # row groups read in parallel, ahead of the batches
    num_shuffle_row_groups: int = 4  # row groups whose rows are permuted together (a shuffle window)
    pin_memory: bool = False  # page-locked host batches, so host-to-GPU copies can be asynchronous
    backend: str = "auto"  # the row-group source (training/backends.resolve_backend)
    verify_checksums: bool = True  # sha256 of each file against the manifest, once per process, before its first read

    @property
    def row_group_rows(self) -> tuple[int, ...]:
        return tuple(rows for file in self.files for rows in file.row_group_rows)

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step over all ranks."""
        return self.batch_size * self.world_size * self.grad_accum_steps

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
class EpochPlan:
    """An epoch in sample space: the global order's windows, and what each rank takes of it."""

    windows: tuple[tuple[int, ...], ...]  # global row-group indexes, in read order, cut into shuffle windows
    window_starts: tuple[int, ...]  # each window's first sample in the global stream, then the stream's length
    rows: int  # samples in the split
    used_rows: int  # samples the epoch trains on: whole global batches (or every row, without drop_last)
    num_batches: int  # micro-batches per rank per epoch, the same on every rank

    @property
    def left_out(self) -> int:
        return self.rows - self.used_rows


def plan_epoch(spec: ReaderSpec, epoch: int) -> EpochPlan:
    """The epoch's plan from the manifest's row counts alone (no I/O, no per-row work)."""
    sizes = spec.row_group_rows
    if not spec.drop_last and spec.world_size > 1:
        raise ValueError("a reader that keeps the last partial batch (drop_last False) reads on one rank; "
                         f"this one is rank {spec.rank} of {spec.world_size}")
    indexes = list(range(len(sizes)))
    if spec.shuffle:
        random.Random(spec.seed * 100_003 + epoch).shuffle(indexes)
    size = spec.num_shuffle_row_groups
    windows = tuple(tuple(indexes[start:start + size]) for start in range(0, len(indexes), size))
    starts = tuple(itertools.accumulate((sum(sizes[i] for i in window) for window in windows), initial=0))
    rows = starts[-1]
    if spec.drop_last:
        used = rows // spec.global_batch * spec.global_batch
        num_batches = used // (spec.batch_size * spec.world_size)
    else:
        used, num_batches = rows, -(-rows // spec.batch_size)
    return EpochPlan(windows, starts, rows, used, num_batches)


def window_order(spec: ReaderSpec, epoch: int, window: int, rows: int) -> np.ndarray | None:
    """The permutation of one window's rows: its own seed, so no other window's is drawn to find it."""
    if not spec.shuffle:
        return None
    return np.random.default_rng([spec.seed, epoch, window]).permutation(rows)


def _first_position(spec: ReaderSpec, start: int) -> int:
    """This rank's first sample at or after global position start."""
    if spec.world_size == 1:
        return start
    block = start // spec.batch_size
    if block % spec.world_size == spec.rank:
        return start
    return (block + (spec.rank - block) % spec.world_size) * spec.batch_size


def _rank_positions(spec: ReaderSpec, start: int, stop: int) -> np.ndarray:
    """This rank's global sample positions in [start, stop), in order."""
    positions = np.arange(start, stop)
    if spec.world_size == 1:
        return positions
    return positions[(positions // spec.batch_size) % spec.world_size == spec.rank]


@dataclass(frozen=True)
class _WindowRead:
    epoch: int
    window: int  # index in the epoch's plan
    row_groups: tuple[int, ...]
    start: int  # the window's first sample in the global stream
    rows: int  # rows in the window
    lo: int  # the samples of it this rank wants: [lo, hi) of the global stream
    hi: int


def _window_reads(spec: ReaderSpec, epoch: int, start_batch: int) -> Iterator[_WindowRead]:
    """The windows of an epoch holding this rank's micro-batches from start_batch on; the others
    are skipped without reading them or drawing their permutations."""
    plan = plan_epoch(spec, epoch)
    first = (start_batch * spec.world_size + spec.rank) * spec.batch_size
    for number, window in enumerate(plan.windows):
        start, end = plan.window_starts[number], plan.window_starts[number + 1]
        lo, hi = max(start, first), min(end, plan.used_rows)
        if lo < hi and _first_position(spec, lo) < hi:
            yield _WindowRead(epoch, number, window, start, end - start, lo, hi)


def _stream(spec: ReaderSpec, epoch: int, start_batch: int, num_epochs: int | None) -> Iterator[tuple[int, Batch]]:
    """(epoch, batch) for this rank from micro-batch start_batch of epoch on, for num_epochs epochs
    (None: without end). Three stages overlap, across epoch ends too: row groups are read by the
    reads' pool; an assembler thread turns each window into this rank's rows in order (one gather
    per column, while the previous window is being handed out); batches are slices of that."""
    def walk() -> Iterator[tuple[int, _WindowRead]]:
        for number in itertools.count(epoch) if num_epochs is None else range(epoch, epoch + num_epochs):
            for window in _window_reads(spec, number, start_batch if number == epoch else 0):
                yield number, window

    sizes = spec.row_group_rows
    reads = RowGroupReads(spec, (i for _, window in walk() for i in window.row_groups if sizes[i]))
    assembler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shardline-assembler")

    def assemble(window: _WindowRead) -> dict[str, np.ndarray]:  # on the assembler thread, windows in order
        merged = _concat([reads.next() for i in window.row_groups if sizes[i]])
        rows = _rank_positions(spec, window.lo, window.hi) - window.start
        order = window_order(spec, window.epoch, window.window, window.rows)
        if order is None and spec.world_size == 1:  # one contiguous run of rows: views, no copy
            return {name: values[rows[0]:rows[-1] + 1] for name, values in merged.items()}
        rows = rows if order is None else order[rows]
        return {name: np.take(values, rows, axis=0) for name, values in merged.items()}  # faster than values[rows]

    windows = walk()
    assembling: deque[tuple[int, Future]] = deque()

    def assemble_next() -> None:
        item = next(windows, None)
        if item is not None:
            assembling.append((item[0], assembler.submit(assemble, item[1])))

    try:
        for _ in range(2):  # the window being handed out and the next one
            assemble_next()
        parts, pending, current = [], 0, epoch
        while assembling:
            number, future = assembling.popleft()
            assemble_next()
            columns = future.result()
            if number != current:
                if parts:  # without drop_last: the epoch's last rows, fewer than a batch
                    yield current, _to_batch(_concat(parts), spec.pin_memory)
                parts, pending, current = [], 0, number
            rows, offset = _rows(columns), 0
            while offset < rows:
                take = min(spec.batch_size - pending, rows - offset)
                parts.append({name: values[offset:offset + take] for name, values in columns.items()})
                pending, offset = pending + take, offset + take
                if pending == spec.batch_size:
                    yield number, _to_batch(_concat(parts), spec.pin_memory)
                    parts, pending = [], 0
        if parts:
            yield current, _to_batch(_concat(parts), spec.pin_memory)
    finally:
        for _, future in assembling:
            future.cancel()
        assembler.shutdown(wait=True, cancel_futures=True)  # before the reads close: it may be waiting on one
        reads.close()


def iter_batches(spec: ReaderSpec, epoch: int = 0, start_batch: int = 0) -> Iterator[Batch]:
    """Yield this rank's batches of one epoch from micro-batch start_batch on. Unshuffled on one rank
    without drop_last (what evaluation reads): every row of the split in file order, the last
    batch short. Windows before start_batch's are neither read nor drawn."""
    with contextlib.closing(_stream(spec, epoch, start_batch, 1)) as batches:
        for _, batch in batches:
            yield batch


class RowGroupReads:
    """The given row groups (global indexes, an iterable read lazily), read through the spec's backend
    by `num_workers` threads, a shuffle window or 2 x num_workers ahead (whichever is more), handed
    out in order by next(), each checked against the manifest."""

    def __init__(self, spec: ReaderSpec, indexes: Iterable[int]):
        self._spec = spec
        self._todo = iter(indexes)
        self._pending: deque[Future] = deque()
        self._checked: set[str] = set()
        self._source = open_source(spec.backend, spec.files)
        self._pool = ThreadPoolExecutor(max_workers=spec.num_workers, thread_name_prefix="shardline-reader")
        for _ in range(max(2 * spec.num_workers, spec.num_shuffle_row_groups)):
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
    """Runs a rank's stream (a generator of (epoch, batch), made on the thread) a few batches ahead,
    and counts how long the consumer waited."""

    def __init__(self, make_stream: Callable[[], Iterator[tuple[int, Batch]]], num_prefetch: int = 4):
        self.wait_seconds = 0.0
        self._queue: queue.Queue = queue.Queue(maxsize=num_prefetch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, args=(make_stream,), daemon=True)
        self._thread.start()

    _DONE = object()

    def _produce(self, make_stream: Callable[[], Iterator[tuple[int, Batch]]]) -> None:
        try:
            with contextlib.closing(make_stream()) as batches:  # closing stops the reads
                for item in batches:
                    if not self._put(item):
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

    def next_item(self) -> tuple[int, Batch]:
        started = time.perf_counter()
        item = self._queue.get()
        self.wait_seconds += time.perf_counter() - started
        if item is self._DONE:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def __next__(self) -> Batch:
        return self.next_item()[1]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class PositionedLoader:
    """What every training loader shares: one rank's micro-batches, epoch after epoch, and a position
    (the next micro-batch is `batch` of `epoch`) that resumes on any process count giving the same
    global batch. Iterating yields the rest of the current epoch; the reads behind it run on into the
    next epoch, so the next iteration starts warm. With num_epochs, nothing is read past the last
    epoch (the run's end); without, the reads go on. A subclass says what a stream from a position
    is (`_stream_from`) and sets num_batches.

    state_dict(): {"epoch", "samples" (consumed in the epoch, over all ranks), "global_batch",
    "world_size"}; a position is always a whole number of global micro-batch rounds."""

    num_batches: int  # micro-batches per rank per epoch, the same every epoch and on every rank

    def __init__(self, batch_size: int, world_size: int, grad_accum_steps: int, num_prefetch: int,
                 num_epochs: int | None):
        self.batch_size, self.world_size, self.grad_accum_steps = batch_size, world_size, grad_accum_steps
        self.num_prefetch, self.num_epochs = num_prefetch, num_epochs
        self.epoch = self.batch = 0
        self._stream: BackgroundBatches | None = None
        self._waited = 0.0

    def _stream_from(self, epoch: int, batch: int, num_epochs: int | None) -> Callable[[], Iterator[tuple[int, Batch]]]:
        raise NotImplementedError

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size * self.grad_accum_steps

    @property
    def samples(self) -> int:
        """Samples of the epoch consumed so far, over all ranks."""
        return self.batch * self.batch_size * self.world_size

    @property
    def wait_seconds(self) -> float:
        """How long the consumer waited for batches, over the loader's life."""
        return self._waited + (self._stream.wait_seconds if self._stream else 0.0)

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "samples": self.samples, "global_batch": self.global_batch,
                "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["global_batch"] != self.global_batch:
            raise ValueError(
                f"the loader position is for a global batch of {state['global_batch']} samples, and this run's is "
                f"{self.global_batch} (batch_size {self.batch_size} x {self.world_size} processes x "
                f"grad_accum_steps {self.grad_accum_steps}); keep the product the same to resume"
            )
        round_size = self.batch_size * self.world_size
        if state["samples"] % round_size:
            raise ValueError(f"position {state['samples']} is not a whole number of rounds of {round_size} samples")
        self._close_stream()
        self.epoch, self.batch = state["epoch"], state["samples"] // round_size
        if self.batch >= self.num_batches:
            self.epoch, self.batch = self.epoch + 1, 0

    def __len__(self) -> int:
        return self.num_batches

    def start(self) -> None:
        """Begin reading from the position now (iterating does it too): a caller with other start-up
        work to do hides the reader's cold start (imports, checksums, the first window) behind it."""
        if self._stream is None and (self.num_epochs is None or self.epoch < self.num_epochs):
            remaining = None if self.num_epochs is None else self.num_epochs - self.epoch
            self._stream = BackgroundBatches(self._stream_from(self.epoch, self.batch, remaining), self.num_prefetch)

    def __iter__(self) -> Iterator[Batch]:
        """The current epoch's remaining batches; the position counts each one as it is handed out."""
        if self.num_epochs is not None and self.epoch >= self.num_epochs:
            return
        self.start()
        while True:
            epoch, batch = self._stream.next_item()
            assert epoch == self.epoch, (epoch, self.epoch)  # the stream and the position move together
            self.batch += 1
            ended = self.batch == self.num_batches
            if ended:
                self.epoch, self.batch = self.epoch + 1, 0
            yield batch
            if ended:
                return

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._waited += self._stream.wait_seconds
            self._stream.close()
            self._stream = None

    def close(self) -> None:
        self._close_stream()


class StatefulLoader(PositionedLoader):
    """One split's training batches for one rank (see PositionedLoader), in the split's epoch order."""

    def __init__(self, spec: ReaderSpec, num_prefetch: int = 4, num_epochs: int | None = None):
        if not spec.drop_last:
            spec = dataclasses.replace(spec, drop_last=True)  # equal ranks need whole global batches
        super().__init__(spec.batch_size, spec.world_size, spec.grad_accum_steps, num_prefetch, num_epochs)
        self.spec = spec
        plan = plan_epoch(spec, 0)  # row counts, hence the batch count, are the same every epoch
        if plan.num_batches == 0:
            raise ValueError(
                f"{spec.split_dir} has {plan.rows} samples, fewer than one global batch of {spec.global_batch} "
                f"(train.batch_size {spec.batch_size} x {spec.world_size} processes x train.grad_accum_steps "
                f"{spec.grad_accum_steps}); lower one of them"
            )
        self.num_batches, self.rows, self.left_out = plan.num_batches, plan.rows, plan.left_out

    def _stream_from(self, epoch: int, batch: int, num_epochs: int | None) -> Callable[[], Iterator[tuple[int, Batch]]]:
        spec = self.spec
        return lambda: _stream(spec, epoch, batch, num_epochs)
