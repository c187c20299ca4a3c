"""Reading a corpus: formats, explicit schemas, and bad records kept with a reason instead of lost.

`text` and `jsonl` are read by Python on the executors, one task per file chunk: Spark's own readers
turn invalid UTF-8 into U+FFFD silently and fail the whole job on a corrupt gzip member, while here
both become counted rejects. Uncompressed files are cut into `data.chunk_mb` byte ranges (a chunk
owns the lines that start inside it, as Hadoop's line reader does); gzip/bz2 files are one chunk each
because they cannot be split. `csv` and `parquet` go through Spark's readers with an explicit schema
(csv) or the footers' schema (parquet): no inference pass over the data.

Every reader returns the same columns (RECORD_SCHEMA); a row whose `reject_reason` is set is a
reject, every other row is a document.
"""
from __future__ import annotations

import bz2
import glob
import gzip
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline.config import DataConfig

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

_CORRUPT = "_corrupt_record"
_RECORD_EXCERPT = 4096  # characters of a rejected record kept in rejects/
_BATCH_ROWS = 8192  # rows per Arrow batch the Python reader yields
_COMPRESSED = (".gz", ".bz2")
_EXTENSION_FORMATS = {".txt": "text", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".csv": "csv"}


class InputError(ValueError):
    """The configured input cannot be read at all (as opposed to bad records inside it)."""


def resolve_input_files(pattern: str) -> list[str]:
    """Expand a path, directory or glob into the sorted list of data files it names."""
    if "://" in pattern and not pattern.startswith("file://"):
        return [pattern]  # remote filesystems: let Spark expand it
    pattern = pattern.removeprefix("file://")
    if os.path.isdir(pattern):
        files = [str(p) for p in sorted(Path(pattern).rglob("*")) if p.is_file() and not _hidden(p)]
    else:
        files = sorted(f for f in glob.glob(pattern, recursive=True) if os.path.isfile(f))
    if not files:
        raise InputError(f"data.input {pattern!r} matches no files; check the path or glob")
    return [os.path.abspath(f) for f in files]


def _hidden(path: Path) -> bool:
    return any(part.startswith((".", "_")) for part in path.parts[-1:])


def detect_format(files: list[str], configured: str) -> str:
    if configured != "auto":
        return configured
    suffixes = set()
    for name in files:
        stem = name[: -len(Path(name).suffix)] if name.endswith(_COMPRESSED) else name
        suffixes.add(Path(stem).suffix.lower())
    formats = {_EXTENSION_FORMATS.get(s) for s in suffixes}
    if len(formats) != 1 or None in formats:
        raise InputError(
            f"cannot tell data.format from file extensions {sorted(suffixes)}; set data.format explicitly"
        )
    return formats.pop()


def read_corpus(spark: SparkSession, cfg: DataConfig, files: list[str]) -> DataFrame:
    """All input records in RECORD_SCHEMA; rejects carry a reason, documents a null one."""
    fmt = detect_format(files, cfg.format)
    if fmt in ("text", "jsonl"):
        return _read_lines(spark, cfg, fmt, files)
    if fmt == "csv":
        fields = [T.StructField(cfg.text_column, T.StringType())]
        fields += [T.StructField(c, T.StringType()) for c in (cfg.label_column, cfg.id_column) if c]
        schema = T.StructType(fields + [T.StructField(_CORRUPT, T.StringType())])
        df = (
            spark.read.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", _CORRUPT)
            .option("header", True).option("multiLine", True).option("escape", '"').csv(files)
        )
        corrupt = F.col(_CORRUPT)
    else:  # parquet: the schema is in the file footers, no inference pass over data
        df = spark.read.parquet(*files)
        corrupt = F.lit(None).cast("string")
    return _standard_columns(df, cfg, corrupt)


