"""Reading a corpus: formats, explicit schemas, and bad records kept with a reason instead of lost.

Every format is read by Python on the executors through pipeline.storage, so input on s3://, gs://,
hdfs:// or local disk needs no Hadoop connector and gets the same accounting. Spark's own readers
turn invalid UTF-8 into U+FFFD silently and fail the whole job on a corrupt gzip member, while here
both become counted rejects. `text` and `jsonl`: uncompressed files are cut into byte ranges of
`partition_bytes` (a chunk owns the lines that start inside it, as Hadoop's line reader does), so
one big file is read and cleaned by many tasks; gzip/bz2 files are one chunk each because they
cannot be split; consecutive small chunks are packed into one task up to the same size, as Spark
packs small files. `csv` (header row,
every field a string) and `parquet` (the footers' schema): one task per file. There is never a
schema-inference pass over the data.

Every reader returns the same columns (RECORD_SCHEMA); a row whose `reject_reason` is set is a
reject, every other row is a document.
"""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import zlib
import math
from collections.abc import Callable, Iterator
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_type

from pipeline import inputs, storage
from pipeline.config import DataConfig
from pipeline.inputs import InputError

TEXT = "text"
LABEL_RAW = "label_raw"  # the label as found in the input (string), before mapping to an id
ID_RAW = "id_raw"  # data.id_column as found in the input (string), when configured
SOURCE = "source"  # the input file a record came from, so a reject can be traced back
OFFSET = "offset"  # byte offset of the record in the (decompressed) file; null for csv/parquet
REJECT_REASON = "reject_reason"
RECORD = "record"  # for rejects: the raw record (or the error), to find and fix it; else null

RECORD_SCHEMA = T.StructType([
    T.StructField(TEXT, T.StringType()),
    T.StructField(LABEL_RAW, T.StringType()),
    T.StructField(ID_RAW, T.StringType()),
    T.StructField(SOURCE, T.StringType()),
    T.StructField(OFFSET, T.LongType()),
    T.StructField(REJECT_REASON, T.StringType()),
    T.StructField(RECORD, T.StringType()),
])
REJECT_COLUMNS = [SOURCE, OFFSET, REJECT_REASON, RECORD, TEXT, LABEL_RAW]  # what rejects/ keeps


class RecordJudge(Protocol):
    """Columns computed from the records' texts in the task that read them (quality.RemovalMarker),
    so the text crosses from Python into the JVM once, with its verdicts."""

    fields: list[T.StructField]

    def __call__(self, texts: list[str | None], reject_reasons: list[str | None]) -> list[pa.Array]: ...


_RECORD_EXCERPT = 4096  # characters of a rejected record kept in rejects/
_BATCH_ROWS = 8192  # rows per Arrow batch the Python reader yields
_COMPRESSED = (".gz", ".bz2")
_EXTENSION_FORMATS = {".txt": "text", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".csv": "csv"}


# Bytes of input per task, from the input's size alone (1/64 of it, within these bounds): never from
# the cluster's core count, so the same corpus gives the same partitions, and the same shards, on
# any cluster; a 1 GB corpus makes 64 tasks, a 1 TB one 8,192, and no default caps a big cluster.
MIN_PARTITION_BYTES = 4 << 20  # below this, per-task overhead (~50 ms) outweighs the work
MAX_PARTITION_BYTES = 128 << 20  # Spark's spark.sql.files.maxPartitionBytes default
_PARTITIONS_PER_INPUT = 64


def partition_bytes(total_bytes: int) -> int:
    """Input bytes per read task and per tokenizing partition (see MIN/MAX_PARTITION_BYTES)."""
    return min(MAX_PARTITION_BYTES, max(MIN_PARTITION_BYTES, math.ceil(total_bytes / _PARTITIONS_PER_INPUT)))


def num_partitions_for(files: list[storage.FileEntry], configured: int | None) -> int:
    """Partitions documents are hashed into before tokenization: configured, else one per
    partition_bytes of input."""
    if configured is not None:
        return configured
    total = sum(f.size for f in files)
    return max(1, math.ceil(total / partition_bytes(total)))


def resolve_input_files(pattern: str) -> list[storage.FileEntry]:
    """Expand a path, directory or glob on any store into its data files (see pipeline.inputs)."""
    return inputs.resolve_input_files(pattern)


