"""The trainer as a process on a Spark-built dataset: SIGKILLed from outside (when a checkpoint
appears, and at a random moment) and resumed exactly; two gloo processes under torchrun on uneven shards."""
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from pipeline import contract
from pipeline.config import build_config, save_config
from pipeline.demo import write_jsonl
from spark_jobs.preprocess import build_dataset

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN = {"model": "mlp", "epochs": 2, "batch_size": 8, "grad_accum_steps": 2, "optimizer": "adamw", "lr": 0.005,
         "scheduler": "linear", "warmup_steps": 3, "max_grad_norm": 1.0, "log_every": 1, "checkpoint_every": 2,
         "num_checkpoints_kept": 2, "record_sample_ids": True, "embedding_dim": 16, "hidden_size": 32}


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory, docstring_records):
    root = tmp_path_factory.mktemp("training")
    corpus = write_jsonl(docstring_records[::5], root / "corpus.jsonl")
    config = build_config({
        "run_dir": str(root / "source"),
        "data": {"input": str(corpus), "label_column": "label"},
        "tokenizer": {"train": {"vocab_size": 500}},
        # Exactly three row groups (the fewest that are a multiple of 3): uneven for 2 ranks.
        "preprocess": {"max_length": 24, "seed": 1, "shard": {"divisible_by": 3, "row_group_rows": 100_000}},
        "train": TRAIN,
    })
    manifest = build_dataset(spark, config)
    train_ids = [i for path in manifest.split_files(config.dataset_dir, "train")
                 for i in pq.read_table(path, columns=[contract.ID_COLUMN]).column(0).to_pylist()]
    return config, manifest, train_ids


