"""Finishing a dataset: per-split statistics, the manifest, then _SUCCESS.

The manifest and _SUCCESS are written last, inside the temporary directory, and the directory is
moved into place in one rename: a reader sees no dataset or a whole one.
"""
from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline import contract
from spark_jobs.encode import DOC_LENGTHS, DOCUMENTS, DROPPED, SPLIT, TRUNCATED


def parquet_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.parquet") if not p.name.startswith((".", "_")))


def row_group_rows(directory: Path) -> list[int]:
    """Rows in each row group of each Parquet file, in file order (read from footers only)."""
    rows: list[int] = []
    for path in parquet_files(directory):
        metadata = pq.ParquetFile(path).metadata
        rows.extend(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    return rows


def token_stats(encoded: DataFrame) -> dict[str, dict]:
    """Per split, from the encoded rows (dropped blocks included): what the manifest reports."""
    written = ~F.col(DROPPED)
    totals = {
        r[SPLIT]: r.asDict()
        for r in encoded.groupBy(SPLIT).agg(
            F.sum(F.when(written, 1).otherwise(0)).alias("rows"),
            F.sum(F.when(written, F.col(contract.NUM_TOKENS)).otherwise(0)).alias("tokens"),
            F.sum(F.when(~written, F.col(contract.NUM_TOKENS)).otherwise(0)).alias("dropped_tokens"),
            F.sum(DOCUMENTS).alias("documents"),
            F.sum(TRUNCATED).alias("truncated_documents"),
        ).collect()
    }
    lengths = encoded.select(SPLIT, F.explode(DOC_LENGTHS).alias("n"))
    bins = F.greatest(F.lit(8), F.pow(F.lit(2), F.ceil(F.log2(F.greatest(F.col("n"), F.lit(1)))))).cast("long")
    for r in lengths.groupBy(SPLIT, bins.alias("bin")).count().collect():
        histogram = totals[r[SPLIT]].setdefault("length_histogram", {})
        histogram[f"<={r['bin']}"] = r["count"]
    return totals


def split_stats(directory: Path, totals: dict | None, max_length: int) -> contract.SplitStats:
    """A split's stats: rows and row groups from the Parquet footers, the rest from token_stats."""
    totals = totals or {}
    groups = row_group_rows(directory)
    rows, documents = sum(groups), int(totals.get("documents") or 0)
    tokens = int(totals.get("tokens") or 0)
    padding = rows * max_length - tokens
    truncated = int(totals.get("truncated_documents") or 0)
    histogram = totals.get("length_histogram", {})
    return contract.SplitStats(
        rows=rows,
        tokens=tokens,
        num_files=len(parquet_files(directory)),
        num_row_groups=len(groups),
        row_group_rows=groups,
        documents=documents,
        padding_tokens=padding,
        padding_fraction=round(padding / (rows * max_length), 6) if rows else 0.0,
        truncated_documents=truncated,
        truncated_fraction=round(truncated / documents, 6) if documents else 0.0,
        dropped_tokens=int(totals.get("dropped_tokens") or 0),
        length_histogram=dict(sorted(histogram.items(), key=lambda kv: int(kv[0][2:]))),
    )


def versions(spark_version: str) -> dict[str, str]:
    import numpy
    import pyarrow
    import tokenizers
    import transformers

    return {
        "python": sys.version.split()[0],
        "spark": spark_version,
        "pyarrow": pyarrow.__version__,
        "numpy": numpy.__version__,
        "tokenizers": tokenizers.__version__,
        "transformers": transformers.__version__,
    }


def new_staging_dir(final_dir: Path) -> Path:
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    return final_dir.parent / f".{final_dir.name}.tmp-{uuid.uuid4().hex[:8]}"


def publish(staging_dir: Path, final_dir: Path, manifest: contract.Manifest) -> None:
    """Write manifest + _SUCCESS into staging, then swap it in for final_dir."""
    contract.write_json_atomic(staging_dir / contract.MANIFEST_FILE, manifest.model_dump(mode="json"))
    (staging_dir / contract.SUCCESS_FILE).write_text("")
    contract.swap_in_dir(staging_dir, final_dir)
