"""Shared fixtures: one local[2] SparkSession for the whole run, small real corpora, a tokenizer."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
_TIERS = ("unit", "spark", "e2e")


def pytest_collection_modifyitems(items):
    # The tier is the directory a test lives in: tests/unit, tests/spark, tests/e2e.
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
