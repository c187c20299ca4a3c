"""Checkpoints: checksummed, the newest K kept; `latest_valid` skips damaged ones.

A checkpoint is `step-NNNNNNNN.pt` (torch.save of a dict of tensors and plain values) plus
`step-NNNNNNNN.sha256`, written after it through the storage layer (local disk or an object store):
the checksum file is the commit, so a checkpoint without a matching one was cut short and is never
loaded. Checkpoints are data: they load with `torch.load(weights_only=True)`, which refuses any
pickled object other than tensors and plain containers, so a crafted file is never executed.
"""
from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
import sys
from typing import Any

import torch

from pipeline import storage

CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^step-\d{8}\.pt$")


class DamagedCheckpointError(ValueError):
    """Cut short or corrupted: an older checkpoint may still be good."""


class UnsafeCheckpointError(ValueError):
    """Verifies but holds something other than tensors and plain values: never loaded."""


def sidecar(uri: str) -> str:
    return uri[: -len(".pt")] + ".sha256"


def save(directory: str, step: int, state: dict[str, Any], num_kept: int) -> str:
    """Write step-N.pt, then its checksum (the commit); drop all but the newest num_kept."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    uri = storage.join(directory, f"step-{step:08d}.pt")
    storage.write_bytes(uri, data)
    checksum = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "step": step}
    storage.write_text(sidecar(uri), json.dumps(checksum))
    for old in candidates(directory)[num_kept:]:
        storage.delete(sidecar(old))  # checksum first: a half-deleted one reads as unfinished
        storage.delete(old)
    return uri


def candidates(directory: str) -> list[str]:
    """Checkpoint files (URIs), newest step first."""
    names = [e.uri for e in storage.list_files(directory, recursive=False) if _NAME.match(storage.basename(e.uri))]
    return sorted(names, key=storage.basename, reverse=True)


def load_verified(uri: str) -> dict[str, Any]:
    """Load one checkpoint. DamagedCheckpointError when it is incomplete or corrupt;
    UnsafeCheckpointError when it verifies but is not plain data."""
    if storage.info(sidecar(uri)) is None:
        raise DamagedCheckpointError(f"checkpoint {uri} has no {storage.basename(sidecar(uri))}: its write did not finish")
    try:
        expected = json.loads(storage.read_text(sidecar(uri)))
        expected_bytes, expected_sha = int(expected["bytes"]), str(expected["sha256"])
    except (ValueError, KeyError, TypeError):
        raise DamagedCheckpointError(f"checkpoint {uri} has an unreadable {storage.basename(sidecar(uri))}") from None
    data = storage.read_bytes(uri)
    if len(data) != expected_bytes or hashlib.sha256(data).hexdigest() != expected_sha:
        raise DamagedCheckpointError(f"checkpoint {uri} does not match its sha256 ({len(data)} of {expected_bytes} bytes): "
                                     "truncated or corrupt")
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's message suggests weights_only=False; only its unpickler's own reason is worth showing.
        found = re.search(r"WeightsUnpickler error: (.*?)(?: Please use|\n|$)", str(error))
        reason = found.group(1).strip() if found else "not a plain-data checkpoint"
        raise UnsafeCheckpointError(
            f"checkpoint {uri} refused: it holds more than tensors and plain values, so loading it could run code "
            f"({reason}); this trainer never writes such a file, so it was replaced or comes from elsewhere. "
            "Delete it and its .sha256 to resume from an older checkpoint, or set train.resume=never to start over"
        ) from None


def latest_valid(directory: str) -> tuple[str, dict[str, Any]] | None:
    """The newest checkpoint that verifies; each damaged newer one is skipped with a warning. An
    unsafe one stops the search (UnsafeCheckpointError): falling back past it would hide it."""
    for uri in candidates(directory):
        try:
            return uri, load_verified(uri)
        except DamagedCheckpointError as error:
            print(f"train: warning: skipping {error}", file=sys.stderr, flush=True)
    return None


def delete_all(directory: str) -> int:
    """Remove every checkpoint in directory, checksums first; returns how many there were."""
    found = candidates(directory)
    for uri in found:
        storage.delete(sidecar(uri))
        storage.delete(uri)
    return len(found)
