"""The driver's decisions: exact command lines, and which stages a rerun skips (on real files)."""
import sys
from pathlib import Path

import pytest

# The driver launches pyspark's spark-submit and reads inputs through spark_jobs: nothing to test
# in a training-only environment (a GPU machine without pyspark).
pytest.importorskip("pyspark")
from pipeline import contract, driver  # noqa: E402
from pipeline.config import build_config  # noqa: E402


def _config(run_dir: Path, corpus: Path, *overrides: str):
    tree = {"run_dir": str(run_dir), "data": {"input": str(corpus), "label_column": "label"},
            "tokenizer": {"train": {"vocab_size": 500}}}
    return build_config(tree, list(overrides))


@pytest.fixture
def finished_run(tmp_path):
    """A run_dir whose three stages have finished: outputs in place, markers written by the driver."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "a document", "label": "x"}\n')
    config = _config(tmp_path / "run", corpus)
    dataset = Path(config.dataset_dir)
    dataset.mkdir(parents=True)
    manifest = contract.Manifest(
        schema_version=contract.SCHEMA_VERSION, task="classification", max_length=8, vocab_size=10, pad_id=0,
        tokenizer_sha256="0" * 64, label_map={"x": 0}, input_records=1, rejected_records=0, rejected_by_reason={},
        token_count=1, splits={}, config=config.to_dict(), dataset_fingerprint="f" * 64,
    )
    (dataset / contract.MANIFEST_FILE).write_text(manifest.model_dump_json())
    (dataset / contract.SUCCESS_FILE).touch()
    Path(config.model_dir).mkdir()
    (Path(config.model_dir) / "_SUCCESS").touch()
    (Path(config.run_dir) / "eval.json").write_text("{}")
    for stage in driver.STAGES:
        driver.write_marker(config, stage, ["recorded"])
    return tmp_path, corpus


def _decisions(tmp_path, corpus, *overrides, **options):
    config = _config(tmp_path / "run", corpus, *overrides)
    return [(plan.stage, plan.run, plan.reason) for plan in driver.plan_stages(config, **options)]


def test_spark_submit_line_carries_master_conf_and_py_files_in_order():
    config = build_config(
        {"run_dir": "runs/x", "data": {"input": "c.jsonl", "label_column": "label"}, "tokenizer": {"train": {}},
         "spark": {"master": "yarn", "conf": {"spark.executor.memory": "4g", "spark.sql.shuffle.partitions": 64},
                   "py_files": ["dist/shardline.zip"], "jvm_archive": False}}
    )
    command = driver.spark_submit_command(config, Path("runs/x/config.resolved.yaml"), force=True)
    assert command == [
        driver.spark_submit_executable(), "--master", "yarn",
        "--conf", "spark.executor.memory=4g", "--conf", "spark.sql.shuffle.partitions=64",
        "--py-files", "dist/shardline.zip",
        str(driver.PREPROCESS_SCRIPT), "--config", "runs/x/config.resolved.yaml", "--force",
    ]


def test_train_runs_in_one_process_or_under_torchrun_by_nproc(tmp_path):
    path = Path("runs/x/config.resolved.yaml")
    single = _config(tmp_path, tmp_path / "c.jsonl")
    assert driver.train_command(single, path) == [sys.executable, "-m", "training.train", "--config", str(path)]
    multi = _config(tmp_path, tmp_path / "c.jsonl", "train.nproc=4")
    assert driver.train_command(multi, path) == [
        str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node", "4",
        "-m", "training.train", "--config", str(path),
    ]


def test_torchrun_launcher_prints_one_command_per_node_and_reads_the_config_from_an_object_store(tmp_path):
    torchrun = str(Path(sys.executable).parent / "torchrun")
    path = Path("/local/config.resolved.yaml")
    nodes = ("train.launcher=torchrun", "train.torchrun.num_nodes=3", "train.torchrun.rdzv_endpoint=[fd00::1]:29400",
             "train.nproc=2")
    c10d = _config(tmp_path, tmp_path / "c.jsonl", *nodes)
    assert driver.train_command(c10d, path) == [
        torchrun, "--nnodes", "3", "--nproc_per_node", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
        "[fd00::1]:29400", "--rdzv_id", "shardline", "-m", "training.train", "--config", str(path)]
    on_s3 = _config("s3://bucket/runs/x", tmp_path / "c.jsonl", *nodes, "train.torchrun.node_rank=2")
    assert driver.train_command(on_s3, path) == [
        torchrun, "--nnodes", "3", "--nproc_per_node", "2", "--node_rank", "2", "--master_addr", "[fd00::1]",
        "--master_port", "29400", "-m", "training.train", "--config", "s3://bucket/runs/x/config.resolved.yaml"]
    alone = _config(tmp_path, tmp_path / "c.jsonl", "train.launcher=torchrun")
    assert driver.train_command(alone, path)[1:6] == ["--nnodes", "1", "--nproc_per_node", "1", "--standalone"]
    spark = _config(tmp_path, tmp_path / "c.jsonl", "train.launcher=spark")
    assert driver.train_command(spark, path) == [sys.executable, "-m", "spark_jobs.train_on_spark", "--config", str(path)]


@pytest.mark.parametrize("overrides, message", [
    (["train.torchrun.num_nodes=2"], "config key train.torchrun.rdzv_endpoint: required when num_nodes is 2"),
    (["train.torchrun.rdzv_endpoint=host"], "config key train.torchrun.rdzv_endpoint: 'host' must look like HOST:PORT"),
    (["train.torchrun.num_nodes=2", "train.torchrun.rdzv_endpoint=h:1", "train.torchrun.node_rank=2"],
     "config key train.torchrun.node_rank: 2 must be below num_nodes 2"),
    (["train.launcher=slurm"], "config key train.launcher: Input should be 'local', 'torchrun' or 'spark'"),
])
def test_launcher_settings_fail_in_one_line_naming_the_key(tmp_path, overrides, message):
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError) as error:
        _config(tmp_path, tmp_path / "c.jsonl", *overrides)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_driver_and_spark_job_agree_on_what_a_dataset_depends_on():
    from spark_jobs.preprocess import DATASET_SECTIONS

    assert driver.STAGE_SECTIONS["preprocess"] == DATASET_SECTIONS


def test_unchanged_config_and_inputs_skip_every_stage(finished_run):
    assert _decisions(*finished_run) == [("preprocess", False, ""), ("train", False, ""), ("evaluate", False, "")]
    # spark.* never changes results, so they never rerun anything
    assert not any(run for _, run, _ in _decisions(*finished_run, "spark.master=yarn", "spark.py_files=[x.zip]"))


def test_a_training_key_reruns_train_and_evaluate_only(finished_run):
    assert _decisions(*finished_run, "train.lr=0.01") == [
        ("preprocess", False, ""),
        ("train", True, "the train settings changed since its last run"),
        ("evaluate", True, "it reads the new output of train"),
    ]
    assert _decisions(*finished_run, "eval.batch_size=8") == [
        ("preprocess", False, ""), ("train", False, ""), ("evaluate", True, "the eval settings changed since its last run"),
    ]


def test_a_dataset_key_is_refused_before_anything_runs_unless_forced(finished_run):
    # The Spark job would refuse to overwrite the dataset; the plan (dry run or not) says so first.
    with pytest.raises(contract.DatasetConflictError, match=r"dataset was built with other preprocess settings; "
                                                            r"add --force to rebuild it"):
        _decisions(*finished_run, "preprocess.seed=5")
    assert _decisions(*finished_run, "preprocess.seed=5", force=True) == [
        ("preprocess", True, "--force was given"), ("train", True, "--force was given"),
        ("evaluate", True, "--force was given"),
    ]


def test_a_dataset_key_with_no_finished_dataset_just_runs(finished_run):
    tmp_path, corpus = finished_run
    (tmp_path / "run" / "dataset" / contract.SUCCESS_FILE).unlink()
    assert _decisions(tmp_path, corpus, "data.chunk_mb=8") == [
        ("preprocess", True, f"its output {tmp_path / 'run' / 'dataset' / contract.SUCCESS_FILE} is missing"),
        ("train", True, "it reads the new output of preprocess"),
        ("evaluate", True, "it reads the new output of train"),
    ]


def test_dry_run_and_real_run_refuse_a_changed_dataset_alike(finished_run, capsys):
    tmp_path, corpus = finished_run
    config = _config(tmp_path / "run", corpus, "preprocess.seed=5")
    for dry_run in (True, False):
        with pytest.raises(contract.DatasetConflictError):
            driver.run_stages(config, dry_run=dry_run)
    assert capsys.readouterr().out == ""  # refused before printing a plan or starting anything


def test_changed_input_file_rebuilds_the_dataset_with_force(finished_run):
    tmp_path, corpus = finished_run
    corpus.write_text(corpus.read_text() + '{"text": "another document", "label": "y"}\n')
    plans = driver.plan_stages(_config(tmp_path / "run", corpus))
    assert [(p.stage, p.run, p.reason) for p in plans][0] == ("preprocess", True, "its input files changed since its last run")
    assert plans[0].command[-1] == "--force"  # same config: the job would otherwise skip its old dataset
    assert all(p.run for p in plans)


def test_missing_output_reruns_that_stage_and_what_follows(finished_run):
    tmp_path, corpus = finished_run
    (tmp_path / "run" / "eval.json").unlink()
    assert _decisions(*finished_run) == [
        ("preprocess", False, ""), ("train", False, ""),
        ("evaluate", True, f"its output {tmp_path / 'run' / 'eval.json'} is missing"),
    ]


def test_force_from_and_to_select_the_stages(finished_run):
    assert _decisions(*finished_run, force=True, first="train") == [
        ("train", True, "--force was given"), ("evaluate", True, "--force was given"),
    ]
    assert _decisions(*finished_run, "train.lr=0.5", last="preprocess") == [("preprocess", False, "")]


def test_from_a_stage_whose_input_is_missing_is_refused(finished_run):
    tmp_path, corpus = finished_run
    (tmp_path / "run" / "dataset" / contract.SUCCESS_FILE).unlink()
    with pytest.raises(driver.StageOrderError) as raised:
        _decisions(tmp_path, corpus, first="train", last="train")  # `shardline train`: no --from typed
    assert str(raised.value) == (
        f"train needs the output of preprocess, {tmp_path / 'run' / 'dataset' / contract.SUCCESS_FILE}, which is "
        "missing; run `shardline preprocess` with the same config first (or `shardline run` for every stage)")
    with pytest.raises(driver.StageOrderError, match="--from evaluate comes after --to train"):
        _decisions(tmp_path, corpus, first="evaluate", last="train")
