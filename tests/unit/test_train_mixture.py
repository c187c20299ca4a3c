"""train() and run_evaluation() in process on a three-source mixture of contract-layout datasets:
per-source reporting and validation, the sample log's sources, a weight change on resume."""
import json
import math

import pytest

from parquet_datasets import write_classification_dataset, write_tokenizer
from pipeline import storage
from pipeline.config import build_config
from training.evaluate import run_evaluation
from training.metrics import loss_series, read_records
from training.mixture import MixtureError
from training.train import train

TRAIN = {"model": "mlp", "epochs": 1, "batch_size": 8, "lr": 0.01, "log_every": 2, "checkpoint_every": 3,
         "embedding_dim": 8, "hidden_size": 16, "num_reader_workers": 1, "record_sample_ids": True}
ROWS = {"web": [[40], [40]], "code": [[24]], "books": [[16]]}


def _sources(tmp_path, max_length=8, **weights):
    """Three committed datasets under tmp_path/<name>/dataset, a tokenizer beside the first."""
    entries = []
    for name, groups in ROWS.items():
        write_classification_dataset(str(tmp_path / name / "dataset"), groups,
                                     max_length=max_length if name == "books" else 8)
        entries.append({"name": name, "path": str(tmp_path / name / "dataset"), "weight": weights.get(name, 1.0)})
    write_tokenizer(str(tmp_path / "web" / "tokenizer"))
    return entries


def _config(run_dir, datasets, **train_settings):
    tree = {"run_dir": str(run_dir), "data": {"label_column": "label"}, "tokenizer": {"path": "unused"},
            "preprocess": {"max_length": 8}, "reader": {"backend": "pyarrow"},
            "train": {**TRAIN, "datasets": datasets, **train_settings}}
    return build_config(tree)


def _sample_sources(run_dir):
    records = [json.loads(line) for line in storage.read_text(str(run_dir / "samples" / "rank-0.jsonl")).splitlines()]
    return [(r["step"], source, sample) for r in records for source, sample in zip(r["sources"], r["ids"])]


def test_a_mixture_trains_reports_each_source_and_validates_each(tmp_path, capsys):
    datasets = _sources(tmp_path, web=0.6, code=0.3, books=0.1)
    run_dir = tmp_path / "run"
    train(_config(run_dir, datasets))
    out = capsys.readouterr().out
    assert "train: mixture of web 0.6 (80 rows), code 0.3 (24 rows), books 0.1 (16 rows)" in out
    seen = _sample_sources(run_dir)
    assert len(seen) == 120  # one epoch: the sources' 120 rows, 15 global batches of 8
    for name, weight in (("web", 0.6), ("code", 0.3), ("books", 0.1)):
        assert abs(sum(1 for _, source, _ in seen if source == name) - weight * 120) < 1
    code = [sample for _, source, sample in seen if source == "code"]
    assert len(code) == 36 and len(set(code[:24])) == 24 and len(set(code[24:])) == 12  # a second pass begun
    assert "train: source code started pass 2" in out
    records = read_records(str(run_dir / "metrics.jsonl"))
    last = [r for r in records if "loss" in r][-1]
    assert (last["samples_web"], last["samples_code"], last["samples_books"]) == (72, 36, 12)
    assert last["tokens_web"] > 0 and last["pass_code"] == 2
    val = [r for r in records if "val_loss" in r][-1]
    assert val["val_web_examples"] == val["val_code_examples"] == val["val_books_examples"] == 24
    weighted = 0.6 * val["val_web_loss"] + 0.3 * val["val_code_loss"] + 0.1 * val["val_books_loss"]
    assert val["val_loss"] == pytest.approx(weighted)
    assert {"val loss: web", "val loss: code", "val loss: books"} <= set(loss_series(records))
    lineage = json.loads((run_dir / "model" / "lineage.json").read_text())
    assert [s["name"] for s in lineage["sources"]] == ["web", "code", "books"]
    assert lineage["sources_seen"]["code"]["samples"] == 36

    payload = run_evaluation(_config(run_dir, datasets))
    assert set(payload["sources"]) == {"web", "code", "books"}
    assert payload["loss"] == pytest.approx(sum(w * payload["sources"][n]["loss"]
                                                for n, w in (("web", 0.6), ("code", 0.3), ("books", 0.1))))
    assert json.loads((run_dir / "eval.json").read_text())["weights"] == {"web": 0.6, "code": 0.3, "books": 0.1}


