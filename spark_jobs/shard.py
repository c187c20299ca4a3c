"""Shard layout: each tokenizing task encodes its partition and writes its own files.

The de-duplicated documents are hashed into partitions by content and sorted by (split, id) within
them (preprocess.documents_by_content). Each task of that stage runs the encoder on its batches and
writes what comes out straight into Parquet (`write_partitions`): per split, row groups of
`shard.row_group_rows` rows (a task's last two share the rest evenly), and a new file once the one being
written reaches `shard.target_mb` compressed. So token arrays never leave the task that made them:
no token rows cross into the JVM, are persisted, counted or shuffled again, and every core that
tokenizes also writes.

Files are named `<split>/part-<partition>-<sequence>-<build>-<attempt>.parquet`: unique to the task
attempt (a retried or speculative attempt never overwrites another's file; object stores cannot
rename one into place), and each task reports what it wrote (path, bytes, row groups, sha256, the
rows' token accounting) plus one summary (duplicates removed before its documents, blocks dropped by
drop_remainder). The manifest is built from those reports alone, in (split, partition, sequence)
order, so a failed or speculative attempt's files are never part of the dataset. Which partition a
document lands in depends on its text and the input's size alone, so the same input gives the same
files on local[1], local[2] or a cluster.

Every rank still gets the same data: the reader deals each global batch out at row granularity
from the manifest's row counts (training/data.py), so files and row groups need not be equal.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from pipeline import contract, storage
from pipeline.config import ShardConfig
from spark_jobs.clean import COPIES
from spark_jobs.encode import DOC_LENGTHS, DOCUMENTS, DROPPED, SPLIT, TRUNCATED, BatchFunction
from spark_jobs.read import REJECT_REASON

FILE = "_file"  # a file's number within its split: partition << SEQUENCE_BITS | its sequence in the task
SEQUENCE_BITS = 20

# What a writer task reports, a row per file: the manifest is built from these rows alone (winning
# attempts only: Spark returns the results of the attempt that succeeded), never from listing the
# store. `stats` (JSON): the file's token accounting, from the rows it wrote (rejects: by reason).
# Plus one row per task with no path: its summary (TaskSummary).
WRITTEN_SCHEMA = T.StructType([
    T.StructField(SPLIT, T.StringType()), T.StructField(FILE, T.LongType()), T.StructField("path", T.StringType()),
    T.StructField("bytes", T.LongType()), T.StructField("sha256", T.StringType()),
    T.StructField("row_group_rows", T.ArrayType(T.LongType(), False)), T.StructField("stats", T.StringType()),
])


@dataclass(frozen=True, order=True)
class WrittenFile:
    split: str
    file: int
    path: str  # relative to the dataset directory
    bytes: int
    sha256: str
    row_group_rows: tuple[int, ...]
    stats: str | None = None  # JSON: tokens, documents, truncated_documents, length_histogram

    def data_file(self) -> contract.DataFile:
        return contract.DataFile(path=self.path, bytes=self.bytes, row_group_rows=list(self.row_group_rows),
                                 sha256=self.sha256)


def attempt_name(stem: str, build_id: str) -> str:
    """A file name unique to this build and this task attempt: a retried or speculative attempt
    never overwrites another's file (object stores cannot rename one into place), and the manifest
    names the one whose task succeeded."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = f"t{context.taskAttemptId()}" if context else "driver"  # unique per task attempt in the app
    return f"{stem}-{build_id}-{attempt}.parquet"


def store(uri: str, sink: pa.BufferOutputStream) -> tuple[int, str]:
    """Store a finished in-memory file in one write (the commit protocol's unit: one PUT on object
    stores, no multipart upload left behind); returns (bytes, sha256)."""
    data = sink.getvalue()
    storage.write_bytes(uri, data)
    return data.size, hashlib.sha256(memoryview(data)).hexdigest()


