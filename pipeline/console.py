"""What a stage shows on the console while it runs, and what reaches its log.

A stage process (the Spark job, training, evaluation) reports progress in one of three modes, read
from SHARDLINE_PROGRESS:

- `bar`: bars redrawn in place (tqdm for training and evaluation, a Spark task line for preprocess);
- `lines`: a plain line every PLAIN_INTERVAL_S seconds, with the rate and the time left;
- `off`: nothing but the stage's result lines.

The driver sets it for each stage from its own console (a terminal gets bars, a pipe or file gets
lines, `-q` gets off); a stage started by hand chooses `bar` when its stdout is a terminal.

The driver side, `run_streamed`, reads a stage's stdout and stderr as they come: everything goes to
logs/<stage>.log (bars as their final state), stdout goes to the console as it is, and of stderr the
console shows the stage's own messages and Spark's WARN and ERROR lines (`-v`: all of it; `-q`:
none of Spark's).
"""
from __future__ import annotations

import codecs
import os
import re
import selectors
import shutil
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TypeVar

PROGRESS_ENV = "SHARDLINE_PROGRESS"
PROGRESS_MODES = ("bar", "lines", "off")
PLAIN_INTERVAL_S = 10.0  # lines mode: at most one progress line this often
CLEAR_LINE = "\r\x1b[K"  # carriage return, then erase to the end of the line
# log4j's default layout in Spark 3.5: `25/01/31 12:00:00 WARN TaskSetManager: ...`
_LOG4J_LINE = re.compile(r"^\d{2}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} ([A-Z]+) ")
_LOUD_LEVELS = {"WARN", "ERROR", "FATAL"}

T = TypeVar("T")


# --- inside a stage process -----------------------------------------------------------------------

def progress_mode() -> str:
    mode = os.environ.get(PROGRESS_ENV, "")
    if mode in PROGRESS_MODES:
        return mode
    return "bar" if sys.stdout.isatty() else "lines"


def bar_columns() -> int | None:
    """The terminal width the driver passed down (a stage's stdout is a pipe, which has none)."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        return None


def format_duration(seconds: float) -> str:
    """`0:42`, `12:05`, `1:02:03`."""
    seconds = int(max(seconds, 0) + 0.5)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def eta_text(done: int, total: int, elapsed: float) -> str:
    if done <= 0 or total <= done:
        return "0:00 left" if total and done >= total else "time left unknown"
    return f"{format_duration(elapsed / done * (total - done))} left"


def track(items: Iterable[T], total: int, label: str, unit: str) -> Iterator[T]:
    """items, with progress shown the way progress_mode() says: a tqdm bar, or a line now and then."""
    mode = progress_mode()
    if mode == "bar":
        from tqdm import tqdm

        yield from tqdm(items, total=total, desc=label, unit=unit, file=sys.stdout, ncols=bar_columns(),
                        dynamic_ncols=bar_columns() is None)
        return
    started = last = time.perf_counter()
    done = 0
    for item in items:
        yield item
        done += 1
        now = time.perf_counter()
        if mode == "lines" and (now - last >= PLAIN_INTERVAL_S or done == total):
            last = now
            units = unit + ("es" if unit.endswith(("ch", "sh", "s", "x")) else "s")
            print(f"{label}: {done}/{total} {units} ({100 * done / max(total, 1):.0f}%), "
                  f"{done / max(now - started, 1e-9):.1f} {units}/s, {eta_text(done, total, now - started)}", flush=True)


# --- in the driver --------------------------------------------------------------------------------

def console_is_terminal() -> bool:
    return sys.stdout.isatty()


def stage_progress_mode(verbosity: int) -> str:
    """The mode a stage started by the driver reports in: follows the driver's own console."""
    if verbosity < 0:
        return "off"
    return "bar" if console_is_terminal() else "lines"


def progress_environment(verbosity: int) -> dict[str, str]:
    env = {PROGRESS_ENV: stage_progress_mode(verbosity)}
    if env[PROGRESS_ENV] == "bar":
        env["COLUMNS"] = str(shutil.get_terminal_size().columns)
    return env


