"""How the Spark driver's JVM starts: from a class-data archive (Java's dynamic AppCDS) built once
at set-up, and for a short local job with the quick JIT compiler alone (`quick_jit`).

A Spark driver's JVM loads about 11,000 classes from pyspark's jars on every start: read, parsed
and verified each time, before and during the first job. From an archive they are mapped from one
file instead. Measured on 2 cores, 4 alternating runs each: a process that starts a session and
runs one small job took 6.6-8.8 s and 11.3-14.7 CPU-s without it, 4.2-5.5 s and 7.0-8.6 CPU-s
with it; `shardline preprocess` on 47.6 MB used 1.7-7.9 CPU-s less (3 pairs). The archive fits one
JDK and one set of jars, so its file name hashes both (`archive_path`); when none matches, the JVM
starts as before, and one the JVM finds stale anyway it refuses with a warning line and goes on.
Each archive is 130-170 MB and every new virtual environment gets its own (its jars' paths differ),
so each build also removes the archives whose JDK or jars are gone or changed (`prune`): a machine
that recreates its environments, as CI does, would otherwise fill its disk with them.

    python -m pipeline.jvm_archive        # build it (scripts/setup.sh does), print its path

Only the driver's JVM, and the archive only in client mode: executors on a cluster are started by
its manager. Imports nothing heavy: the driver and the CLI build their spark-submit commands with it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pipeline.config import SparkConfig

DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
CACHE_ENV = "SHARDLINE_CACHE_DIR"
BUILD_TIMEOUT_S = 600  # the build's preprocess takes ~25 s; set-up must not hang on a stuck JVM


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shardline"


def spark_jars_dir() -> Path | None:
    """The jars spark-submit puts on the driver's classpath: $SPARK_HOME's, else pyspark's own."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"]) / "jars"
    spec = importlib.util.find_spec("pyspark")  # finds the package without importing it
    return Path(spec.submodule_search_locations[0]) / "jars" if spec and spec.submodule_search_locations else None


def java_executable() -> Path | None:
    """The java spark-submit starts: $JAVA_HOME's, else the first on PATH (as bin/spark-class does)."""
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if os.environ.get("JAVA_HOME") else shutil.which("java")
    return Path(java).resolve() if java and Path(java).exists() else None


