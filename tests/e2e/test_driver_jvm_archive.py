"""A driver JVM started the way `shardline preprocess` starts it loads Spark from the archive, and
compiles with C1 alone for a small local corpus."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline import driver, jvm_archive, launch
from pipeline.config import build_config

SCRIPT = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
numbers = spark.range(100)
assert numbers.groupBy((numbers.id % 3).alias("k")).count().count() == 3
spark.stop()
"""


def spark_classes_by_source(tmp_path, use_archive: bool) -> dict[str, int]:
    """org.apache.spark classes the driver JVM loaded, by where from: the archive or the jars."""
    log = tmp_path / f"classes-{use_archive}.log"
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    config = build_config({
        "run_dir": str(tmp_path / "run"), "data": {"input": "unused.jsonl", "label_column": "label"}, "tokenizer": {"path": "unused"},
        "spark": {"master": "local[1]", "jvm_archive": use_archive, "conf": {
            "spark.ui.enabled": "false", "spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={log}"}},
    })
    environment = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    result = subprocess.run([*launch.spark_submit_args(config), str(script)], capture_output=True, text=True,
                            env=environment, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    counts = {"archive": 0, "jars": 0}
    for line in log.read_text().splitlines():
        if " org.apache.spark." in line and "$$Lambda$" not in line:  # lambdas are made at run time
            counts["archive" if "source: shared objects file" in line else "jars"] += 1
    return counts


@pytest.fixture(scope="module")
def built_archive():
    path = jvm_archive.archive_path()
    assert path is not None, "java and pyspark are both installed in this environment"
    if not path.exists():  # scripts/setup.sh builds it; a test run without set-up builds it here
        jvm_archive.build(path)
    assert not jvm_archive.is_stale(path)  # its source is recorded, so no other set-up's prune removes it
    return path


def test_the_driver_jvm_loads_spark_from_the_archive_setup_built(built_archive, tmp_path):
    with_archive = spark_classes_by_source(tmp_path, use_archive=True)
    without = spark_classes_by_source(tmp_path, use_archive=False)
    assert without["archive"] == 0 and without["jars"] > 3000
    # Nearly every class comes from the archive; the few this job needs beyond the archive's build
    # (a preprocess run) still load from the jars.
    assert with_archive["archive"] > 0.9 * without["jars"]
    assert with_archive["jars"] < 0.05 * without["jars"]


JIT_SCRIPT = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
jvm = spark._jvm
bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
    jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))
print("TieredStopAtLevel=" + bean.getVMOption("TieredStopAtLevel").getValue())
spark.stop()
"""


@pytest.mark.parametrize("driver_jit, level", [("auto", "1"), ("tiered", "4")])
def test_a_small_local_corpus_gets_a_driver_jvm_with_the_quick_jit(tmp_path, driver_jit, level):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "a small corpus", "label": "x"}\n')
    script = tmp_path / "job.py"
    script.write_text(JIT_SCRIPT)
    config = build_config({
        "run_dir": str(tmp_path / "run"), "data": {"input": str(corpus), "label_column": "label"}, "tokenizer": {"path": "unused"},
        "spark": {"master": "local[1]", "driver_jit": driver_jit, "conf": {"spark.ui.enabled": "false"}},
    })
    environment = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    command = [*launch.spark_submit_args(config, driver.preprocess_input_bytes(config)), str(script)]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"TieredStopAtLevel={level}" in result.stdout.splitlines()