class FileStats:
    """Token accounting of encoded rows (from the encoder's stat columns): those a file holds, or
    the blocks a task dropped (`dropped`: their tokens count as dropped_tokens, not tokens)."""

    def __init__(self):
        self.tokens = self.documents = self.truncated = self.dropped_tokens = 0
        self.histogram: dict[int, int] = {}

    def add(self, table: pa.Table, dropped: bool = False) -> None:
        tokens = int(pc.sum(table.column(contract.NUM_TOKENS)).as_py() or 0)
        if dropped:
            self.dropped_tokens += tokens
        else:
            self.tokens += tokens
        self.documents += int(pc.sum(table.column(DOCUMENTS)).as_py() or 0)
        self.truncated += int(pc.sum(table.column(TRUNCATED)).as_py() or 0)
        lengths = pc.list_flatten(table.column(DOC_LENGTHS)).to_numpy()
        if len(lengths):
            # Bins: powers of two, at least 8.
            bins = np.maximum(8, 2 ** np.ceil(np.log2(np.maximum(lengths, 1)))).astype(np.int64)
            for value, count in zip(*np.unique(bins, return_counts=True)):
                self.histogram[int(value)] = self.histogram.get(int(value), 0) + int(count)

    def to_dict(self) -> dict:
        return {"tokens": self.tokens, "documents": self.documents, "truncated_documents": self.truncated,
                "dropped_tokens": self.dropped_tokens,
                "length_histogram": {f"<={k}": v for k, v in sorted(self.histogram.items())}}


def add_totals(totals: dict[str, dict], split_name: str, stats: dict) -> None:
    """Add one report's stats (FileStats.to_dict) into totals[split_name]."""
    split_totals = totals.setdefault(split_name, {"length_histogram": {}})
    for key in ("tokens", "documents", "truncated_documents", "dropped_tokens"):
        split_totals[key] = split_totals.get(key, 0) + stats.get(key, 0)
    for key, count in stats["length_histogram"].items():
        split_totals["length_histogram"][key] = split_totals["length_histogram"].get(key, 0) + count


@dataclass(frozen=True)
class WrittenDataset:
    """What the writer tasks reported: their files, per split token totals, and duplicates removed."""
    files: list[WrittenFile]
    totals: dict[str, dict]
    duplicates: int


class _SplitFiles:
    """One split's files in one task: row groups of row_group_rows rows, cut by row count (not by
    where batches end), the last two sharing what is left evenly, and a new file once the one being
    written reaches target_mb compressed. The task holds one batch, at most two pending row groups
    and the compressed file it is writing."""

    def __init__(self, root: str, split_name: str, partition: int, cfg: ShardConfig, schema: pa.Schema,
                 build_id: str):
        self.root, self.split, self.partition, self.cfg = root, split_name, partition, cfg
        self.schema, self.build_id = schema, build_id
        self.target_bytes = int(cfg.target_mb * 2**20)
        self.sequence = 0
        self.pending: list[pa.Table] = []
        self.pending_rows = 0
        self.written: list[tuple] = []
        # The file being written (None between files): opened by the first row group that needs it.
        self.writer: pq.ParquetWriter | None = None
        self.sink: pa.BufferOutputStream | None = None
        self.number, self.name, self.counts, self.stats = 0, "", [], FileStats()

    def add(self, rows: pa.Table) -> None:
        self.pending.append(rows)
        self.pending_rows += rows.num_rows
        # Up to two row groups are held back, so that the task's last rows are shared evenly by its
        # last two groups (each at least half of row_group_rows) instead of ending in a sliver.
        while self.pending_rows >= 2 * self.cfg.row_group_rows:
            table = pa.concat_tables(self.pending)
            self._write_group(table.slice(0, self.cfg.row_group_rows))
            rest = table.slice(self.cfg.row_group_rows)
            self.pending, self.pending_rows = [rest], rest.num_rows

    def close(self) -> list[tuple]:
        if self.pending_rows:
            table = pa.concat_tables(self.pending)
            first = table.num_rows if table.num_rows <= self.cfg.row_group_rows else (table.num_rows + 1) // 2
            self._write_group(table.slice(0, first))
            if first < table.num_rows:
                self._write_group(table.slice(first))
            self.pending, self.pending_rows = [], 0
        self._close_file()
        return self.written

    def _write_group(self, table: pa.Table) -> None:
        if self.writer is None:
            self.number = (self.partition << SEQUENCE_BITS) | self.sequence
            self.name = attempt_name(f"{self.split}/part-{self.partition:05d}-{self.sequence:03d}", self.build_id)
            self.sink = pa.BufferOutputStream()
            self.writer = pq.ParquetWriter(self.sink, self.schema, compression=self.cfg.compression)
            self.counts, self.stats = [], FileStats()
            self.sequence += 1
        self.stats.add(table)
        self.writer.write_table(table.select(self.schema.names).cast(self.schema), row_group_size=table.num_rows)
        self.counts.append(table.num_rows)
        if self.sink.tell() >= self.target_bytes:
            self._close_file()

    def _close_file(self) -> None:
        if self.writer is None:
            return
        self.writer.close()
        size, digest = store(f"{self.root}/{self.name}", self.sink)
        self.written.append((self.split, self.number, self.name, size, digest, self.counts,
                             json.dumps(self.stats.to_dict())))
        self.writer = self.sink = None  # the compressed file is released before the next one is started


