"""A three-source mixture through `shardline run`: one Spark job per source (the first trains the
tokenizer the others read), training on two processes SIGKILLed mid-epoch, resumed on one process
with the same global batch; every sample of every source used once per pass, per-source eval."""
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from pipeline.demo import demo_records, write_jsonl

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WEIGHTS = {"web": 0.5, "code": 0.3, "books": 0.2}


def _env():
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYSPARK_", "SHARDLINE_"))}
    env.update(PYTHONPATH=str(REPO_ROOT), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    return env


def _shardline(*args: str, **popen):
    command = [sys.executable, "-m", "pipeline.cli", *args]
    if popen:
        return subprocess.Popen(command, cwd=REPO_ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    return subprocess.run(command, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def mixture_config(tmp_path_factory):
    """Three corpora of stdlib docstrings (disjoint thirds of a sample, all four packages in each)
    and a config mixing them 0.5/0.3/0.2."""
    root = tmp_path_factory.mktemp("mixture")
    records = demo_records()[::4]
    tree = yaml.safe_load((REPO_ROOT / "configs" / "demo.yaml").read_text())
    tree["run_dir"] = str(root / "run")
    del tree["data"]["input"]
    tree["tokenizer"]["train"]["vocab_size"] = 500
    tree["train"].update(epochs=2, batch_size=8, nproc=2, checkpoint_every=3, record_sample_ids=True, datasets=[
        {"name": name, "input": str(write_jsonl(records[number::3], root / f"{name}.jsonl")), "weight": weight}
        for number, (name, weight) in enumerate(WEIGHTS.items())
    ])
    path = root / "mixture.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path, root / "run"


def _kill_tree(process) -> None:
    tree = psutil.Process(process.pid)
    for member in [*tree.children(recursive=True), tree]:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)


def test_a_three_source_mixture_killed_mid_epoch_resumes_on_another_process_count(mixture_config):
    config, run_dir = mixture_config
    running = _shardline("run", "--config", str(config), popen=True)
    deadline = time.monotonic() + 600
    while not list(run_dir.glob("checkpoints/*/step-00000006.sha256")):  # mid epoch 0 (about 30 steps an epoch)
        assert running.poll() is None, running.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint at step 6 in 600 s"
        time.sleep(0.01)
    _kill_tree(running)
    assert not (run_dir / "model").exists()
    for name in WEIGHTS:  # one Spark job per source; the later ones read the first one's tokenizer
        assert (run_dir / "sources" / name / "dataset" / "_SUCCESS").exists()
    tokenizers = {json.loads((run_dir / "sources" / name / "dataset" / "manifest.json").read_text())["tokenizer_sha256"]
                  for name in WEIGHTS}
    assert len(tokenizers) == 1

    resumed = _shardline("run", "--config", str(config), "--set", "train.nproc=1", "--set", "train.batch_size=16")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    for name in WEIGHTS:
        assert f"preprocess {name}: skipped, already done" in resumed.stdout
    train_log = (run_dir / "logs" / "train.log").read_text()
    assert "train: resumed from" in train_log and "written by 2 processes, continued by 1" in train_log

    # Every step's samples from every rank's log (rank 1's trimmed to the resumed step).
    per_source = collections.defaultdict(list)
    for log in sorted((run_dir / "samples").glob("rank-*.jsonl")):
        for record in map(json.loads, log.read_text().splitlines()):
            for source, sample in zip(record["sources"], record["ids"]):
                per_source[source].append(sample)
    total = sum(len(ids) for ids in per_source.values())
    manifests = {name: json.loads((run_dir / "sources" / name / "dataset" / "manifest.json").read_text())
                 for name in WEIGHTS}
    assert total == 2 * (sum(m["splits"]["train"]["rows"] for m in manifests.values()) // 16 * 16)  # 2 epochs
    for name, weight in WEIGHTS.items():
        ids, rows = per_source[name], manifests[name]["splits"]["train"]["rows"]
        assert abs(len(ids) - weight * total) < 1
        # Once per pass: over the run every row is used floor or ceil(samples / rows) times.
        uses = collections.Counter(ids)
        passes, partial = divmod(len(ids), rows)
        assert len(uses) == (rows if passes else partial)
        assert sorted(collections.Counter(uses.values()).items()) == sorted(
            {k: v for k, v in {passes: rows - partial, passes + 1: partial}.items() if v and k}.items())

    result = json.loads((run_dir / "eval.json").read_text())
    assert set(result["sources"]) == set(WEIGHTS) and result["weights"] == WEIGHTS
    assert result["accuracy"] == pytest.approx(sum(w * result["sources"][n]["accuracy"] for n, w in WEIGHTS.items()))
