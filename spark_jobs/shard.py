"""Shard layout: equal-sized row groups per split, their number a multiple of shard.divisible_by.

Petastorm gives rank r of W the row groups r, r+W, r+2W, ... of a split; with a multiple of W row
groups whose sizes differ by at most one row, every rank gets the same amount of data (to a row).

How rows get there, without a global sort or collecting ids on the driver:
1. `with_local_index`: on rows already sorted by (split, id) within their partitions, tag each row
   with its partition and its index inside the partition (JVM only, no shuffle).
2. `count_positions` (one small aggregation, collected): rows per (partition, split), giving each
   (partition, split) run its first position in the split, and, in the same pass, the duplicates
   de-duplication removed before them (clean.COPIES); `plan_split` fixes each split's number of
   row groups and files from its row count.
3. `with_layout`: position -> row group (position * groups // rows: sizes differ by <= 1) -> file.
4. `write_shards`: one shuffle by (split, file); each task writes its files with pyarrow through
   the storage layer, one Parquet row group per planned group (empty groups included, so the count
   stays a multiple), under a name unique to the task attempt, and reports each file (path, bytes,
   row groups, sha256): the manifest lists exactly those, so a failed or speculative attempt's
   files are never part of the dataset.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline import contract, storage
from pipeline.config import ShardConfig
from spark_jobs.clean import COPIES
from spark_jobs.encode import SPLIT
from spark_jobs.read import REJECT_REASON

PARTITION = "_partition"
LOCAL_INDEX = "_local_index"
POSITION = "_position"  # 0-based row position within its split, in (partition, split, id) order
GROUP = "_group"  # row group number within the split
FILE = "_file"  # file number within the split
_LOCAL_BITS = (1 << 33) - 1  # monotonically_increasing_id keeps the in-partition index in 33 bits


@dataclass(frozen=True)
class SplitPlan:
    split: str
    rows: int
    num_row_groups: int
    num_files: int

    @property
    def groups_per_file(self) -> int:
        return self.num_row_groups // self.num_files if self.num_files else 0

    def file_name(self, file_number: int) -> str:
        return f"{self.split}/part-{file_number:05d}.parquet"


def plan_split(split: str, rows: int, bytes_per_row: int, cfg: ShardConfig) -> SplitPlan:
    """Row groups: the smallest multiple of divisible_by that keeps groups <= row_group_rows.
    Files: as close to target_mb each as a divisor of the row-group count allows."""
    if rows == 0:
        return SplitPlan(split, 0, 0, 0)
    step = cfg.divisible_by
    groups = math.ceil(math.ceil(rows / cfg.row_group_rows) / step) * step
    wanted_files = max(1, round(rows * bytes_per_row / (cfg.target_mb * 2**20)))
    files = max(d for d in range(1, groups + 1) if groups % d == 0 and d <= wanted_files)
    return SplitPlan(split, rows, groups, files)


def row_bytes(max_length: int, task: str) -> int:
    """Uncompressed bytes of one row: what target_mb is measured against (files compress smaller)."""
    token_columns = 4 + 1 + (8 if task == "causal_lm" else 0)  # int32 ids, int8 mask, int32 pos + seg
    return max_length * token_columns + 48


def with_local_index(df: DataFrame) -> DataFrame:
    return df.withColumn(PARTITION, F.spark_partition_id()).withColumn(
        LOCAL_INDEX, F.monotonically_increasing_id().bitwiseAND(F.lit(_LOCAL_BITS))
    )


@dataclass(frozen=True)
class RowCounts:
    per_split: dict[str, int]  # rows per split
    bases: dict[tuple[int, str], int]  # position of local index 0 for each (partition, split) run
    duplicates: int  # rows de-duplication removed before these (0 when the rows carry no clean.COPIES)


def count_positions(indexed: DataFrame) -> RowCounts:
    """One aggregation over the rows to be written: their per-split counts and run bases, and the
    duplicates behind them, so de-duplication needs no counting job of its own."""
    removed = F.sum(F.col(COPIES) - 1) if COPIES in indexed.columns else F.lit(0)
    runs = sorted(
        (r[0], r[1], r[2], r[3], r[4])
        for r in indexed.groupBy(PARTITION, SPLIT).agg(F.count(F.lit(1)), F.min(LOCAL_INDEX), removed).collect()
    )
    totals: dict[str, int] = {}
    bases: dict[tuple[int, str], int] = {}
    for partition, split_name, count, first_local, _ in runs:
        start = totals.get(split_name, 0)
        bases[(partition, split_name)] = start - first_local
        totals[split_name] = start + count
    return RowCounts(totals, bases, sum(int(run[4] or 0) for run in runs))


def with_layout(indexed: DataFrame, bases: dict[tuple[int, str], int], plans: dict[str, SplitPlan]) -> DataFrame:
    """Add position, row group and file columns from the collected run bases and split plans."""
    entries = [x for (p, s), b in sorted(bases.items()) for x in (F.lit(f"{p}/{s}"), F.lit(b))]
    # No rows at all (every record rejected): an empty map has no key type Spark can look up.
    run = F.concat_ws("/", F.col(PARTITION).cast("string"), F.col(SPLIT))
    base = F.create_map(*entries)[run] if entries else F.lit(None).cast("long")
    position = base + F.col(LOCAL_INDEX)
    df = indexed.withColumn(POSITION, position)
    group = F.lit(None).cast("long")
    file = F.lit(None).cast("long")
    for name, plan in plans.items():
        if plan.rows:
            in_split = F.col(SPLIT) == name
            split_group = F.floor(F.col(POSITION) * plan.num_row_groups / plan.rows).cast("long")
            group = F.when(in_split, split_group).otherwise(group)
            file = F.when(in_split, F.floor(split_group / plan.groups_per_file).cast("long")).otherwise(file)
    return df.withColumn(GROUP, group).withColumn(FILE, file)


# What a writer task reports per file: the manifest is built from these rows alone (winning attempts
# only: Spark returns the results of the attempt that succeeded), never from listing the store.
# `stats` (JSON, null for rejects): the file's token accounting, from the rows it wrote.
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


def write_parquet(uri: str, schema: pa.Schema, groups: list[pa.Table], compression: str) -> tuple[int, str]:
    """Write one Parquet file, one row group per table (empty ones included), in a single write;
    returns (bytes, sha256)."""
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema, compression=compression) as writer:
        for group in groups:
            writer.write_table(group, row_group_size=max(group.num_rows, 1))
    return store(uri, sink)


def store(uri: str, sink: pa.BufferOutputStream) -> tuple[int, str]:
    """Store a finished in-memory file in one write (the commit protocol's unit: one PUT on object
    stores, no multipart upload left behind); returns (bytes, sha256)."""
    data = sink.getvalue()
    storage.write_bytes(uri, data)
    return data.size, hashlib.sha256(memoryview(data)).hexdigest()


class FileStats:
    """Token accounting of the rows one file holds (from the encoder's stat columns)."""

    def __init__(self):
        self.tokens = self.documents = self.truncated = 0
        self.histogram: dict[int, int] = {}

    def add(self, table: pa.Table) -> None:
        from spark_jobs.encode import DOC_LENGTHS, DOCUMENTS, TRUNCATED

        self.tokens += int(pc.sum(table.column(contract.NUM_TOKENS)).as_py() or 0)
        self.documents += int(pc.sum(table.column(DOCUMENTS)).as_py() or 0)
        self.truncated += int(pc.sum(table.column(TRUNCATED)).as_py() or 0)
        lengths = pc.list_flatten(table.column(DOC_LENGTHS)).to_numpy()
        if len(lengths):
            # Bins as token_stats': powers of two, at least 8.
            bins = np.maximum(8, 2 ** np.ceil(np.log2(np.maximum(lengths, 1)))).astype(np.int64)
            for value, count in zip(*np.unique(bins, return_counts=True)):
                self.histogram[int(value)] = self.histogram.get(int(value), 0) + int(count)

    def to_json(self) -> str:
        return json.dumps({"tokens": self.tokens, "documents": self.documents, "truncated_documents": self.truncated,
                           "length_histogram": {f"<={k}": v for k, v in sorted(self.histogram.items())}})


def totals_from_files(written: list[WrittenFile]) -> dict[str, dict]:
    """Per split, the manifest's token totals summed over the writer tasks' reports."""
    totals: dict[str, dict] = {}
    for w in written:
        if w.stats is None:
            continue
        stats, split_totals = json.loads(w.stats), totals.setdefault(w.split, {"length_histogram": {}})
        for key in ("tokens", "documents", "truncated_documents"):
            split_totals[key] = split_totals.get(key, 0) + stats[key]
        for key, count in stats["length_histogram"].items():
            split_totals["length_histogram"][key] = split_totals["length_histogram"].get(key, 0) + count
    return totals


class _ShardFile:
    """One planned file being written: row groups encoded and compressed in order, empty ones
    included; the task holds one row group, one input batch and the compressed file, never its
    partition."""

    def __init__(self, root: str, split_name: str, file_number: int, groups_per_file: int, schema: pa.Schema,
                 compression: str, build_id: str):
        self.split, self.file, self.schema = split_name, file_number, schema
        self.next_group, self.end_group = file_number * groups_per_file, (file_number + 1) * groups_per_file
        self.name = attempt_name(f"{split_name}/part-{file_number:05d}", build_id)
        self.uri = f"{root}/{self.name}"
        # The file is assembled in memory (compressed: about target_mb), then `store`d in one write.
        self.sink = pa.BufferOutputStream()
        self.writer = pq.ParquetWriter(self.sink, schema, compression=compression)
        self.pending: list[pa.Table] = []
        self.pending_group: int | None = None
        self.counts: list[int] = []
        self.stats = FileStats()

    def add(self, group: int, rows: pa.Table) -> None:
        if group != self.pending_group:
            self._flush()
            self._write_empty_until(group)
            self.pending_group = group
        self.stats.add(rows)
        self.pending.append(rows.select(self.schema.names).cast(self.schema))

    def _flush(self) -> None:
        if self.pending_group is None:
            return
        table = pa.concat_tables(self.pending)
        self.writer.write_table(table, row_group_size=max(table.num_rows, 1))
        self.counts.append(table.num_rows)
        self.pending, self.pending_group = [], None
        self.next_group += 1

    def _write_empty_until(self, group: int) -> None:
        while self.next_group < group:
            self.writer.write_table(self.schema.empty_table(), row_group_size=1)
            self.counts.append(0)
            self.next_group += 1

    def close(self) -> tuple:
        self._flush()
        self._write_empty_until(self.end_group)
        self.writer.close()
        size, digest = store(self.uri, self.sink)
        return (self.split, self.file, self.name, size, digest, self.counts, self.stats.to_json())


class SelectColumns:
    """The row encoder for rows already encoded (in the JVM): the file's columns and stat columns."""

    def __call__(self, batch: pa.RecordBatch) -> pa.Table:
        return pa.Table.from_batches([batch])


def write_shards(laid_out: DataFrame, plans: dict[str, SplitPlan], schema: pa.Schema, root: str,
                 compression: str, build_id: str, encode_rows=None) -> list[WrittenFile]:
    """Write every planned file under root/<split>/ through the storage layer; one report per file.

    `encode_rows(batch) -> pa.Table` turns an incoming Arrow batch into the file's columns (`schema`)
    plus encode.STAT_COLUMNS: with an encoder that tokenizes, token arrays are built in the task
    that writes them and never cross into the JVM. Rows arrive sorted by (split, file, position)."""
    num_files = sum(p.num_files for p in plans.values())
    if not num_files:
        return []
    groups_per_file = {name: plan.groups_per_file for name, plan in plans.items()}
    options = storage.current_options()
    encode_rows = encode_rows or SelectColumns()

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage.configure(options)
        files = _PartitionFiles(root, groups_per_file, schema, compression, build_id, encode_rows)
        for batch in batches:
            files.add(batch)
        written = files.close()
        if written:  # hash partitioning can leave a partition without a file
            yield _report_batch(written)

    partitioned = laid_out.repartition(num_files, SPLIT, FILE).sortWithinPartitions(SPLIT, FILE, POSITION)
    return sorted(_written(r) for r in partitioned.mapInArrow(write_partition, WRITTEN_SCHEMA).collect())


class _PartitionFiles:
    """One writer task's files, one open at a time, fed batch by batch: each batch is encoded in
    `add`'s own frame, so no batch's encoded rows outlive the row group that holds them."""

    def __init__(self, root: str, groups_per_file: dict[str, int], schema: pa.Schema, compression: str,
                 build_id: str, encode_rows):
        self.root, self.groups_per_file, self.schema = root, groups_per_file, schema
        self.compression, self.build_id, self.encode_rows = compression, build_id, encode_rows
        self.current: _ShardFile | None = None
        self.written: list[tuple] = []

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        splits = batch.column(SPLIT).to_pylist()
        files = batch.column(FILE).to_numpy()
        groups = batch.column(GROUP).to_numpy()
        rows = self.encode_rows(batch)
        start = 0
        for stop in _run_ends(splits, groups):
            key = (splits[start], int(files[start]))
            if self.current is None or (self.current.split, self.current.file) != key:
                self._close_current()
                self.current = _ShardFile(self.root, key[0], key[1], self.groups_per_file[key[0]], self.schema,
                                          self.compression, self.build_id)
            self.current.add(int(groups[start]), rows.slice(start, stop - start))
            start = stop

    def _close_current(self) -> None:
        if self.current is not None:
            self.written.append(self.current.close())
            self.current = None  # its compressed file is released before the next one is started

    def close(self) -> list[tuple]:
        self._close_current()
        return self.written


def _run_ends(splits: list[str], groups: np.ndarray) -> list[int]:
    """End index of each run of rows with the same (split, row group)."""
    change = np.flatnonzero((groups[1:] != groups[:-1]) | (np.array(splits[1:]) != np.array(splits[:-1]))) + 1
    return [*change.tolist(), len(splits)]


def _written(row) -> WrittenFile:
    return WrittenFile(*row[:5], tuple(row[5]), row[6])


def _report_batch(written: list[tuple]) -> pa.RecordBatch:
    types = [pa.string(), pa.int64(), pa.string(), pa.int64(), pa.string(), pa.list_(pa.int64()), pa.string()]
    return pa.RecordBatch.from_arrays(
        [pa.array([w[i] if i < len(w) else None for w in written], type=t) for i, t in enumerate(types)],
        names=WRITTEN_SCHEMA.fieldNames(),
    )


def write_missing_files(plans: dict[str, SplitPlan], written: list[WrittenFile], schema: pa.Schema,
                        root: str, compression: str, build_id: str) -> list[WrittenFile]:
    """Files of a tiny split whose row groups all came out empty: write them with empty row groups,
    so every split still has its planned (multiple-of-divisible_by) number of row groups."""
    done = {(w.split, w.file) for w in written}
    added = []
    for name, plan in plans.items():
        for file_number in range(plan.num_files):
            if (name, file_number) in done:
                continue
            path = attempt_name(f"{name}/part-{file_number:05d}", build_id)
            size, digest = write_parquet(f"{root}/{path}", schema, [schema.empty_table()] * plan.groups_per_file,
                                         compression)
            added.append(WrittenFile(name, file_number, path, size, digest, (0,) * plan.groups_per_file))
    return added


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


def _write_rejects_file(uri: str, schema: pa.Schema, compression: str,
                        batches: Iterator[pa.RecordBatch]) -> tuple[int, str, list[int], Counter] | None:
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
        reasons.update(table.column(REJECT_REASON).to_pylist())

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
    """Rejects per reason, summed from what the rejects writers reported writing."""
    total: Counter = Counter()
    for written in rejects_files:
        total.update(json.loads(written.stats)["by_reason"])
    return dict(total)


def arrow_schema(schema: T.StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)
