"""The current stack itself (.venv-current, made by `scripts/setup.sh current`): Spark 4, numpy 2, a
current pyarrow, no Petastorm and no s3fs 0.4.2. The GPU image has this stack without pyspark, so the
training side must import and run without loading any of Spark. Collected only when named (`pytest
tests/current_stack`, as scripts/test.sh does in .venv-current): the petastorm stack is the other
one on purpose."""
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

pytestmark = pytest.mark.unit
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["petastorm", "s3fs"])
def test_the_petastorm_stacks_reader_is_not_importable_here(name):
    assert importlib.util.find_spec(name) is None
    with pytest.raises(ImportError):
        importlib.import_module(name)


def test_spark_4_numpy_2_and_a_current_pyarrow():
    import pandas
    import pyspark

    assert int(pyspark.__version__.split(".")[0]) == 4
    assert int(np.__version__.split(".")[0]) >= 2
    assert int(pa.__version__.split(".")[0]) >= 18  # what Spark 4 needs, past what Petastorm 0.12 can import
    assert int(pandas.__version__.split(".")[0]) == 2  # Spark 4.3 warns on every conversion with pandas 3


def test_the_default_reader_here_is_pyarrow_and_petastorm_is_a_one_line_error():
    from pipeline.errors import ShardlineError
    from training.backends import resolve_backend

    assert resolve_backend("auto") == "pyarrow"
    with pytest.raises(ShardlineError) as error:
        resolve_backend("petastorm")
    message = str(error.value)
    assert "\n" not in message and "petastorm stack" in message and "reader.backend: pyarrow" in message


def test_the_training_side_imports_without_them():
    code = ("import sys; import training.train, training.loop, training.evaluate; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'petastorm', 'spark_jobs')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"


def test_train_then_evaluate_as_the_gpu_machine_runs_them(tmp_path):
    """`python -m training.train` and `-m training.evaluate`, on a dataset from the Spark-free writer."""
    sys.path.insert(0, str(REPO_ROOT / "tests" / "unit"))
    from parquet_datasets import write_classification_dataset
    from pipeline.config import build_config, save_config

    run_dir = tmp_path / "run"
    write_classification_dataset(run_dir / "dataset", [[24], [24]])
    (run_dir / "tokenizer").mkdir()
    config = build_config({"run_dir": str(run_dir), "data": {"input": "unused", "label_column": "label"}, "tokenizer": {"path": "unused"},
                           "preprocess": {"max_length": 8}, "reader": {"backend": "pyarrow"},
                           "train": {"model": "mlp", "max_steps": 4, "batch_size": 8, "embedding_dim": 8,
                                     "hidden_size": 16, "checkpoint_every": 2}})
    save_config(config, str(run_dir / "config.yaml"))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    for stage in ("train", "evaluate"):
        result = subprocess.run([sys.executable, "-m", f"training.{stage}", "--config", str(run_dir / "config.yaml")],
                                cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{stage}: " + result.stderr[-3000:]
    assert json.loads((run_dir / "eval.json").read_text())["examples"] == 24
    assert (run_dir / "model" / "model.safetensors").exists()
