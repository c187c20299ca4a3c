"""Checkpoints: atomic, checksummed, the newest K kept; `latest_valid` skips damaged ones.

A checkpoint is `step-NNNNNNNN.pt` (torch.save of a plain dict) plus `step-NNNNNNNN.sha256`, written
after it: a checkpoint without a matching checksum file was cut short and is never loaded.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_DIR = "checkpoints"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def save(directory: Path, step: int, state: dict[str, Any], num_kept: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    path = directory / f"step-{step:08d}.pt"
    _write_atomic(path, data)
    checksum = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "step": step}
    _write_atomic(path.with_suffix(".sha256"), json.dumps(checksum).encode())
    for old in _candidates(directory)[num_kept:]:
        old.with_suffix(".sha256").unlink(missing_ok=True)  # checksum first: a half-deleted one reads as invalid
        old.unlink(missing_ok=True)
    return path


def _candidates(directory: Path) -> list[Path]:
    """Checkpoint files, newest step first."""
    return sorted(directory.glob("step-*.pt"), reverse=True)


def load_verified(path: Path) -> dict[str, Any]:
    """Load one checkpoint; raise ValueError naming the file when it is incomplete or corrupt."""
    sidecar = path.with_suffix(".sha256")
    if not sidecar.exists():
        raise ValueError(f"checkpoint {path} has no {sidecar.name}: its write did not finish")
    expected = json.loads(sidecar.read_text())
    data = path.read_bytes()
    if len(data) != expected["bytes"] or hashlib.sha256(data).hexdigest() != expected["sha256"]:
        raise ValueError(f"checkpoint {path} does not match its sha256 ({len(data)} of {expected['bytes']} bytes): "
                         "truncated or corrupt")
    # Our own checksummed file: it holds numpy RNG state, which weights_only loading refuses.
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def latest_valid(directory: Path) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that verifies; each damaged newer one is skipped with a warning."""
    for path in _candidates(directory) if directory.exists() else []:
        try:
            return path, load_verified(path)
        except ValueError as error:
            print(f"train: warning: skipping {error}", file=sys.stderr, flush=True)
    return None
