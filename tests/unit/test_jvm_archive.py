"""The driver JVM's class-data archive: which archive a JDK and a set of jars get, and when the
driver's Java options name it."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from pipeline import jvm_archive
from pipeline.config import SparkConfig


@pytest.fixture()
def archive(tmp_path, monkeypatch):
    """An archive file where a JDK and a Spark (both stand-ins: files in tmp_path) have theirs."""
    (tmp_path / "jdk" / "bin").mkdir(parents=True)
    (tmp_path / "jdk" / "bin" / "java").write_bytes(b"")
    (tmp_path / "spark" / "jars").mkdir(parents=True)
    (tmp_path / "spark" / "jars" / "spark-core.jar").write_bytes(b"x")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    monkeypatch.setenv(jvm_archive.CACHE_ENV, str(tmp_path / "cache"))
    path = jvm_archive.archive_path()
    assert path is not None and path.parent.parent == tmp_path / "cache"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    return path


def test_the_driver_options_name_the_archive_after_the_users_own(archive):
    conf = jvm_archive.driver_conf(SparkConfig(conf={"spark.driver.extraJavaOptions": "-Dkeep=1", "spark.a": "b"}))
    assert conf == {"spark.driver.extraJavaOptions": f"-Dkeep=1 -XX:SharedArchiveFile={archive}", "spark.a": "b"}
    assert jvm_archive.driver_conf(SparkConfig())["spark.driver.extraJavaOptions"] == f"-XX:SharedArchiveFile={archive}"


@pytest.mark.parametrize("spark", [
    SparkConfig(jvm_archive=False),
    SparkConfig(conf={"spark.submit.deployMode": "cluster"}),  # the driver JVM starts on the cluster
], ids=["switched-off", "cluster-mode"])
def test_no_archive_where_it_is_off_or_the_driver_runs_elsewhere(archive, spark):
    assert jvm_archive.driver_conf(spark) == spark.conf


def test_no_archive_option_before_one_is_built(archive):
    archive.unlink()
    assert jvm_archive.driver_conf(SparkConfig(conf={"spark.a": "b"})) == {"spark.a": "b"}


def test_another_jdk_or_a_changed_jar_gets_another_archive(tmp_path):
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core.jar").write_bytes(b"x")
    java = tmp_path / "java"
    java.write_bytes(b"")
    key = jvm_archive.archive_key(java, jars)
    assert jvm_archive.archive_key(java, jars) == key
    os.utime(jars / "spark-core.jar", ns=(1, 1))
    assert jvm_archive.archive_key(java, jars) != key
    other_java = tmp_path / "java17"
    other_java.write_bytes(b"")
    assert jvm_archive.archive_key(other_java, jars) != jvm_archive.archive_key(java, jars)


SMALL, BIG = 40 << 20, jvm_archive.QUICK_JIT_MAX_INPUT_BYTES


@pytest.mark.parametrize("spark, input_bytes, quick", [
    (SparkConfig(master="local[2]"), SMALL, True),
    (SparkConfig(master="local"), 0, True),
    (SparkConfig(master="local[2]"), BIG, False),  # C2's faster code pays back on a long run
    (SparkConfig(master="local[2]"), None, False),  # size not known (the training driver)
    (SparkConfig(master="spark://head:7077"), SMALL, False),  # the driver only plans and schedules
    (SparkConfig(master="local-cluster[2,1,1024]"), SMALL, False),  # executors are other JVMs
    (SparkConfig(master="local[2]", conf={"spark.driver.extraJavaOptions": "-XX:-TieredCompilation"}), SMALL, False),
    (SparkConfig(master="spark://head:7077", driver_jit="c1"), BIG, True),
    (SparkConfig(master="local[2]", driver_jit="tiered"), SMALL, False),
], ids=["small-local", "local-no-brackets", "big-local", "unknown-size", "cluster", "local-cluster",
        "users-own-jit-option", "forced-c1", "forced-tiered"])
def test_the_quick_jit_goes_to_short_local_jobs_only(spark, input_bytes, quick):
    assert jvm_archive.quick_jit(spark, input_bytes) is quick


def test_the_quick_jit_option_follows_the_users_options_and_the_archive(archive):
    spark = SparkConfig(master="local[2]", conf={"spark.driver.extraJavaOptions": "-Dkeep=1"})
    assert jvm_archive.driver_conf(spark, SMALL)["spark.driver.extraJavaOptions"] == (
        f"-Dkeep=1 -XX:SharedArchiveFile={archive} {jvm_archive.QUICK_JIT_OPTION}")
    archive.unlink()
    assert jvm_archive.driver_conf(SparkConfig(master="local[2]"), SMALL) == {
        "spark.driver.extraJavaOptions": jvm_archive.QUICK_JIT_OPTION}
    assert jvm_archive.driver_conf(SparkConfig(master="local[2]"), BIG) == {}


def stand_in_archive(cache: Path, java: Path, jars: Path, record: bool = True) -> Path:
    """An archive file named for java and jars as they are now, with its source recorded."""
    path = cache / "jvm" / jvm_archive.archive_name(java, jars)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"archive")
    if record:
        jvm_archive.record_source(path, java, jars)
    return path


def spark_install(folder: Path) -> Path:
    (folder / "jars").mkdir(parents=True)
    (folder / "jars" / "spark-core.jar").write_bytes(b"x")
    return folder / "jars"


def test_a_build_removes_the_archives_of_jdks_and_jars_no_longer_here(tmp_path):
    java = tmp_path / "java"
    java.write_bytes(b"")
    cache = tmp_path / "cache"
    current = stand_in_archive(cache, java, spark_install(tmp_path / "venv"))
    other_live = stand_in_archive(cache, java, spark_install(tmp_path / "other-venv"))
    deleted_venv = stand_in_archive(cache, java, spark_install(tmp_path / "deleted-venv"))
    shutil.rmtree(tmp_path / "deleted-venv")
    upgraded_jars = spark_install(tmp_path / "upgraded-venv")
    upgraded = stand_in_archive(cache, java, upgraded_jars)
    (upgraded_jars / "spark-core.jar").write_bytes(b"a newer jar")
    gone_jdk_java = tmp_path / "old-java"
    gone_jdk_java.write_bytes(b"")
    gone_jdk = stand_in_archive(cache, gone_jdk_java, tmp_path / "venv" / "jars")
    gone_jdk_java.unlink()
    unrecorded = stand_in_archive(cache, java, spark_install(tmp_path / "older-shardline"), record=False)

    removed = jvm_archive.prune(cache / "jvm", keep=current)

    assert removed == sorted([deleted_venv, upgraded, gone_jdk, unrecorded])
    assert sorted(path.name for path in (cache / "jvm").iterdir()) == sorted(
        [current.name, jvm_archive.source_path(current).name, other_live.name, jvm_archive.source_path(other_live).name])


def test_setup_keeps_the_archive_it_names_and_records_its_source(archive, capsys):
    stale = archive.with_name("spark-driver-0000000000000000.jsa")
    stale.write_bytes(b"")
    assert jvm_archive.main() == 0
    assert capsys.readouterr().out.strip() == str(archive)
    assert sorted(archive.parent.iterdir()) == [archive, jvm_archive.source_path(archive)]
    assert not jvm_archive.is_stale(archive)
