"""train() in process on small contract-layout datasets: what resumes and what starts over, and a
run_dir on an object store (moto's S3 server) end to end, resumed there from another machine."""
import json
import os

import pytest
import torch
from safetensors.torch import load_file

from parquet_datasets import write_tokenizer, write_classification_dataset
from pipeline import contract, storage
from pipeline.config import build_config
from training.evaluate import run_evaluation
from training.train import train

TRAIN = {"model": "mlp", "epochs": 2, "batch_size": 8, "lr": 0.01, "log_every": 1, "checkpoint_every": 2,
         "num_checkpoints_kept": 2, "embedding_dim": 8, "hidden_size": 16, "num_reader_workers": 1}


def _config(run_dir, local_dir=None, **train_settings):
    # The pyarrow backend: these tests are about the trainer, and run in the Petastorm-free env too.
    tree = {"run_dir": str(run_dir), "data": {"input": "unused", "label_column": "label"}, "tokenizer": {"path": "unused"},
            "preprocess": {"max_length": 8}, "reader": {"backend": "pyarrow"}, "train": {**TRAIN, **train_settings}}
    if local_dir is not None:
        tree["storage"] = {"local_dir": str(local_dir)}
    return build_config(tree)


def _new_run(run_dir):
    """run_dir (a path or URI) with a dataset of 80 training rows (10 batches an epoch) and a
    tokenizer dir."""
    write_classification_dataset(storage.join(str(run_dir), "dataset"), [[40], [40]])
    write_tokenizer(storage.join(str(run_dir), "tokenizer"))
    return run_dir


def _steps(metrics_uri):
    return [r["step"] for r in map(json.loads, storage.read_text(metrics_uri).splitlines()) if "loss" in r]


def _checkpoints(run_dir):
    return sorted(storage.relative(e.uri, storage.join(str(run_dir), "checkpoints"))
                  for e in storage.list_files(storage.join(str(run_dir), "checkpoints")) if e.uri.endswith(".pt"))


def test_resume_never_starts_over_and_drops_this_configs_checkpoints(tmp_path, capsys):
    run_dir = _new_run(tmp_path)
    train(_config(run_dir, max_steps=6))
    [folder] = {name.split("/")[0] for name in _checkpoints(run_dir)}
    capsys.readouterr()

    train(_config(run_dir, max_steps=4, resume="never"))
    out = capsys.readouterr().out
    assert f"train.resume=never: deleted 2 checkpoint(s) in {run_dir / 'checkpoints' / folder}" in out
    assert "resumed from" not in out
    assert _steps(str(run_dir / "metrics.jsonl")) == [1, 2, 3, 4]
    # The first run's step 6 is gone: a later resume continues this run, not the abandoned one.
    assert _checkpoints(run_dir) == [f"{folder}/step-00000002.pt", f"{folder}/step-00000004.pt"]


def test_another_train_config_starts_fresh_saying_what_differs_and_the_old_one_still_resumes(tmp_path, capsys):
    run_dir = _new_run(tmp_path)
    train(_config(run_dir, max_steps=4))
    [first] = {name.split("/")[0] for name in _checkpoints(run_dir)}
    capsys.readouterr()

    train(_config(run_dir, max_steps=4, lr=0.02, seed=3))
    out = capsys.readouterr().out
    assert (f"train: starting fresh: the checkpoints in {run_dir / 'checkpoints' / first} are from another setup "
            "(train.lr 0.01 -> 0.02; train.seed 0 -> 3; theirs -> this run's)") in out
    assert "resumed from" not in out and _steps(str(run_dir / "metrics.jsonl")) == [1, 2, 3, 4]

    train(_config(run_dir, max_steps=6))  # max_steps may change on resume: same setup as the first run
    out = capsys.readouterr().out
    assert f"train: resumed from {run_dir / 'checkpoints' / first / 'step-00000004.pt'} (step 4, epoch 0, 32 of its samples done)" in out