class _LogLines:
    """Turns a byte stream into the lines a terminal would end up showing: of text redrawn with
    carriage returns (a progress bar), only the last state of the line is kept."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""

    def feed(self, data: bytes) -> tuple[str, list[str]]:
        """(the decoded text, the lines it completed, carriage returns resolved)."""
        text = self._decoder.decode(data)
        *complete, self._partial = (self._partial + text).split("\n")
        return text, [_last_redraw(line) for line in complete]

    def flush(self) -> list[str]:
        rest, self._partial = self._partial + self._decoder.decode(b"", final=True), ""
        return [_last_redraw(rest)] if rest.strip() else []


def _last_redraw(line: str) -> str:
    redraws = [part for part in line.split("\r") if part.strip()]
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", redraws[-1]) if redraws else ""


class _Stderr:
    """Which of a stage's stderr lines the console shows, by verbosity."""

    def __init__(self, stage: str, verbosity: int):
        self.own_prefixes = (f"{stage}:", "shardline")  # the stage's own messages: errors, warnings
        self.verbosity = verbosity
        self._showing_log4j = False  # inside a shown WARN/ERROR: its stack trace lines follow

    def shown(self, line: str) -> bool:
        if self.verbosity > 0:
            return True
        match = _LOG4J_LINE.match(line)
        if match:
            self._showing_log4j = self.verbosity == 0 and match.group(1) in _LOUD_LEVELS
            return self._showing_log4j
        if line.startswith(self.own_prefixes):
            self._showing_log4j = False
            return True
        return self._showing_log4j and line.startswith(("\t", " ", "Caused by", "java.", "org.", "py4j."))


def run_streamed(stage: str, command: list[str], log: IO[str], env: dict[str, str], verbosity: int,
                 console: IO[str] | None = None, errors: IO[str] | None = None) -> tuple[int, list[str]]:
    """Run command, sending its output to the log and the console as the module docstring says.
    Returns (exit code, the last stderr lines that are not Spark's log lines), for a failure report."""
    console, errors = console or sys.stdout, errors or sys.stderr
    terminal = console_is_terminal()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert process.stdout is not None and process.stderr is not None
    streams = {process.stdout.fileno(): ("out", _LogLines()), process.stderr.fileno(): ("err", _LogLines())}
    stderr_filter = _Stderr(stage, verbosity)
    recent_errors: deque[str] = deque(maxlen=20)
    with selectors.DefaultSelector() as selector:
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        while streams:
            for key, _ in selector.select():
                data = os.read(key.fd, 65536)
                name, lines = streams[key.fd]
                if not data:
                    selector.unregister(key.fd)
                    del streams[key.fd]
                    complete = lines.flush()
                    text = "\n".join(complete)
                else:
                    text, complete = lines.feed(data)
                for line in complete:
                    log.write(line + "\n")
                log.flush()
                if name == "out":
                    if verbosity >= 0 and text:
                        console.write(text)
                        console.flush()
                    continue
                for line in complete:
                    if not _LOG4J_LINE.match(line) and line.strip():
                        recent_errors.append(line)
                    if stderr_filter.shown(line):
                        _write_above_bar(errors, console, line, terminal)
    return process.wait(), list(recent_errors)


def _write_above_bar(errors: IO[str], console: IO[str], line: str, terminal: bool) -> None:
    """A stderr line on a terminal where a bar may be drawn: clear the bar's line first; the stage
    redraws its bar on its next update."""
    if terminal:
        console.write(CLEAR_LINE)
        console.flush()
    errors.write(line + "\n")
    errors.flush()


def log_tail(log_path: Path, lines: int = 15) -> list[str]:
    """The last lines of a log without Spark's INFO/WARN chatter, for a failure report."""
    text = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    kept = [line for line in text if not (_LOG4J_LINE.match(line) and _LOG4J_LINE.match(line).group(1) in {"INFO", "WARN", "DEBUG"})]
    return kept[-lines:]
