"""The CLI as a user runs it: subprocesses, spark-submit, the demo corpus."""
import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from pipeline.demo import stdlib_docstrings, write_jsonl

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARDLINE = [sys.executable, "-m", "pipeline.cli"]


def _run(args, **kwargs):
    # As after `source .venv/bin/activate`: pyspark's launcher scripts find `python3` on PATH.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for inherited in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):  # set by the spark fixture; users lack them
        env.pop(inherited, None)
    return subprocess.run(args, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, **kwargs)


def _cleaned(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())  # demo.yaml: NFKC, whitespace collapsed


# Appended to the demo corpus so that every term of the manifest's accounting is known in advance.
BAD_LINES = {
    "malformed_record": '{"text": "never closed',
    "empty_text": json.dumps({"text": " \t ", "label": "email"}),
    "wrong_type": json.dumps({"text": 7, "label": "email"}),
    "missing_label": json.dumps({"text": "a docstring nobody labelled"}),
}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    records = list({_cleaned(r["text"]): r for r in stdlib_docstrings() if _cleaned(r["text"])}.values())
    corpus = write_jsonl(records, root / "corpus" / "docstrings.jsonl")
    with open(corpus, "a") as handle:
        handle.write(json.dumps(records[0]) + "\n")  # exact duplicate
        handle.write(json.dumps({**records[1], "text": records[1]["text"] + "\n\n  "}) + "\n")  # same once cleaned
        handle.writelines(line + "\n" for line in BAD_LINES.values())
    run_dir = root / "run"
    result = _run([*SHARDLINE, "run", "--config", "configs/demo.yaml",
                   "--set", f"run_dir={run_dir}", "--set", f"data.input={corpus}", "--set", "train.epochs=6"])
    assert result.returncode == 0, result.stdout + result.stderr
    return run_dir, corpus, records, result


def test_run_builds_dataset_trains_and_beats_chance(demo_run):
    run_dir, corpus, records, _ = demo_run
    manifest = json.loads((run_dir / "dataset" / "manifest.json").read_text())
    assert manifest["input_records"] == len(records) + 2 + len(BAD_LINES) == sum(1 for _ in open(corpus))
    assert manifest["rejected_by_reason"] == {reason: 1 for reason in BAD_LINES}
    assert manifest["duplicates_removed"] == 2
    assert sum(s["documents"] for s in manifest["splits"].values()) == len(records)
    assert sum(s["rows"] for s in manifest["splits"].values()) == len(records)  # a row per document
    assert (run_dir / "dataset" / "_SUCCESS").exists()
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["split"] == "test" and evaluation["examples"] == manifest["splits"]["test"]["rows"]
    assert evaluation["accuracy"] > 0.6  # 4 classes: chance is 0.25
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    metrics = [r for r in records if "loss" in r]  # training lines; val_* lines sit between them
    assert metrics and {"step", "loss", "lr", "samples_per_s"} <= set(metrics[0])
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    model_dir = run_dir / "model"
    for name in ("model.safetensors", "tokenizer.json", "label_map.json", "lineage.json"):
        assert (model_dir / name).exists(), name


def test_inspect_decodes_rows_back_to_text(demo_run):
    import hashlib

    from pipeline.tokenizer import load_tokenizer

    run_dir, corpus, records, _ = demo_run
    result = _run([*SHARDLINE, "inspect", str(run_dir / "dataset"), "--rows", "2"])
    assert result.returncode == 0, result.stderr
    cleaned = (_cleaned(r["text"]) for r in records)
    by_id = {hashlib.sha256(t.encode()).hexdigest()[:32]: t for t in cleaned}  # ids hash the cleaned text
    tokenizer = load_tokenizer(run_dir / "tokenizer")
    blocks = result.stdout.split("\n[train row ")[1:]
    assert len(blocks) == 2
    for block in blocks:
        header, decoded = block.split("\n", 1)
        original = by_id[header.split("id=")[1].split()[0]]
        expected = tokenizer.decode(tokenizer(original, truncation=True, max_length=128)["input_ids"], skip_special_tokens=True)
        assert decoded.strip() == expected.strip()
        assert decoded.split()[0] in original.lower()


def test_spark_submit_runs_the_job_directly_and_skips_when_built(demo_run):
    run_dir, corpus, _, _ = demo_run
    spark_submit = Path(sys.executable).parent / "spark-submit"
    result = _run([str(spark_submit), "spark_jobs/preprocess.py", "--config", "configs/demo.yaml",
                   "--set", f"run_dir={run_dir}", "--set", f"data.input={corpus}"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "already built from this config; skipping" in result.stdout


def test_bad_config_key_is_one_line_naming_the_key(tmp_path):
    result = _run([*SHARDLINE, "train", "--config", "configs/demo.yaml", "--set", "train.optimiser=sgd"])
    assert result.returncode == 2
    assert result.stderr.strip() == "shardline train: error: config key train.optimiser: unknown key"


def test_missing_input_is_a_clear_error_not_a_traceback(tmp_path):
    result = _run([*SHARDLINE, "preprocess", "--config", "configs/demo.yaml",
                   "--set", f"run_dir={tmp_path}", "--set", f"data.input={tmp_path}/missing/*.jsonl"])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "matches no files" in result.stderr
