"""The storage layer on local disk and on a real S3-compatible server (moto, on 127.0.0.1)."""
from __future__ import annotations

import os
import time

import pytest

from pipeline import storage


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "root")
    return request.getfixturevalue("s3_bucket") + "/root"


def test_bytes_are_stored_as_given_whatever_the_extension(root):
    import gzip

    data = gzip.compress(b"already compressed")
    storage.write_bytes(storage.join(root, "x.jsonl.gz"), data)  # pyarrow would gzip it again by its name
    assert storage.read_bytes(storage.join(root, "x.jsonl.gz")) == data
    with storage.open_binary(storage.join(root, "x.jsonl.gz")) as handle:
        assert handle.read() == data


def test_write_read_list_glob_delete(root):
    storage.write_text(storage.join(root, "a.txt"), "alpha")
    storage.write_bytes(storage.join(root, "sub", "b.jsonl"), b"{}\n")
    storage.write_bytes(storage.join(root, "sub", "deeper", "c.jsonl"), b"[]\n")
    assert storage.read_text(storage.join(root, "a.txt")) == "alpha"
    assert [storage.relative(e.uri, root) for e in storage.list_files(root)] == ["a.txt", "sub/b.jsonl", "sub/deeper/c.jsonl"]
    assert [e.size for e in storage.list_files(root)] == [5, 3, 3]
    assert [storage.relative(e.uri, root) for e in storage.glob(storage.join(root, "*.txt"))] == ["a.txt"]
    assert [storage.relative(e.uri, root) for e in storage.glob(storage.join(root, "sub", "*.jsonl"))] == ["sub/b.jsonl"]
    assert [storage.relative(e.uri, root) for e in storage.glob(storage.join(root, "**", "*.jsonl"))] == [
        "sub/b.jsonl", "sub/deeper/c.jsonl"]
    assert storage.info(storage.join(root, "missing")) is None and storage.info(storage.join(root, "sub")) is None
    assert storage.is_dir(storage.join(root, "sub")) and storage.exists(storage.join(root, "a.txt"))
    storage.delete(storage.join(root, "a.txt"))
    storage.delete(storage.join(root, "a.txt"))  # already gone: no error
    storage.delete_tree(storage.join(root, "sub"))
    assert storage.list_files(root) == []


def test_directories_round_trip_through_a_store(root, tmp_path):
    source = tmp_path / "model"
    (source / "nested").mkdir(parents=True)
    (source / "weights.bin").write_bytes(bytes(range(256)) * 10)
    (source / "nested" / "config.json").write_text('{"a": 1}')
    target = storage.join(root, "model")
    with storage.staged_local_dir(target) as staging:
        for item in source.rglob("*"):
            if item.is_file():
                dest = os.path.join(staging, item.relative_to(source))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with open(dest, "wb") as handle:
                    handle.write(item.read_bytes())
    with storage.local_dir_for(target) as local:
        assert open(os.path.join(local, "weights.bin"), "rb").read() == (source / "weights.bin").read_bytes()
        assert open(os.path.join(local, "nested", "config.json")).read() == '{"a": 1}'
    assert storage.sha256(storage.join(target, "weights.bin")) == storage.sha256(str(source / "weights.bin"))


def test_join_parent_relative_and_uris():
    assert storage.join("s3://bucket/runs/", "x", "dataset") == "s3://bucket/runs/x/dataset"
    assert storage.parent("s3://bucket/runs/x") == "s3://bucket/runs"
    assert storage.relative("gs://b/d/train/part-0.parquet", "gs://b/d") == "train/part-0.parquet"
    assert storage.join("relative/dir", "f") == os.path.join(os.getcwd(), "relative", "dir", "f")
    assert storage.as_uri("/tmp/x") == "file:///tmp/x" and storage.normalize("file:///tmp/x") == "/tmp/x"
    assert storage.scheme("abfss://c@acct.dfs.core.windows.net/p") == "abfss" and storage.is_local("C/x")


def test_a_missing_bucket_is_one_line_naming_the_store_in_seconds(s3_server):
    started = time.perf_counter()
    with pytest.raises(storage.StorageError) as error:
        storage.check_reachable("s3://no-such-bucket-shardline/runs/x")
    message = str(error.value)
    assert time.perf_counter() - started < 10
    assert "no-such-bucket-shardline" in message and s3_server in message and "AWS_ACCESS_KEY_ID" in message
    assert "\n" not in message and "shardline-test-secret" not in message


def test_endpoint_comes_from_aws_endpoint_url(s3_bucket, s3_server):
    # pyarrow 14's S3FileSystem ignores AWS_ENDPOINT_URL; the layer passes it on.
    assert storage.s3_arguments(storage.current_options())["endpoint_override"] == s3_server.removeprefix("http://")
    storage.write_text(f"{s3_bucket}/probe", "ok")
    import boto3

    body = boto3.client("s3").get_object(Bucket=s3_bucket.removeprefix("s3://"), Key="probe")["Body"].read()
    assert body == b"ok"
