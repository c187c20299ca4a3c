"""What a run reports: metrics.jsonl, TensorBoard events, progress on the console, plots/loss.png
and the input-stall report. Only the main process writes; the others get a logger that does nothing.

Progress follows pipeline.console.progress_mode(): a tqdm bar on stdout (steps, rate, time left, with
the loss and samples/s of the last logged step), or in `lines` mode one line per logged step with the
time left.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from pipeline.console import bar_columns, eta_text, progress_mode

METRICS_FILE = "metrics.jsonl"
INPUT_BOUND_FRACTION = 0.05  # waiting on the reader more than this share of the loop: input-bound


class MetricsLog:
    def __init__(self, run_dir: Path, total_steps: int, initial_step: int, enabled: bool):
        self.enabled = enabled
        self.path = run_dir / METRICS_FILE
        self.total_steps, self.initial_step = total_steps, initial_step
        self._file = self._writer = self._bar = None
        self._started = time.perf_counter()
        self.mode = progress_mode()
        if not enabled:
            return
        from torch.utils.tensorboard import SummaryWriter
        from tqdm import tqdm

        _drop_records_after(self.path, initial_step)  # a resumed run rewrites what came after its checkpoint
        self._file = open(self.path, "a", encoding="utf-8")
        self._writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=initial_step + 1)
        self._bar = tqdm(total=total_steps, initial=initial_step, desc="train", unit="step", file=sys.stdout,
                         ncols=bar_columns(), dynamic_ncols=bar_columns() is None, disable=self.mode != "bar")

    def log(self, record: dict[str, Any], console: bool = False) -> None:
        """Append record to metrics.jsonl and TensorBoard; with console, also show it (a training step)."""
        if not self.enabled:
            return
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        for key, value in record.items():
            if key not in ("step", "epoch") and isinstance(value, (int, float)):
                self._writer.add_scalar(key, value, record["step"])
        if self.mode == "off":
            return
        if not console:
            val = {key[4:]: value for key, value in record.items() if key.startswith("val_") and isinstance(value, float)}
            if val:
                shown = ", ".join(f"{key} {value:.4f}" for key, value in val.items())
                self._show(f"train: step {record['step']} val {shown}")
            return
        line = (f"train: step {record['step']}/{self.total_steps} epoch {record['epoch']} loss {record['loss']:.4f}, "
                f"{record['samples_per_s']:.0f} samples/s")
        if self.mode == "bar":
            self._bar.set_postfix(loss=f"{record['loss']:.4f}", samples_per_s=f"{record['samples_per_s']:.0f}",
                                  refresh=False)
            self._show(line)
        else:
            steps_done = record["step"] - self.initial_step
            self._show(f"{line}, {eta_text(steps_done, self.total_steps - self.initial_step, time.perf_counter() - self._started)}")

    def _show(self, line: str) -> None:
        if self.mode == "bar":
            self._bar.write(line, file=sys.stdout)  # above the bar, which is redrawn below it
        else:
            print(line, flush=True)

    def advance(self, steps: int = 1) -> None:
        if self.enabled:
            self._bar.update(steps)

    def close(self) -> None:
        if self.enabled:
            self._bar.close()
            self._writer.close()
            self._file.close()


def _drop_records_after(path: Path, step: int) -> None:
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in kept))


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def plot_losses(metrics_path: Path, out_path: Path) -> None:
    """Train and val loss against step, from metrics.jsonl."""
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    records = read_records(metrics_path)
    train = [(r["step"], r["loss"]) for r in records if "loss" in r]
    val = [(r["step"], r["val_loss"]) for r in records if "val_loss" in r]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(7, 4))
    for points, label, style in ((train, "train loss", "-"), (val, "val loss", "o-")):
        if points:
            axes.plot(*zip(*points), style, label=label)
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.legend()
    figure.tight_layout()
    figure.savefig(out_path, dpi=100)
    plt.close(figure)


def stall_report(wait_seconds: float, loop_seconds: float) -> dict[str, Any]:
    fraction = wait_seconds / loop_seconds if loop_seconds > 0 else 0.0
    verdict = "input-bound" if fraction > INPUT_BOUND_FRACTION else "compute-bound"
    return {"input_wait_s": round(wait_seconds, 3), "loop_s": round(loop_seconds, 3),
            "input_wait_fraction": round(fraction, 4), "verdict": verdict}


def format_stall_report(report: dict[str, Any]) -> str:
    return (f"train: input stall: waited {report['input_wait_s']:.2f} s of {report['loop_s']:.2f} s on the reader "
            f"({100 * report['input_wait_fraction']:.1f}%): {report['verdict']}")
