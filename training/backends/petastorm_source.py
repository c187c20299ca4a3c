"""The Petastorm row-group source: Petastorm 0.12.1's own reading code, set up once per manifest file
and then asked for one row group at a time.

Per file (and column set), once: Petastorm's filesystem resolution of the file's URL, its legacy
`ParquetDataset`, its Unischema (inferred from the Parquet schema, viewed down to the columns), its
row-group pieces (`dataset_metadata.load_row_groups`, one per row group, in file order) and an
`ArrowReaderWorker`, the worker `make_batch_reader` runs. Per read: that worker's `process(piece)`,
which opens the file and reads the one row group through Petastorm (`ParquetDatasetPiece.read`).

What is left out is `make_batch_reader`'s scheduling (a `Reader`, a thread pool, a ventilator and a
results queue per call), which the reader's plan replaces: building it per row group cost ~5 ms of
Python per row group (three `ParquetDataset`s, three footer reads, four threads started and joined)
competing for the GIL with the shuffle's gather. `ArrowReaderWorker(worker_id, publish_func, args)`
and its `args` tuple are Petastorm internals, the ones `Reader.__init__` passes; petastorm is pinned
to 0.12.1 (constraints.txt), and tests/unit/test_reader.py reads both backends against each other.

On s3:// Petastorm 0.12.1 cannot use `storage_options` (it asks pyarrow 14's new Dataset API for
`validate_schema`, which that API does not support), and `pyarrow.filesystem.S3FSWrapper` only works
over a synchronous s3fs: 0.4.2 is the last one (0.5+ returns coroutines). The endpoint, region,
timeouts and retries come from the same storage options as everything else; credentials from
boto's standard chain, as for pyarrow.
"""
from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Sequence

import numpy as np

from pipeline import storage
from training.backends import SourceFile, table_to_numpy

# Petastorm 0.12 calls pyarrow APIs deprecated since pyarrow 3-11; they warn on every call.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"petastorm(\.|$)")
warnings.filterwarnings("ignore", category=FutureWarning, message=r".*pyarrow\.filesystem.*deprecated")
warnings.filterwarnings("ignore", category=FutureWarning, message=r".*ParquetDataset.*")
# Petastorm needs the legacy ParquetDataset (its pieces); pyarrow 14 warns each time one is built.
warnings.filterwarnings("ignore", category=FutureWarning, message=r"Passing 'use_legacy_dataset=True'")
# fsspec warns about any s3fs older than 0.5; 0.4.2 is the pin on purpose (see the module docstring).
warnings.filterwarnings("ignore", category=UserWarning, message=r"Your installed version of s3fs is very old")

import pyarrow.parquet as pq  # noqa: E402
from petastorm.arrow_reader_worker import ArrowReaderWorker  # noqa: E402  (imported only when chosen)
from petastorm.cache import NullCache  # noqa: E402
from petastorm.etl import dataset_metadata  # noqa: E402
from petastorm.fs_utils import get_filesystem_and_path_or_paths  # noqa: E402
from petastorm.reader import normalize_dataset_url_or_urls  # noqa: E402


class _PetastormFile:
    """One file's Petastorm set-up, as `make_batch_reader([url], schema_fields=columns)` builds it."""

    def __init__(self, url: str, columns: Sequence[str], filesystem, published: threading.local):
        urls = normalize_dataset_url_or_urls([url])
        fs, paths = get_filesystem_and_path_or_paths(urls, filesystem=filesystem)
        dataset = pq.ParquetDataset(paths, filesystem=fs, validate_schema=False)
        schema = dataset_metadata.infer_or_load_unischema(dataset).create_schema_view(
            [re.escape(name) for name in columns]  # patterns matched against whole names
        )
        self.pieces = dataset_metadata.load_row_groups(dataset)  # one file: its row groups, in order
        self._published = published
        # Reader.__init__'s args: filesystem, paths, schema, ngram, pieces, cache, transform_spec,
        # transformed schema, filters, shuffle_rows, seed.
        args = (fs, paths, schema, None, self.pieces, NullCache(), None, schema, None, False, None)
        self._worker = ArrowReaderWorker(0, self._publish, args)

    def _publish(self, table) -> None:
        self._published.tables.append(table)

    def read(self, row_group: int) -> list:
        """The row group's tables, as the worker publishes them. `process` runs on the calling thread
        and opens its own file, so several threads may read one file at once: each collects what it
        publishes in its own thread-local list. (The worker builds its ParquetDataset on first use;
        two threads racing there both build an equal one and one is kept.)"""
        self._published.tables = []
        self._worker.process(row_group, None, (0, 1))  # no predicate; the whole row group
        return self._published.tables


class PetastormSource:
    def __init__(self, files: Sequence[SourceFile]):
        self._filesystem = None
        if any(storage.scheme(f.uri) == "s3" for f in files):
            self._filesystem = _s3fs_wrapper()
        self._files: dict[tuple[str, tuple[str, ...]], _PetastormFile] = {}
        self._lock = threading.Lock()
        self._published = threading.local()

    def _file(self, file: SourceFile, columns: tuple[str, ...]) -> _PetastormFile:
        key = (file.uri, columns)
        with self._lock:  # built once per file: concurrent first reads of one file wait for it
            if key not in self._files:
                url = storage.as_uri(file.uri)
                filesystem = self._filesystem if storage.scheme(url) == "s3" else None
                self._files[key] = _PetastormFile(url, columns, filesystem, self._published)
            return self._files[key]

    def read(self, file: SourceFile, row_group: int, columns: Sequence[str]) -> dict[str, np.ndarray]:
        petastorm_file = self._file(file, tuple(columns))
        if not 0 <= row_group < len(petastorm_file.pieces):
            raise IndexError(f"{file.uri} has {len(petastorm_file.pieces)} row groups; row group {row_group} was asked for")
        parts = [table_to_numpy(table) for table in petastorm_file.read(row_group)]
        if not parts:  # Petastorm publishes nothing for a row group without rows
            return {name: np.empty(0) for name in columns}
        if len(parts) == 1:
            return parts[0]
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}

    def close(self) -> None:
        with self._lock:
            self._files.clear()
        self._filesystem = None


def _s3fs_wrapper():
    import pyarrow.filesystem
    import s3fs

    options = storage.current_options()
    endpoint = storage.s3_endpoint(options)
    # As storage.s3_arguments: a custom endpoint (MinIO, a test server) has no region to look up.
    client_kwargs = {"endpoint_url": endpoint, "region_name": storage.s3_region(options) or ("us-east-1" if endpoint else None)}
    config_kwargs = {
        "connect_timeout": options.connect_timeout_s,
        "read_timeout": options.request_timeout_s,
        "retries": {"max_attempts": options.max_attempts},
    }
    s3 = s3fs.S3FileSystem(
        anon=options.s3_anonymous,
        client_kwargs={k: v for k, v in client_kwargs.items() if v},
        config_kwargs=config_kwargs,
    )
    return pyarrow.filesystem.S3FSWrapper(s3)


def open_source(files: Sequence[SourceFile]) -> PetastormSource:
    return PetastormSource(files)
