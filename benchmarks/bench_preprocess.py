"""Preprocess throughput: the raw tokenizer path against the Spark job, on one corpus, in one run.

    python benchmarks/bench_preprocess.py [--mb 50] [--max-length 128] [--workdir runs/bench]

(a) raw: one process, `tokenizers` encode_batch_fast with pad/truncate to max_length (its own Rust
    thread pool, all cores), numpy -> Arrow list columns, one Parquet write.
(b) Spark: `build_dataset` end to end (read, clean, dedup, split, tokenize, shard, manifest) on a
    session created beforehand, so JVM start is excluded; run on local[2], then local[1] for scaling.
The corpus is generated offline: ~50 MB of dictionary-sized documents (15-60 words drawn from the
standard library's docstrings with a seeded RNG). Both paths load the same saved tokenizer.
Prints docs/s for each and the ratios; nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402


def make_corpus(path: Path, target_mb: int, seed: int = 0) -> int:
    from pipeline.demo import stdlib_docstrings

    words = sorted({w for r in stdlib_docstrings() for w in r["text"].split() if w.isprintable()})
    rng = np.random.default_rng(seed)
    labels = ["asyncio", "email", "logging", "tkinter"]
    path.parent.mkdir(parents=True, exist_ok=True)
    written = docs = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < target_mb << 20:
            lengths = rng.integers(15, 61, size=10_000)
            picks = rng.integers(0, len(words), size=int(lengths.sum()))
            start = 0
            for n in lengths:
                line = json.dumps({"text": " ".join(words[i] for i in picks[start:start + n]),
                                   "label": labels[picks[start] % 4]}) + "\n"
                start += n
                out.write(line)
                written += len(line)
                docs += 1
    return docs


def raw_path(corpus: Path, tokenizer_dir: Path, max_length: int, out: Path) -> float:
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    started = time.perf_counter()
    table = pj.read_json(corpus)
    texts = table.column("text").to_pylist()
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(length=max_length, pad_id=0)
    encodings = tokenizer.encode_batch_fast(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int32)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int8)
    offsets = pa.array(np.arange(0, (len(texts) + 1) * max_length, max_length, dtype=np.int32))
    pq.write_table(
        pa.table({
            "input_ids": pa.ListArray.from_arrays(offsets, pa.array(ids.reshape(-1))),
            "attention_mask": pa.ListArray.from_arrays(offsets, pa.array(mask.reshape(-1))),
            "num_tokens": pa.array(mask.sum(axis=1, dtype=np.int32)),
        }),
        out, compression="zstd",
    )
    return time.perf_counter() - started


def spark_path(master: str, corpus: Path, tokenizer_dir: Path, max_length: int, run_dir: Path, minimal: bool):
    from pyspark.sql import SparkSession

    from pipeline.config import build_config
    from spark_jobs.preprocess import build_dataset

    session = (SparkSession.builder.master(master).appName("bench").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "4g").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    preprocess = {"max_length": max_length, "num_partitions": 8}
    if minimal:
        preprocess.update(normalization="none", collapse_whitespace=False, dedup=False)
    config = build_config({
        "run_dir": str(run_dir), "data": {"input": str(corpus), "label_column": "label"},
        "tokenizer": {"path": str(tokenizer_dir)}, "preprocess": preprocess,
    })
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        started = time.perf_counter()
        manifest = build_dataset(session, config)
        return time.perf_counter() - started, manifest
    finally:
        session.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--workdir", default="runs/bench")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                             os.environ.get("PYTHONPATH")]))
    work = Path(args.workdir)
    corpus = work / "corpus.jsonl"
    docs = make_corpus(corpus, args.mb)
    print(f"corpus: {docs} documents, {corpus.stat().st_size / 2**20:.1f} MB, max_length {args.max_length}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)

    from pipeline.config import TokenizerTrainConfig
    from pipeline.tokenizer import train_tokenizer

    tokenizer_dir = work / "tokenizer"
    with open(corpus) as handle:
        sample = [json.loads(line)["text"] for _, line in zip(range(50_000), handle)]
    train_tokenizer(sample, TokenizerTrainConfig(vocab_size=8000)).save_pretrained(str(tokenizer_dir))

    raw_s = raw_path(corpus, tokenizer_dir, args.max_length, work / "raw.parquet")
    print(f"(a) raw tokenizers + Parquet : {raw_s:7.2f} s  {docs / raw_s:9.0f} docs/s", flush=True)
    results = {}
    for label, master, minimal in [
        ("local[2], default clean+dedup", "local[2]", False),
        ("local[2], no clean/dedup", "local[2]", True),
        ("local[1], no clean/dedup", "local[1]", True),
    ]:
        seconds, manifest = spark_path(master, corpus, tokenizer_dir, args.max_length, work / "spark", minimal)
        results[label] = seconds
        print(f"(b) Spark {label:28s}: {seconds:7.2f} s  {docs / seconds:9.0f} docs/s  "
              f"ratio to raw {raw_s / seconds:.2f}x  stages {manifest.stage_seconds}", flush=True)
    print(f"local[2] / local[1] speed-up (no clean/dedup): "
          f"{results['local[1], no clean/dedup'] / results['local[2], no clean/dedup']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
