"""The pyarrow.fs row-group source: `ParquetFile(...).read_row_group` on any store pipeline.storage
opens (local, s3://, gs://, hdfs://, abfs://). Imports nothing of Petastorm or Spark."""
from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pyarrow.parquet as pq

from pipeline import storage
from training.backends import SourceFile, table_to_numpy


class PyArrowSource:
    def __init__(self, files: Sequence[SourceFile]):
        self._footers: dict[str, pq.FileMetaData] = {}  # read once per file, not once per row group
        self._lock = threading.Lock()

    def read(self, file: SourceFile, row_group: int, columns: Sequence[str]) -> dict[str, np.ndarray]:
        with storage.open_input(file.uri) as handle:
            parquet = pq.ParquetFile(handle, metadata=self._footers.get(file.uri), pre_buffer=True)
            with self._lock:
                self._footers.setdefault(file.uri, parquet.metadata)
            if row_group >= parquet.num_row_groups:
                raise IndexError(f"{file.uri} has {parquet.num_row_groups} row groups; row group {row_group} was asked for")
            return table_to_numpy(parquet.read_row_group(row_group, columns=list(columns)))

    def close(self) -> None:
        self._footers.clear()


def open_source(files: Sequence[SourceFile]) -> PyArrowSource:
    return PyArrowSource(files)
