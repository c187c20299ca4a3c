"""Reading a corpus into a DataFrame of (text, label, source), with explicit schemas.

Records that cannot be used are not dropped here: they come back with a non-null `reject_reason`,
and `split_rejects` separates them so the job can write and count them.
"""
from __future__ import annotations

import glob
import os
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline.config import DataConfig

TEXT = "text"
LABEL_RAW = "label_raw"  # the label as found in the input (string), before mapping to an id
SOURCE = "source"  # the input file a record came from, so a reject can be traced back
REJECT_REASON = "reject_reason"
CORRUPT = "_corrupt_record"

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
        stem = name[: -len(Path(name).suffix)] if name.endswith((".gz", ".bz2")) else name
        suffixes.add(Path(stem).suffix.lower())
    formats = {_EXTENSION_FORMATS.get(s) for s in suffixes}
    if len(formats) != 1 or None in formats:
        raise InputError(
            f"cannot tell data.format from file extensions {sorted(suffixes)}; set data.format explicitly"
        )
    return formats.pop()


def read_corpus(spark: SparkSession, cfg: DataConfig, files: list[str]) -> DataFrame:
    """Columns: text (string), label_raw (string or null), source (string), reject_reason."""
    fmt = detect_format(files, cfg.format)
    label = cfg.label_column
    if fmt == "text":
        df = spark.read.text(files).withColumnRenamed("value", TEXT)
        df = df.withColumn(LABEL_RAW, F.lit(None).cast("string")).withColumn(CORRUPT, F.lit(None).cast("string"))
    elif fmt in ("jsonl", "csv"):
        fields = [T.StructField(cfg.text_column, T.StringType())]
        if label:
            fields.append(T.StructField(label, T.StringType()))
        schema = T.StructType(fields + [T.StructField(CORRUPT, T.StringType())])
        reader = spark.read.schema(schema).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
        if fmt == "jsonl":
            df = reader.json(files)
        else:
            df = reader.option("header", True).option("multiLine", True).option("escape", '"').csv(files)
        df = _standard_columns(df, cfg)
    else:  # parquet: the schema is in the file footers, no inference pass over data
        df = _standard_columns(spark.read.parquet(*files).withColumn(CORRUPT, F.lit(None).cast("string")), cfg)
    df = df.withColumn(SOURCE, F.input_file_name())
    return df.withColumn(REJECT_REASON, _reject_reason(needs_label=label is not None)).drop(CORRUPT)


def _standard_columns(df: DataFrame, cfg: DataConfig) -> DataFrame:
    missing = [c for c in (cfg.text_column, cfg.label_column) if c and c not in df.columns]
    if missing:
        raise InputError(f"input has no column(s) {missing}; columns are {df.columns}")
    label = F.col(cfg.label_column).cast("string") if cfg.label_column else F.lit(None).cast("string")
    return df.select(F.col(cfg.text_column).cast("string").alias(TEXT), label.alias(LABEL_RAW), F.col(CORRUPT))


def _reject_reason(needs_label: bool) -> Column:
    reason = (
        F.when(F.col(CORRUPT).isNotNull(), F.lit("malformed_record"))
        .when(F.col(TEXT).isNull(), F.lit("null_text"))
        .when(F.length(F.trim(F.col(TEXT))) == 0, F.lit("empty_text"))
    )
    if needs_label:
        reason = reason.when(
            F.col(LABEL_RAW).isNull() | (F.length(F.trim(F.col(LABEL_RAW))) == 0), F.lit("missing_label")
        )
    return reason


def split_rejects(df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(good records without the reason column, rejected records with it)."""
    good = df.filter(F.col(REJECT_REASON).isNull()).drop(REJECT_REASON)
    rejected = df.filter(F.col(REJECT_REASON).isNotNull())
    return good, rejected
