"""Input records counted apart from the read: a second check on the job's accounting.

check_accounting proves that every record the read pass produced became a document, a reject or
a removed duplicate; it cannot see a record lost while reading (a line skipped at a chunk edge, a
batch dropped on its way into the JVM), since its input_records come from the same DataFrame. So a
separate Spark job reads every input file whole, with none of the read pass's chunking, batching
or DataFrame, and counts its records and bytes; the read records are counted per file, and every
file must agree before anything is published.

What one file holds, by format (the read pass's definitions): `text`/`jsonl`, the lines that are not
whitespace only, one record for a file with no bytes, and one more for a decompression error that
ends the file; with `doc_per_file`, one; `csv`, the rows the csv reader gives; `parquet`, the rows
its footer lists. A damaged parquet row group ends that file's read with one corrupt_file reject,
so such a file may hold fewer read records than its footer lists (never more).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline import storage
from pipeline.config import DataConfig
from spark_jobs import read

_COUNT_SCHEMA = T.StructType([
    T.StructField("uri", T.StringType()),
    T.StructField("records", T.LongType()),
    T.StructField("bytes", T.LongType()),  # read from the file (decompressed); -1 where not read (parquet)
])


@dataclass(frozen=True)
class FileCount:
    records: int
    bytes: int


def count_file(uri: str, fmt: str, cfg: DataConfig) -> FileCount:
    """The records one input file holds (see the module docstring), read whole."""
    if fmt == "parquet":
        try:
            with storage.open_input(uri) as handle:
                return FileCount(pq.ParquetFile(handle).metadata.num_rows, -1)
        except (OSError, pa.ArrowException):
            return FileCount(1, -1)  # the read pass's one corrupt_file reject
    if fmt == "csv":
        return FileCount(sum(1 for _ in read.CsvFile(cfg)(uri)), -1)
    one_per_file = cfg.doc_per_file and fmt == "text"
    records = size = 0
    try:
        with read.open_decompressed(uri) as handle:
            for line in handle:
                size += len(line)
                records += bool(line.strip())
    except read.READ_ERRORS:
        records += 1  # the error ends the file as one more record
    return FileCount(1 if one_per_file or not size and not records else records, size)


def count_input(spark: SparkSession, cfg: DataConfig, files: list[storage.FileEntry]) -> dict[str, FileCount]:
    """Every input file's count, keyed by its URI as the read records name it (read.SOURCE): one
    Spark job, files packed into tasks of the read pass's task size, each file read by one task."""
    fmt = read.detect_format(files, cfg.format)
    task_bytes = read.partition_bytes(sum(f.size for f in files))
    tasks = read.pack_chunks(read.plan_chunks(files, task_bytes, whole_files=True), {f.uri: f.size for f in files},
                             task_bytes)
    options = storage.current_options()

    def count_tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage.configure(options)
        for batch in batches:
            rows = [(storage.as_uri(path), count_file(path, fmt, cfg)) for index in batch.column(0).to_pylist()
                    for path, _, _ in tasks[index]]
            yield pa.RecordBatch.from_arrays(
                [pa.array([u for u, _ in rows], pa.string()), pa.array([c.records for _, c in rows], pa.int64()),
                 pa.array([c.bytes for _, c in rows], pa.int64())], names=_COUNT_SCHEMA.fieldNames())

    counted = spark.range(len(tasks), numPartitions=max(1, len(tasks))).mapInArrow(count_tasks, _COUNT_SCHEMA)
    return {row["uri"]: FileCount(row["records"], row["bytes"]) for row in counted.collect()}


def read_per_file(records: DataFrame) -> dict[str, tuple[int, int]]:
    """file URI -> (records the read pass gave, of which corrupt_file rejects)."""
    corrupt = (F.col(read.REJECT_REASON) == "corrupt_file").cast("long")
    rows = records.groupBy(read.SOURCE).agg(F.count(F.lit(1)).alias("n"), F.sum(corrupt).alias("corrupt")).collect()
    return {row[read.SOURCE]: (row["n"], row["corrupt"] or 0) for row in rows}


class InputCountError(RuntimeError):
    """The read pass gave other records than the input files hold: records lost or doubled while reading."""


def check_input_counts(counted: dict[str, FileCount], read_counts: dict[str, tuple[int, int]],
                       files: list[storage.FileEntry], fmt: str, dataset_dir: str) -> None:
    """Fail the job, before anything is published, unless each file's read records are what it holds,
    and each uncompressed text/jsonl file was counted to its last byte."""
    problems = []
    for entry in files:
        uri = storage.as_uri(entry.uri)
        count, (got, corrupt) = counted[uri], read_counts.get(uri, (0, 0))
        if fmt == "parquet" and corrupt:
            if got > count.records + 1:
                problems.append(f"{uri}: {got} records read, more than the {count.records} its footer lists")
        elif got != count.records:
            problems.append(f"{uri}: {count.records} records in the file, {got} read ({got - count.records:+d})")
        if fmt in ("text", "jsonl") and not entry.uri.endswith((".gz", ".bz2")) and count.bytes != entry.size:
            problems.append(f"{uri}: {count.bytes} of its {entry.size} bytes counted")
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more file(s)" if len(problems) > 5 else "")
        raise InputCountError(
            f"the records read do not match the input files, so the dataset was not published: {shown}. "
            f"A file changed while the job ran, or this is a bug in the job; the unpublished output is in "
            f"{dataset_dir} for the report."
        )