def detect_format(files: list, configured: str) -> str:
    if configured != "auto":
        return configured
    suffixes = set()
    for entry in files:
        name = storage.basename(entry.uri if isinstance(entry, storage.FileEntry) else entry)
        stem = name[: -len(name.rpartition(".")[2]) - 1] if name.endswith(_COMPRESSED) else name
        suffixes.add("." + stem.rpartition(".")[2].lower() if "." in stem else "")
    formats = {_EXTENSION_FORMATS.get(s) for s in suffixes}
    if len(formats) != 1 or None in formats:
        raise InputError(
            f"cannot tell data.format from file extensions {sorted(suffixes)}; set data.format explicitly"
        )
    return formats.pop()


TextCleaner = Callable[[list], list]  # texts (None for rejects) -> cleaned texts, in the reading task


def read_corpus(spark: SparkSession, cfg: DataConfig, files: list[storage.FileEntry],
                clean_text: TextCleaner | None = None, judge: RecordJudge | None = None) -> DataFrame:
    """All input records in RECORD_SCHEMA (then judge.fields); rejects carry a reason, documents a
    null one.

    Every format is read by Python on the executors through the storage layer, so s3://, gs://,
    hdfs:// and local input need no Hadoop connector and get exactly the same bad-record accounting.
    `clean_text` (clean.TextCleaner), then `judge`, run on each batch in the task that read it: the
    text crosses from Python into the JVM once, already cleaned and judged."""
    steps = _BatchSteps(clean_text, judge)
    fmt = detect_format(files, cfg.format)
    if fmt in ("text", "jsonl"):
        return _read_lines(spark, cfg, fmt, files, steps)
    if fmt == "csv":
        _check_csv_headers(cfg, files)
        return _read_per_file(spark, files, CsvFile(cfg), steps)
    _check_parquet_schemas(cfg, files)
    return _read_per_file(spark, files, _ParquetFile(cfg), steps)


def _wanted_columns(cfg: DataConfig) -> list[str]:
    return [c for c in (cfg.text_column, cfg.label_column, cfg.id_column) if c]


def _check_csv_headers(cfg: DataConfig, files: list[storage.FileEntry]) -> None:
    for entry in files:
        try:
            with open_decompressed(entry.uri) as handle:
                text = io.TextIOWrapper(handle, encoding="utf-8", errors="replace", newline="")
                header = next(csv.reader(text), None)
        except (csv.Error, *READ_ERRORS):
            continue  # a damaged file is rejected by the read pass, not a configuration problem
        if header is None:
            continue  # so is an empty one (no bytes, or none once decompressed): one empty_file reject
        missing = [c for c in _wanted_columns(cfg) if c not in header]
        if missing:
            raise InputError(f"{entry.uri} has no column(s) {missing}; its header is {header}")


def _check_parquet_schemas(cfg: DataConfig, files: list[storage.FileEntry]) -> None:
    for entry in files:
        with storage.open_input(entry.uri) as handle:
            names = pq.read_schema(handle).names
        missing = [c for c in _wanted_columns(cfg) if c not in names]
        if missing:
            raise InputError(f"{entry.uri} has no column(s) {missing}; its columns are {names}")


