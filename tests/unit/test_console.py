"""What the driver shows of a running stage and what it logs, with a real child process."""
import io
import sys
import textwrap

import pytest

from pipeline import console

# A stage in miniature: a redrawn progress bar and result lines on stdout; on stderr Spark's log4j
# lines (INFO, a WARN with its stack trace), the stage's own error line and another library's warning.
CHILD = textwrap.dedent("""
    import sys, time
    out, err = sys.stdout, sys.stderr
    out.write("preprocess: starting\\n"); out.flush()
    for done in range(4):
        out.write(f"\\r\\x1b[Kpreprocess: 3 stage: {done}/3 tasks"); out.flush(); time.sleep(0.02)
    err.write("26/01/31 12:00:00 INFO SparkContext: Running Spark version 3.5.9\\n")
    err.write("26/01/31 12:00:01 WARN TaskSetManager: Lost task 0.0 in stage 3\\n")
    err.write("\\tat org.apache.spark.Task.run(Task.scala:141)\\n")
    err.write("/venv/site-packages/petastorm/fs.py:12: FutureWarning: pyarrow.filesystem is deprecated\\n")
    err.write("preprocess: error: data.input 'x' matches no files\\n"); err.flush()
    out.write("\\r\\x1b[Kpreprocess: wrote the dataset\\n"); out.flush()
    sys.exit(int(sys.argv[1]))
""")


def _run(verbosity, code=0):
    log, out, err = io.StringIO(), io.StringIO(), io.StringIO()
    result = console.run_streamed("preprocess", [sys.executable, "-c", CHILD, str(code)], log, env=None,
                                  verbosity=verbosity, console=out, errors=err)
    return result, log.getvalue(), out.getvalue(), err.getvalue()


def test_the_log_gets_everything_with_bars_resolved_to_their_last_state():
    (code, recent), log, _, _ = _run(0, code=2)
    assert code == 2
    lines = log.splitlines()
    assert "preprocess: starting" in lines and "preprocess: wrote the dataset" in lines
    assert "26/01/31 12:00:00 INFO SparkContext: Running Spark version 3.5.9" in lines
    assert "\tat org.apache.spark.Task.run(Task.scala:141)" in lines
    assert not any("\r" in line or "\x1b" in line for line in lines)
    assert not any("0/3 tasks" in line for line in lines)  # redrawn states are not logged, only what stayed
    assert recent[-1] == "preprocess: error: data.input 'x' matches no files"  # for the failure report


@pytest.mark.parametrize("verbosity, shown, hidden", [
    (0, ["WARN TaskSetManager", "\tat org.apache.spark.Task.run", "preprocess: error:"],
     ["INFO SparkContext", "FutureWarning"]),
    (1, ["INFO SparkContext", "WARN TaskSetManager", "FutureWarning", "preprocess: error:"], []),
    (-1, ["preprocess: error:"], ["INFO SparkContext", "WARN TaskSetManager", "FutureWarning"]),
])
def test_the_console_shows_stderr_by_verbosity(verbosity, shown, hidden):
    _, _, out, err = _run(verbosity)
    for text in shown:
        assert text in err
    for text in hidden:
        assert text not in err
    if verbosity >= 0:  # stdout passes through as written, redraws included
        assert "preprocess: 3 stage: 1/3 tasks" in out and out.endswith("preprocess: wrote the dataset\n")
    else:
        assert out == ""


def test_stage_progress_mode_follows_the_console_and_quiet(monkeypatch):
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # not a terminal
    assert console.progress_environment(0) == {console.PROGRESS_ENV: "lines"}
    assert console.progress_environment(-1) == {console.PROGRESS_ENV: "off"}
    monkeypatch.setenv(console.PROGRESS_ENV, "bar")
    assert console.progress_mode() == "bar"  # a stage obeys what the driver chose


def test_lines_mode_prints_progress_with_rate_and_time_left(monkeypatch, capsys):
    monkeypatch.setenv(console.PROGRESS_ENV, "lines")
    monkeypatch.setattr(console, "PLAIN_INTERVAL_S", 0.0)
    assert list(console.track(range(4), 4, "evaluate", "batch")) == [0, 1, 2, 3]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("evaluate: 1/4 batches (25%), ") and lines[0].endswith(" left")
    assert lines[-1].startswith("evaluate: 4/4 batches (100%)") and lines[-1].endswith("0:00 left")


def test_durations_read_like_a_clock():
    assert [console.format_duration(s) for s in (0, 42, 725, 3723)] == ["0:00", "0:42", "12:05", "1:02:03"]
