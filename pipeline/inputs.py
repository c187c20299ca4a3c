"""The corpus's input files, found through the storage layer (no Spark needed): what the job reads,
what the manifest records and what the dataset fingerprint hashes."""
from __future__ import annotations

from typing import Any

from pipeline import contract, storage
from pipeline.errors import ShardlineError


class InputError(ShardlineError, ValueError):
    """The configured input cannot be read at all (as opposed to bad records inside it)."""


def _hidden(uri: str) -> bool:
    return storage.basename(uri).startswith((".", "_"))


def resolve_input_files(pattern: str) -> list[storage.FileEntry]:
    """Expand a path, directory or glob (local or any store) into its data files, sorted by URI.
    Names starting with '.' or '_' are skipped in directories (Spark's and Hadoop's convention)."""
    storage.check_reachable(pattern)
    if storage.is_dir(pattern):
        files = [e for e in storage.list_files(pattern) if not _hidden(e.uri)]
    else:
        files = storage.glob(pattern)
    if not files:
        raise InputError(f"data.input {pattern!r} matches no files; check the path or glob")
    return files


def input_file_list(files: list[storage.FileEntry]) -> list[dict[str, Any]]:
    """What the manifest records of the input, and what the dataset fingerprint hashes: a changed
    file (size or modification time) makes another dataset."""
    return [{"path": f.uri, "bytes": f.size, "mtime_ns": f.mtime_ns} for f in files]


def dataset_fingerprint(config, files: list[storage.FileEntry]) -> str:
    """The dataset a config builds from these files (contract.dataset_fingerprint): what the job's
    skip check and the driver's preprocess marker both compare."""
    return contract.dataset_fingerprint(config.to_dict(), input_file_list(files))
