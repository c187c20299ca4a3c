"""What one row group costs each backend's source, read one after another (no loader, no threads of
ours): wall and CPU per row group, the best of --repeats passes over a synthetic split, and the
petastorm source's cost as a ratio to the pyarrow one's (the reader's per-row-group overhead).

    python benchmarks/bench_row_group_sources.py [--rows 200000] [--repeats 5]

CPU is the process's (Arrow decodes on its own threads), so it is the figure to trust on a loaded
machine; each pass opens a fresh source, so a file's set-up (the petastorm source's dataset, schema
and pieces) is counted once per file, as in an epoch.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests" / "unit")]

from parquet_datasets import write_classification_dataset  # noqa: E402
from training.backends import open_source  # noqa: E402
from training.data import TASK_COLUMNS, split_spec  # noqa: E402

BACKENDS = ("petastorm", "pyarrow")


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def one_pass(backend: str, files, columns) -> tuple[float, float]:
    source = open_source(backend, files)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for file in files:
            for row_group in range(len(file.row_group_rows)):
                source.read(file, row_group, columns)
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        source.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "dataset")
        manifest = write_classification_dataset(root, [[args.rows // 16] * 4 for _ in range(4)], max_length=128,
                                                vocab_size=8000)
        spec = split_spec(root, manifest, "train", batch_size=256, columns=TASK_COLUMNS["classification"], shuffle=False,
                          verify_checksums=False)
        groups = sum(len(f.row_group_rows) for f in spec.files)
        print(f"synthetic split: {manifest.splits['train'].rows} rows x 128 tokens in {groups} row groups")
        for backend in BACKENDS:
            open_source(backend, ()).close()  # imports outside the timings
        best = {backend: (float("inf"), float("inf")) for backend in BACKENDS}
        for _ in range(args.repeats):  # interleaved, so a burst of load hits both
            for backend in BACKENDS:
                wall, cpu = one_pass(backend, spec.files, spec.columns)
                best[backend] = (min(best[backend][0], wall), min(best[backend][1], cpu))
        for backend, (wall, cpu) in best.items():
            print(f"{backend:9} source, best of {args.repeats}: {1000 * wall / groups:.1f} ms wall, "
                  f"{1000 * cpu / groups:.1f} ms CPU per row group")
        (pw, pc), (aw, ac) = best["petastorm"], best["pyarrow"]
        print(f"petastorm / pyarrow: {pw / aw:.2f}x wall, {pc / ac:.2f}x CPU")
    print(f"machine at the end: {load()}")


if __name__ == "__main__":
    main()
