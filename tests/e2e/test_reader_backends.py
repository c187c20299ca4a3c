"""With reader.backend=pyarrow, training and what it imports load neither Petastorm nor Spark (nor
s3fs), so the trainer runs where they cannot be installed (numpy 2, a current pyarrow)."""
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys
sys.path.insert(0, {unit!r})
import training.train, training.evaluate, training.loop  # the trainer's entry points
from parquet_datasets import write_classification_dataset
from training.data import TASK_COLUMNS, iter_batches, split_spec
manifest = write_classification_dataset({root!r}, [[20, 5], [11]])
spec = split_spec({root!r}, manifest, "train", batch_size=4, columns=TASK_COLUMNS["classification"],
                  shuffle=True, num_workers=2, backend="pyarrow")
print(sum(len(batch["label"]) for batch in iter_batches(spec)))
print(sorted({{name.split(".")[0] for name in sys.modules}} & {{"petastorm", "pyspark", "s3fs"}}))
"""


def test_the_pyarrow_backend_imports_no_petastorm_spark_or_s3fs(tmp_path):
    script = SCRIPT.format(unit=str(REPO_ROOT / "tests" / "unit"), root=str(tmp_path / "dataset"))
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["36", "[]"]
