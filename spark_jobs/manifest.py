"""Finishing a dataset: per-split statistics from the written files, the manifest, then _SUCCESS.

The manifest and _SUCCESS are written last, inside the temporary directory, and the directory is
moved into place in one rename: a reader sees no dataset or a whole one.
"""
from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq

from pipeline import contract


def parquet_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.parquet") if not p.name.startswith((".", "_")))


def row_group_rows(directory: Path) -> list[int]:
    """Rows in each row group of each Parquet file, in file order (read from footers only)."""
    rows: list[int] = []
    for path in parquet_files(directory):
        metadata = pq.ParquetFile(path).metadata
        rows.extend(metadata.row_group(i).num_rows for i in range(metadata.num_row_groups))
    return rows


def new_staging_dir(final_dir: Path) -> Path:
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    return final_dir.parent / f".{final_dir.name}.tmp-{uuid.uuid4().hex[:8]}"


def publish(staging_dir: Path, final_dir: Path, manifest: contract.Manifest) -> None:
    """Write manifest + _SUCCESS into staging, then swap it in for final_dir."""
    contract.write_json_atomic(staging_dir / contract.MANIFEST_FILE, manifest.model_dump(mode="json"))
    (staging_dir / contract.SUCCESS_FILE).write_text("")
    if final_dir.exists():
        # A forced rebuild: move the old dataset aside first so the swap itself is one rename.
        retired = final_dir.parent / f".{final_dir.name}.old-{int(time.time())}-{uuid.uuid4().hex[:6]}"
        os.replace(final_dir, retired)
        os.replace(staging_dir, final_dir)
        shutil.rmtree(retired, ignore_errors=True)
    else:
        os.replace(staging_dir, final_dir)
