"""Input stall: the share of the training loop's wall time spent waiting on the reader, for the
`mlp` model on CPU. One run; prints the figures and the fraction (target <= 2 %).

    python benchmarks/bench_stall.py [--rows 100000] [--batch-size 64]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests" / "unit")]  # the tests' contract-layout dataset writer

from parquet_datasets import write_classification_dataset  # noqa: E402
from pipeline.config import build_config  # noqa: E402
from training.distributed import Processes, use_deterministic_kernels  # noqa: E402
from training.loop import Trainer  # noqa: E402
from training.models import build_model  # noqa: E402


def train_on_synthetic(run_dir: Path, rows: int, max_length: int, train: dict, device: str = "cpu",
                       vocab_size: int = 8000, files: int = 8) -> tuple[dict, float, int]:
    """One epoch of the real Trainer on a synthetic dataset: (summary, seconds, parameter count)."""
    groups = 4
    manifest = write_classification_dataset(run_dir / "dataset", [[rows // (files * groups)] * groups for _ in range(files)],
                                            max_length=max_length, vocab_size=vocab_size, num_labels=4)
    config = build_config({
        "run_dir": str(run_dir), "data": {"input": "synthetic", "label_column": "label"}, "tokenizer": {"path": "synthetic"},
        "preprocess": {"max_length": max_length}, "train": {"log_every": 100, "resume": "never", **train},
    })
    if config.train.deterministic:
        use_deterministic_kernels()  # as training.train does
    torch.manual_seed(0)
    model = build_model(config.train, manifest)
    trainer = Trainer(model.to(device), config, manifest, Processes(0, 1, torch.device(device)))
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    summary = trainer.fit()
    if device == "cuda":
        torch.cuda.synchronize()
    return summary, time.perf_counter() - started, sum(p.numel() for p in model.parameters())


def train_mlp(run_dir: Path, rows: int, max_length: int, batch_size: int, workers: int) -> tuple[dict, float]:
    summary, seconds, _ = train_on_synthetic(run_dir, rows, max_length, {
        "model": "mlp", "batch_size": batch_size, "num_reader_workers": workers, "device": "cpu", "precision": "fp32"})
    return summary, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        summary, seconds = train_mlp(Path(tmp), args.rows, args.max_length, args.batch_size, args.workers)
    stall = summary["input_stall"]
    print(f"mlp, 1 epoch: {summary['steps']} steps of {args.batch_size} x {args.max_length} tokens in {seconds:.2f} s "
          f"({summary['steps'] * args.batch_size / seconds:,.0f} samples/s), torch threads {torch.get_num_threads()}")
    print(f"input wait {stall['input_wait_s']:.3f} s of loop {stall['loop_s']:.3f} s: "
          f"fraction {100 * stall['input_wait_fraction']:.2f} % (target <= 2 %), {stall['verdict']}")


if __name__ == "__main__":
    main()
