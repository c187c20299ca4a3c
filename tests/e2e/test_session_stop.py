"""The drivers' SparkSession stops without pyspark's accumulator-server wait, and still
stops: the JVM's SparkContext is stopped after it and the server's socket file is gone."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from pipeline import launch
from pipeline.config import build_config

SCRIPT = """
import glob, sys
from pyspark.sql import SparkSession
from spark_jobs.session import stop_session

spark = SparkSession.builder.getOrCreate()
numbers = spark.range(1000)
# Python tasks: each sends its accumulator updates to the driver's server.
assert numbers.mapInArrow(lambda batches: batches, numbers.schema).count() == 1000
jvm_context = spark.sparkContext._jsc.sc()
stop_session(spark)
print("stopped in the JVM:", jvm_context.isStopped())
print("socket files:", len(glob.glob(sys.argv[1] + "/.*.sock")))
"""


@pytest.fixture
def socket_dir():
    """A short directory: AF_UNIX paths take 108 bytes, fewer than pytest's tmp_path may need."""
    with tempfile.TemporaryDirectory(prefix="shardline-") as directory:
        yield directory


def test_stop_session_stops_the_jvm_context_and_removes_the_accumulator_socket(tmp_path, socket_dir):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    # On Spark 4 the accumulator server listens on a socket file in socket_dir; Spark 3.5 ignores both keys.
    config = build_config({
        "run_dir": str(tmp_path / "run"), "data": {"input": "unused.jsonl", "label_column": "label"},
        "tokenizer": {"path": "unused"},
        "spark": {"master": "local[1]", "conf": {"spark.ui.enabled": "false",
                                                 "spark.python.unix.domain.socket.enabled": "true",
                                                 "spark.python.unix.domain.socket.dir": socket_dir}},
    })
    environment = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    result = subprocess.run([*launch.spark_submit_args(config), str(script), socket_dir], capture_output=True,
                            text=True, env=environment, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:] + result.stdout[-2000:]
    assert "stopped in the JVM: True" in result.stdout.splitlines()
    assert "socket files: 0" in result.stdout.splitlines()
