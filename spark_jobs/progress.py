"""The Spark job's progress on the console: the running stages and their tasks, from the driver's
`SparkContext.statusTracker()`, polled on a background thread (no Spark listener, no JVM changes).

In `bar` mode one line is redrawn in place, e.g.

    near-dedup: MinHash signatures and candidate pairs: Spark stage 8: 2/12 tasks done, 3 running, 0:13

(the phase `described` or `name_jobs` named last; without one, the stage's call site:
`preprocess: Spark stage 14 (mapInArrow at encode.py:152): 5/8 tasks done, 2 running, 0:41`), and
any other output of the job first clears it. In `lines` mode the same text is printed as a
line at most every PLAIN_INTERVAL_S seconds; `off` shows nothing.

`described` names the Spark jobs of a phase in the Spark UI and the history server, where they
would otherwise go by call sites such as `localCheckpoint at NativeMethodAccessorImpl.java:0`.
"""
from __future__ import annotations

import io
import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from pipeline.console import CLEAR_LINE, PLAIN_INTERVAL_S, bar_columns, format_duration, progress_mode

POLL_S = 0.25
JOB_DESCRIPTION = "spark.job.description"  # a local property: the calling thread's jobs only
# The description named last, for the console line: the thread that polls the status tracker cannot
# read the job thread's local properties. A driver runs one build at a time.
_named_phase: str | None = None


def name_jobs(spark_context, text: str | None) -> None:
    """The Spark jobs this thread starts from now are described as `text` (None: not described), in
    the Spark UI and on the console line."""
    global _named_phase
    spark_context.setLocalProperty(JOB_DESCRIPTION, text)  # None removes it
    _named_phase = text


@contextmanager
def described(spark_context, text: str) -> Iterator[None]:
    """The Spark jobs this thread starts inside are described as `text`; the description they had
    before (an outer phase's, or none) is put back after."""
    before = spark_context.getLocalProperty(JOB_DESCRIPTION)
    name_jobs(spark_context, text)
    try:
        yield
    finally:
        name_jobs(spark_context, before)


def stage_label(name: str) -> str:
    """`collect at /long/path/spark_jobs/preprocess.py:80` -> `collect at preprocess.py:80`."""
    return re.sub(r"(?<= at )\S*/", "", name)


def status_text(tracker, started: float, prefix: str = "preprocess", phase: str | None = None) -> str | None:
    """One line about the active stages, or None when none runs: under the phase's name when one is
    given, else under prefix with each stage's call site."""
    stages = [info for info in (tracker.getStageInfo(i) for i in sorted(tracker.getActiveStageIds())) if info]
    if not stages:
        return None
    parts = []
    for info in stages:
        running = f", {info.numActiveTasks} running" if info.numActiveTasks else ""
        failed = f", {info.numFailedTasks} failed" if info.numFailedTasks else ""
        site = "" if phase else f" ({stage_label(info.name)})"
        parts.append(f"Spark stage {info.stageId}{site}: "
                     f"{info.numCompletedTasks}/{info.numTasks} tasks done{running}{failed}")
    return f"{phase or prefix}: {'; '.join(parts)}, {format_duration(time.perf_counter() - started)}"


class _ClearingStdout(io.TextIOBase):
    """sys.stdout while a status line may be drawn: any other write clears the line first."""

    def __init__(self, real: TextIO, progress: "SparkProgress"):
        self.real, self.progress = real, progress

    def write(self, text: str) -> int:
        with self.progress.lock:
            self.progress.clear_locked()
            return self.real.write(text)

    def flush(self) -> None:
        self.real.flush()

    def isatty(self) -> bool:
        return self.real.isatty()

    def fileno(self) -> int:
        return self.real.fileno()


class SparkProgress:
    """`with SparkProgress(spark.sparkContext): build_dataset(...)` shows the job's progress."""

    def __init__(self, spark_context, prefix: str = "preprocess", mode: str | None = None):
        self.tracker = spark_context.statusTracker()
        self.prefix, self.mode = prefix, mode or progress_mode()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-progress", daemon=True)
        self._drawn = False
        self._real_stdout: TextIO | None = None
        self._started = time.perf_counter()

    def __enter__(self) -> "SparkProgress":
        if self.mode == "off":
            return self
        self._real_stdout = sys.stdout
        if self.mode == "bar":
            sys.stdout = _ClearingStdout(self._real_stdout, self)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.mode == "off":
            return
        self._stop.set()
        self._thread.join()
        with self.lock:
            self.clear_locked()
        sys.stdout = self._real_stdout

    def clear_locked(self) -> None:
        if self._drawn:
            self._real_stdout.write(CLEAR_LINE)
            self._drawn = False

    def _run(self) -> None:
        last_line = 0.0
        while not self._stop.wait(POLL_S):
            try:
                text = status_text(self.tracker, self._started, self.prefix, _named_phase)
            except Exception:  # the context is stopping under us (py4j gone): nothing more to show
                return
            with self.lock:
                if self.mode == "bar":
                    if text:  # one write: clear and redraw, so the line never flickers empty
                        self._real_stdout.write(CLEAR_LINE + text[: (bar_columns() or 120) - 1])
                        self._drawn = True
                    else:
                        self.clear_locked()
                    self._real_stdout.flush()
                elif text and time.perf_counter() - last_line >= PLAIN_INTERVAL_S:
                    last_line = time.perf_counter()
                    self._real_stdout.write(text + "\n")
                    self._real_stdout.flush()