def test_the_same_global_batch_made_up_otherwise_resumes_and_another_one_says_what_must_match(tmp_path, capsys):
    run_dir = _new_run(tmp_path)
    train(_config(run_dir, max_steps=4, record_sample_ids=True))
    [first] = {name.split("/")[0] for name in _checkpoints(run_dir)}
    capsys.readouterr()

    # 8 x 1 process x 1 = 4 x 1 x 2: the same 8 samples a step, so it continues the same order.
    train(_config(run_dir, max_steps=6, batch_size=4, grad_accum_steps=2, record_sample_ids=True))
    out = capsys.readouterr().out
    assert f"train: resumed from {run_dir / 'checkpoints' / first / 'step-00000004.pt'} (step 4, epoch 0, 32 of" in out
    ids = [i for line in (run_dir / "samples" / "rank-0.jsonl").read_text().splitlines() for i in json.loads(line)["ids"]]
    assert len(ids) == 48 and len(set(ids)) == 48

    train(_config(run_dir, max_steps=6, batch_size=4, record_sample_ids=True))
    out = capsys.readouterr().out
    assert "resumed from" not in out
    # identity.json says how the run that last wrote a checkpoint there made up its global batch.
    assert ("(global batch 8 = batch_size 4 x 1 processes x grad_accum_steps 2 -> 4 = batch_size 4 x 1 processes x "
            "grad_accum_steps 1; to resume, make batch_size x processes x grad_accum_steps 8 again; theirs -> this run's)") in out


