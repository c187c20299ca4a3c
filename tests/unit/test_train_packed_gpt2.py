"""train() end to end (in process) on packed causal-LM blocks written in the contract's layout."""
import json
import math

import pytest

from parquet_datasets import write_causal_dataset
from pipeline import contract
from pipeline.config import build_config
from training.evaluate import run_evaluation
from training.train import train


def _config(run_dir, **train_settings):
    train_settings = {"model": "gpt2", "epochs": 4, "batch_size": 8, "lr": 0.01, "log_every": 1, "eval_every": 4,
                      "model_config": {"n_embd": 32, "n_layer": 1, "n_head": 2}, **train_settings}
    return build_config({"run_dir": str(run_dir), "data": {"input": "unused"}, "tokenizer": {"path": "unused"},
                         "preprocess": {"task": "causal_lm", "max_length": 16},
                         "reader": {"backend": "pyarrow"},  # runs in the Petastorm-free environment too
                         "train": train_settings})


def test_gpt2_learns_packed_documents_and_reports_perplexity(tmp_path):
    manifest = write_causal_dataset(tmp_path / "dataset")
    (tmp_path / "tokenizer").mkdir()
    config = _config(tmp_path, precision="fp32")  # as the recompute below; bf16 (auto on CUDA) differs by ~1e-3
    train(config)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0] * 0.8
    assert {"step", "lr", "grad_norm", "samples_per_s", "tokens_per_s", "input_wait_fraction"} <= set(records[0])
    assert any("val_perplexity" in r for r in records)
    assert (tmp_path / "plots" / "loss.png").stat().st_size > 0
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    lineage = json.loads((tmp_path / "model" / "lineage.json").read_text())
    assert lineage["dataset_manifest_sha256"] == contract.file_sha256(tmp_path / "dataset" / contract.MANIFEST_FILE)
    assert lineage["input_stall"]["verdict"] in ("input-bound", "compute-bound")
    config.eval.split = "test"
    result = run_evaluation(config)
    assert result["task"] == "causal_lm" and result["examples"] == manifest.splits["test"].rows
    # Independently: the saved GPT-2 run on each test document alone (plain causal attention,
    # positions from 0), summing the log-loss of every token after the first.
    nll, predicted = _one_document_at_a_time(tmp_path / "model", tmp_path / "dataset" / "test")
    assert result["tokens"] == predicted
    assert result["loss"] == pytest.approx(nll / predicted, rel=1e-4)
    assert result["perplexity"] == pytest.approx(math.exp(nll / predicted), rel=1e-4)
    assert result["perplexity"] < manifest.vocab_size  # better than guessing uniformly


def _one_document_at_a_time(model_dir, split_dir) -> tuple[float, int]:
    import numpy as np
    import pyarrow.parquet as pq
    import torch
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(str(model_dir)).eval()
    nll, predicted = 0.0, 0
    for row in pq.read_table(split_dir).to_pylist():
        ids, segments = np.array(row[contract.INPUT_IDS]), np.array(row[contract.SEGMENT_IDS])
        for segment in range(1, segments.max() + 1):
            document = torch.tensor(ids[segments == segment]).unsqueeze(0)
            if document.shape[1] < 2:
                continue
            with torch.no_grad():
                logits = model(input_ids=document).logits[0, :-1]
            nll += float(torch.nn.functional.cross_entropy(logits, document[0, 1:], reduction="sum"))
            predicted += document.shape[1] - 1
    return nll, predicted


def test_an_unfinished_dataset_is_not_read(tmp_path):
    write_causal_dataset(tmp_path / "dataset")
    (tmp_path / "dataset" / contract.SUCCESS_FILE).unlink()
    with pytest.raises(contract.DatasetNotReadyError, match="has no _SUCCESS"):
        train(_config(tmp_path))


def _samples_by_step(run_dir):
    return {r["step"]: r["ids"] for r in map(json.loads, (run_dir / "samples" / "rank-0.jsonl").read_text().splitlines())}


def test_a_packed_run_stopped_and_resumed_trains_on_every_block_once_per_epoch(tmp_path):
    # A sample is a packed block (a row): the loader's position counts blocks, never documents, so
    # resuming neither repeats nor skips one whatever the packing ratio.
    runs = {}
    for name, stops in (("straight", [None]), ("resumed", [5, 9, None])):
        run_dir = tmp_path / name
        manifest = write_causal_dataset(run_dir / "dataset")
        (run_dir / "tokenizer").mkdir()
        for max_steps in stops:  # max_steps may change on resume; the run stops there with a checkpoint
            train(_config(run_dir, epochs=2, batch_size=4, grad_accum_steps=2, eval_every=None, record_sample_ids=True,
                          max_steps=max_steps))
        runs[name] = _samples_by_step(run_dir)
    rows = manifest.splits["train"].rows
    steps_per_epoch = rows // 8
    assert runs["resumed"] == runs["straight"] and sorted(runs["straight"]) == list(range(1, 2 * steps_per_epoch + 1))
    for epoch in range(2):
        blocks = [i for step in range(epoch * steps_per_epoch + 1, (epoch + 1) * steps_per_epoch + 1)
                  for i in runs["straight"][step]]
        assert len(blocks) == len(set(blocks)) == rows - rows % 8 and all(i.startswith("block-") for i in blocks)
