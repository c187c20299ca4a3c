"""The job on a real Spark standalone cluster (master + one worker on 127.0.0.1), code shipped as the
`shardline package` zip through --py-files, compared with the local[2] run of the same config."""
import json
import os
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import pytest

from dataset_reads import split_rows
from pipeline import contract, storage
from pipeline.config import build_config, save_config
from pipeline.demo import demo_records, write_jsonl
from pipeline.packaging import build_package
from spark_jobs import english_words, lid176, minhash, text_filters
from spark_jobs.preprocess import build_dataset
from standalone_cluster import LOOPBACK, daemon_env, standalone_cluster

REPO_ROOT = Path(__file__).resolve().parents[2]


def _daemon_env(tmp: Path) -> dict:
    """Spark's own launcher environment, without this checkout on PYTHONPATH: executors must get
    the project from the --py-files zip, as on a real cluster."""
    env = daemon_env(tmp)
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def _executor_python(tmp: Path) -> Path:
    """An interpreter for the executors with the pinned third-party packages that cannot import this
    project. The venv's own python would import it from the checkout whatever --py-files holds: the
    editable install is a .pth hook in site-packages. This one is the same python run with -S (no
    site module, so no .pth file is processed) and site-packages added to the end of PYTHONPATH as a
    plain directory, after what Spark puts there (pyspark's zips and the --py-files zip).

    Python 3.12 has no distutils, and Spark 3.5's Arrow path still imports it (pyspark.sql.pandas.types);
    setuptools (which torch requires) supplies it through a .pth hook, which -S skips. So a `distutils`
    link to setuptools' own copy goes on the path just before site-packages, as that hook would give it."""
    site_packages = sysconfig.get_paths()["purelib"]
    path = site_packages
    if sys.version_info >= (3, 12):
        shims = tmp / "executor-shims"
        shims.mkdir(exist_ok=True)
        if not (shims / "distutils").exists():
            (shims / "distutils").symlink_to(Path(site_packages) / "setuptools" / "_distutils")
        path = f"{shims}:{site_packages}"
    wrapper = tmp / "executor-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{path}" exec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory, s3_server):
    """spark://127.0.0.1:PORT with one 2-core worker; both daemons are stopped at teardown. The
    daemons get the AWS_* variables (as cluster nodes get an instance role): executors reach the
    S3 server with their own credentials."""
    tmp = tmp_path_factory.mktemp("cluster")
    env = _daemon_env(tmp)
    with standalone_cluster(tmp, env) as (master, ui_port):
        yield master, ui_port, env


def _applications(ui_port: int) -> list[dict]:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{ui_port}/json/", timeout=5) as reply:
        state = json.load(reply)
    return state.get("activeapps", []) + state.get("completedapps", [])


