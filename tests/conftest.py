"""Shared fixtures: one local[2] SparkSession for the whole run, small real corpora, a tokenizer."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
_TIERS = ("unit", "spark", "e2e", "fuzz")


def pytest_collection_modifyitems(items):
    # The tier is the directory a test lives in: tests/unit, tests/spark, tests/e2e, tests/fuzz.
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in _TIERS:
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python workers import spark_jobs from this checkout, not from wherever it is installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("shardline-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def docstring_records():
    """The demo corpus: real stdlib docstrings labelled by package."""
    from pipeline.demo import stdlib_docstrings

    return stdlib_docstrings()


@pytest.fixture(scope="session")
def small_tokenizer(docstring_records):
    from pipeline.config import TokenizerTrainConfig
    from pipeline.tokenizer import train_tokenizer

    return train_tokenizer((r["text"] for r in docstring_records[:400]), TokenizerTrainConfig(vocab_size=800))


@pytest.fixture(scope="session")
def submit_preprocess():
    """Runs spark_jobs/preprocess.py with spark-submit in its own JVM (e.g. on another master),
    with the environment a user has after `source .venv/bin/activate`."""
    def submit(config_path: Path, master: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
        env.update(PYTHONPATH=str(REPO_ROOT), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
        result = subprocess.run(
            [str(Path(sys.executable).parent / "spark-submit"), "--master", master, "--conf", "spark.ui.enabled=false",
             str(REPO_ROOT / "spark_jobs" / "preprocess.py"), "--config", str(config_path)],
            cwd=Path(config_path).parent, env=env, capture_output=True, text=True, timeout=600,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
        return result

    return submit


def dataset_contents(dataset_dir: Path) -> dict:
    """What two builds of one config must agree on, leaving out what belongs to the run (its
    timings, its run_dir): the bytes of every shard file and tokenizer file, the rejects' rows
    (as a sorted list: Spark names its part files per job) and the manifest."""
    import pyarrow.parquet as pq

    from pipeline import contract

    manifest = json.loads((dataset_dir / contract.MANIFEST_FILE).read_text())
    manifest.pop("stage_seconds")
    manifest["config"].pop("run_dir")
    return {
        "manifest": manifest,
        "shards": {f"{split}/{p.name}": p.read_bytes() for split in contract.SPLITS
                   for p in sorted((dataset_dir / split).glob("*.parquet"))},
        "rejects": sorted(pq.read_table(dataset_dir / contract.REJECTS_DIR).to_pylist(), key=repr),
        "tokenizer": {p.name: p.read_bytes() for p in sorted((dataset_dir / "tokenizer").iterdir())},
    }


@pytest.fixture(scope="session")
def contents_of():
    return dataset_contents
