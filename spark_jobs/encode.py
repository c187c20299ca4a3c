"""Tokenization inside Spark, on Arrow batches, with the Rust tokenizer built once per worker.

The encoder runs in `mapInArrow`: each Arrow batch of text goes through one `encode_batch` call and
comes back as Arrow list arrays built from flat numpy buffers, with no per-row Python objects.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from pipeline import contract

# Spark workers are reused across tasks: cache the built tokenizer by the hash of its JSON.
_WORKER_TOKENIZERS: dict[str, object] = {}


def _worker_tokenizer(tokenizer_json: str, max_length: int, pad_id: int):
    from tokenizers import Tokenizer

    key = hashlib.sha256(tokenizer_json.encode()).hexdigest() + f":{max_length}:{pad_id}"
    tokenizer = _WORKER_TOKENIZERS.get(key)
    if tokenizer is None:
        # One Rust thread per Spark task slot: Spark already runs one task per core.
        os.environ.setdefault("RAYON_NUM_THREADS", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        tokenizer = Tokenizer.from_str(tokenizer_json)
        tokenizer.enable_truncation(max_length=max_length)
        tokenizer.enable_padding(length=max_length, pad_id=pad_id)
        _WORKER_TOKENIZERS[key] = tokenizer
    return tokenizer


def _fixed_length_list(values: np.ndarray, row_length: int, arrow_type: pa.DataType) -> pa.ListArray:
    """Rows of a 2-D array as a list<...> array: offsets are a multiple of row_length."""
    num_rows = values.shape[0]
    offsets = pa.array(np.arange(0, (num_rows + 1) * row_length, row_length, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1), type=arrow_type))


def encode_padded(
    df: DataFrame, tokenizer_json: str, max_length: int, pad_id: int, text_column: str = "text"
) -> DataFrame:
    """Add input_ids / attention_mask (padded or truncated to max_length) and num_tokens; drop text."""
    keep = [f for f in df.schema.fields if f.name != text_column]
    out_schema = T.StructType(
        keep
        + [
            T.StructField(contract.INPUT_IDS, T.ArrayType(T.IntegerType(), False), False),
            T.StructField(contract.ATTENTION_MASK, T.ArrayType(T.ByteType(), False), False),
            T.StructField(contract.NUM_TOKENS, T.IntegerType(), False),
        ]
    )
    keep_names = [f.name for f in keep]

    def encode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tokenizer = _worker_tokenizer(tokenizer_json, max_length, pad_id)
        for batch in batches:
            texts = batch.column(text_column).to_pylist()
            encodings = tokenizer.encode_batch_fast(texts) if texts else []
            ids = np.array([e.ids for e in encodings], dtype=np.int32).reshape(len(texts), max_length)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int8).reshape(len(texts), max_length)
            columns = [batch.column(name) for name in keep_names] + [
                _fixed_length_list(ids, max_length, pa.int32()),
                _fixed_length_list(mask, max_length, pa.int8()),
                pa.array(mask.sum(axis=1, dtype=np.int32)),
            ]
            yield pa.RecordBatch.from_arrays(columns, names=out_schema.fieldNames())

    return df.mapInArrow(encode_batches, out_schema)
