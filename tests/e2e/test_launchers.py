"""train.launcher on one machine, with real torchrun and Spark's real TorchDistributor (gloo, CPU):
two torchrun "nodes" meeting at a c10d rendezvous, TorchDistributor in local mode against that torchrun
run, a slow validation share past a short process-group timeout, and a NaN loss on one rank."""
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pipeline.config import build_config, save_config
from pipeline.demo import write_jsonl
from spark_jobs.preprocess import build_dataset

REPO_ROOT = Path(__file__).resolve().parents[2]
FAULTS = Path(__file__).resolve().parent / "faults" / "training"
TRAIN = {"model": "mlp", "epochs": 2, "batch_size": 8, "optimizer": "adamw", "lr": 0.005, "log_every": 1,
         "record_sample_ids": True, "embedding_dim": 16, "hidden_size": 32, "num_reader_workers": 1}
TIMEOUT_S = 400  # every subprocess: a hang fails the test instead of stalling it


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory, docstring_records):
    root = tmp_path_factory.mktemp("launchers")
    corpus = write_jsonl(docstring_records[::6], root / "corpus.jsonl")
    config = build_config({
        "run_dir": str(root / "source"),
        "data": {"input": str(corpus), "label_column": "label"},
        "tokenizer": {"train": {"vocab_size": 400}},
        "preprocess": {"max_length": 24, "seed": 3, "shard": {"row_group_rows": 64}},
        "eval": {"batch_size": 16},
        "train": TRAIN,
    })
    build_dataset(spark, config)
    return config


def _new_run(built, name) -> Path:
    run_dir = Path(built.run_dir).parent / name
    shutil.copytree(built.dataset_dir, run_dir / "dataset")
    shutil.copytree(built.tokenizer_dir, run_dir / "tokenizer")
    save_config(build_config({**built.to_dict(), "run_dir": str(run_dir)}), run_dir / "config.yaml")
    return run_dir


def _env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), **extra}


def _shardline(run_dir, *args, env=None, timeout=TIMEOUT_S):
    command = [sys.executable, "-m", "pipeline.cli", *args, "--config", str(run_dir / "config.yaml")]
    return subprocess.run(command, cwd=REPO_ROOT, env=env or _env(), capture_output=True, text=True, timeout=timeout)


def _log(run_dir, stage="train") -> str:
    path = run_dir / "logs" / f"{stage}.log"
    return path.read_text() if path.exists() else ""


def _samples(run_dir, rank):
    return [json.loads(line) for line in (run_dir / "samples" / f"rank-{rank}.jsonl").read_text().splitlines()]


def _weights(run_dir):
    return load_file(str(run_dir / "model" / "model.safetensors"))


