"""Finishing a dataset: per-split statistics, the manifest, then _SUCCESS.

No renames (object stores have none): a build first removes _SUCCESS, writes every file under a
name unique to its task attempt, then writes the manifest, which lists every file that belongs to
the dataset, and _SUCCESS last. A reader sees no dataset or a whole one, and reads only the files
the manifest names.
"""
from __future__ import annotations

import sys
import uuid

from pipeline import contract, storage


def split_stats(files: list[contract.DataFile], totals: dict | None, max_length: int) -> contract.SplitStats:
    """A split's stats: rows and row groups from its files, the token accounting from the totals the
    writer tasks reported (shard.WrittenDataset.totals)."""
    totals = totals or {}
    groups = [rows for f in files for rows in f.row_group_rows]
    rows, documents = sum(groups), int(totals.get("documents") or 0)
    tokens = int(totals.get("tokens") or 0)
    padding = rows * max_length - tokens
    truncated = int(totals.get("truncated_documents") or 0)
    histogram = totals.get("length_histogram", {})
    return contract.SplitStats(
        rows=rows,
        tokens=tokens,
        num_files=len(files),
        num_row_groups=len(groups),
        row_group_rows=groups,
        documents=documents,
        padding_tokens=padding,
        padding_fraction=round(padding / (rows * max_length), 6) if rows else 0.0,
        truncated_documents=truncated,
        truncated_fraction=round(truncated / documents, 6) if documents else 0.0,
        dropped_tokens=int(totals.get("dropped_tokens") or 0),
        length_histogram=dict(sorted(histogram.items(), key=lambda kv: int(kv[0][2:]))),
        files=files,
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


def begin_build(dataset_dir: str) -> str:
    """Uncommit and clear dataset_dir before a build: _SUCCESS goes first, so no reader takes the
    directory for a dataset from then on; then everything else, stale attempt files of a killed
    earlier run included. Returns the build id that this build's file names carry."""
    storage.delete(storage.join(dataset_dir, contract.SUCCESS_FILE))
    storage.delete(storage.join(dataset_dir, contract.MANIFEST_FILE))
    storage.delete_tree(dataset_dir)
    storage.makedirs(dataset_dir)
    return uuid.uuid4().hex[:8]


# Kept in a dataset directory besides the files the manifest lists.
_PUBLISHED_NAMES = (contract.MANIFEST_FILE, contract.SUCCESS_FILE)
_PUBLISHED_DIRS = ("tokenizer",)


def remove_unlisted(dataset_dir: str, manifest: contract.Manifest) -> list[str]:
    """Delete what the manifest does not name: files of failed, retried or speculative task attempts.
    Returns their relative paths."""
    listed = {f.path for stats in manifest.splits.values() for f in stats.files}
    listed |= {f.path for f in manifest.rejects_files}
    listed |= {f.path for f in manifest.removed_files}
    removed = []
    for entry in storage.list_files(dataset_dir):
        name = storage.relative(entry.uri, dataset_dir)
        if name in listed or name in _PUBLISHED_NAMES or name.split("/")[0] in _PUBLISHED_DIRS:
            continue
        storage.delete(entry.uri)
        removed.append(name)
    return removed


def publish(dataset_dir: str, manifest: contract.Manifest) -> None:
    """The commit: manifest.json, then _SUCCESS, each a single write (no rename on object stores)."""
    contract.write_json_atomic(storage.join(dataset_dir, contract.MANIFEST_FILE), manifest.model_dump(mode="json"))
    storage.write_bytes(storage.join(dataset_dir, contract.SUCCESS_FILE), b"")