class _RunsCode:
    """Unpickling this calls open(path, "w"): what a crafted checkpoint would do instead."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_resuming_onto_a_crafted_checkpoint_with_a_valid_checksum_refuses_it_and_runs_nothing(tmp_path):
    import hashlib
    import io

    from training import checkpoint

    run_dir = _new_run(tmp_path)
    train(_config(run_dir, max_steps=4))
    newest = str(sorted((run_dir / "checkpoints").glob("*/step-*.pt"))[-1])
    marker = tmp_path / "the-checkpoint-ran-code"
    buffer = io.BytesIO()
    torch.save({"fingerprint": "x", "model": _RunsCode(str(marker))}, buffer)
    data = buffer.getvalue()
    storage.write_bytes(newest, data)
    storage.write_text(checkpoint.sidecar(newest), json.dumps(
        {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "step": 4}))
    with pytest.raises(checkpoint.UnsafeCheckpointError, match=f"checkpoint {newest} refused"):
        train(_config(run_dir, max_steps=6))
    assert not marker.exists()


def _rewrite_manifest(run_dir, **changes):
    uri = str(run_dir / "dataset" / contract.MANIFEST_FILE)
    manifest = contract.load_manifest(str(run_dir / "dataset")).model_copy(update=changes)
    contract.write_json_atomic(uri, manifest.model_dump(mode="json"))


def test_a_rebuild_with_the_same_content_resumes_and_another_dataset_starts_fresh(tmp_path, capsys):
    run_dir = _new_run(tmp_path)
    _rewrite_manifest(run_dir, dataset_fingerprint="a" * 64, stage_seconds={"tokenize": 1.0})
    train(_config(run_dir, max_steps=4))
    capsys.readouterr()

    # What `preprocess --force` on unchanged input and config does: a new manifest file, same dataset.
    _rewrite_manifest(run_dir, stage_seconds={"tokenize": 2.5})
    train(_config(run_dir, max_steps=6))
    assert "resumed from" in capsys.readouterr().out

    _rewrite_manifest(run_dir, dataset_fingerprint="b" * 64)
    train(_config(run_dir, max_steps=6))
    out = capsys.readouterr().out
    assert "resumed from" not in out and "(the dataset (another dataset_fingerprint); theirs -> this run's)" in out


def test_train_evaluate_and_resume_on_an_s3_run_dir(tmp_path, s3_bucket, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # a URI mistaken for a local path would appear here as an s3: folder
    run_dir = _new_run(f"{s3_bucket}/runs/one")

    config = _config(run_dir, tmp_path / "machine-1", max_steps=4, record_sample_ids=True)
    assert train(config) == f"{run_dir}/model"
    out = capsys.readouterr().out
    assert (f"train: logs are written under {tmp_path / 'machine-1'} (an object store cannot append); metrics.jsonl, "
            f"samples/ and plots/loss.png are copied to {run_dir} at each checkpoint and at the end; TensorBoard "
            f"events stay in {tmp_path / 'machine-1' / 'tensorboard'}") in out
    assert f"model saved to {run_dir}/model" in out
    stored = {storage.relative(e.uri, run_dir) for e in storage.list_files(run_dir)}
    [folder] = {name.split("/")[1] for name in stored if name.startswith("checkpoints/")}
    assert {"model/model.safetensors", "model/shardline_mlp.json", "model/lineage.json", "model/label_map.json",
            "model/tokenizer.json", "metrics.jsonl", "plots/loss.png", "samples/rank-0.jsonl", "config.resolved.yaml",
            f"checkpoints/{folder}/identity.json", f"checkpoints/{folder}/step-00000004.pt",
            f"checkpoints/{folder}/step-00000004.sha256"} <= stored
    assert not any(name.startswith("tensorboard") for name in stored)
    assert os.listdir(tmp_path / "machine-1" / "tensorboard")

    result = run_evaluation(config)
    assert json.loads(storage.read_text(f"{run_dir}/eval.json")) == result and result["examples"] == 24

    # Another machine (an empty local dir) resumes from the bucket's checkpoint and logs.
    train(_config(run_dir, tmp_path / "machine-2", max_steps=6, record_sample_ids=True))
    out = capsys.readouterr().out
    assert f"train: resumed from {run_dir}/checkpoints/{folder}/step-00000004.pt (step 4, epoch 0, 32 of its samples done)" in out
    assert _steps(f"{run_dir}/metrics.jsonl") == [1, 2, 3, 4, 5, 6]
    samples = [json.loads(line)["step"] for line in storage.read_text(f"{run_dir}/samples/rank-0.jsonl").splitlines()]
    assert samples == [1, 2, 3, 4, 5, 6]

    # The same six steps uninterrupted on local disk end with the same weights.
    _new_run(tmp_path / "local-run")
    straight = load_file(os.path.join(train(_config(tmp_path / "local-run", max_steps=6)), "model.safetensors"))
    with storage.local_dir_for(f"{run_dir}/model") as model_dir:
        resumed = load_file(os.path.join(model_dir, "model.safetensors"))
    assert resumed.keys() == straight.keys() and all(torch.equal(resumed[k], straight[k]) for k in straight)
    assert not [path for path, dirs, files in os.walk(tmp_path) if "s3:" in dirs or "s3:" in files]


def test_a_missing_bucket_fails_naming_it_before_anything_runs(s3_server, tmp_path):
    with pytest.raises(storage.StorageError, match="bucket 'no-such-bucket' .* does not exist"):
        train(_config("s3://no-such-bucket/run", tmp_path / "local", max_steps=2))


@pytest.fixture
def deterministic_kernels_off_after():
    yield
    torch.use_deterministic_algorithms(False)  # process-wide: the next test in this worker must not inherit it


def test_deterministic_kernels_make_a_resumed_bert_equal_the_straight_run_on_any_device(
        tmp_path, deterministic_kernels_off_after):
    """train.deterministic: on CUDA, attention's backward accumulates with atomics, so without it a
    resumed bert (and a second straight run) differs from the first in the last bits (measured on an
    H200, README). With it every op the model uses has a deterministic kernel (a missing one would
    raise there) and the runs are equal bitwise; on CPU they are either way."""
    bert = {"model": "bert", "deterministic": True, "model_config": {
        "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}}
    straight = _new_run(tmp_path / "straight")
    train(_config(straight, max_steps=8, **bert))
    assert torch.are_deterministic_algorithms_enabled()
    stopped = _new_run(tmp_path / "stopped")
    train(_config(stopped, max_steps=5, **bert))
    train(_config(stopped, max_steps=8, **bert))
    expected, got = load_file(str(straight / "model" / "model.safetensors")), load_file(str(stopped / "model" / "model.safetensors"))
    assert all(torch.equal(expected[name], got[name]) for name in expected)


def test_a_dropout_model_stopped_and_resumed_mid_epoch_equals_the_uninterrupted_run_bitwise(tmp_path):
    """bert trains with dropout (0.1), which draws from torch's generator every step: the resumed
    run equals the straight one only if the checkpoint restored that generator's state."""
    bert = {"model": "bert", "model_config": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                                              "intermediate_size": 32}}
    straight = _new_run(tmp_path / "straight")
    train(_config(straight, max_steps=8, **bert))
    stopped = _new_run(tmp_path / "stopped")
    train(_config(stopped, max_steps=5, **bert))  # its last checkpoint is step 5, mid epoch 0 (10 steps an epoch)
    train(_config(stopped, max_steps=8, **bert))
    expected, got = load_file(str(straight / "model" / "model.safetensors")), load_file(str(stopped / "model" / "model.safetensors"))
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[name], got[name]) for name in expected)
