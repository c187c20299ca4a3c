"""Small finished datasets written with pyarrow in the contract's exact layout (schema 3: the manifest
lists every file with its bytes, row groups and sha256), for reader and model tests that need control
over row-group sizes (uneven shards) or a task the Spark job may not write yet. Written through
pipeline.storage, so `dataset_dir` may be a local path or a URI (s3://bucket/dataset)."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import contract, storage


def _manifest(task: str, max_length: int, vocab_size: int, label_map: dict, splits: dict) -> contract.Manifest:
    return contract.Manifest(
        schema_version=contract.SCHEMA_VERSION, task=task, max_length=max_length, vocab_size=vocab_size, pad_id=0,
        tokenizer_sha256="0" * 64, label_map=label_map, input_records=sum(s.rows for s in splits.values()),
        rejected_records=0, rejected_by_reason={}, token_count=sum(s.tokens for s in splits.values()),
        splits=splits, config={"preprocess": {"task": task, "max_length": max_length}},
    )


def parquet_bytes(tables: list[pa.Table]) -> bytes:
    """One Parquet file, one row group per table."""
    schema = next((t.schema for t in tables if t.num_rows), tables[0].schema)  # an empty table's ids are null-typed
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(sink, schema) as writer:
        for table in tables:
            writer.write_table(table.cast(schema))
    return sink.getvalue().to_pybytes()


def _write_split(dataset_dir: str, split: str, tables_per_file: list[list[pa.Table]]) -> contract.SplitStats:
    sizes, tokens, files = [], 0, []
    for number, tables in enumerate(tables_per_file):
        # Spark-style names with an attempt suffix, so a test can add a stray attempt beside them.
        path = f"{split}/part-{number:05d}-attempt0.parquet"
        data = parquet_bytes(tables)
        storage.write_bytes(storage.join(dataset_dir, path), data)
        groups = [table.num_rows for table in tables]
        files.append(contract.DataFile(path=path, bytes=len(data), row_group_rows=groups,
                                       sha256=hashlib.sha256(data).hexdigest()))
        sizes += groups
        tokens += sum(int(np.sum(t.column(contract.ATTENTION_MASK).combine_chunks().flatten().to_numpy())) for t in tables)
    return contract.SplitStats(rows=sum(sizes), tokens=tokens, num_files=len(tables_per_file),
                               num_row_groups=len(sizes), row_group_rows=sizes, files=files)


def _publish(dataset_dir: str, manifest: contract.Manifest) -> None:
    contract.write_json_atomic(storage.join(dataset_dir, contract.MANIFEST_FILE), manifest.model_dump(mode="json"))
    storage.write_text(storage.join(dataset_dir, contract.SUCCESS_FILE), "")


def _fixed_lists(matrix: np.ndarray, value_type: pa.DataType) -> pa.ListArray:
    offsets = pa.array(np.arange(0, matrix.size + 1, matrix.shape[1], dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(matrix.ravel(), type=value_type))


def classification_table(first_id: int, rows: int, max_length: int, vocab_size: int, num_labels: int) -> pa.Table:
    """Rows whose label is readable from the tokens (token 2 + label leads), so models can learn it."""
    rng = np.random.default_rng(first_id)
    ids = np.arange(first_id, first_id + rows)
    labels = ids % num_labels
    lengths = rng.integers(2, max_length + 1, size=rows)
    input_ids = rng.integers(10, vocab_size, size=(rows, max_length))
    input_ids[:, 0] = 2 + labels
    mask = (np.arange(max_length)[None, :] < lengths[:, None]).astype(np.int8)
    input_ids = np.where(mask == 1, input_ids, 0).astype(np.int32)
    return pa.table({
        contract.ID_COLUMN: pa.array([f"doc-{i:06d}" for i in ids]),
        contract.INPUT_IDS: _fixed_lists(input_ids, pa.int32()),
        contract.ATTENTION_MASK: _fixed_lists(mask, pa.int8()),
        contract.LABEL: pa.array(labels.astype(np.int32)),
        contract.NUM_TOKENS: pa.array(lengths.astype(np.int32)),
    })


def write_classification_dataset(dataset_dir: str | os.PathLike, row_groups: list[list[int]], max_length: int = 8,
                                 vocab_size: int = 60, num_labels: int = 3) -> contract.Manifest:
    """row_groups: rows per row group, per train file, e.g. [[50, 7], [30]]; val/test get one small file."""
    dataset_dir = str(dataset_dir)
    next_id = 0
    train_tables = []
    for file_groups in row_groups:
        tables = []
        for rows in file_groups:
            tables.append(classification_table(next_id, rows, max_length, vocab_size, num_labels))
            next_id += rows
        train_tables.append(tables)
    splits = {"train": _write_split(dataset_dir, "train", train_tables)}
    for split in ("val", "test"):
        splits[split] = _write_split(dataset_dir, split, [[classification_table(next_id, 24, max_length, vocab_size, num_labels)]])
        next_id += 24
    manifest = _manifest("classification", max_length, vocab_size, {f"class{i}": i for i in range(num_labels)}, splits)
    _publish(dataset_dir, manifest)
    return manifest


def pack_documents(documents: list[list[int]], max_length: int) -> list[dict[str, list[int]]]:
    """Greedy packing in the Spark job's layout: documents end to end, never split, padded with 0."""
    blocks, current = [], []
    for document in documents:
        document = document[:max_length]
        if sum(len(d) for d in current) + len(document) > max_length:
            blocks.append(current)
            current = []
        current.append(document)
    blocks.append(current)
    rows = []
    for block in blocks:
        ids, pos, seg = [], [], []
        for number, document in enumerate(block, start=1):
            ids += document
            pos += list(range(len(document)))
            seg += [number] * len(document)
        pad = max_length - len(ids)
        rows.append({
            contract.INPUT_IDS: ids + [0] * pad, contract.ATTENTION_MASK: [1] * len(ids) + [0] * pad,
            contract.POSITION_IDS: pos + [0] * pad, contract.SEGMENT_IDS: seg + [0] * pad,
        })
    return rows