def _two_nodes(run_dir, port, env=None):
    """`shardline train` on node 0, and on node 1 the command its dry run printed; (results, command)."""
    overrides = ["--set", "train.launcher=torchrun", "--set", "train.torchrun.num_nodes=2",
                 "--set", f"train.torchrun.rdzv_endpoint=127.0.0.1:{port}"]
    dry = _shardline(run_dir, "train", *overrides, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    command = shlex.split(lines[lines.index(next(l for l in lines if l.startswith("train: would run"))) + 1])
    assert "train: run this same command on each of the 2 nodes" in dry.stdout
    node0 = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "train", *overrides, "--config",
                              str(run_dir / "config.yaml")], cwd=REPO_ROOT, env=env or _env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (run_dir / "config.resolved.yaml").exists():  # the driver writes it, then starts torchrun
        assert node0.poll() is None and time.monotonic() < deadline, node0.communicate()
        time.sleep(0.2)
    node1 = subprocess.Popen(command, cwd=REPO_ROOT, env=env or _env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    results = []
    for process in (node0, node1):
        out, err = process.communicate(timeout=TIMEOUT_S)
        results.append((process.returncode, out, err))
    return results, command


@pytest.fixture(scope="module")
def two_nodes(built):
    """A finished run of two torchrun nodes, one process each: (run_dir, port, results, command)."""
    run_dir, port = _new_run(built, "two-nodes"), _free_port()
    results, command = _two_nodes(run_dir, port)
    assert [code for code, _, _ in results] == [0, 0], "\n".join(out[-2000:] + err[-3000:] for _, out, err in results) + _log(run_dir)
    return run_dir, port, results, command


def test_two_torchrun_nodes_at_a_c10d_rendezvous_train_one_model_on_disjoint_data(two_nodes):
    run_dir, port, results, command = two_nodes
    assert command[1:9] == ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d",
                            "--rdzv_endpoint", f"127.0.0.1:{port}"]
    lineage = json.loads((run_dir / "model" / "lineage.json").read_text())
    hashes = lineage["weights_sha256_per_rank"]
    ranks = [_samples(run_dir, rank) for rank in (0, 1)]
    # One process per node, identical final weights; on failure, what each rank ran and printed.
    assert len(hashes) == 2 and hashes[0] == hashes[1], (
        f"steps per rank {[len(r) for r in ranks]}\n" + "\n".join(out[-3000:] + err[-2000:] for _, out, err in results))
    assert [s["step"] for s in ranks[0]] == [s["step"] for s in ranks[1]] and ranks[0]
    seen = [[i for s in steps[: len(steps) // 2] for i in s["ids"]] for steps in ranks]  # epoch 0
    assert not set(seen[0]) & set(seen[1]) and all(len(set(ids)) == len(ids) for ids in seen)
    assert json.loads((run_dir / "stages" / "train.json").read_text())["command"][0].endswith("torchrun")


def test_torch_distributor_in_local_mode_trains_the_same_model_as_two_torchrun_processes(built, two_nodes):
    # The reference: the two-node run's two processes (the same arithmetic as one node's two: measured,
    # the same weights to the bit as `train.nproc=2` on one node).
    by_torchrun, by_spark = two_nodes[0], _new_run(built, "distributor-local")
    spark = _shardline(by_spark, "train", "--set", "train.launcher=spark", "--set", "train.nproc=2",
                       "--set", "train.distributor.local_mode=true", "--set", "spark.master=local[2]",
                       "--set", "spark.conf.spark.ui.enabled=false")
    assert spark.returncode == 0, spark.stderr[-3000:] + _log(by_spark)[-5000:]
    log = _log(by_spark)
    assert "-m spark_jobs.train_on_spark --config" in log.splitlines()[0] and "TorchDistributor finished" in log
    expected, got = _weights(by_torchrun), _weights(by_spark)
    # Equal weights: evaluation cannot differ (a model TorchDistributor trained is evaluated in test_dag.py).
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)


def test_rank_0_work_slower_than_the_process_group_timeout_does_not_stop_the_run(built, tmp_path):
    """A validation share and the checkpoint saves, each 9 s late on rank 0, against a 6 s timeout."""
    run_dir = _new_run(built, "slow-eval")
    fault_log = tmp_path / "faults.log"
    env = _env(PYTHONPATH=f"{FAULTS}{os.pathsep}{REPO_ROOT}", SHARDLINE_FAULT="slow-eval,slow-save",
               SHARDLINE_FAULT_RANK="0", SHARDLINE_FAULT_SLEEP_S="9", SHARDLINE_FAULT_LOG=str(fault_log))
    # Rank 1 finishes its share (or reaches the barrier after a save) at once, then waits 9 s for rank 0.
    result = _shardline(run_dir, "train", "--set", "train.nproc=2", "--set", "train.process_group_timeout_s=6",
                        "--set", "train.eval_every=4", "--set", "train.max_steps=6", env=env)
    assert result.returncode == 0, result.stderr[-3000:] + _log(run_dir)[-5000:]
    fired = fault_log.read_text()
    assert fired.count("rank 0: evaluation delayed 9.0 s") >= 2  # mid-run and final passes
    assert fired.count("rank 0: checkpoint save delayed 9.0 s") >= 1
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "val_loss" in r][0] == 4 and (run_dir / "model" / "lineage.json").exists()


def test_a_nan_loss_on_one_rank_stops_every_rank_with_the_same_error(built, tmp_path):
    run_dir = _new_run(built, "nan-loss")
    fault_log = tmp_path / "faults.log"
    env = _env(PYTHONPATH=f"{FAULTS}{os.pathsep}{REPO_ROOT}", SHARDLINE_FAULT="nan-loss", SHARDLINE_FAULT_RANK="1",
               SHARDLINE_FAULT_STEP="3", SHARDLINE_FAULT_LOG=str(fault_log))
    # fp16: the grad scaler would skip the NaN step on every rank; only the loss check stops it.
    save_config(build_config({**built.to_dict(), "run_dir": str(run_dir), "train": {**TRAIN, "precision": "fp16"}}),
                run_dir / "config.yaml")
    results, command = _two_nodes(run_dir, _free_port(), env=env)
    assert "rank 1: loss made NaN at training forward 3" in fault_log.read_text()
    message = "training diverged at step 3: loss nan on rank 1 of 2, grad norm"
    node0_log, node1_err = _log(run_dir), results[1][2]
    assert results[0][0] != 0 and "shardline train: train failed" in results[0][2]  # the driver names the log
    assert results[1][0] != 0
    errors = [line for line in (node0_log + node1_err).splitlines() if message in line]
    assert len(errors) == 2 and errors[0].split("error: ", 1)[1] == errors[1].split("error: ", 1)[1], errors
