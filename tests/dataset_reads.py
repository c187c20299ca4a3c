"""A published dataset read in tests as its manifest lists it: only those files (a stray file in
the directory is not the dataset), through the storage layer, so one helper reads local and s3://
datasets alike. Importable from every tier: tests/ is on sys.path through tests/conftest.py."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import contract, storage


def read_parquet(uri: str, columns: list[str] | None = None) -> pa.Table:
    filesystem, path = storage.filesystem(uri)
    return pq.read_table(path, columns=columns, filesystem=filesystem)


def read_files(uris: list[str], columns: list[str] | None = None) -> pa.Table | None:
    """The files' rows in order, as one table; None for no files (an empty split has none)."""
    tables = [read_parquet(uri, columns) for uri in uris]
    return pa.concat_tables(tables) if tables else None


def split_table(dataset_dir: str, split: str, columns: list[str] | None = None) -> pa.Table | None:
    manifest = contract.load_manifest(dataset_dir)
    return read_files(manifest.split_files(dataset_dir, split), columns)


def split_rows(dataset_dir: str) -> dict[str, list[dict]]:
    """Every split's rows, as dicts, in the manifest's file order."""
    return {name: (table.to_pylist() if (table := split_table(dataset_dir, name)) is not None else [])
            for name in contract.SPLITS}


def listed_rows(dataset_dir: str, files: list) -> list[dict]:
    """The rows of files a manifest lists (its rejects_files or removed_files), in order."""
    table = read_files([storage.join(dataset_dir, f.path) for f in files])
    return table.to_pylist() if table is not None else []