def causal_table(rows: list[dict[str, list[int]]], first_id: int) -> pa.Table:
    return pa.table({
        contract.ID_COLUMN: pa.array([f"block-{first_id + i:06d}" for i in range(len(rows))]),
        contract.INPUT_IDS: pa.array([r[contract.INPUT_IDS] for r in rows], type=pa.list_(pa.int32())),
        contract.ATTENTION_MASK: pa.array([r[contract.ATTENTION_MASK] for r in rows], type=pa.list_(pa.int8())),
        contract.POSITION_IDS: pa.array([r[contract.POSITION_IDS] for r in rows], type=pa.list_(pa.int32())),
        contract.SEGMENT_IDS: pa.array([r[contract.SEGMENT_IDS] for r in rows], type=pa.list_(pa.int32())),
        contract.NUM_TOKENS: pa.array([sum(r[contract.ATTENTION_MASK]) for r in rows], type=pa.int32()),
    })


def write_causal_dataset(dataset_dir: str | os.PathLike, max_length: int = 16, vocab_size: int = 40,
                         num_documents: int = 120, rows_per_group: int = 8) -> contract.Manifest:
    """Packed blocks of counting documents (each document is a run of consecutive token ids)."""
    dataset_dir = str(dataset_dir)
    rng = np.random.default_rng(7)
    documents = []
    for _ in range(num_documents):
        start, length = int(rng.integers(5, vocab_size - 12)), int(rng.integers(3, 9))
        documents.append(list(range(start, start + length)))
    blocks = pack_documents(documents, max_length)
    cut_val, cut_test = int(len(blocks) * 0.8), int(len(blocks) * 0.9)
    parts = {"train": blocks[:cut_val], "val": blocks[cut_val:cut_test], "test": blocks[cut_test:]}
    splits, next_id = {}, 0
    for split, rows in parts.items():
        groups = [causal_table(rows[i:i + rows_per_group], next_id + i) for i in range(0, len(rows), rows_per_group)]
        next_id += len(rows)
        splits[split] = _write_split(dataset_dir, split, [groups[i::2] for i in range(2) if groups[i::2]])
    manifest = _manifest("causal_lm", max_length, vocab_size, {}, splits)
    _publish(dataset_dir, manifest)
    return manifest


def write_tokenizer(directory: str, vocab_size: int = 64) -> None:
    """A real (tiny, word-level) tokenizer directory at directory, on any store: what a run_dir's
    tokenizer/ holds, for tests that train on these datasets without the Spark job."""
    import tempfile

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i for i in range(2, vocab_size)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]")
    with tempfile.TemporaryDirectory() as local:
        tokenizer.save_pretrained(local)
        storage.upload_dir(local, directory)
