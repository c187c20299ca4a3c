"""What a run reports: metrics.jsonl, TensorBoard events, progress on the console, plots/loss.png
and the input-stall report. Only the main process writes; the others get a logger that does nothing.

Progress follows pipeline.console.progress_mode(): a tqdm bar on stdout (steps, rate, time left, with
the loss and samples/s of the last logged step), or in `lines` mode one line per logged step with the
time left.

Object stores cannot append, so these files are written on local disk (`config.local_dir`, which is
run_dir itself when run_dir is local) and, for a remote run_dir, copied there whole at each
checkpoint and at the end (`copy_to_run_dir`); TensorBoard events stay on local disk."""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from pipeline import storage
from pipeline.console import bar_columns, eta_text, progress_mode

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "plots/loss.png"
TENSORBOARD_DIR = "tensorboard"
INPUT_BOUND_FRACTION = 0.05  # waiting on the reader more than this share of the loop: input-bound


class MetricsLog:
    def __init__(self, local_dir: str, run_dir: str, total_steps: int, initial_step: int, enabled: bool):
        self.enabled = enabled
        self.path = os.path.join(local_dir, METRICS_FILE)
        self.total_steps, self.initial_step = total_steps, initial_step
        self._started = time.perf_counter()
        self.mode = progress_mode()
        self._file = self._writer = self._bar = None
        if not enabled:
            return
        from torch.utils.tensorboard import SummaryWriter
        from tqdm import tqdm

        fetch_if_missing(run_dir, local_dir, METRICS_FILE)  # resuming on a machine that did not start the run
        drop_records_after(self.path, initial_step)  # a resumed run rewrites what came after its checkpoint
        self._file = open(self.path, "a", encoding="utf-8")
        self._writer = SummaryWriter(os.path.join(local_dir, TENSORBOARD_DIR), purge_step=initial_step + 1)
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


def drop_records_after(path: str, step: int) -> None:
    """Keep the JSON lines of a local log up to step (creating it empty when absent)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    kept = [line for line in _read_lines(path) if json.loads(line)["step"] <= step]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in kept))


def _read_lines(path: str) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [line for line in handle.read().splitlines() if line]


def read_records(uri: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in storage.read_text(uri).splitlines() if line]


def keeps_copies(local_dir: str, run_dir: str) -> bool:
    """Whether the local files are elsewhere than run_dir and so get copied there."""
    return storage.normalize(local_dir) != storage.normalize(run_dir)


def copy_to_run_dir(local_dir: str, run_dir: str, names: list[str]) -> None:
    """Put these local files ('/'-separated names below local_dir) at the same names in run_dir,
    each as one whole write (an object store cannot append)."""
    if not keeps_copies(local_dir, run_dir):
        return
    for name in names:
        path = os.path.join(local_dir, *name.split("/"))
        if os.path.exists(path):
            with open(path, "rb") as handle:
                storage.write_bytes(storage.join(run_dir, name), handle.read())


def fetch_if_missing(run_dir: str, local_dir: str, name: str) -> None:
    """A run resumed on another machine has no local copy yet: start from run_dir's."""
    path = os.path.join(local_dir, *name.split("/"))
    if not keeps_copies(local_dir, run_dir) or os.path.exists(path):
        return
    remote = storage.join(run_dir, name)
    if storage.info(remote) is not None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(storage.read_bytes(remote))


def describe_locations(local_dir: str, run_dir: str, samples: bool) -> str | None:
    """One line saying where the logs go, when that is not simply run_dir."""
    if not keeps_copies(local_dir, run_dir):
        return None
    copied = f"{METRICS_FILE}{', samples/' if samples else ''} and {PLOT_FILE}"
    return (f"train: logs are written under {local_dir} (an object store cannot append); {copied} are copied to "
            f"{run_dir} at each checkpoint and at the end; TensorBoard events stay in "
            f"{os.path.join(local_dir, TENSORBOARD_DIR)}")


def loss_series(records: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """The plot's lines: train loss, val loss (a mixture's weighted whole) and, for a mixture, each
    source's val loss (val_<name>_loss)."""
    series: dict[str, list[tuple[int, float]]] = {"train loss": [], "val loss": []}
    for record in records:
        for key, value in record.items():
            if key == "loss":
                series["train loss"].append((record["step"], value))
            elif key == "val_loss":
                series["val loss"].append((record["step"], value))
            elif key.startswith("val_") and key.endswith("_loss"):
                series.setdefault(f"val loss: {key[4:-5]}", []).append((record["step"], value))
    return {label: points for label, points in series.items() if points}


def plot_losses(metrics_path: str, out_path: str) -> None:
    """Train and val loss against step, from metrics.jsonl (one val line per source of a mixture)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    figure, axes = plt.subplots(figsize=(7, 4))
    for label, points in loss_series(read_records(metrics_path)).items():
        axes.plot(*zip(*points), "-" if label == "train loss" else "o-", label=label)
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
