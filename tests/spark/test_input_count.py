"""Input records counted apart from the read pass (spark_jobs.input_count): the same figure as the
read pass for every format and kind of damage, and a record the read pass loses fails the build."""
import bz2
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from pipeline import contract, storage
from pipeline.config import DataConfig, build_config
from spark_jobs import input_count, preprocess, read


def _counts(spark, cfg: DataConfig) -> tuple[dict[str, int], dict[str, int]]:
    files = read.resolve_input_files(cfg.input)
    counted = input_count.count_input(spark, cfg, files)
    read_counts = input_count.read_per_file(read.read_corpus(spark, cfg, files))
    input_count.check_input_counts(counted, read_counts, files, read.detect_format(files, cfg.format), "out")
    return ({storage.basename(uri): c.records for uri, c in counted.items()},
            {storage.basename(uri): n for uri, (n, _) in read_counts.items()})


def test_line_files_count_as_read_across_chunks_compression_damage_and_blank_lines(spark, tmp_path):
    lines = [json.dumps({"text": f"document {i} " + "x" * (i % 300)}).encode() for i in range(12_000)]
    lines[5:5] = [b"", b"  \t", b"\r"]  # separators, not records
    big = b"\r\n".join(lines) + b"\r\n"
    assert len(big) > 2 << 20  # three 1 MB chunks, so lines cross the read pass's chunk edges
    (tmp_path / "a-big.jsonl").write_bytes(big)
    (tmp_path / "b-empty.jsonl").write_bytes(b"")
    (tmp_path / "c-no-newline.jsonl").write_bytes(b'{"text": "one"}\n{"text": "two"}')
    (tmp_path / "d-garbage-tail.jsonl.gz").write_bytes(gzip.compress(b'{"text": "z1"}\n{"text": "z2"}\n') + b"not gzip")
    (tmp_path / "e-garbage-tail.jsonl.bz2").write_bytes(bz2.compress(b'{"text": "b1"}\n') + b"\x00\x01junk")
    (tmp_path / "f-not-gzip.jsonl.gz").write_bytes(b"plain bytes under a .gz name\n")
    counted, got = _counts(spark, DataConfig(input=str(tmp_path), chunk_mb=1))
    assert counted == got
    # 12,000 records; the empty file is 1; 2; the gzip's two lines and its error are 3; bzip2 ignores
    # bytes after a complete stream that do not start another, so its one line; 1, the error.
    assert counted == {"a-big.jsonl": 12_000, "b-empty.jsonl": 1, "c-no-newline.jsonl": 2,
                       "d-garbage-tail.jsonl.gz": 3, "e-garbage-tail.jsonl.bz2": 1, "f-not-gzip.jsonl.gz": 1}


def test_documents_per_file_csv_and_parquet_count_as_read(spark, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_bytes(b"one document\n\nover lines\n")
    (docs / "b.txt").write_bytes(b"")
    (docs / "c.txt.gz").write_bytes(b"not gzip")
    counted, got = _counts(spark, DataConfig(input=str(docs), doc_per_file=True))
    assert counted == got == {"a.txt": 1, "b.txt": 1, "c.txt.gz": 1}

    tables = tmp_path / "csv"
    tables.mkdir()
    (tables / "a.csv").write_text('body,topic\n"spans\nlines",a\n\ntoo,many,fields\n"ok",b\n', encoding="utf-8")
    (tables / "b.csv").write_text("", encoding="utf-8")
    counted, got = _counts(spark, DataConfig(input=str(tables), text_column="body", label_column="topic"))
    assert counted == got == {"a.csv": 3, "b.csv": 1}

    footers = tmp_path / "parquet"
    footers.mkdir()
    pq.write_table(pa.table({"body": [f"row {i}" for i in range(250)]}), footers / "a.parquet", row_group_size=100)
    pq.write_table(pa.table({"body": ["one", None]}), footers / "b.parquet")
    counted, got = _counts(spark, DataConfig(input=str(footers), text_column="body"))
    assert counted == got == {"a.parquet": 250, "b.parquet": 2}


def test_a_record_the_read_pass_loses_fails_the_build_before_publishing(spark, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"doc {i} about things", "label": "ab"[i % 2]}) + "\n"
                              for i in range(40)), encoding="utf-8")
    config = build_config({"run_dir": str(tmp_path / "run"), "data": {"input": str(corpus), "label_column": "label"},
                           "tokenizer": {"train": {"vocab_size": 120}}, "preprocess": {"max_length": 8}})
    read_clean = preprocess.read_clean
    # The fault: the read pass drops the record at byte 0, and nothing after it can tell.
    monkeypatch.setattr(preprocess, "read_clean",
                        lambda *args: read_clean(*args).filter(F.col(read.OFFSET) != 0))
    with pytest.raises(input_count.InputCountError, match=r"corpus.jsonl: 40 records in the file, 39 read \(-1\)"):
        preprocess.build_dataset(spark, config)
    assert storage.info(storage.join(config.dataset_dir, contract.SUCCESS_FILE)) is None
    assert not (tmp_path / "run" / "dataset" / "manifest.json").exists()