def test_cluster_run_on_s3_equals_the_local_run(standalone_master, spark, tmp_path):
    import boto3

    master, ui_port, env = standalone_master
    records = demo_records()[::12]
    longest = max(records, key=lambda r: len(r["text"]))
    records.append({**longest, "text": longest["text"].replace(" the ", " a ", 1)})  # a near-duplicate
    corpus = write_jsonl(records, tmp_path / "corpus.jsonl")
    boto3.client("s3").create_bucket(Bucket="shardline-cluster")
    storage.write_bytes("s3://shardline-cluster/corpus/docstrings.jsonl", corpus.read_bytes())
    tree = {
        "data": {"input": str(corpus), "label_column": "label"},
        "tokenizer": {"train": {"vocab_size": 600}},  # trained by each run, in its own driver process
        "preprocess": {"max_length": 32, "seed": 5, "num_partitions": 2, "shard": {"row_group_rows": 16},
                       "collapse_whitespace": False,  # the filters judge lines
                       # Filters, language and near-duplicates on the executors: they remove the same
                       # documents. The executors here import the project from the zip, which holds no
                       # compiled code: their words and word n-grams are the Python's and numpy's, the
                       # local run's the C's (tests/unit/test_english_words.py).
                       "quality": {"gopher_repetition": {"top_n_grams": {2: 0.4, 3: 0.4, 4: 0.4}}, "fineweb": {},
                                   "language": {"keep": ["en"], "min_score": 0.3}, "near_dedup": {}}},
        "spark": {"conf": {"spark.sql.shuffle.partitions": 4}},
    }
    local = build_config({**tree, "run_dir": str(tmp_path / "local")})
    local_manifest = build_dataset(spark, local)

    # Input and output on the S3 server: nothing shared between driver and executors but the bucket.
    cluster = build_config({**tree, "run_dir": "s3://shardline-cluster/runs/x",
                            "data": {**tree["data"], "input": "s3://shardline-cluster/corpus/*.jsonl"}})
    config_path = tmp_path / "cluster.yaml"
    save_config(cluster, str(config_path))
    package = build_package(tmp_path / "shardline.zip")
    executor_python = _executor_python(tmp_path)
    probe = [str(executor_python), "-c", "import pyarrow, tokenizers, pyspark, spark_jobs; print(spark_jobs.__file__)\n"
             "from spark_jobs import english_words, lid176, minhash, text_filters\n"
             "print(english_words._english_words_c, text_filters._word_ngrams_c, text_filters._text_filters_c,\n"
             "      minhash._minhash_c, lid176._lid176_c)"]
    bare = subprocess.run(probe, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert bare.returncode != 0 and "No module named 'spark_jobs'" in bare.stderr, bare.stdout + bare.stderr
    shipped = subprocess.run(probe, cwd=tmp_path, env={**env, "PYTHONPATH": str(package)}, capture_output=True,
                             text=True, timeout=120)
    # From the zip, without the compiled modules: the filters' Python fallbacks, and fasttext for lid.176.
    assert shipped.stdout.split("\n")[:2] == [str(package / "spark_jobs" / "__init__.py"), "None None None None None"], shipped.stderr
    assert None not in (english_words._english_words_c, text_filters._word_ngrams_c, text_filters._text_filters_c,
                        minhash._minhash_c, lid176._lid176_c)  # here: the C
    spark_submit = Path(sys.executable).parent / "spark-submit"
    result = subprocess.run(
        [str(spark_submit), "--master", master, "--py-files", str(package),
         "--conf", f"spark.driver.host={LOOPBACK}", "--conf", "spark.ui.enabled=false",
         str(REPO_ROOT / "spark_jobs" / "preprocess.py"), "--config", str(config_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=400,
        # The driver runs the venv's python (it reads the config, trains nothing, plans the shards);
        # every executor runs executor_python, which has only the zip to import the project from.
        env={**env, "PYSPARK_DRIVER_PYTHON": sys.executable, "PYSPARK_PYTHON": str(executor_python)},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "preprocess: wrote" in result.stdout
    cluster_manifest = contract.load_manifest(cluster.dataset_dir)
    # The application really ran on the standalone master, with executors, not in a local fallback.
    assert [app["name"] for app in _applications(ui_port)] == ["shardline-preprocess"]
    assert not (tmp_path / "s3:").exists()
    assert split_rows(cluster.dataset_dir) == split_rows(local.dataset_dir)
    for name in contract.SPLITS:  # file names carry each build's id; contents are byte for byte the same
        cluster_split, local_split = cluster_manifest.splits[name], local_manifest.splits[name]
        assert cluster_split.model_copy(update={"files": []}) == local_split.model_copy(update={"files": []})
        assert [f.sha256 for f in cluster_split.files] == [f.sha256 for f in local_split.files]
    assert cluster_manifest.rejected_by_reason == local_manifest.rejected_by_reason
    assert cluster_manifest.removed_by_rule == local_manifest.removed_by_rule
    assert local_manifest.removed_by_rule.get("near_dedup.near_duplicate", 0) >= 1
    assert local_manifest.removed_by_rule.get("gopher_repetition.top_4_gram", 0) >= 1
    assert local_manifest.removed_by_rule.get("fineweb.line_punct_ratio", 0) >= 1
    assert cluster_manifest.tokenizer_sha256 == local_manifest.tokenizer_sha256


def test_package_command_writes_a_reproducible_zip_of_the_project(tmp_path):
    import zipfile

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    zips = []
    for name in ("a.zip", "b.zip"):
        result = subprocess.run([sys.executable, "-m", "pipeline.cli", "package", "--output", str(tmp_path / name)],
                                cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == str(tmp_path / name)
        zips.append((tmp_path / name).read_bytes())
    assert zips[0] == zips[1]
    names = zipfile.ZipFile(tmp_path / "a.zip").namelist()
    assert {"pipeline/__init__.py", "spark_jobs/preprocess.py", "spark_jobs/encode.py", "training/__init__.py"} <= set(names)
    assert all(n.endswith(".py") and "__pycache__" not in n for n in names)


def _upload(local_dir: Path, uri: str) -> None:
    for path in sorted(p for p in local_dir.rglob("*") if p.is_file()):
        storage.write_bytes(storage.join(uri, path.relative_to(local_dir).as_posix()), path.read_bytes())


def test_torch_distributor_on_the_cluster_trains_the_model_a_torchrun_run_trains(standalone_master, spark, tmp_path):
    """`shardline train --set train.launcher=spark`: two barrier tasks on the 2-core worker, one
    process each, run_dir on S3 (nothing shared with the driver but the bucket), against torchrun
    with two local processes on a copy of the same dataset."""
    import boto3
    from safetensors.torch import load as load_safetensors

    master, ui_port, env = standalone_master
    tree = {
        "data": {"input": str(write_jsonl(demo_records()[::10], tmp_path / "corpus.jsonl")), "label_column": "label"},
        "tokenizer": {"train": {"vocab_size": 400}},
        "preprocess": {"max_length": 24, "seed": 2, "shard": {"row_group_rows": 64}},
        "train": {"epochs": 1, "batch_size": 8, "embedding_dim": 16, "hidden_size": 32, "num_reader_workers": 1},
    }
    local = build_config({**tree, "run_dir": str(tmp_path / "torchrun")})
    build_dataset(spark, local)
    boto3.client("s3").create_bucket(Bucket="shardline-distributor")
    cluster = build_config({
        **tree, "run_dir": "s3://shardline-distributor/runs/x",
        "train": {**tree["train"], "launcher": "spark", "distributor": {"num_processes": 2, "local_mode": False}},
        "spark": {"master": master, "py_files": [str(build_package(tmp_path / "shardline.zip"))],
                  "conf": {"spark.driver.host": LOOPBACK, "spark.ui.enabled": "false"}},
        "storage": {"local_dir": str(tmp_path / "driver-local")},
    })
    for name in ("dataset", "tokenizer"):
        _upload(tmp_path / "torchrun" / name, cluster.run_path(name))
    save_config(local, str(tmp_path / "torchrun.yaml"))
    save_config(cluster, str(tmp_path / "cluster.yaml"))

    def shardline(*args, **extra_env):
        return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=600, env={**env, "PYTHONPATH": str(REPO_ROOT), **extra_env})

    reference = shardline("train", "--config", str(tmp_path / "torchrun.yaml"), "--set", "train.nproc=2")
    assert reference.returncode == 0, reference.stderr[-3000:]
    # The driver runs the venv's python; every executor runs executor_python, importing only the zip.
    trained = shardline("train", "--config", str(tmp_path / "cluster.yaml"), PYSPARK_PYTHON=str(_executor_python(tmp_path)),
                        PYSPARK_DRIVER_PYTHON=sys.executable)
    log = (tmp_path / "driver-local" / "logs" / "train.log")
    assert trained.returncode == 0, trained.stderr[-3000:] + (log.read_text()[-6000:] if log.exists() else "")
    assert "shardline-train" in [app["name"] for app in _applications(ui_port)]  # ran on the standalone master
    lineage = json.loads(storage.read_text(cluster.run_path("model", "lineage.json")))
    assert len(lineage["weights_sha256_per_rank"]) == 2 and len(set(lineage["weights_sha256_per_rank"])) == 1
    expected = load_safetensors((tmp_path / "torchrun" / "model" / "model.safetensors").read_bytes())
    got = load_safetensors(storage.read_bytes(cluster.run_path("model", "model.safetensors")))
    assert expected.keys() == got.keys() and all((expected[k] == got[k]).all() for k in expected)
    for config in ("torchrun.yaml", "cluster.yaml"):
        result = shardline("evaluate", "--config", str(tmp_path / config))
        assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(storage.read_text(cluster.run_path("eval.json"))) == \
        json.loads((tmp_path / "torchrun" / "eval.json").read_text())
