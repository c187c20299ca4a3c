"""How long `shardline run` takes fresh, rerun unchanged, and rerun after one training key changed.

    python benchmarks/driver_rerun.py [--fraction 6]

Runs the CLI as a subprocess (as a user does) on every --fraction-th demo docstring, one epoch, and
prints the three wall times and their ratios, all from this one run.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from pipeline.demo import demo_records, write_jsonl  # noqa: E402


def timed_run(args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pipeline.cli", "run", *args], cwd=REPO_ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fraction", type=int, default=6, help="use every N-th demo docstring")
    fraction = parser.parse_args().fraction
    with tempfile.TemporaryDirectory() as root:
        corpus = write_jsonl(demo_records()[::fraction], Path(root) / "corpus.jsonl")
        args = ["--config", "configs/demo.yaml", "--set", f"run_dir={root}/run", "--set", f"data.input={corpus}",
                "--set", "train.epochs=1"]
        fresh = timed_run(args)
        unchanged = timed_run(args)
        train_changed = timed_run([*args, "--set", "train.lr=0.002"])
    print(f"fresh run (3 stages)            {fresh:7.2f} s")
    print(f"unchanged rerun (all skipped)   {unchanged:7.2f} s   {fresh / unchanged:6.1f}x faster than fresh")
    print(f"train.lr changed (train + eval) {train_changed:7.2f} s   {fresh / train_changed:6.1f}x faster than fresh")


if __name__ == "__main__":
    main()
