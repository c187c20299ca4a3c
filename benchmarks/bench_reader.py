"""Reader throughput: the training reader (Petastorm streams, shuffled, sharded) against raw pyarrow
`iter_batches` -> torch on the same files. One run; prints rows/s for each and the ratio (target >= 1.0).

    python benchmarks/bench_reader.py [--rows 400000] [--workers 2]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests" / "unit")]  # the tests' contract-layout dataset writer

from parquet_datasets import write_classification_dataset  # noqa: E402
from pipeline import contract  # noqa: E402
from training.data import TASK_COLUMNS, iter_batches, split_spec  # noqa: E402


def raw_pyarrow_rows(split_dir: Path, batch_size: int) -> int:
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")  # zero-copy views, read only
    rows = 0
    for path in sorted(split_dir.glob("*.parquet")):
        for record_batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=list(TASK_COLUMNS["classification"])):
            tensors = {}  # the same dtypes the training reader hands over: tokens as stored, labels int64
            for name in TASK_COLUMNS["classification"]:
                column = record_batch.column(name)
                if name == contract.LABEL:
                    values = column.to_numpy().astype(np.int64)
                else:
                    values = np.ascontiguousarray(column.flatten().to_numpy().reshape(len(column), -1))
                tensors[name] = torch.from_numpy(values)
            rows += tensors[contract.LABEL].shape[0]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2, help="train.num_reader_workers")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files, groups = 8, 4
        per_group = args.rows // (files * groups)
        dataset = Path(tmp) / "dataset"
        manifest = write_classification_dataset(dataset, [[per_group] * groups for _ in range(files)],
                                                max_length=args.max_length, vocab_size=8000)
        split_dir = contract.split_dir(dataset, "train")
        size_mb = sum(p.stat().st_size for p in split_dir.glob("*.parquet")) / 1e6
        print(f"dataset: {manifest.splits['train'].rows} rows x {args.max_length} tokens, {files} files x {groups} "
              f"row groups, {size_mb:.1f} MB (zstd off, pyarrow default codec)")

        started = time.perf_counter()
        raw_rows = raw_pyarrow_rows(split_dir, args.batch_size)
        raw_seconds = time.perf_counter() - started

        ours = {}
        for world_size, shuffle in ((1, True), (2, True), (1, False)):  # the last shows what shuffling costs
            spec = split_spec(dataset, manifest, "train", batch_size=args.batch_size,
                              columns=TASK_COLUMNS["classification"], shuffle=shuffle, seed=0, rank=0,
                              world_size=world_size, num_workers=args.workers)
            started = time.perf_counter()
            rows = sum(batch[contract.LABEL].shape[0] for batch in iter_batches(spec, epoch=0))
            ours[world_size, shuffle] = (rows, time.perf_counter() - started)

    raw_rate = raw_rows / raw_seconds
    print(f"raw pyarrow iter_batches -> torch: {raw_rows} rows in {raw_seconds:.2f} s = {raw_rate:,.0f} rows/s")
    for (world_size, shuffle), (rows, seconds) in ours.items():
        rate = rows / seconds
        order = "shuffled" if shuffle else "not shuffled"
        print(f"shardline reader (petastorm, {args.workers} streams, {order}, rank 0 of {world_size}): {rows} rows "
              f"in {seconds:.2f} s = {rate:,.0f} rows/s; ratio vs raw {rate / raw_rate:.2f}x (target >= 1.0)")


if __name__ == "__main__":
    main()