def test_new_weights_on_resume_apply_from_that_step_and_are_said(tmp_path, capsys):
    datasets = _sources(tmp_path, web=0.6, code=0.3, books=0.1)
    run_dir = tmp_path / "run"
    train(_config(run_dir, datasets, max_steps=6))
    before = _sample_sources(run_dir)
    capsys.readouterr()
    changed = [{**d, "weight": w} for d, w in zip(datasets, (0.2, 0.2, 0.6))]
    train(_config(run_dir, changed))
    out = capsys.readouterr().out
    assert "train: resumed from" in out and "weights [0.6, 0.3, 0.1] -> [0.2, 0.2, 0.6] from position 48" in out
    after = _sample_sources(run_dir)
    assert after[:48] == before[:48]  # the log keeps the first run's steps
    later = [source for step, source, _ in after if step > 6]
    assert abs(later.count("books") - 0.6 * len(later)) < 1
    books = [sample for _, source, sample in after if source == "books"]
    assert len(set(books[:16])) == 16  # each source continued its pass: no row twice before the pass ends


def test_sources_built_differently_are_refused_naming_both(tmp_path):
    datasets = _sources(tmp_path, max_length=12)
    with pytest.raises(MixtureError, match=r"web \(.*\) and books \(.*\) cannot be mixed: max_length 8 vs 12"):
        train(_config(tmp_path / "run", datasets))


def test_a_causal_lm_mixture_reports_each_sources_perplexity(tmp_path):
    from parquet_datasets import write_causal_dataset

    datasets = []
    for name, documents, weight in (("prose", 120, 0.75), ("notes", 60, 0.25)):
        write_causal_dataset(str(tmp_path / name / "dataset"), num_documents=documents)
        datasets.append({"name": name, "path": str(tmp_path / name / "dataset"), "weight": weight})
    config = build_config({
        "run_dir": str(tmp_path / "run"), "tokenizer": {"path": "unused"}, "reader": {"backend": "pyarrow"},
        "preprocess": {"task": "causal_lm", "max_length": 16},
        "train": {"model": "gpt2", "batch_size": 4, "lr": 0.01, "log_every": 2, "datasets": datasets,
                  "model_config": {"n_embd": 32, "n_layer": 1, "n_head": 2}}})
    train(config)
    val = [r for r in read_records(str(tmp_path / "run" / "metrics.jsonl")) if "val_loss" in r][-1]
    assert val["val_perplexity"] == pytest.approx(math.exp(0.75 * val["val_prose_loss"] + 0.25 * val["val_notes_loss"]))
    assert val["val_prose_tokens"] > 0 and val["val_notes_tokens"] > 0
    result = run_evaluation(config)
    assert result["task"] == "causal_lm" and set(result["sources"]) == {"prose", "notes"}


def test_a_mixture_of_datasets_on_an_object_store_trains_and_evaluates(s3_bucket, tmp_path):
    """Sources and run_dir as s3:// URIs (moto's server): every read goes through the storage layer."""
    datasets = []
    for name, groups, weight in (("web", [[24], [24]], 0.7), ("books", [[16]], 0.3)):
        write_classification_dataset(storage.join(s3_bucket, name, "dataset"), groups)
        datasets.append({"name": name, "path": storage.join(s3_bucket, name, "dataset"), "weight": weight})
    write_tokenizer(storage.join(s3_bucket, "web", "tokenizer"))
    config = build_config({
        "run_dir": storage.join(s3_bucket, "run"), "data": {"label_column": "label"}, "tokenizer": {"path": "unused"},
        "preprocess": {"max_length": 8}, "reader": {"backend": "pyarrow"},
        "storage": {"local_dir": str(tmp_path / "local")},
        "train": {**TRAIN, "record_sample_ids": False, "datasets": datasets}})
    train(config)
    assert storage.exists(storage.join(s3_bucket, "run", "model", "tokenizer.json"))  # the sources' tokenizer
    lineage = json.loads(storage.read_text(storage.join(s3_bucket, "run", "model", "lineage.json")))
    assert [s["dataset_dir"] for s in lineage["sources"]] == [d["path"] for d in datasets]
    assert set(run_evaluation(config)["sources"]) == {"web", "books"}
