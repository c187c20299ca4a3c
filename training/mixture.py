"""Training on a weighted mixture of datasets: one deterministic, elastically resumable stream.

The order has two parts, both pure functions:
- which source each position of the global stream takes, from the weights alone. The weights
  become integer counts per period (exact for weights such as 0.7/0.2/0.1, else apportioned over
  2**16 positions), and one period is laid out by the quota method (Balinski and Young): each
  position goes to the source with the earliest deadline (count + 1) / k among those still under
  their upper quota. Every prefix of the stream then holds each source's share within one sample
  (|count - weight x positions| < 1), the period repeats exactly, and a position's source and its
  index within that source are two table lookups, so seeking is instant;
- which row of a source that index is: the source's own passes, each a shuffled order of all its
  rows from (seed, source, pass), as training/data plans a single dataset. Source position q is
  row q % rows of pass q // rows: every row once per pass, then the next pass (`repeat`), or the
  run ends before any source would start a second one (`stop`).

A mixture epoch is the sum of the sources' train rows, in whole global batches, and ranks deal each
global batch out as training/data does (micro-batch k of rank r is positions [(k W + r) B, ...)), so
resume at any position on another process count is exact. A weight change (`shardline train --set`
with new weights) starts a new segment at the position where it happens: positions before keep their
sources, each source continues from the samples it had given; the segments are part of the loader's
state, so the history of the mix is in every checkpoint.

Reading costs what one dataset's does: each source's windows are copied, as they are reached, into
that source's ring of one shared array (the arena), and a chunk of batches is then one gather per
column from it into position order, the two copies of a row a single dataset's window makes
(row groups concatenated, then gathered); gathering per source and interleaving after is three.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from pipeline import contract, storage
from pipeline.errors import ShardlineError
from training.data import (Batch, PositionedLoader, ReaderSpec, RowGroupReads, _to_batch, plan_epoch,
                           split_spec, window_order)

SOURCE_COLUMN = "source"  # in each mixture batch: the index of the source (in train.datasets order) of each row
MAX_PERIOD = 1 << 16  # weights with no exact period this short are apportioned over this many positions


class MixtureError(ShardlineError):
    """Sources that cannot be mixed, or a mixture state this config cannot continue."""


# --- the source of each position ------------------------------------------------------------------

@lru_cache(maxsize=64)
def integer_shares(weights: tuple[float, ...]) -> tuple[int, ...]:
    """Samples of each source per period: the exact ratio when the weights' decimal fractions have a
    common denominator up to MAX_PERIOD, else the largest-remainder apportionment of MAX_PERIOD."""
    exact = [Fraction(repr(float(w))) for w in weights]
    total = sum(exact)
    shares = [w / total for w in exact]
    period = math.lcm(*(s.denominator for s in shares))
    if period <= MAX_PERIOD:
        return tuple(int(s * period) for s in shares)
    quotas = [s * MAX_PERIOD for s in shares]
    counts = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in by_remainder[:MAX_PERIOD - sum(counts)]:
        counts[i] += 1
    if min(counts) == 0:
        raise MixtureError(f"a weight of {min(weights)} is below 1 / {MAX_PERIOD} of the total; raise it or drop the source")
    return tuple(counts)


@dataclass(frozen=True)
class MixPattern:
    """One period of the mixture: `order[r]` is the source of position r; `before[s, r]` the samples
    of source s among positions [0, r); `index[r]` the samples of position r's source before it."""

    counts: tuple[int, ...]
    order: np.ndarray
    before: np.ndarray
    index: np.ndarray

    @property
    def period(self) -> int:
        return len(self.order)

    def locate(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, index among that source's positions) of each position counted from the pattern's start."""
        cycle, offset = np.divmod(local, self.period)
        source = np.take(self.order, offset)
        return source, cycle * np.take(np.asarray(self.counts), source) + np.take(self.index, offset)

    def taken(self, local: int) -> np.ndarray:
        """Samples of each source among the first `local` positions."""
        cycle, offset = divmod(local, self.period)
        return cycle * np.asarray(self.counts, dtype=np.int64) + self.before[:, offset]

    def first_reaching(self, source: int, samples: int) -> int:
        """The fewest positions holding `samples` samples of source."""
        if samples <= 0:
            return 0
        cycle, rest = divmod(samples - 1, self.counts[source])
        return cycle * self.period + int(np.searchsorted(self.before[source], rest + 1))


@lru_cache(maxsize=8)
def quota_pattern(counts: tuple[int, ...]) -> MixPattern:
    """The quota method over one period of sum(counts) positions (see the module docstring)."""
    period, sources = sum(counts), len(counts)
    taken = [0] * sources
    order = np.empty(period, dtype=np.int32)
    for position in range(period):
        best = -1
        for s in range(sources):
            # Under the upper quota: one more sample keeps count <= ceil(k (position + 1) / period).
            if taken[s] * period < counts[s] * (position + 1):
                # Earliest deadline (taken + 1) / k, ties to the lower index; compared without division.
                if best < 0 or (taken[s] + 1) * counts[best] < (taken[best] + 1) * counts[s]:
                    best = s
        order[position] = best
        taken[best] += 1
    before = np.zeros((sources, period + 1), dtype=np.int64)
    for s in range(sources):
        before[s, 1:] = np.cumsum(order == s)
    return MixPattern(counts, order, before, before[order, np.arange(period)])


@dataclass(frozen=True)
class MixSegment:
    """Weights in force from global position `start` on; `offsets`: each source's samples before it."""

    start: int
    weights: tuple[float, ...]
    offsets: tuple[int, ...]

    @property
    def pattern(self) -> MixPattern:
        return quota_pattern(integer_shares(self.weights))

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "weights": list(self.weights), "offsets": list(self.offsets)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MixSegment:
        return cls(int(data["start"]), tuple(float(w) for w in data["weights"]), tuple(int(o) for o in data["offsets"]))


def locate(segments: tuple[MixSegment, ...], positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, source position) of each global position (sorted ascending)."""
    sources = np.empty(len(positions), dtype=np.int64)
    indexes = np.empty(len(positions), dtype=np.int64)
    starts = [segment.start for segment in segments]
    cuts = np.searchsorted(positions, starts[1:] + [np.iinfo(np.int64).max])
    lo = 0
    for segment, hi in zip(segments, cuts):
        if hi > lo:
            source, index = segment.pattern.locate(positions[lo:hi] - segment.start)
            sources[lo:hi], indexes[lo:hi] = source, index + np.asarray(segment.offsets)[source]
        lo = hi
    return sources, indexes


def taken_before(segments: tuple[MixSegment, ...], position: int) -> np.ndarray:
    """Samples each source gave before a global position."""
    segment = next(s for s in reversed(segments) if s.start <= position)
    return np.asarray(segment.offsets, dtype=np.int64) + segment.pattern.taken(position - segment.start)


# --- the sources ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    name: str
    dataset_dir: str
    manifest: contract.Manifest
    weight: float


def check_compatible(sources: list[Source]) -> None:
    """Every source must be readable as one dataset: the same tokenizer, row length, task and labels."""
    first = sources[0]
    for other in sources[1:]:
        differences = []
        for what, key in (("tokenizer (sha256)", "tokenizer_sha256"), ("max_length", "max_length"), ("task", "task"),
                          ("label set", "label_map"), ("pad id", "pad_id")):
            mine, theirs = getattr(first.manifest, key), getattr(other.manifest, key)
            if mine != theirs:
                shown = (lambda v: v[:12] + "…") if key == "tokenizer_sha256" else repr
                differences.append(f"{what} {shown(mine)} vs {shown(theirs)}")
        if differences:
            raise MixtureError(
                f"train.datasets {first.name} ({first.dataset_dir}) and {other.name} ({other.dataset_dir}) cannot be "
                f"mixed: {'; '.join(differences)}; build every source with the same tokenizer and preprocess settings"
            )
    for source in sources:
        if source.manifest.splits["train"].rows == 0:
            raise MixtureError(f"train.datasets {source.name} ({source.dataset_dir}) has no training rows")


def source_seed(seed: int, name: str) -> int:
    """Each source's passes are shuffled from their own seed, so adding a source moves no other's order."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:4], "little")


# --- reading --------------------------------------------------------------------------------------

class _Arena:
    """The rows of every source's windows being read, one array per column, so that a chunk is one
    gather from it, as a single dataset's window is: source s owns the rows [base_s, base_s + size_s),
    a ring its windows are copied into (row groups in file order) at their source positions modulo
    size_s. Columns are allocated at the first row group read."""

    def __init__(self, sizes: list[int]):
        self.sizes = sizes
        self.bases = [0, *itertools.accumulate(sizes)][:-1]
        self.columns: dict[str, np.ndarray] = {}

    def column(self, name: str, like: np.ndarray) -> np.ndarray:
        if name not in self.columns:
            self.columns[name] = np.empty((sum(self.sizes), *like.shape[1:]), dtype=like.dtype)
        return self.columns[name]


class _SourceRing:
    """One source's rows at increasing source positions, for one rank: the windows of its passes
    are read in order from the first position asked for (row groups ahead, by RowGroupReads) and
    copied into the source's ring of the arena; slots() says where each asked row lies there."""

    def __init__(self, spec: ReaderSpec, first: int, arena: _Arena, source: int):
        self.spec, self.arena = spec, arena
        self.base, self.size = arena.bases[source], arena.sizes[source]
        self.rows = plan_epoch(spec, 0).rows
        self.sizes = spec.row_group_rows
        first_pass, offset = divmod(first, self.rows)
        plan = plan_epoch(spec, first_pass)
        first_window = int(np.searchsorted(plan.window_starts, offset, side="right")) - 1
        self._windows = self._walk(first_pass, first_window)
        self._reads = RowGroupReads(spec, (i for w in self._walk(first_pass, first_window) for i in w[2] if self.sizes[i]))
        self._live: deque[tuple[int, int, np.ndarray | None]] = deque()  # windows in the ring: (start, stop, order)

    def _walk(self, first_pass: int, first_window: int) -> Iterator[tuple[int, int, tuple[int, ...], int]]:
        """(pass, window, row groups, the window's first source position), without end."""
        number = first_pass
        while True:
            plan = plan_epoch(self.spec, number)
            for window in range(first_window if number == first_pass else 0, len(plan.windows)):
                yield number, window, plan.windows[window], number * self.rows + plan.window_starts[window]
            number += 1

    def _load(self) -> None:
        number, window, groups, start = next(self._windows)
        stop = start + sum(self.sizes[i] for i in groups)
        if self._live and stop - self.size > self._live[0][0]:
            raise AssertionError(f"source ring of {self.size} rows cannot hold [{self._live[0][0]}, {stop})")
        position = start
        for i in groups:
            if self.sizes[i]:
                for name, values in self._reads.next().items():
                    self._write(self.arena.column(name, values), position, values)
                position += self.sizes[i]
        self._live.append((start, stop, window_order(self.spec, number, window, stop - start)))

    def _write(self, column: np.ndarray, position: int, values: np.ndarray) -> None:
        """Copy rows to the ring at position (modulo its size): in two parts where it wraps."""
        at = position % self.size
        head = min(len(values), self.size - at)
        np.copyto(column[self.base + at:self.base + at + head], values[:head])  # several times faster than a[i:j] = v
        if head < len(values):
            np.copyto(column[self.base:self.base + len(values) - head], values[head:])

    def slots(self, positions: np.ndarray) -> np.ndarray:
        """The arena rows holding the rows at positions (ascending), loading windows as far as the last."""
        while self._live and self._live[0][1] <= positions[0]:
            self._live.popleft()  # done with: its rows may be overwritten now
        while not self._live or self._live[-1][1] <= positions[-1]:
            self._load()
        slots, lo = np.empty(len(positions), dtype=np.int64), 0
        for start, stop, order in self._live:
            hi = int(np.searchsorted(positions, stop, side="left"))
            if hi > lo:
                rows = positions[lo:hi] - start
                slots[lo:hi] = start + (rows if order is None else np.take(order, rows))
            lo = hi
        if positions[0] < self._live[0][0]:
            raise AssertionError(f"source position {positions[0]} is behind the window at {self._live[0][0]}")
        return self.base + slots % self.size

    def close(self) -> None:
        self._reads.close()


def ring_rows(spec: ReaderSpec, span: int) -> int:
    """Rows a source's ring needs when a chunk spans `span` global positions: the live windows cover
    the chunk's rows of the source plus at most a window's rows either side."""
    window = sum(sorted(spec.row_group_rows, reverse=True)[:spec.num_shuffle_row_groups])
    return span + 2 * window


@dataclass(frozen=True)
class MixturePlan:
    """What one rank reads of the mixture: the sources' specs, the batch geometry and the mix history."""

    specs: tuple[ReaderSpec, ...]  # one per source: shuffled passes over every row (world 1: the plan is global)
    batch_size: int
    rank: int
    world_size: int
    grad_accum_steps: int
    epoch_rows: int  # global positions per mixture epoch, whole global batches
    segments: tuple[MixSegment, ...]
    pin_memory: bool = False

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size * self.grad_accum_steps

    @property
    def source_rows(self) -> tuple[int, ...]:
        return tuple(plan_epoch(spec, 0).rows for spec in self.specs)

    def rank_positions(self, epoch: int, batch: int, count: int = 1) -> np.ndarray:
        """Global positions of this rank's micro-batches [batch, batch + count) of `epoch`, in order."""
        rounds = epoch * self.epoch_rows + (np.arange(batch, batch + count) * self.world_size + self.rank) * self.batch_size
        return (rounds[:, None] + np.arange(self.batch_size)[None, :]).ravel()


CHUNK_ROWS = 8192  # rows assembled at a time: a few large gathers per source instead of a few per batch


def _mixture_stream(plan: MixturePlan, epoch: int, start_batch: int, num_epochs: int | None,
                    num_batches: int) -> Iterator[tuple[int, Batch]]:
    """(epoch, batch) for this rank from micro-batch start_batch of epoch on; each batch's rows in
    position order, with the SOURCE_COLUMN saying whose each is. Batches are assembled a chunk of
    them at a time (within an epoch), the next chunk on an assembler thread while this one's
    batches are handed out as views of it."""
    per_chunk = max(1, CHUNK_ROWS // (plan.batch_size * plan.world_size))
    arena = _Arena([ring_rows(spec, per_chunk * plan.batch_size * plan.world_size) for spec in plan.specs])
    readers: list[_SourceRing | None] = [None] * len(plan.specs)  # each opened at its first position asked for

    def chunks() -> Iterator[tuple[int, int, int]]:  # (epoch, first batch, batches)
        number, batch, first = epoch, start_batch, True
        while num_epochs is None or number < epoch + num_epochs:
            # The first chunk is one batch, so the first batch (a resume's, too) waits for no more.
            count = min(1 if first else per_chunk, num_batches - batch)
            first = False
            yield number, batch, count
            batch += count
            if batch == num_batches:
                number, batch = number + 1, 0

    def assemble(number: int, batch: int, count: int) -> dict[str, np.ndarray]:  # on the assembler thread, in order
        sources, positions = locate(plan.segments, plan.rank_positions(number, batch, count))
        slots = np.empty(len(positions), dtype=np.int64)
        for s in range(len(plan.specs)):
            mine = np.flatnonzero(sources == s)  # this source's chunk rows, in position order
            if len(mine):
                if readers[s] is None:
                    readers[s] = _SourceRing(plan.specs[s], int(positions[mine[0]]), arena, s)
                slots[mine] = readers[s].slots(np.take(positions, mine))
        # One gather per column, from the windows' rows straight into position order.
        return {**{name: np.take(rows, slots, axis=0) for name, rows in arena.columns.items()}, SOURCE_COLUMN: sources}

    assembler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shardline-mixture")
    todo = chunks()
    try:
        current = next(todo, None)
        pending = assembler.submit(assemble, *current) if current else None
        while current is not None:
            columns = pending.result()
            following = next(todo, None)
            pending = assembler.submit(assemble, *following) if following else None
            number, _, count = current
            for k in range(count):
                part = slice(k * plan.batch_size, (k + 1) * plan.batch_size)
                yield number, _to_batch({name: values[part] for name, values in columns.items()}, plan.pin_memory)
            current = following
    finally:
        assembler.shutdown(wait=True, cancel_futures=True)
        for reader in readers:
            if reader is not None:
                reader.close()


class MixtureLoader(PositionedLoader):
    """A mixture's training batches for one rank (see PositionedLoader); its state also holds the
    mix's segments, so a weight change is a new segment from the position where it is made, never
    a silent restart."""

    def __init__(self, plan: MixturePlan, num_prefetch: int = 4, num_epochs: int | None = None):
        super().__init__(plan.batch_size, plan.world_size, plan.grad_accum_steps, num_prefetch, num_epochs)
        self.plan = plan
        self.num_batches = plan.epoch_rows // (plan.batch_size * plan.world_size)
        if self.num_batches == 0:
            raise ValueError(f"the mixture has {plan.epoch_rows} samples per epoch, fewer than one global batch of "
                             f"{plan.global_batch}; lower train.batch_size or train.grad_accum_steps")
        self.rows, self.left_out = sum(plan.source_rows), sum(plan.source_rows) - plan.epoch_rows
        self.changes: list[str] = []  # what load_state_dict did to the mix, in words, for the log

    @property
    def position(self) -> int:
        """Global positions consumed since the run's start."""
        return self.epoch * self.plan.epoch_rows + self.samples

    def taken(self) -> np.ndarray:
        """Samples of each source consumed so far over all ranks."""
        return taken_before(self.plan.segments, self.position)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "segments": [s.to_dict() for s in self.plan.segments]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        saved = tuple(MixSegment.from_dict(s) for s in state["segments"])
        wanted = self.plan.segments[-1].weights
        segments = saved
        if saved[-1].weights != wanted:
            position = self.position
            kept = tuple(s for s in saved if s.start < position) or saved[:1]
            segments = kept + (MixSegment(position, wanted, tuple(int(n) for n in taken_before(saved, position))),)
            self.changes.append(f"weights {list(saved[-1].weights)} -> {list(wanted)} from position {position}")
        self.plan = dataclasses.replace(self.plan, segments=segments)

    def _stream_from(self, epoch: int, batch: int, num_epochs: int | None) -> Callable[[], Iterator[tuple[int, Batch]]]:
        plan, batches = self.plan, self.num_batches
        return lambda: _mixture_stream(plan, epoch, batch, num_epochs, batches)


def epoch_rows(rows: tuple[int, ...], weights: tuple[float, ...], global_batch: int, on_exhausted: str) -> int:
    """Positions per mixture epoch: the sources' rows summed (`repeat`), or (`stop`) the longest prefix
    in which no source starts a second pass; whole global batches either way."""
    if on_exhausted == "repeat":
        total = sum(rows)
    else:
        pattern = quota_pattern(integer_shares(weights))
        total = min(pattern.first_reaching(s, n + 1) - 1 for s, n in enumerate(rows))
    return total // global_batch * global_batch


def build_plan(sources: list[Source], *, batch_size: int, columns: tuple[str, ...], seed: int, rank: int,
               world_size: int, grad_accum_steps: int, num_workers: int, num_shuffle_row_groups: int,
               pin_memory: bool, backend: str, verify_checksums: bool, on_exhausted: str) -> MixturePlan:
    specs = tuple(
        split_spec(s.dataset_dir, s.manifest, "train", batch_size=batch_size, columns=columns, shuffle=True,
                   seed=source_seed(seed, s.name), drop_last=False, num_workers=num_workers,
                   num_shuffle_row_groups=num_shuffle_row_groups, backend=backend, verify_checksums=verify_checksums)
        for s in sources
    )
    weights = tuple(s.weight for s in sources)
    rows = tuple(s.manifest.splits["train"].rows for s in sources)
    global_batch = batch_size * world_size * grad_accum_steps
    return MixturePlan(specs, batch_size, rank, world_size, grad_accum_steps,
                       epoch_rows(rows, weights, global_batch, on_exhausted),
                       (MixSegment(0, weights, (0,) * len(sources)),), pin_memory)


def load_sources(entries: list[Any], resolve_path) -> list[Source]:
    """train.datasets entries -> sources with their manifests (each dataset must be committed)."""
    sources = [Source(entry.name, resolve_path(entry), contract.load_manifest(resolve_path(entry)), entry.weight)
               for entry in entries]
    check_compatible(sources)
    return sources



def sources_of(config) -> list[Source] | None:
    """The config's mixture (train.datasets) as compatible, committed sources; None for one dataset."""
    if config.train.datasets is None:
        return None
    return load_sources(config.train.datasets, config.source_dataset_dir)


def lineage(sources: list[Source]) -> list[dict[str, Any]]:
    """Each source's identity, for the model's lineage and the run identity."""
    return [{"name": s.name, "weight": s.weight, "dataset_dir": s.dataset_dir,
             "dataset_fingerprint": s.manifest.dataset_fingerprint,
             "dataset_manifest_sha256": contract.file_sha256(storage.join(s.dataset_dir, contract.MANIFEST_FILE))}
            for s in sources]


def weighted_whole(per_source: dict[str, dict[str, float]], weights: dict[str, float]) -> dict[str, float]:
    """The mixture's own validation figures: each source's mean metric weighted by its mix weight
    (perplexity from the weighted loss), over the sources that have validation rows."""
    present = {name: m for name, m in per_source.items() if m.get("examples")}
    total = sum(weights[name] for name in present)
    whole: dict[str, float] = {"examples": sum(int(m["examples"]) for m in present.values())}
    for key in ("loss", "accuracy", "macro_f1"):
        if present and all(key in m for m in present.values()):
            whole[key] = sum(weights[name] * m[key] for name, m in present.items()) / total
    if "loss" in whole and any("perplexity" in m for m in present.values()):
        whole["perplexity"] = math.exp(whole["loss"])
    return whole


def tokenizer_dir(sources: list[Source]) -> str:
    """The sources' shared tokenizer: beside the first source's dataset, as a run_dir lays them out."""
    return storage.join(storage.parent(sources[0].dataset_dir), "tokenizer")
