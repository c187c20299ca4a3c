"""Reader throughput: the training reader (shuffled, sharded, read ahead) with each row-group backend
(Petastorm, pyarrow.fs) against raw pyarrow `ParquetFile.iter_batches` -> torch on the same files, on
local disk and on an S3 server (moto, started here on 127.0.0.1 in its own process). One run; prints
rows/s for each and the ratio to raw pyarrow on the same store (target >= 1.0), and rows per CPU
second of this process (the S3 server's own CPU excluded), which a busy shared machine disturbs less.

    python benchmarks/bench_reader.py [--rows 200000] [--workers 2]
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests" / "unit")]  # the tests' contract-layout dataset writer

from parquet_datasets import write_classification_dataset  # noqa: E402
from pipeline import contract, storage  # noqa: E402
from training.backends import open_source  # noqa: E402
from training.data import TASK_COLUMNS, iter_batches, split_spec  # noqa: E402

COLUMNS = TASK_COLUMNS["classification"]


def start_s3_server() -> subprocess.Popen:
    """moto's S3 server on a free port of 127.0.0.1, found by every client through AWS_* variables."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret", AWS_ENDPOINT_URL=endpoint,
                      AWS_REGION="us-east-1")
    os.environ.pop("AWS_PROFILE", None)
    return server


def raw_pyarrow_rows(uris: list[str], batch_size: int) -> int:
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")  # zero-copy views, read only
    rows = 0
    for uri in uris:
        fs, path = storage.filesystem(uri)
        for record_batch in pq.ParquetFile(path, filesystem=fs).iter_batches(batch_size=batch_size, columns=list(COLUMNS)):
            tensors = {}  # the same dtypes the training reader hands over: tokens as stored, labels int64
            for name in COLUMNS:
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
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2, help="train.num_reader_workers")
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()
    server = start_s3_server()
    try:
        import boto3

        boto3.client("s3").create_bucket(Bucket="shardline-bench")
        with tempfile.TemporaryDirectory() as tmp:
            files, groups = 4, 4
            per_group = args.rows // (files * groups)
            local = os.path.join(tmp, "dataset")
            manifest = write_classification_dataset(local, [[per_group] * groups for _ in range(files)],
                                                    max_length=args.max_length, vocab_size=8000)
            remote = "s3://shardline-bench/dataset"
            storage.upload_dir(local, remote)
            size_mb = sum(f.bytes for f in manifest.splits["train"].files) / 1e6
            print(f"dataset: {manifest.splits['train'].rows} rows x {args.max_length} tokens, {files} files x {groups} "
                  f"row groups of {per_group} rows, {size_mb:.1f} MB (pyarrow default codec); S3: moto at "
                  f"{os.environ['AWS_ENDPOINT_URL']}; {args.workers} row groups read in parallel")
            for store, root in (("local", local), ("s3", remote)):
                started, cpu = time.perf_counter(), time.process_time()
                raw_rows = raw_pyarrow_rows(manifest.split_files(root, "train"), args.batch_size)
                raw_rate = raw_rows / (time.perf_counter() - started)
                raw_cpu_rate = raw_rows / (time.process_time() - cpu)
                print(f"{store:5} raw pyarrow iter_batches -> torch: {raw_rows} rows = {raw_rate:,.0f} rows/s "
                      f"({raw_cpu_rate:,.0f} rows/CPU-s)")
                for backend in ("petastorm", "pyarrow"):
                    spec = split_spec(root, manifest, "train", batch_size=args.batch_size, columns=COLUMNS, shuffle=False)
                    open_source(backend, spec.files).close()  # imports and clients, outside the timings
                    for world_size, shuffle in ((1, True), (2, True), (1, False)):
                        spec = split_spec(root, manifest, "train", batch_size=args.batch_size, columns=COLUMNS,
                                          shuffle=shuffle, seed=0, rank=0, world_size=world_size, drop_last=world_size > 1,
                                          num_workers=args.workers, backend=backend)
                        started, cpu = time.perf_counter(), time.process_time()
                        rows = sum(batch[contract.LABEL].shape[0] for batch in iter_batches(spec, epoch=0))
                        rate = rows / (time.perf_counter() - started)
                        cpu_rate = rows / (time.process_time() - cpu)
                        order = "shuffled" if shuffle else "in order"
                        print(f"{store:5} reader {backend:9} {order:8} rank 0 of {world_size}: {rows} rows = "
                              f"{rate:,.0f} rows/s, {rate / raw_rate:.2f}x raw ({cpu_rate:,.0f} rows/CPU-s, "
                              f"{cpu_rate / raw_cpu_rate:.2f}x)")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