@pytest.fixture(scope="module")
def straight(built):
    """An uninterrupted run."""
    run_dir = _new_run(built, "straight")
    result = _train(run_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def _new_run(built, name) -> Path:
    config, _, _ = built
    run_dir = Path(config.run_dir).parent / name
    shutil.copytree(config.dataset_dir, run_dir / "dataset")
    shutil.copytree(config.tokenizer_dir, run_dir / "tokenizer")
    save_config(build_config({**config.to_dict(), "run_dir": str(run_dir)}), run_dir / "config.yaml")
    return run_dir


def _command(run_dir, launcher=(sys.executable, "-m", "training.train")):
    return [*launcher, "--config", str(run_dir / "config.yaml")]


def _train(run_dir, launcher=(sys.executable, "-m", "training.train")):
    return subprocess.run(_command(run_dir, launcher), cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=300)


def _start(run_dir):
    return subprocess.Popen(_command(run_dir), cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill(process) -> tuple[str, str]:
    process.send_signal(signal.SIGKILL)  # no cleanup runs: what a preempted machine does
    out, err = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, err[-3000:]
    return out, err


def _wait_for(run_dir: Path, pattern: str, process) -> None:
    """Until a file matching pattern (below run_dir) exists, polling every 2 ms."""
    deadline = time.monotonic() + 300
    while not list(run_dir.glob(pattern)):
        assert process.poll() is None, f"training ended before {pattern} appeared: {process.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, f"{pattern} did not appear in 300 s"
        time.sleep(0.002)


def _complete_checkpoints(run_dir) -> list[Path]:
    """Checkpoints whose checksum was written (the commit), oldest first."""
    return sorted(p for p in (run_dir / "checkpoints").glob("*/step-*.pt") if p.with_suffix(".sha256").exists())


def _samples(run_dir, rank=0):
    return [json.loads(line) for line in (run_dir / "samples" / f"rank-{rank}.jsonl").read_text().splitlines()]


def _final_loss(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in line][-1]


def test_killed_from_outside_then_resumed_equals_an_uninterrupted_run(built, straight):
    _, manifest, train_ids = built
    rows = manifest.splits["train"].rows
    steps_per_epoch = math.ceil(math.ceil(rows / 8) / 2)
    watched = steps_per_epoch + 4 - steps_per_epoch % 2  # an even step, so a checkpoint, well inside epoch 1

    killed = _new_run(built, "killed")
    process = _start(killed)
    _wait_for(killed, f"checkpoints/*/step-{watched:08d}.sha256", process)
    _kill(process)
    assert not (killed / "model").exists()
    complete = _complete_checkpoints(killed)
    newest, resumable = complete[-1], complete[-2]  # the run may have gone on a little before the kill
    resumed_step = int(resumable.stem.split("-")[1])
    assert steps_per_epoch < resumed_step < 2 * steps_per_epoch, "killed too late to resume mid epoch 1"
    newest.write_bytes(newest.read_bytes()[:500])  # and the newest one is damaged too

    result = _train(killed)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"skipping checkpoint {newest} does not match its sha256" in result.stderr
    resumed_at = f"resumed from {resumable} (step {resumed_step}, epoch 1, batch {2 * (resumed_step - steps_per_epoch)})"
    assert resumed_at in result.stdout and "batch 0)" not in result.stdout

    assert _final_loss(killed) == {**_final_loss(straight), **{k: _final_loss(killed)[k] for k in
                                   ("samples_per_s", "tokens_per_s", "input_wait_fraction")}}
    expected, got = load_file(str(straight / "model" / "model.safetensors")), load_file(str(killed / "model" / "model.safetensors"))
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)

    samples = _samples(killed)
    assert samples == _samples(straight)
    assert [s["step"] for s in samples] == list(range(1, 2 * steps_per_epoch + 1))
    for epoch in range(2):
        seen = [i for s in samples[epoch * steps_per_epoch:(epoch + 1) * steps_per_epoch] for i in s["ids"]]
        assert sorted(seen) == sorted(train_ids)  # every training sample exactly once in the epoch


def test_killed_at_a_random_moment_then_resumed_equals_an_uninterrupted_run(built, straight):
    _, manifest, _ = built
    last_step = 2 * math.ceil(math.ceil(manifest.splits["train"].rows / 8) / 2)
    # A moment nobody picked: just after a random checkpoint's data file (its checksum may not be
    # written yet) or its checksum appears, plus a random few milliseconds (mid step, mid write, mid delete).
    chosen = random.Random()
    step, suffix, delay = 2 * chosen.randint(2, last_step // 4), chosen.choice([".pt", ".sha256"]), chosen.uniform(0, 0.02)
    when = f"killed {delay * 1000:.0f} ms after step-{step:08d}{suffix} appeared"
    run_dir = _new_run(built, "random-kill")
    process = _start(run_dir)
    _wait_for(run_dir, f"checkpoints/*/step-{step:08d}{suffix}", process)
    time.sleep(delay)
    _kill(process)  # asserts it died of the signal, i.e. had not finished
    result = _train(run_dir)
    assert result.returncode == 0, f"{when}: " + result.stderr[-3000:]
    assert "train: resumed from" in result.stdout, f"{when}\n{result.stdout}"
    assert _samples(run_dir) == _samples(straight), when
    expected, got = (load_file(str(r / "model" / "model.safetensors")) for r in (straight, run_dir))
    assert all(torch.equal(expected[k], got[k]) for k in expected), when


def test_two_gloo_processes_on_uneven_shards_see_disjoint_data_and_end_identical(built):
    _, manifest, train_ids = built
    sizes = manifest.splits["train"].row_group_rows
    assert len(sizes) == 3 and sum(sizes[0::2]) != sum(sizes[1::2])  # rank 0 reads two row groups, rank 1 one
    run_dir = _new_run(built, "ddp")
    launcher = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                "-m", "training.train")
    result = _train(run_dir, launcher)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]

    ranks = [_samples(run_dir, rank) for rank in (0, 1)]
    assert [s["step"] for s in ranks[0]] == [s["step"] for s in ranks[1]]  # same number of steps
    batches = min(math.ceil(sum(sizes[r::2]) / 8) for r in (0, 1))
    assert len(ranks[0]) == 2 * math.ceil(batches / 2)
    for epoch_steps in (ranks[0][: len(ranks[0]) // 2], ranks[1][: len(ranks[1]) // 2]):
        assert len({i for s in epoch_steps for i in s["ids"]}) == sum(len(s["ids"]) for s in epoch_steps)
    seen = [{i for s in steps for i in s["ids"]} for steps in ranks]
    assert not seen[0] & seen[1] and seen[0] | seen[1] <= set(train_ids)
    lineage = json.loads((run_dir / "model" / "lineage.json").read_text())
    hashes = lineage["weights_sha256_per_rank"]
    assert len(hashes) == 2 and hashes[0] == hashes[1]
