"""The Spark job on an S3-compatible store (moto on 127.0.0.1): input in every format, the dataset,
its commit protocol, and exactly the same accounting and rows as the same job on local disk."""
import bz2
import gzip
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from dataset_reads import read_parquet, split_rows
from pipeline import contract, storage
from pipeline.config import DataConfig, build_config
from pipeline.demo import write_jsonl
from spark_jobs import read
from spark_jobs.preprocess import build_dataset


def _mixed_corpus(root):
    """One directory per format, each with good and bad records of its kind."""
    jsonl = root / "jsonl"
    jsonl.mkdir(parents=True)
    (jsonl / "a.jsonl").write_bytes(b'{"text": "first doc", "label": "x"}\n{"text": "cut\n[1]\n{"text": 5}\n'
                                    b'{"text": "caf\xe9", "label": "y"}\n')
    (jsonl / "b.jsonl.gz").write_bytes(gzip.compress(b'{"text": "zipped", "label": "y"}\n') + b"\x1f\x8b\x08garbage")
    (jsonl / "c.jsonl.bz2").write_bytes(bz2.compress(b'{"text": "bzipped", "label": "x"}\n'))
    (jsonl / "d.jsonl").write_bytes(b"")
    (jsonl / "_ignored.jsonl").write_bytes(b'{"text": "hidden by its name"}\n')
    text = root / "text"
    text.mkdir()
    (text / "a.txt").write_bytes(b"line one\n\nline \xff two\nline three\n")
    csv_dir = root / "csv"
    csv_dir.mkdir()
    (csv_dir / "a.csv").write_bytes(b'topic,body\nx,"first, with comma"\ny,"spans\nlines"\nx,too,many\ny,"bad \xff"\n')
    (csv_dir / "b.csv").write_bytes(b"")
    parquet_dir = root / "parquet"
    parquet_dir.mkdir()
    pq.write_table(pa.table({"body": ["p one", None, "p three"], "topic": ["x", "y", None]}), parquet_dir / "a.parquet",
                   row_group_size=2)
    pq.write_table(pa.table({"body": [1, 2], "topic": ["x", "y"]}), parquet_dir / "b.parquet")
    return {"jsonl": ("text", "label"), "text": ("text", None), "csv": ("body", "topic"), "parquet": ("body", "topic")}


@pytest.fixture(scope="module")
def corpus_in_both_places(tmp_path_factory, s3_server):
    import boto3

    root = tmp_path_factory.mktemp("formats")
    formats = _mixed_corpus(root)
    bucket = "shardline-formats"
    boto3.client("s3").create_bucket(Bucket=bucket)
    storage.upload_dir(str(root), f"s3://{bucket}/corpus")
    return root, f"s3://{bucket}/corpus", formats


def _records(spark, location, fmt, columns):
    text_column, label_column = columns
    cfg = DataConfig(input=location, format=fmt, text_column=text_column, label_column=label_column)
    df = read.read_corpus(spark, cfg, read.resolve_input_files(location))
    # The source differs only in its prefix (file:///tmp/… vs s3://bucket/…): compare file names.
    return df.withColumn(read.SOURCE, F.element_at(F.split(read.SOURCE, "/"), -1))


@pytest.mark.parametrize("fmt", ["jsonl", "text", "csv", "parquet"])
def test_every_format_reads_the_same_records_from_s3_as_from_local_disk(spark, corpus_in_both_places, fmt):
    local_root, s3_root, formats = corpus_in_both_places
    local = _records(spark, str(local_root / fmt), fmt, formats[fmt])
    remote = _records(spark, f"{s3_root}/{fmt}", fmt, formats[fmt])
    assertDataFrameEqual(remote, local)
    reasons = sorted((r[0] or "document") for r in local.select(read.REJECT_REASON).collect())
    expected = {
        "jsonl": ["corrupt_file", "document", "document", "document", "empty_file", "invalid_utf8",
                  "malformed_record", "malformed_record", "wrong_type"],
        "text": ["document", "document", "invalid_utf8"],
        "csv": ["document", "document", "empty_file", "invalid_utf8", "malformed_record"],
        "parquet": ["document", "document", "null_text", "wrong_type", "wrong_type"],
    }[fmt]
    assert reasons == expected


def test_globs_and_single_files_expand_through_the_store(corpus_in_both_places):
    _, s3_root, _ = corpus_in_both_places
    names = lambda entries: [storage.relative(e.uri, s3_root) for e in entries]  # noqa: E731
    assert names(read.resolve_input_files(f"{s3_root}/jsonl")) == [
        "jsonl/a.jsonl", "jsonl/b.jsonl.gz", "jsonl/c.jsonl.bz2", "jsonl/d.jsonl"]
    assert names(read.resolve_input_files(f"{s3_root}/*/a.*")) == [
        "csv/a.csv", "jsonl/a.jsonl", "parquet/a.parquet", "text/a.txt"]
    assert names(read.resolve_input_files(f"{s3_root}/text/a.txt")) == ["text/a.txt"]
    with pytest.raises(read.InputError, match="matches no files"):
        read.resolve_input_files(f"{s3_root}/nothing-*.jsonl")


