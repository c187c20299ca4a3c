"""The Spark job's console progress, read from the shared session's status tracker while a job runs."""
import itertools
import re
import threading
import time

import pytest

from pipeline.console import CLEAR_LINE
from spark_job_names import descriptions_since, last_job_id
from spark_jobs import progress
from spark_jobs.progress import JOB_DESCRIPTION, SparkProgress, described


def _slow_job(spark):
    return spark.sparkContext.parallelize(range(4), 4).map(lambda x: time.sleep(0.6) or x).collect()


def test_lines_mode_prints_the_running_stage_and_its_tasks(spark, monkeypatch, capsys):
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    with SparkProgress(spark.sparkContext, mode="lines"):
        assert _slow_job(spark) == [0, 1, 2, 3]
    lines = capsys.readouterr().out.splitlines()
    pattern = re.compile(r"preprocess: Spark stage \d+ \(collect at test_progress\.py:\d+\): [0-4]/4 tasks done"
                         r"(, \d running)?, \d+:\d\d$")
    assert lines and all(pattern.match(line) for line in lines), lines


def test_lines_name_the_phase_described_last_and_the_call_site_again_once_it_ends(spark, monkeypatch, capsys):
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    with SparkProgress(spark.sparkContext, mode="lines"):
        with described(spark.sparkContext, "near-dedup: a phase"):
            progress.name_jobs(spark.sparkContext, "near-dedup: its second step")
            assert _slow_job(spark) == [0, 1, 2, 3]
        time.sleep(2 * progress.POLL_S)  # no stage runs: nothing is printed
        assert _slow_job(spark) == [0, 1, 2, 3]
    lines = capsys.readouterr().out.splitlines()
    named = re.compile(r"near-dedup: its second step: Spark stage \d+: [0-4]/4 tasks done(, \d running)?, \d+:\d\d$")
    by_site = re.compile(r"preprocess: Spark stage \d+ \(collect at test_progress\.py:\d+\): ")
    kinds = [name for name, _ in itertools.groupby("named" if named.match(line) else
                                                   "by site" if by_site.match(line) else line for line in lines)]
    assert kinds == ["named", "by site"]


def test_bar_mode_redraws_one_line_and_clears_it_for_other_output(spark, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the line is cut to the terminal's width: this one fits whole
    with SparkProgress(spark.sparkContext, mode="bar"):
        job = threading.Thread(target=_slow_job, args=(spark,))
        job.start()
        time.sleep(1.0)  # the status line is drawn by now
        print("preprocess: a message while a stage runs")
        job.join()
    out = capsys.readouterr().out
    before, after = out.split("preprocess: a message while a stage runs\n")
    assert before.count(CLEAR_LINE + "preprocess: Spark stage") >= 2  # redrawn in place, no newline between
    assert "\n" not in before
    assert re.search(r"tasks done.*, \d+:\d\d" + re.escape(CLEAR_LINE) + "$", before)  # cleared, then printed
    assert CLEAR_LINE + "preprocess: Spark stage" in after  # and drawn again below the message


def test_described_names_the_jobs_inside_and_puts_the_outer_name_back_after_a_failure(spark):
    context = spark.sparkContext
    before = last_job_id(spark)
    with described(context, "outer"):
        spark.range(3).count()
        with pytest.raises(RuntimeError, match="a failed phase"):
            with described(context, "inner"):
                spark.range(4).count()
                raise RuntimeError("a failed phase")
        spark.range(5).count()
    assert context.getLocalProperty(JOB_DESCRIPTION) is None
    spark.range(6).count()
    runs = [name for name, _ in itertools.groupby(descriptions_since(spark, before))]  # a count may be 2 jobs
    assert runs == ["outer", "inner", "outer", None]