def _read_per_file(spark: SparkSession, files: list[storage.FileEntry], parse, steps: _BatchSteps) -> DataFrame:
    """One task per file; `parse(uri)` yields RECORD_SCHEMA tuples."""
    uris = [f.uri for f in files]
    options = storage.current_options()

    def read_files(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage.configure(options)
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from _batches(parse(uris[index]), steps)

    return spark.range(len(uris), numPartitions=max(1, len(uris))).mapInArrow(read_files, steps.schema)


class CsvFile:
    """A csv file with a header row (`.gz` and `.bz2` decompressed, as line files are): quoted fields
    may span lines; a row whose field count differs from the header's, or that the csv module cannot
    parse, is malformed_record; undecodable bytes are invalid_utf8 (Spark's reader would silently
    turn them into U+FFFD); a decompression error ends the file as one corrupt_file record."""

    def __init__(self, cfg: DataConfig):
        self.cfg = cfg

    def __call__(self, uri: str) -> Iterator[tuple]:
        source = storage.as_uri(uri)
        try:
            raw = open_decompressed(uri)
        except OSError as error:
            yield _error_reject(error, source, 0)
            return
        with raw:
            text = io.TextIOWrapper(raw, encoding="utf-8", errors="surrogateescape", newline="")
            rows = csv.reader(text, strict=True)
            try:
                header = next(rows, None)
            except csv.Error as error:
                yield _reject("malformed_record", source, None, f"header: {error}")
                return
            except READ_ERRORS as error:
                yield _error_reject(error, source, 0)
                return
            if header is None:
                yield _error_reject(EmptyFile(), source, 0)
                return
            position = {name: header.index(name) for name in _wanted_columns(self.cfg)}
            while True:
                try:
                    row = next(rows)
                except StopIteration:
                    return
                except csv.Error as error:
                    yield _reject("malformed_record", source, None, f"line {rows.line_num}: {error}")
                    continue
                except READ_ERRORS as error:
                    yield _error_reject(error, source, None)
                    return
                if len(row) < len(header) and not any(field.strip() for field in row):
                    continue  # a blank line separates records, as in text and jsonl
                # A row of the header's width is a record even when every field is blank (e.g.
                # `"\n\t",""`): the writer meant a record, so it is counted (and rejected as empty_text).
                yield self._record(row, header, position, source)

    def _record(self, row: list[str], header: list[str], position: dict[str, int], source: str) -> tuple:
        raw = ",".join(row)
        if len(row) != len(header):
            return _reject("malformed_record", source, None, raw.encode("utf-8", "surrogateescape"))
        if any(_has_surrogates(field) for field in row):
            return _reject("invalid_utf8", source, None, raw.encode("utf-8", "surrogateescape"))
        cfg = self.cfg
        label = row[position[cfg.label_column]] if cfg.label_column else None
        doc_id = row[position[cfg.id_column]] if cfg.id_column else None
        return (row[position[cfg.text_column]], label, doc_id, source, None, None, None)


def _has_surrogates(text: str) -> bool:
    return any("\udc80" <= ch <= "\udcff" for ch in text) if not text.isascii() else False


class _ParquetFile:
    """A parquet file, row group by row group, schema from its footer: a text column that is not a
    string is wrong_type (null: null_text); label and id are cast to strings."""

    def __init__(self, cfg: DataConfig):
        self.cfg = cfg

    def __call__(self, uri: str) -> Iterator[tuple]:
        source = storage.as_uri(uri)
        cfg = self.cfg
        try:
            handle = storage.open_input(uri)
            parquet = pq.ParquetFile(handle)
        except (OSError, pa.ArrowException) as error:
            yield _error_reject(error, source, None)
            return
        with handle:
            for group in range(parquet.metadata.num_row_groups):
                try:
                    table = parquet.read_row_group(group, columns=_wanted_columns(cfg))
                except (OSError, pa.ArrowException) as error:
                    yield _error_reject(error, source, None)
                    return
                texts = table.column(cfg.text_column)
                text_ok = pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type)
                labels = _as_strings(table, cfg.label_column)
                ids = _as_strings(table, cfg.id_column)
                for i, text in enumerate(texts.to_pylist()):
                    if text is None:
                        yield (None, labels[i], ids[i], source, None, "null_text", None)
                    elif not text_ok:
                        yield (None, labels[i], ids[i], source, None, "wrong_type", str(text)[:_RECORD_EXCERPT])
                    else:
                        yield (text, labels[i], ids[i], source, None, None, None)


def _as_strings(table: pa.Table, column: str | None) -> list:
    if not column:
        return [None] * table.num_rows
    values = table.column(column)
    try:
        return pc.cast(values, pa.string()).to_pylist()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return [None if v is None else json.dumps(v, default=str) for v in values.to_pylist()]


# --- text / jsonl: Python line reader over file chunks --------------------------------------------

def plan_chunks(files: list[storage.FileEntry], chunk_bytes: int, whole_files: bool) -> list[tuple[str, int, int]]:
    """(uri, start, end) byte ranges; compressed files and doc-per-file inputs are never cut."""
    chunks = []
    for entry in files:
        path, size = entry.uri, entry.size
        if whole_files or path.endswith(_COMPRESSED) or size <= chunk_bytes:
            chunks.append((path, 0, -1))
            continue
        chunks.extend((path, start, min(start + chunk_bytes, size)) for start in range(0, size, chunk_bytes))
    return chunks


