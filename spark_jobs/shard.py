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
4. `write_shards`: one shuffle by (split, file); each task writes its files with pyarrow, one
   Parquet row group per planned group (empty groups included, so the count stays a multiple).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

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


def write_shards(laid_out: DataFrame, plans: dict[str, SplitPlan], columns: list[str], root: str,
                 compression: str) -> list[tuple[str, int, int, int]]:
    """Write every planned file under root/<split>/; return (split, file, group, rows) per row group."""
    num_files = sum(p.num_files for p in plans.values())
    if not num_files:
        return []
    groups_per_file = {name: plan.groups_per_file for name, plan in plans.items()}
    file_names = {name: plan.file_name(0)[: -len("00000.parquet")] for name, plan in plans.items()}
    file_schema = arrow_schema(laid_out.select(*columns).schema)
    result = T.StructType([T.StructField(SPLIT, T.StringType()), T.StructField(FILE, T.LongType()),
                           T.StructField(GROUP, T.LongType()), T.StructField("rows", T.LongType())])

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = list(batches)
        if not batches:  # two files can hash to one partition, leaving another with no rows at all
            return
        table = pa.Table.from_batches(batches)
        if not table.num_rows:
            return
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
            path = f"{root}/{file_names[split_name]}{file_number:05d}.parquet"
            rows = table.slice(start, stop - start).select(columns).cast(file_schema)
            file_groups = groups[start:stop]
            with pq.ParquetWriter(path, file_schema, compression=compression) as writer:
                offset = 0
                for group in range(first_group, first_group + per_file):
                    count = int((file_groups == group).sum())
                    writer.write_table(rows.slice(offset, count), row_group_size=max(count, 1))
                    written.append((split_name, file_number, group, count))
                    offset += count
            start = stop
        yield pa.RecordBatch.from_arrays(
            [pa.array([w[i] for w in written], type=t) for i, t in enumerate([pa.string(), pa.int64(), pa.int64(), pa.int64()])],
            names=result.fieldNames(),
        )

    partitioned = laid_out.repartition(num_files, SPLIT, FILE).sortWithinPartitions(SPLIT, FILE, POSITION)
    return [tuple(r) for r in partitioned.mapInArrow(write_partition, result).collect()]


def write_missing_files(plans: dict[str, SplitPlan], written: list[tuple[str, int, int, int]], schema: pa.Schema,
                        root: str, compression: str) -> list[tuple[str, int, int, int]]:
    """Files of a tiny split whose row groups all came out empty: write them with empty row groups,
    so every split still has its planned (multiple-of-divisible_by) number of row groups."""
    done = {(w[0], w[1]) for w in written}
    added = []
    for name, plan in plans.items():
        for file_number in range(plan.num_files):
            if (name, file_number) in done:
                continue
            with pq.ParquetWriter(f"{root}/{plan.file_name(file_number)}", schema, compression=compression) as writer:
                for group in range(file_number * plan.groups_per_file, (file_number + 1) * plan.groups_per_file):
                    writer.write_table(schema.empty_table(), row_group_size=1)
                    added.append((name, file_number, group, 0))
    return added


def arrow_schema(schema: T.StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)
