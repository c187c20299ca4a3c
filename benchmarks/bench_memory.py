"""Memory: peak RSS training the `mlp` model for one epoch on 1x and 10x the data, each in a fresh
process. One run; prints both peaks, their ratio (target <= 1.1) and the growth over the RSS
measured just before training (imports and model excluded).

    python benchmarks/bench_memory.py [--rows 10000]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(rows: int) -> None:
    sys.path[:0] = [str(HERE.parent)]
    import torch

    from bench_stall import train_mlp
    from parquet_datasets import write_classification_dataset  # noqa: F401  (imported before measuring)
    from training.loop import Trainer  # noqa: F401

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        before = _rss_mb()
        summary, seconds = train_mlp(Path(tmp), rows, 128, 64, 2)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    print(json.dumps({"rows": rows, "steps": summary["steps"], "seconds": seconds, "rss_before_mb": before, "peak_mb": peak}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    results = []
    for rows in (args.rows, 10 * args.rows):
        out = subprocess.run([sys.executable, str(HERE), "--child", str(rows)], capture_output=True, text=True, check=True)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    for r in results:
        print(f"{r['rows']:>8} rows, {r['steps']} steps in {r['seconds']:.1f} s: peak RSS {r['peak_mb']:.0f} MB "
              f"(RSS before training {r['rss_before_mb']:.0f} MB, growth {r['peak_mb'] - r['rss_before_mb']:.0f} MB)")
    small, large = results
    print(f"peak RSS ratio 10x/1x: {large['peak_mb'] / small['peak_mb']:.3f} (target <= 1.1); growth ratio "
          f"{(large['peak_mb'] - large['rss_before_mb']) / max(small['peak_mb'] - small['rss_before_mb'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
