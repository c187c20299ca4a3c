"""The dataset is the contract between the two stacks (scripts/stack.sh): a dataset built on one trains
on the other with no rebuild and gives the same model. On a cluster the Spark image (current stack)
and the GPU image (either) are different environments, so this is how they meet.

Needs both environments (`make test` sets both up); runs once, in the petastorm stack's suite.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.demo import demo_records, write_jsonl

pytestmark = pytest.mark.e2e
REPO_ROOT = Path(__file__).resolve().parents[2]
VENVS = {"petastorm": REPO_ROOT / ".venv", "current": REPO_ROOT / ".venv-current"}


def _stack_python(stack: str) -> Path:
    python = VENVS[stack] / "bin" / "python"
    if not python.exists():
        message = f"no {stack} stack at {VENVS[stack]}: run scripts/setup.sh {stack} (make test does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def _shardline(stack: str, *args: str) -> subprocess.CompletedProcess:
    python = _stack_python(stack)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYSPARK_") and k not in ("SHARDLINE_PROGRESS", "COLUMNS", "VIRTUAL_ENV")}
    # As after `source <venv>/bin/activate`: pyspark's launcher scripts find that stack's python3.
    env.update(PYTHONPATH=str(REPO_ROOT), PATH=f"{python.parent}{os.pathsep}{env['PATH']}")
    result = subprocess.run([str(python), "-m", "pipeline.cli", *args, "--quiet"], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{stack}: {' '.join(args)}\n" + result.stdout[-2000:] + result.stderr[-4000:]
    return result


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One corpus and config, preprocessed once on each stack (its own Spark: 3.5 and 4)."""
    if Path(sys.prefix).resolve() != VENVS["petastorm"].resolve():
        pytest.skip("runs once, in the petastorm stack's suite (it starts both stacks itself)")
    root = tmp_path_factory.mktemp("cross-stack")
    corpus = write_jsonl(demo_records()[:1500], root / "corpus.jsonl")
    settings = ["--config", "configs/demo.yaml", "--set", f"data.input={corpus}", "--set", "tokenizer.train.vocab_size=1500",
                "--set", "preprocess.max_length=64", "--set", "train.epochs=2", "--set", "train.device=cpu"]
    for stack in VENVS:
        _shardline(stack, "run", "--to", "preprocess", *settings, "--set", f"run_dir={root / stack}")
    return root, settings


def _split_files(dataset: Path) -> list[Path]:
    manifest = json.loads((dataset / "manifest.json").read_text())
    return [dataset / entry["path"] for split in ("train", "val", "test") for entry in manifest["splits"][split]["files"]]


def test_both_stacks_build_the_same_dataset_and_tokenizer_from_the_same_input(built, contents_of):
    root, _ = built
    petastorm, current = (contents_of(root / stack / "dataset") for stack in VENVS)
    assert petastorm["tokenizer"] == current["tokenizer"]  # byte for byte
    assert petastorm["rejects"] == current["rejects"]
    versions = petastorm["manifest"].pop("versions"), current["manifest"].pop("versions")
    assert versions[0]["spark"].startswith("3.5.") and versions[1]["spark"].startswith("4.")
    # Each file's sha256 and size are the bytes compared below; everything else must be equal.
    for manifest in (petastorm["manifest"], current["manifest"]):
        for stats in manifest["splits"].values():
            for entry in stats["files"]:
                entry.pop("sha256"), entry.pop("bytes")
    assert petastorm["manifest"] == current["manifest"]
    # The shard files: the same rows, schema, row groups and codecs. Their bytes are not the same:
    # each pyarrow writes its version into the footer, and pyarrow 26 writes page-header statistics
    # fields pyarrow 14 does not know.
    files = [_split_files(root / stack / "dataset") for stack in VENVS]
    assert len(files[0]) == len(files[1]) > 0
    for ours, theirs in zip(*files):
        a, b = pq.ParquetFile(ours), pq.ParquetFile(theirs)
        assert a.metadata.num_row_groups == b.metadata.num_row_groups
        assert [a.metadata.row_group(i).num_rows for i in range(a.metadata.num_row_groups)] == \
               [b.metadata.row_group(i).num_rows for i in range(b.metadata.num_row_groups)]
        assert a.schema_arrow == b.schema_arrow
        assert a.read().to_pylist() == b.read().to_pylist()
        codecs = [{f.metadata.row_group(0).column(i).compression for i in range(f.metadata.num_columns)}
                  for f in (a, b)]
        assert codecs[0] == codecs[1]


def test_a_dataset_from_either_stack_trains_on_the_other_to_the_same_model(built):
    root, settings = built
    trained = {}
    # Spark 4's dataset trained with Petastorm (petastorm stack), Spark 3.5's with pyarrow (current).
    for built_on, trains_on, backend in (("current", "petastorm", "petastorm"), ("petastorm", "current", "pyarrow")):
        run_dir = root / f"{built_on}-trained-on-{trains_on}"
        for part in ("dataset", "tokenizer"):
            shutil.copytree(root / built_on / part, run_dir / part)
        result = _shardline(trains_on, "run", "--from", "train", *settings, "--set", f"run_dir={run_dir}",
                            "--set", f"reader.backend={backend}")
        assert "preprocess" not in result.stdout.split("train")[0], result.stdout  # no rebuild
        trained[trains_on] = run_dir
    weights = {stack: (run_dir / "model" / "model.safetensors").read_bytes() for stack, run_dir in trained.items()}
    evaluations = {stack: json.loads((run_dir / "eval.json").read_text()) for stack, run_dir in trained.items()}
    assert evaluations["petastorm"]["examples"] == evaluations["current"]["examples"] > 0
    assert evaluations["petastorm"]["accuracy"] == evaluations["current"]["accuracy"]
    assert weights["petastorm"] == weights["current"]  # bitwise: same batches, same torch, both on CPU