class PartitionWriter:
    """One tokenizing task's output: encoded batches (split, the file's columns and the encoder's
    stat columns), in split order, into each split's files; blocks marked DROPPED are counted, not
    written."""

    def __init__(self, root: str, partition: int, cfg: ShardConfig, schema: pa.Schema, build_id: str):
        self.root, self.partition, self.cfg, self.schema, self.build_id = root, partition, cfg, schema, build_id
        self.current: _SplitFiles | None = None
        self.written: list[tuple] = []
        self.dropped: dict[str, FileStats] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        rows = pa.Table.from_batches([batch])
        if DROPPED in rows.column_names:
            dropped = rows.column(DROPPED)
            if pc.any(dropped).as_py():
                for name in set(rows.filter(dropped).column(SPLIT).to_pylist()):
                    self.dropped.setdefault(name, FileStats()).add(
                        rows.filter(pc.and_(dropped, pc.equal(rows.column(SPLIT), name))), dropped=True)
                rows = rows.filter(pc.invert(dropped))
        splits = rows.column(SPLIT).to_pylist()
        start = 0
        for stop in _run_ends(splits):
            if self.current is None or self.current.split != splits[start]:
                self._close_current()
                self.current = _SplitFiles(self.root, splits[start], self.partition, self.cfg, self.schema,
                                           self.build_id)
            self.current.add(rows.slice(start, stop - start))
            start = stop

    def _close_current(self) -> None:
        if self.current is not None:
            self.written += self.current.close()
            self.current = None

    def close(self) -> list[tuple]:
        self._close_current()
        return self.written


def _run_ends(splits: list[str]) -> list[int]:
    """End index of each run of rows with the same split."""
    if not splits:
        return []
    values = np.array(splits)
    return [*(np.flatnonzero(values[1:] != values[:-1]) + 1).tolist(), len(splits)]


