"""Shard layout: equal-sized row groups per split, their number a multiple of shard.divisible_by.

Petastorm gives rank r of W the row groups r, r+W, r+2W, ... of a split; with a multiple of W row
groups whose sizes differ by at most one row, every rank gets the same amount of data (to a row).

How rows get there, without a global sort or collecting ids on the driver:
1. `with_local_index`: on rows already sorted by (split, id) within their partitions, tag each row
   with its partition and its index inside the partition (JVM only, no shuffle).
2. `count_positions` (one small aggregation, collected): rows per (partition, split), giving each
   (partition, split) run its first position in the split; `plan_split` fixes each split's number of
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
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline import contract, storage
from pipeline.config import ShardConfig
from spark_jobs.encode import SPLIT

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


def count_positions(indexed: DataFrame) -> tuple[dict[str, int], dict[tuple[int, str], int]]:
    """(rows per split, position of local index 0 for each (partition, split) run)."""
    runs = sorted(
        (r[0], r[1], r[2], r[3])
        for r in indexed.groupBy(PARTITION, SPLIT).agg(F.count(F.lit(1)), F.min(LOCAL_INDEX)).collect()
    )
    totals: dict[str, int] = {}
    bases: dict[tuple[int, str], int] = {}
    for partition, split_name, count, first_local in runs:
        start = totals.get(split_name, 0)
        bases[(partition, split_name)] = start - first_local
        totals[split_name] = start + count
    return totals, bases


def with_layout(indexed: DataFrame, bases: dict[tuple[int, str], int], plans: dict[str, SplitPlan]) -> DataFrame:
    """Add position, row group and file columns from the collected run bases and split plans."""
    base = F.create_map(*[x for (p, s), b in sorted(bases.items()) for x in (F.lit(f"{p}/{s}"), F.lit(b))])
    position = base[F.concat_ws("/", F.col(PARTITION).cast("string"), F.col(SPLIT))] + F.col(LOCAL_INDEX)
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
WRITTEN_SCHEMA = T.StructType([
    T.StructField(SPLIT, T.StringType()), T.StructField(FILE, T.LongType()), T.StructField("path", T.StringType()),
    T.StructField("bytes", T.LongType()), T.StructField("sha256", T.StringType()),
    T.StructField("row_group_rows", T.ArrayType(T.LongType(), False)),
])


@dataclass(frozen=True, order=True)
class WrittenFile:
    split: str
    file: int
    path: str  # relative to the dataset directory
    bytes: int
    sha256: str
    row_group_rows: tuple[int, ...]

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
    data = sink.getvalue().to_pybytes()
    storage.write_bytes(uri, data)
    return len(data), hashlib.sha256(data).hexdigest()


def write_shards(laid_out: DataFrame, plans: dict[str, SplitPlan], columns: list[str], root: str,
                 compression: str, build_id: str) -> list[WrittenFile]:
    """Write every planned file under root/<split>/ through the storage layer; one report per file."""
    num_files = sum(p.num_files for p in plans.values())
    if not num_files:
        return []
    groups_per_file = {name: plan.groups_per_file for name, plan in plans.items()}
    file_schema = arrow_schema(laid_out.select(*columns).schema)
    options = storage.current_options()

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage.configure(options)
        batches = [b for b in batches if b.num_rows]
        if not batches:  # hash partitioning can leave a partition without a file
            return
        table = pa.Table.from_batches(batches)
        keys = list(zip(table.column(SPLIT).to_pylist(), table.column(FILE).to_pylist()))
        groups = table.column(GROUP).to_numpy()
        written = []
        start = 0
        while start < len(keys):  # rows arrive sorted by (split, file, position): one file per run
            stop = start
            while stop < len(keys) and keys[stop] == keys[start]:
                stop += 1
            split_name, file_number = keys[start]
            per_file = groups_per_file[split_name]
            first_group = file_number * per_file
            rows = table.slice(start, stop - start).select(columns).cast(file_schema)
            file_groups = groups[start:stop]
            counts = [int((file_groups == g).sum()) for g in range(first_group, first_group + per_file)]
            offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int)
            parts = [rows.slice(offsets[i], counts[i]) for i in range(per_file)]
            name = attempt_name(f"{split_name}/part-{file_number:05d}", build_id)
            size, digest = write_parquet(f"{root}/{name}", file_schema, parts, compression)
            written.append((split_name, file_number, name, size, digest, counts))
            start = stop
        yield _report_batch(written)

    partitioned = laid_out.repartition(num_files, SPLIT, FILE).sortWithinPartitions(SPLIT, FILE, POSITION)
    return sorted(WrittenFile(*r[:5], tuple(r[5])) for r in partitioned.mapInArrow(write_partition, WRITTEN_SCHEMA).collect())


def _report_batch(written: list[tuple]) -> pa.RecordBatch:
    types = [pa.string(), pa.int64(), pa.string(), pa.int64(), pa.string(), pa.list_(pa.int64())]
    return pa.RecordBatch.from_arrays(
        [pa.array([w[i] for w in written], type=t) for i, t in enumerate(types)], names=WRITTEN_SCHEMA.fieldNames()
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


def write_rejects(rejected: DataFrame, root: str, compression: str, build_id: str) -> list[WrittenFile]:
    """rejects/part-<partition>-<build>-<attempt>.parquet, one file per non-empty partition."""
    schema = arrow_schema(rejected.schema)
    options = storage.current_options()

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        storage.configure(options)
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return
        table = pa.Table.from_batches(batches).cast(schema)
        name = attempt_name(f"{contract.REJECTS_DIR}/part-{TaskContext.get().partitionId():05d}", build_id)
        size, digest = write_parquet(f"{root}/{name}", schema, [table], compression)
        yield _report_batch([(contract.REJECTS_DIR, TaskContext.get().partitionId(), name, size, digest, [table.num_rows])])

    return sorted(WrittenFile(*r[:5], tuple(r[5])) for r in rejected.mapInArrow(write_partition, WRITTEN_SCHEMA).collect())


def arrow_schema(schema: T.StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)
