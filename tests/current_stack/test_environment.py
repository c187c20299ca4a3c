"""The stack the GPU machine has: numpy 2, a current pyarrow, torch, no pyspark and no petastorm
(.venv-current, made by scripts/setup_current.sh). The training side must import and run there.
Collected only when named (`pytest tests/current_stack`, as `make test` does in .venv-current): the
main environment has Spark and Petastorm on purpose."""
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


@pytest.mark.parametrize("name", ["pyspark", "petastorm"])
def test_the_spark_stack_is_not_importable_here(name):
    assert importlib.util.find_spec(name) is None
    with pytest.raises(ImportError):
        importlib.import_module(name)


def test_numpy_2_and_a_current_pyarrow():
    assert int(np.__version__.split(".")[0]) >= 2
    assert int(pa.__version__.split(".")[0]) >= 15  # past what Petastorm 0.12 can import


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