def pack_chunks(chunks: list[tuple[str, int, int]], sizes: dict[str, int], task_bytes: int) -> list[list[tuple[str, int, int]]]:
    """Consecutive chunks grouped into read tasks of at most task_bytes (a chunk bigger than that
    is a task alone): many small files do not each cost a task."""
    tasks: list[list[tuple[str, int, int]]] = []
    filled = 0
    for chunk in chunks:
        path, start, end = chunk
        size = (sizes[path] if end < 0 else end) - start
        if not tasks or filled + size > task_bytes:  # the first chunk (empty files too) opens a task
            tasks.append([])
            filled = 0
        tasks[-1].append(chunk)
        filled += size
    return tasks


def _read_lines(spark: SparkSession, cfg: DataConfig, fmt: str, files: list[storage.FileEntry],
                steps: _BatchSteps) -> DataFrame:
    task_bytes = (cfg.chunk_mb << 20) if cfg.chunk_mb else partition_bytes(sum(f.size for f in files))
    tasks = pack_chunks(plan_chunks(files, task_bytes, whole_files=cfg.doc_per_file),
                        {f.uri: f.size for f in files}, task_bytes)
    # One task per partition, as row i of a range: the task list travels with the function.
    task_df = spark.range(len(tasks), numPartitions=max(1, len(tasks)))
    parse = _JsonRecord(cfg) if fmt == "jsonl" else _TextRecord()
    doc_per_file = cfg.doc_per_file and fmt == "text"
    options = storage.current_options()

    def read_chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        storage.configure(options)  # the driver's storage options, in this executor's process
        for batch in batches:
            for index in batch.column(0).to_pylist():
                for path, start, end in tasks[index]:
                    records = _whole_file(path) if doc_per_file else read_chunk_lines(path, start, end)
                    source = storage.as_uri(path)  # file:///… for local files, as Spark names its inputs
                    yield from _batches((parse(raw, source, offset) for raw, offset in records), steps)

    return task_df.mapInArrow(read_chunks, steps.schema)


# A record from a chunk: (raw bytes, offset), or (exception, offset) when the file could not be read on.
READ_ERRORS = (OSError, EOFError, zlib.error, ValueError)  # gzip: BadGzipFile is an OSError


def open_decompressed(uri: str):
    raw = storage.open_binary(uri)
    if uri.endswith(".gz"):
        return gzip.open(raw, "rb")
    if uri.endswith(".bz2"):
        return bz2.open(raw, "rb")
    return raw


def read_chunk_lines(path: str, start: int, end: int) -> Iterator[tuple[bytes | Exception, int]]:
    """Lines starting in [start, end) of the file (all of it when end is -1), with their offsets.

    Whitespace-only lines are separators, not records. A file with no bytes at all yields one
    EmptyFile marker, and a decompression error ends the file with the error as its last record:
    the lines before it were read intact and stay documents.
    """
    offset = start
    try:
        with open_decompressed(path) as handle:
            if start > 0:
                # The line running across `start` belongs to the previous chunk.
                handle.seek(start - 1)
                offset = start - 1 + len(handle.readline())
            empty = True
            while end < 0 or offset < end:
                line = handle.readline()
                if not line:
                    break
                empty = False
                if line.strip():
                    yield line.rstrip(b"\r\n"), offset
                offset += len(line)
            if empty and start == 0:
                yield EmptyFile(), 0
    except READ_ERRORS as error:
        yield error, offset


def _whole_file(path: str) -> Iterator[tuple[bytes | Exception, int]]:
    try:
        with open_decompressed(path) as handle:
            data = handle.read()
    except READ_ERRORS as error:
        yield error, 0
        return
    yield (data if data else EmptyFile()), 0


class EmptyFile(Exception):
    """Marks a file with no bytes: one reject, so the file is accounted for."""


def _reject(reason: str, path: str, offset: int, record: object) -> tuple:
    if isinstance(record, bytes):
        record = record[: _RECORD_EXCERPT * 4].decode("utf-8", "backslashreplace")
    return (None, None, None, path, offset, reason, str(record)[:_RECORD_EXCERPT])


def _error_reject(error: Exception, path: str, offset: int) -> tuple:
    if isinstance(error, EmptyFile):
        return _reject("empty_file", path, offset, "")
    return _reject("corrupt_file", path, offset, f"{type(error).__name__}: {error}")