def write_partitions(documents: DataFrame, encode_batches: BatchFunction, schema: pa.Schema, root: str,
                     cfg: ShardConfig, build_id: str) -> WrittenDataset:
    """Encode every partition of `documents` and write it under root/<split>/ through the storage
    layer, in the task that encodes it (see the module's docstring).

    `encode_batches` turns a task's document batches into rows of the file's columns (`schema`)
    plus SPLIT and encode.STAT_COLUMNS, in split order. The duplicates behind the documents
    (clean.COPIES) are summed as they stream past, before encoding."""
    options = storage.current_options()

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        storage.configure(options)
        writer = PartitionWriter(root, TaskContext.get().partitionId(), cfg, schema, build_id)
        removed = [0]

        def counting_copies(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                if COPIES in batch.schema.names:
                    removed[0] += int(pc.sum(batch.column(COPIES)).as_py() or 0) - batch.num_rows
                yield batch

        for encoded in encode_batches(counting_copies(batches)):
            writer.add(encoded)
        written = writer.close()
        summary = {"duplicates": removed[0], "dropped": {name: s.to_dict() for name, s in writer.dropped.items()}}
        yield _report_batch(written + [(None, None, None, None, None, None, json.dumps(summary))])

    files, totals, duplicates = [], {}, 0
    for row in documents.mapInArrow(write_partition, WRITTEN_SCHEMA).collect():
        if row["path"] is None:
            summary = json.loads(row["stats"])
            duplicates += summary["duplicates"]
            for name, stats in summary["dropped"].items():
                add_totals(totals, name, stats)
        else:
            files.append(_written(row))
            add_totals(totals, row[SPLIT], json.loads(row["stats"]))
    return WrittenDataset(sorted(files), totals, duplicates)


def _written(row) -> WrittenFile:
    return WrittenFile(*row[:5], tuple(row[5]), row[6])


def _report_batch(written: list[tuple]) -> pa.RecordBatch:
    types = [pa.string(), pa.int64(), pa.string(), pa.int64(), pa.string(), pa.list_(pa.int64()), pa.string()]
    return pa.RecordBatch.from_arrays(
        [pa.array([w[i] if i < len(w) else None for w in written], type=t) for i, t in enumerate(types)],
        names=WRITTEN_SCHEMA.fieldNames(),
    )


REJECT_GROUP_ROWS = 8192  # rows per row group of a rejects file (the last one holds the rest)


def write_rejects(rejected: DataFrame, root: str, compression: str, build_id: str) -> list[WrittenFile]:
    """rejects/part-<partition>-<build>-<attempt>.parquet, one file per non-empty partition.

    Streams: a task holds one input batch, one row group and the compressed file, stored in one
    write (the commit protocol's unit); the file holds one read partition's rejects, so it is
    bounded by the read partition size (read.MAX_PARTITION_BYTES of input), not by the corpus."""
    schema = arrow_schema(rejected.schema)
    options = storage.current_options()

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        storage.configure(options)
        partition = TaskContext.get().partitionId()
        name = attempt_name(f"{contract.REJECTS_DIR}/part-{partition:05d}", build_id)
        written = _write_rejects_file(f"{root}/{name}", schema, compression, batches)
        if written is None:
            return
        size, digest, counts, reasons = written
        yield _report_batch([(contract.REJECTS_DIR, partition, name, size, digest, counts,
                              json.dumps({"by_reason": dict(sorted(reasons.items()))}))])

    return sorted(_written(r) for r in rejected.mapInArrow(write_partition, WRITTEN_SCHEMA).collect())


def write_removed(removed: DataFrame, rule_column: str, root: str, compression: str, build_id: str,
                  num_samples: int) -> tuple[list[WrittenFile], dict[str, int]]:
    """removed/part-<partition>-<build>-<attempt>.parquet: per task, the first num_samples records of
    each quality rule (rule_column) in the order the task saw them. Every removed record is counted by
    rule as it streams past, sampled or not; returns (the files written, records removed per rule)."""
    schema = arrow_schema(removed.schema)
    options = storage.current_options()

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        storage.configure(options)
        partition = TaskContext.get().partitionId()
        counts: Counter = Counter()

        def sampled(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                take = []
                for row, rule in enumerate(batch.column(rule_column).to_pylist()):
                    counts[rule] += 1
                    if counts[rule] <= num_samples:
                        take.append(row)
                if take:
                    yield batch.take(pa.array(take, pa.int64()))

        name = attempt_name(f"{contract.REMOVED_DIR}/part-{partition:05d}", build_id)
        written = _write_rejects_file(f"{root}/{name}", schema, compression, sampled(batches), rule_column)
        stats = json.dumps({"by_reason": dict(sorted(counts.items()))})
        if written is not None:
            size, digest, group_rows, _ = written
            yield _report_batch([(contract.REMOVED_DIR, partition, name, size, digest, group_rows, stats)])
        elif counts:  # removals counted, none sampled (num_samples 0)
            yield _report_batch([(contract.REMOVED_DIR, partition, None, 0, None, [], stats)])

    reports = sorted((_written(r) for r in removed.mapInArrow(write_partition, WRITTEN_SCHEMA).collect()),
                     key=lambda w: (w.file, w.path or ""))
    return [w for w in reports if w.path is not None], rejects_by_reason(reports)


def _write_rejects_file(uri: str, schema: pa.Schema, compression: str, batches: Iterator[pa.RecordBatch],
                        reason_column: str = REJECT_REASON) -> tuple[int, str, list[int], Counter] | None:
    """The rejects of one partition as one Parquet file of REJECT_GROUP_ROWS-row groups (cut by row
    count, not by where Spark's batches end): (bytes, sha256, rows per group, rejects per reason),
    or None (nothing stored) when there are no rows."""
    sink = pa.BufferOutputStream()
    writer = pq.ParquetWriter(sink, schema, compression=compression)
    pending: list[pa.Table] = []
    pending_rows = 0
    counts: list[int] = []
    reasons: Counter = Counter()  # what this file holds, counted as written

    def write_group(table: pa.Table) -> None:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
        counts.append(table.num_rows)
        reasons.update(table.column(reason_column).to_pylist())

    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(pa.Table.from_batches([batch]).cast(schema))
        pending_rows += batch.num_rows
        while pending_rows >= REJECT_GROUP_ROWS:
            table = pa.concat_tables(pending)
            write_group(table.slice(0, REJECT_GROUP_ROWS))
            rest = table.slice(REJECT_GROUP_ROWS)
            pending, pending_rows = ([rest] if rest.num_rows else []), rest.num_rows
    if pending_rows:
        write_group(pa.concat_tables(pending))
    writer.close()
    if not counts:
        return None
    return (*store(uri, sink), counts, reasons)


def rejects_by_reason(rejects_files: list[WrittenFile]) -> dict[str, int]:
    """Rejects (or removals) per reason, summed from what their writers reported."""
    total: Counter = Counter()
    for written in rejects_files:
        total.update(json.loads(written.stats)["by_reason"])
    return dict(total)


def arrow_schema(schema: T.StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)