def archive_key(java: Path, jars: Path) -> str:
    """A hash of the JDK binary and every jar (path, size, modification time): what the archive
    was built against."""
    digest = hashlib.sha256()
    for path in [java, *sorted(jars.glob("*.jar"))]:
        stat = path.stat()
        digest.update(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


ARCHIVE_GLOB = "spark-driver-*.jsa"


def archive_name(java: Path, jars: Path) -> str:
    return f"spark-driver-{archive_key(java, jars)}.jsa"


def archive_path() -> Path | None:
    """Where the archive for this JDK and these jars is (or goes); None without java or pyspark."""
    java, jars = java_executable(), spark_jars_dir()
    if java is None or jars is None or not jars.is_dir():
        return None
    return cache_dir() / "jvm" / archive_name(java, jars)


def source_path(archive: Path) -> Path:
    """Beside each archive: the JDK and the jars folder it was built from, one a line."""
    return archive.with_suffix(".source")


def record_source(archive: Path, java: Path, jars: Path) -> None:
    source_path(archive).write_text(f"{java}\n{jars}\n")


def is_stale(archive: Path) -> bool:
    """True when no JDK and jars hash to this archive's key any more: its source's JDK or jars
    folder is gone, a jar changed, or it has no source (built before sources were recorded)."""
    try:
        java, jars = (Path(line) for line in source_path(archive).read_text().splitlines())
    except (OSError, ValueError):
        return True
    if not java.exists() or not jars.is_dir():
        return True
    return archive.name != archive_name(java, jars)


def prune(folder: Path, keep: Path) -> list[Path]:
    """Remove every stale archive in folder but keep, with its source; return those removed. A
    JVM still running from one keeps its mapping (the file goes when it exits)."""
    removed = []
    for archive in sorted(folder.glob(ARCHIVE_GLOB)):
        if archive != keep and is_stale(archive):
            archive.unlink(missing_ok=True)
            source_path(archive).unlink(missing_ok=True)
            removed.append(archive)
    return removed


QUICK_JIT_OPTION = "-XX:TieredStopAtLevel=1"  # C1 only: no C2 compiles
# Below this much input C2's compiles cost a local job more than its faster code wins back. Whole
# `shardline preprocess` on 2 cores (GCIDE, see docs/performance.md): 47.6 MB 34.2 -> 29.4 s,
# 190 MB 72.8 -> 65.6 s, 367 MB 115.3 -> 116.6 s (about even).
QUICK_JIT_MAX_INPUT_BYTES = 256 << 20


def runs_tasks_in_driver(master: str) -> bool:
    """local or local[N]: the driver's JVM is the executor too (local-cluster[...] starts others)."""
    return master == "local" or master.startswith("local[")


def quick_jit(spark: SparkConfig, input_bytes: int | None) -> bool:
    """Whether the driver's JVM compiles with C1 alone (spark.driver_jit). `auto`: for a local
    master, where the driver's JVM also runs every task, with under QUICK_JIT_MAX_INPUT_BYTES of
    input (None: not known, as for training), and Java options of the user's own that set no JIT
    level. A cluster's driver only plans and schedules, for as long as the job runs."""
    if spark.driver_jit != "auto":
        return spark.driver_jit == "c1"
    return (runs_tasks_in_driver(spark.master) and input_bytes is not None and input_bytes < QUICK_JIT_MAX_INPUT_BYTES
            and "Tiered" not in spark.conf.get(DRIVER_JAVA_OPTIONS, ""))


def driver_conf(spark: SparkConfig, input_bytes: int | None = None) -> dict[str, str]:
    """spark.conf with the driver's Java options after the user's own: the archive when
    spark.jvm_archive is on, the driver runs here (client mode) and an archive matching this JDK
    and jars exists; the quick JIT where `quick_jit` says so for a job reading input_bytes."""
    conf = dict(spark.conf)
    added = []
    path = archive_path() if spark.jvm_archive and conf.get("spark.submit.deployMode", "client") == "client" else None
    if path is not None and path.exists():
        added.append(f"-XX:SharedArchiveFile={path}")
    if quick_jit(spark, input_bytes):
        added.append(QUICK_JIT_OPTION)
    if added:
        conf[DRIVER_JAVA_OPTIONS] = " ".join(filter(None, [conf.get(DRIVER_JAVA_OPTIONS), *added]))
    return conf


def build(path: Path) -> Path:
    """Run a small real `preprocess` (a tokenizer trained on the demo corpus, clean, dedup,
    split, shards) under spark-submit, with the JVM writing the classes it loaded to `path` at exit."""
    from pipeline import demo, driver, launch
    from pipeline.config import load_config, save_config

    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="shardline-jvm-archive-") as work:
        corpus = demo.write_jsonl(demo.demo_records(("email", "logging")), Path(work) / "corpus.jsonl")
        config = load_config(str(demo.DEMO_CONFIG), [
            f"run_dir={work}/run", f"data.input={corpus}", "tokenizer.train.vocab_size=500",
            "tokenizer.train.sample_size=2000", "spark.jvm_archive=false",
        ])
        config_path = Path(work) / "config.yaml"
        save_config(config, str(config_path))
        partial = path.with_name(path.name + ".partial")
        # The driver's own spark-submit line, with the JVM told to dump its classes at exit.
        command = [*launch.spark_submit_args(config), "--driver-java-options", f"-XX:ArchiveClassesAtExit={partial}",
                   str(driver.PREPROCESS_SCRIPT), "--config", str(config_path)]
        result = subprocess.run(command, capture_output=True, text=True, env=driver.stage_environment(),
                                timeout=BUILD_TIMEOUT_S)
        if result.returncode != 0 or not partial.exists():
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"spark-submit exited {result.returncode} without an archive: "
                               + (result.stderr.strip().splitlines() or ["no output"])[-1])
        # The source first: a set-up pruning beside this one never sees the archive without it.
        record_source(path, java_executable(), spark_jars_dir())
        os.replace(partial, path)  # a local cache file: the driver never sees a half-written archive
    return path


def main() -> int:
    path = archive_path()
    if path is None:
        print("jvm_archive: no java or pyspark found; the driver's JVM starts without an archive", file=sys.stderr)
        return 0
    if not path.exists():
        try:
            build(path)
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:  # only start-up time is lost: set-up goes on
            print(f"jvm_archive: not built ({error}); the driver's JVM starts without an archive", file=sys.stderr)
            return 0
    try:
        if not source_path(path).exists():  # built before sources were recorded
            record_source(path, java_executable(), spark_jars_dir())
        removed = prune(path.parent, keep=path)
    except OSError as error:  # a cache we cannot write costs disk, not the set-up
        print(f"jvm_archive: stale archives not removed ({error})", file=sys.stderr)
    else:
        if removed:
            print(f"jvm_archive: removed {len(removed)} archive(s) of JDKs or Spark jars no longer here", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