def _classification_config(run_dir, corpus, tokenizer_dir):
    return build_config({
        "run_dir": run_dir,
        "data": {"input": corpus, "label_column": "label"},
        "tokenizer": {"path": tokenizer_dir},
        "preprocess": {"max_length": 32, "seed": 2, "num_partitions": 2, "shard": {"row_group_rows": 16}},
    })


@pytest.fixture(scope="module")
def s3_and_local_runs(spark, tmp_path_factory, s3_server, docstring_records, small_tokenizer):
    import boto3

    root = tmp_path_factory.mktemp("s3run")
    corpus = write_jsonl(docstring_records[::10], root / "corpus.jsonl")
    with open(corpus, "a") as handle:
        handle.write('{"text": "no label here"}\n{"broken\n')
    small_tokenizer.save_pretrained(str(root / "tokenizer"))
    bucket = "shardline-runs"
    boto3.client("s3").create_bucket(Bucket=bucket)
    storage.write_bytes(f"s3://{bucket}/corpus/docstrings.jsonl", corpus.read_bytes())
    storage.upload_dir(str(root / "tokenizer"), f"s3://{bucket}/tokenizers/small")
    cwd = os.getcwd()
    os.chdir(root)  # a run_dir taken for a local path would appear here as ./s3:
    try:
        remote = _classification_config(f"s3://{bucket}/runs/a", f"s3://{bucket}/corpus/*.jsonl",
                                         f"s3://{bucket}/tokenizers/small")
        remote_manifest = build_dataset(spark, remote)
    finally:
        os.chdir(cwd)
    local = _classification_config(str(root / "local"), str(corpus), str(root / "tokenizer"))
    return root, remote, remote_manifest, local, build_dataset(spark, local)


def test_a_dataset_built_on_s3_equals_the_local_one(s3_and_local_runs):
    root, remote, remote_manifest, local, local_manifest = s3_and_local_runs
    assert not (root / "s3:").exists()
    assert storage.is_committed(remote.dataset_dir)
    assert contract.load_manifest(remote.dataset_dir) == remote_manifest
    assert split_rows(remote.dataset_dir) == split_rows(local.dataset_dir)
    assert remote_manifest.rejected_by_reason == local_manifest.rejected_by_reason == {
        "malformed_record": 1, "missing_label": 1}
    assert remote_manifest.tokenizer_sha256 == local_manifest.tokenizer_sha256
    for name in contract.SPLITS:
        assert [f.sha256 for f in remote_manifest.splits[name].files] == [f.sha256 for f in local_manifest.splits[name].files]
    # Every listed file is in the bucket with the recorded size and checksum, and nothing else is.
    listed = {f.path: f for s in remote_manifest.splits.values() for f in s.files}
    listed.update({f.path: f for f in remote_manifest.rejects_files})
    found = {storage.relative(e.uri, remote.dataset_dir): e for e in storage.list_files(remote.dataset_dir)}
    data_files = {name for name in found if name.endswith(".parquet") and not name.startswith("tokenizer/")}
    assert data_files == set(listed)
    for name, entry in listed.items():
        assert found[name].size == entry.bytes
        assert storage.sha256(storage.join(remote.dataset_dir, name)) == entry.sha256
    rejects = read_parquet(storage.join(remote.dataset_dir, remote_manifest.rejects_files[0].path))
    assert {r["source"] for r in rejects.to_pylist()} == {"s3://shardline-runs/corpus/docstrings.jsonl"}


def test_a_rebuild_on_s3_removes_stale_attempt_files_and_keeps_the_fingerprint(spark, s3_and_local_runs, monkeypatch):
    from spark_jobs import preprocess

    _, remote, remote_manifest, _, _ = s3_and_local_runs
    before_build = storage.join(remote.dataset_dir, "train", "part-00000-deadbeef-t999.parquet")
    during_build = storage.join(remote.dataset_dir, "train", "part-00001-00000-deadbeef-attempt3.parquet")
    storage.write_bytes(before_build, b"left by a killed earlier run")
    begin_build = preprocess.begin_build

    def begin_then_a_failed_attempt_writes(dataset_dir):  # after begin_build's clean-up: only the commit removes it
        build_id = begin_build(dataset_dir)
        storage.write_bytes(during_build, b"left by a failed attempt of this build")
        return build_id

    monkeypatch.setattr(preprocess, "begin_build", begin_then_a_failed_attempt_writes)
    before = split_rows(remote.dataset_dir)
    rebuilt = build_dataset(spark, remote)
    assert storage.info(before_build) is None and storage.info(during_build) is None
    assert rebuilt.dataset_fingerprint == remote_manifest.dataset_fingerprint
    assert split_rows(remote.dataset_dir) == before


def test_an_uncommitted_dataset_on_s3_is_refused(s3_and_local_runs):
    _, remote, *_ = s3_and_local_runs
    half = storage.join(storage.parent(remote.dataset_dir), "half-written")
    storage.write_bytes(storage.join(half, "train", "part-00000-x-t1.parquet"), b"PAR1")
    storage.write_text(storage.join(half, contract.MANIFEST_FILE), "{}")
    with pytest.raises(contract.DatasetNotReadyError, match="has no _SUCCESS"):
        contract.load_manifest(half)