class _TextRecord:
    def __call__(self, raw: bytes | Exception, path: str, offset: int) -> tuple:
        if isinstance(raw, Exception):
            return _error_reject(raw, path, offset)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _reject("invalid_utf8", path, offset, raw)
        return (text, None, None, path, offset, None, None)


class _JsonRecord:
    def __init__(self, cfg: DataConfig):
        self.text_field, self.label_field, self.id_field = cfg.text_column, cfg.label_column, cfg.id_column

    def __call__(self, raw: bytes | Exception, path: str, offset: int) -> tuple:
        if isinstance(raw, Exception):
            return _error_reject(raw, path, offset)
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            return _reject("invalid_utf8", path, offset, raw)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's json can parse
            return _reject("malformed_record", path, offset, raw)
        if not isinstance(record, dict):
            return _reject("malformed_record", path, offset, raw)
        text = record.get(self.text_field)
        label = record.get(self.label_field) if self.label_field else None
        doc_id = record.get(self.id_field) if self.id_field else None
        if text is not None and not isinstance(text, str):
            return _reject("wrong_type", path, offset, raw)
        for value in (label, doc_id):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int))):
                return _reject("wrong_type", path, offset, raw)
        if any(isinstance(value, str) and not _is_unicode(value) for value in (text, label, doc_id)):
            return _reject("invalid_utf8", path, offset, raw)  # a lone surrogate escape such as \ud800
        reason = "null_text" if text is None else None
        return (
            text, None if label is None else str(label), None if doc_id is None else str(doc_id),
            path, offset, reason, raw.decode("utf-8")[:_RECORD_EXCERPT] if reason else None,
        )


def _is_unicode(text: str) -> bool:
    """False for a string holding a lone surrogate (valid JSON escape, not a character): Arrow
    cannot store it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _BatchSteps:
    """What the read task does to each batch of RECORD_SCHEMA tuples before the JVM gets it: clean
    the texts, then add the judge's columns."""

    _TYPES = [to_arrow_type(field.dataType) for field in RECORD_SCHEMA.fields]
    _TEXT, _REJECT_REASON = RECORD_SCHEMA.fieldNames().index(TEXT), RECORD_SCHEMA.fieldNames().index(REJECT_REASON)

    def __init__(self, clean_text: TextCleaner | None, judge: RecordJudge | None):
        self.clean_text, self.judge = clean_text, judge
        self.schema = RECORD_SCHEMA if judge is None else T.StructType(RECORD_SCHEMA.fields + judge.fields)
        self.names = self.schema.fieldNames()

    def __call__(self, rows: list[tuple]) -> pa.RecordBatch:
        columns = list(zip(*rows))
        if self.clean_text is not None:
            columns[self._TEXT] = self.clean_text(list(columns[self._TEXT]))
        arrays = [pa.array(c, type=t) for c, t in zip(columns, self._TYPES)]
        if self.judge is not None:
            arrays += self.judge(list(columns[self._TEXT]), list(columns[self._REJECT_REASON]))
        return pa.RecordBatch.from_arrays(arrays, names=self.names)


def _batches(rows: Iterator[tuple], to_batch: _BatchSteps) -> Iterator[pa.RecordBatch]:
    buffer: list[tuple] = []
    for row in rows:
        buffer.append(row)
        if len(buffer) == _BATCH_ROWS:
            yield to_batch(buffer)
            buffer = []
    if buffer:
        yield to_batch(buffer)


# --- rejects ----------------------------------------------------------------------------------------

def with_reason(df: DataFrame, condition: Column, reason: str) -> DataFrame:
    """Set reject_reason to `reason` where the condition holds and no earlier reason is set."""
    return df.withColumn(
        REJECT_REASON, F.coalesce(F.col(REJECT_REASON), F.when(condition, F.lit(reason)))
    )


def split_rejects(df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(documents without the reject columns, rejects in rejects/ layout)."""
    good = df.filter(F.col(REJECT_REASON).isNull()).drop(REJECT_REASON, RECORD)
    rejected = df.filter(F.col(REJECT_REASON).isNotNull())
    return good, rejected.select(*[c for c in REJECT_COLUMNS if c in rejected.columns])