def _standard_columns(df: DataFrame, cfg: DataConfig, corrupt: Column) -> DataFrame:
    missing = [c for c in (cfg.text_column, cfg.label_column, cfg.id_column) if c and c not in df.columns]
    if missing:
        raise InputError(f"input has no column(s) {missing}; columns are {df.columns}")
    text_type = df.schema[cfg.text_column].dataType

    def as_string(name: str | None) -> Column:
        return F.col(name).cast("string") if name else F.lit(None).cast("string")

    text_ok = isinstance(text_type, T.StringType)
    text = F.col(cfg.text_column) if text_ok else F.lit(None).cast("string")
    reason = F.when(corrupt.isNotNull(), F.lit("malformed_record"))
    if not text_ok:
        reason = reason.when(F.col(cfg.text_column).isNotNull(), F.lit("wrong_type"))
    reason = reason.when(F.col(cfg.text_column).isNull(), F.lit("null_text"))
    record = F.when(corrupt.isNotNull(), corrupt).when(F.lit(not text_ok), as_string(cfg.text_column))
    return df.select(
        text.alias(TEXT),
        as_string(cfg.label_column).alias(LABEL_RAW),
        as_string(cfg.id_column).alias(ID_RAW),
        F.input_file_name().alias(SOURCE),
        F.lit(None).cast("long").alias(OFFSET),
        reason.alias(REJECT_REASON),
        F.substring(record, 1, _RECORD_EXCERPT).alias(RECORD),
    )


# --- text / jsonl: Python line reader over file chunks --------------------------------------------

def plan_chunks(files: list[str], chunk_bytes: int, whole_files: bool) -> list[tuple[str, int, int]]:
    """(path, start, end) byte ranges; compressed files and doc-per-file inputs are never cut."""
    chunks = []
    for path in files:
        size = os.path.getsize(path)
        if whole_files or path.endswith(_COMPRESSED) or size <= chunk_bytes:
            chunks.append((path, 0, -1))
            continue
        chunks.extend((path, start, min(start + chunk_bytes, size)) for start in range(0, size, chunk_bytes))
    return chunks


def _read_lines(spark: SparkSession, cfg: DataConfig, fmt: str, files: list[str]) -> DataFrame:
    chunks = plan_chunks(files, cfg.chunk_mb << 20, whole_files=cfg.doc_per_file)
    # One chunk per partition, as row i of a range: the chunk list travels with the function.
    chunk_df = spark.range(len(chunks), numPartitions=len(chunks))
    parse = _JsonRecord(cfg) if fmt == "jsonl" else _TextRecord()
    doc_per_file = cfg.doc_per_file and fmt == "text"

    def read_chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                path, start, end = chunks[index]
                records = _whole_file(path) if doc_per_file else read_chunk_lines(path, start, end)
                source = Path(path).as_uri()  # as Spark's input_file_name() names csv/parquet sources
                yield from _batches(parse(raw, source, offset) for raw, offset in records)

    return chunk_df.mapInArrow(read_chunks, RECORD_SCHEMA)


# A record from a chunk: (raw bytes, offset), or (exception, offset) when the file could not be read on.
_READ_ERRORS = (OSError, EOFError, zlib.error, ValueError)  # gzip: BadGzipFile is an OSError


def _open(path: str):
    if path.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.endswith(".bz2"):
        return bz2.open(path, "rb")
    return open(path, "rb")


def read_chunk_lines(path: str, start: int, end: int) -> Iterator[tuple[bytes | Exception, int]]:
    """Lines starting in [start, end) of the file (all of it when end is -1), with their offsets.

    Whitespace-only lines are separators, not records. A file with no bytes at all yields one
    EmptyFile marker, and a decompression error ends the file with the error as its last record:
    the lines before it were read intact and stay documents.
    """
    offset = start
    try:
        with _open(path) as handle:
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
    except _READ_ERRORS as error:
        yield error, offset


def _whole_file(path: str) -> Iterator[tuple[bytes | Exception, int]]:
    try:
        with _open(path) as handle:
            data = handle.read()
    except _READ_ERRORS as error:
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


def _batches(rows: Iterator[tuple]) -> Iterator[pa.RecordBatch]:
    names = RECORD_SCHEMA.fieldNames()
    types = [pa.string(), pa.string(), pa.string(), pa.string(), pa.int64(), pa.string(), pa.string()]
    buffer: list[tuple] = []
    for row in rows:
        buffer.append(row)
        if len(buffer) == _BATCH_ROWS:
            yield _to_batch(buffer, names, types)
            buffer = []
    if buffer:
        yield _to_batch(buffer, names, types)


def _to_batch(rows: list[tuple], names: list[str], types: list[pa.DataType]) -> pa.RecordBatch:
    columns = list(zip(*rows))
    return pa.RecordBatch.from_arrays([pa.array(c, type=t) for c, t in zip(columns, types)], names=names)


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
