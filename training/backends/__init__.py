"""Row-group sources: the one thing the reader asks of a storage backend.

The reader plans from the manifest (which row groups, in what order, on which rank) and asks a
source only for "row group i of file f, these columns, as numpy arrays". Two sources:

- `petastorm` (the default where it is installed: the `petastorm` stack): Petastorm 0.12.1's `ArrowReaderWorker` (the worker `make_batch_reader`
  runs) over the file's row-group pieces, set up once per file; on s3:// through
  `pyarrow.filesystem.S3FSWrapper` over s3fs 0.4.2.
- `pyarrow` (the default on the `current` stack, which has no Petastorm): `pyarrow.fs` +
  `ParquetFile.read_row_group`; imports nothing of Petastorm or Spark, so it runs on numpy 2 and a
  current pyarrow.
`reader.backend: auto` picks between them by what is installed (resolve_backend).

A source must be safe to call from several threads at once (the reader reads ahead in parallel).
"""
from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from pipeline.errors import ShardlineError

BACKENDS = {  # name -> module holding its `open_source(files)`, imported only when chosen
    "petastorm": "training.backends.petastorm_source",
    "pyarrow": "training.backends.pyarrow_source",
}


@dataclass(frozen=True)
class SourceFile:
    """One data file as the manifest lists it."""

    uri: str
    bytes: int
    row_group_rows: tuple[int, ...]
    sha256: str = ""


class RowGroupSource(Protocol):
    def read(self, file: SourceFile, row_group: int, columns: Sequence[str]) -> dict[str, np.ndarray]:
        """Row group `row_group` (0-based, within the file) of `file`: column name -> array, one row
        per entry (list columns as a 2-D array)."""

    def close(self) -> None:
        """Release what the source holds (connections, clients)."""


class BackendUnavailableError(ShardlineError):
    """reader.backend names a source whose library this environment does not have."""


def resolve_backend(backend: str) -> str:
    """The source reader.backend means here: `auto` is petastorm where Petastorm is installed, else
    pyarrow; `petastorm` without Petastorm (the current stack) is a one-line error."""
    installed = importlib.util.find_spec("petastorm") is not None
    if backend == "auto":
        return "petastorm" if installed else "pyarrow"
    if backend == "petastorm" and not installed:
        raise BackendUnavailableError(
            "reader.backend: petastorm needs Petastorm, which this environment (the current stack) does not "
            "install; use reader.backend: pyarrow (or auto), or train on the petastorm stack "
            "(SHARDLINE_STACK=petastorm, Python 3.10-3.12)")
    if backend not in BACKENDS:
        raise ValueError(f"reader.backend {backend!r} is not one of {['auto', *sorted(BACKENDS)]}")
    return backend


def open_source(backend: str, files: Sequence[SourceFile]) -> RowGroupSource:
    """A source for `files` (every file it will be asked for)."""
    return importlib.import_module(BACKENDS[resolve_backend(backend)]).open_source(files)


def table_to_numpy(table: pa.Table) -> dict[str, np.ndarray]:
    return {name: column_to_numpy(table.column(name)) for name in table.column_names}


def column_to_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A column as numpy; a list column (one length per the contract) as a rows x length array, in
    one reshape of the flat values rather than one array per row."""
    if isinstance(column, pa.ChunkedArray):
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    else:
        array = column
    if pa.types.is_list(array.type):
        lengths = np.diff(array.offsets.to_numpy())
        if len(lengths) and (lengths != lengths[0]).any():
            raise ValueError(f"column has lists of lengths {sorted(set(lengths.tolist()))}; the contract says one length")
        values = array.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(len(array), -1) if len(array) else values.reshape(0, 0)
    return array.to_numpy(zero_copy_only=False)
