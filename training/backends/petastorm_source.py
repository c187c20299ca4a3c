"""The Petastorm row-group source: Petastorm 0.12.1 `make_batch_reader` over one manifest file's URL,
sharded to exactly one row group (`shard_count` = the file's row groups, `cur_shard` = the one
wanted, no shuffling), so the reader's plan, not Petastorm, decides what is read and in what order.

On s3:// Petastorm 0.12.1 cannot use `storage_options` (it asks pyarrow 14's new Dataset API for
`validate_schema`, which that API does not support), and `pyarrow.filesystem.S3FSWrapper` only works
over a synchronous s3fs: 0.4.2 is the last one (0.5+ returns coroutines). The endpoint, region,
timeouts and retries come from the same storage options as everything else; credentials from
boto's standard chain, as for pyarrow.
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Sequence

import numpy as np

from pipeline import storage
from training.backends import SourceFile, table_to_numpy

# Petastorm 0.12 calls pyarrow APIs deprecated since pyarrow 3-11; they warn on every call.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"petastorm(\.|$)")
warnings.filterwarnings("ignore", category=FutureWarning, message=r".*pyarrow\.filesystem.*deprecated")
warnings.filterwarnings("ignore", category=FutureWarning, message=r".*ParquetDataset.*")
# fsspec warns about any s3fs older than 0.5; 0.4.2 is the pin on purpose (see the module docstring).
warnings.filterwarnings("ignore", category=UserWarning, message=r"Your installed version of s3fs is very old")

from petastorm import make_batch_reader  # noqa: E402  (this module is imported only when chosen)
from petastorm.workers_pool import EmptyResultError  # noqa: E402


class _ArrowColumnsResults:
    """Petastorm's results reader, minus its per-row `np.vstack(list.tolist())`: list columns come
    out of Arrow as one reshape (the stock one is the reader's bottleneck on token columns)."""

    batched_output = True

    def read_next(self, workers_pool, schema, ngram):
        try:
            table = workers_pool.get_results()
        except EmptyResultError:
            raise StopIteration from None
        return table_to_numpy(table)


class PetastormSource:
    def __init__(self, files: Sequence[SourceFile]):
        self._filesystem = None
        if any(storage.scheme(f.uri) == "s3" for f in files):
            self._filesystem = _s3fs_wrapper()

    def read(self, file: SourceFile, row_group: int, columns: Sequence[str]) -> dict[str, np.ndarray]:
        url = storage.as_uri(file.uri)
        with make_batch_reader(
            [url],
            schema_fields=[re.escape(name) for name in columns],  # patterns matched against whole names
            num_epochs=1,
            shuffle_row_groups=False,
            seed=None,
            cur_shard=row_group,
            shard_count=len(file.row_group_rows),  # one row group per shard: exactly the one asked for
            workers_count=1,
            reader_pool_type="thread",
            filesystem=self._filesystem if storage.scheme(url) == "s3" else None,
        ) as reader:
            reader._results_queue_reader = _ArrowColumnsResults()  # petastorm<0.13 (pinned): see the class
            parts = list(reader)
        if not parts:  # Petastorm publishes nothing for a row group without rows
            return {name: np.empty(0) for name in columns}
        if len(parts) == 1:
            return parts[0]
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}

    def close(self) -> None:
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

