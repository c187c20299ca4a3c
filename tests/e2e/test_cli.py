"""The CLI as a user runs it: subprocesses, spark-submit, the demo corpus, a pseudo-terminal."""
import hashlib
import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline import contract
from pipeline.demo import demo_records, write_jsonl
from pseudo_terminal import run_in_terminal, screen_lines

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARDLINE = [sys.executable, "-m", "pipeline.cli"]


def _env():
    # As after `source .venv/bin/activate`: pyspark's launcher scripts find `python3` on PATH.
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for inherited in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SHARDLINE_PROGRESS", "COLUMNS"):
        env.pop(inherited, None)  # set by the spark fixture or a caller; users lack them
    return env


def _run(args, **kwargs):
    return subprocess.run(args, cwd=REPO_ROOT, env=_env(), capture_output=True, text=True, timeout=600, **kwargs)


def _cleaned(text):
    return " ".join(unicodedata.normalize("NFKC", text).split())


# Appended to the demo corpus so that every term of the manifest's accounting is known in advance.
BAD_LINES = {
    "malformed_record": '{"text": "never closed',
    "empty_text": json.dumps({"text": " \t ", "label": "email"}),
    "wrong_type": json.dumps({"text": 7, "label": "email"}),
    "missing_label": json.dumps({"text": "a docstring nobody labelled"}),
}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo recipe run as a person at a terminal runs it (stdout and stderr a pseudo-terminal),
    on the demo corpus made distinct after cleaning, plus two duplicates and one line of each BAD_LINES."""
    root = tmp_path_factory.mktemp("e2e")
    records = list({_cleaned(r["text"]): r for r in demo_records() if _cleaned(r["text"])}.values())
    corpus = write_jsonl(records, root / "corpus" / "docstrings.jsonl")
    with open(corpus, "a") as handle:
        handle.write(json.dumps(records[0]) + "\n")  # exact duplicate
        handle.write(json.dumps({**records[1], "text": records[1]["text"] + "\n\n  "}) + "\n")  # same once cleaned
        handle.writelines(line + "\n" for line in BAD_LINES.values())
    demo_run.records = records
    run_dir = root / "run"
    code, output = run_in_terminal([*SHARDLINE, "run", "--config", "configs/demo.yaml", "--set", f"run_dir={run_dir}",
                                    "--set", f"data.input={corpus}", "--set", "train.epochs=6"], _env(), REPO_ROOT)
    assert code == 0, output[-5000:]
    return run_dir, corpus, output


def test_a_terminal_shows_spark_task_progress_and_tqdm_bars(demo_run):
    run_dir, _, output = demo_run
    # Spark's stages under the job's phase, redrawn in place while preprocessing runs (several states of
    # one line).
    redraws = re.findall(r"\r\x1b\[Kpreprocess: [a-z_]+: Spark stage \d+: (\d+)/(\d+) tasks done", output)
    assert len(redraws) >= 5 and any(int(done) < int(total) for done, total in redraws)
    lines = screen_lines(output)
    # tqdm: steps, rate, time left, loss and samples/s; then the evaluation's bar.
    assert any(re.match(r"train: 100%\|.*\| (\d+)/\1 \[\d+:\d\d<00:00, +[\d.]+step/s, loss=[\d.]+, samples_per_s=\d+\]",
                        line) for line in lines), lines
    assert any(re.match(r"evaluate: 100%\|.*\| (\d+)/\1 \[", line) for line in lines)
    assert "preprocess: done in " in output and "train: done in " in output
    # Spark's INFO chatter stays in the log; the console got its WARN lines at most.
    assert " INFO " not in output and " INFO " in (run_dir / "logs" / "preprocess.log").read_text()
    log = (run_dir / "logs" / "train.log").read_text()
    assert "\r" not in log and re.search(r"^train: 100%\|", log, re.M)  # the bar's last state, once


def test_run_builds_dataset_trains_and_beats_chance(demo_run):
    run_dir, corpus, _ = demo_run
    manifest = json.loads((run_dir / "dataset" / "manifest.json").read_text())
    documents = demo_run_records()
    # Every term of the identity against what the corpus was built from, not against each other.
    assert manifest["input_records"] == len(documents) + 2 + len(BAD_LINES) == sum(1 for _ in open(corpus))
    assert manifest["rejected_by_reason"] == {reason: 1 for reason in BAD_LINES}
    assert manifest["duplicates_removed"] == 2
    assert sum(s["documents"] for s in manifest["splits"].values()) == len(documents)
    assert sum(s["rows"] for s in manifest["splits"].values()) == len(documents)  # a row per document
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
    assert not list(model_dir.glob("*.sha256"))  # the tokenizer-training marker stays in run_dir/tokenizer
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["model_max_length"] == manifest["max_length"] == 128


def demo_run_records():
    return demo_run.records


def _test_split(run_dir, corpus):
    """(text, label) of every test row, found by the ids the job gave the cleaned texts."""
    by_id = {hashlib.sha256(_cleaned(r["text"]).encode()).hexdigest()[:32]: r for r in demo_run_records()}
    label_map = json.loads((run_dir / "dataset" / "manifest.json").read_text())["label_map"]
    names = {index: name for name, index in label_map.items()}
    manifest = contract.load_manifest(str(run_dir / "dataset"))
    rows = [row for path in manifest.split_files(str(run_dir / "dataset"), "test")
            for row in pq.read_table(path, columns=["id", "label"]).to_pylist()]
    return [(by_id[row["id"]]["text"], names[row["label"]]) for row in rows]


def test_predict_labels_new_texts_from_the_demo_model(demo_run):
    run_dir, _, _ = demo_run
    texts = ["Create a new event loop and run the coroutine until it completes.",
             "Return the MIME type of this message's payload, from its Content-Type header.",
             "Log a message with severity ERROR on the root logger.",
             "Configure the widget: set its background colour and the font of its label."]
    result = _run([*SHARDLINE, "predict", "--model", str(run_dir / "model"), *texts])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["asyncio", "email", "logging", "tkinter"]
    assert all(float(line.split()[1]) > 0.25 and line.endswith(text) for line, text in zip(lines, texts))
    as_json = _run([*SHARDLINE, "predict", "--model", str(run_dir), "--json", texts[0]])  # a run_dir works too
    prediction = json.loads(as_json.stdout)
    assert prediction["label"] == "asyncio" and set(prediction["scores"]) == {"asyncio", "email", "logging", "tkinter"}
    assert sum(prediction["scores"].values()) == pytest.approx(1.0, abs=1e-5)


def test_predict_on_the_test_split_matches_the_evaluation(demo_run, tmp_path):
    from training.predict import predict

    run_dir, corpus, _ = demo_run
    rows = _test_split(run_dir, corpus)
    test_file = write_jsonl([{"text": text} for text, _ in rows], tmp_path / "test.jsonl")
    result = _run([*SHARDLINE, "predict", "--model", str(run_dir / "model"), "--input", str(test_file), "--json"])
    assert result.returncode == 0, result.stderr
    predicted = [json.loads(line)["label"] for line in result.stdout.splitlines()]
    accuracy = sum(p == label for p, (_, label) in zip(predicted, rows)) / len(rows)
    evaluation = json.loads((run_dir / "eval.json").read_text())
    print(f"predict: test accuracy {accuracy:.4f} on {len(rows)} rows; eval.json says {evaluation['accuracy']:.4f}")
    assert len(predicted) == len(rows) == evaluation["examples"]
    assert accuracy == pytest.approx(evaluation["accuracy"], abs=1.01 / len(rows))  # same cleaning and encoding
    # The Python entry point gives the same answers in one call.
    assert [r["label"] for r in predict(run_dir / "model", [text for text, _ in rows[:20]])] == predicted[:20]


def test_inspect_summarizes_then_decodes_rows_back_to_text(demo_run):
    from pipeline.tokenizer import load_tokenizer

    run_dir, corpus, _ = demo_run
    result = _run([*SHARDLINE, "inspect", str(run_dir), "--rows", "2"])  # the run_dir: inspect finds dataset/
    assert result.returncode == 0, result.stderr
    summary, *blocks = result.stdout.split("\n[train row ")
    manifest = json.loads((run_dir / "dataset" / "manifest.json").read_text())
    assert summary.startswith(f"dataset {run_dir / 'dataset'}: classification, rows of 128 tokens")
    assert "tokenizer: wordpiece trained on up to 20000 sampled documents; " in summary
    assert re.search(rf"^train +{manifest['splits']['train']['rows']:,} ", summary, re.M)
    assert len(summary.splitlines()) < 20  # a summary, not the manifest
    by_id = {hashlib.sha256(_cleaned(r["text"]).encode()).hexdigest()[:32]: _cleaned(r["text"])
             for r in demo_run_records()}
    tokenizer = load_tokenizer(run_dir / "tokenizer")
    assert len(blocks) == 2
    for block in blocks:
        header, decoded = block.split("\n", 1)
        original = by_id[header.split("id=")[1].split()[0]]
        expected = tokenizer.decode(tokenizer(original, truncation=True, max_length=128)["input_ids"], skip_special_tokens=True)
        assert decoded.strip() == expected.strip()
        assert decoded.split()[0] in original.lower()
    full = _run([*SHARDLINE, "inspect", str(run_dir / "dataset"), "--manifest"])
    assert json.loads(full.stdout) == manifest


def test_spark_submit_runs_the_job_directly_and_skips_when_built(demo_run):
    run_dir, corpus, _ = demo_run
    spark_submit = Path(sys.executable).parent / "spark-submit"
    result = _run([str(spark_submit), "spark_jobs/preprocess.py", "--config", "configs/demo.yaml",
                   "--set", f"run_dir={run_dir}", "--set", f"data.input={corpus}"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "already built from this config; skipping" in result.stdout


def test_version_and_one_line_errors_name_what_to_do(tmp_path):
    version = _run([*SHARDLINE, "--version"])
    assert version.returncode == 0 and re.fullmatch(r"shardline \d+\.\d+\.\d+\n", version.stdout)
    result = _run([*SHARDLINE, "train", "--config", "configs/demo.yaml", "--set", "train.optimiser=sgd"])
    assert result.returncode == 2
    assert result.stderr.strip() == "shardline train: error: config key train.optimiser: unknown key"
    # `shardline train` before preprocess: no word about --from, which the user never typed.
    result = _run([*SHARDLINE, "train", "--config", "configs/demo.yaml", "--set", f"run_dir={tmp_path}"])
    assert result.returncode == 2 and "--from" not in result.stderr
    assert result.stderr.strip() == (f"shardline train: error: train needs the output of preprocess, "
                                     f"{tmp_path / 'dataset' / '_SUCCESS'}, which is missing; run `shardline preprocess` "
                                     "with the same config first (or `shardline run` for every stage)")
    # Refused at load time, not inside the Spark job: a bpe tokenizer without its <unk> and </s>.
    result = _run([*SHARDLINE, "run", "--dry-run", "--config", "configs/demo.yaml", "--set", "tokenizer.train.kind=bpe",
                   "--set", "tokenizer.train.special_tokens=[<pad>, <s>]"])
    assert result.returncode == 2 and result.stderr.startswith(
        "shardline run: error: config key tokenizer.train.special_tokens: a bpe tokenizer needs the special tokens")
    missing = _run([*SHARDLINE, "predict", "--model", str(tmp_path / "nothing"), "some text"])
    assert missing.returncode == 2 and missing.stderr.strip() == (
        f"shardline predict: error: model directory {tmp_path / 'nothing'} does not exist; "
        "`shardline train` writes one to run_dir/model")
    foreign = _run([*SHARDLINE, "predict", "--model", str(REPO_ROOT / "configs"), "some text"])
    assert foreign.returncode == 2 and "is not a shardline model directory" in foreign.stderr
    assert "Traceback" not in missing.stderr + foreign.stderr


def test_missing_input_is_a_clear_error_not_a_traceback(tmp_path):
    result = _run([*SHARDLINE, "preprocess", "--config", "configs/demo.yaml",
                   "--set", f"run_dir={tmp_path}", "--set", f"data.input={tmp_path}/missing/*.jsonl"])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "matches no files" in result.stderr
