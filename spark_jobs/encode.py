"""Tokenization inside Spark, on Arrow batches, with the Rust tokenizer built once per Python worker.

Each encoder is a function of a task's Arrow batches (`padded_batches`, `packed_batches`), run by
the shard writer in the task that writes the rows (shard.write_partitions), or on its own in
`mapInArrow` (`encode_padded`, `pack_causal_lm`). Each Arrow batch of text goes through one
`encode_batch_fast` call (one Rust thread per Spark task slot, so cores are not oversubscribed), and
the token columns are built in bulk with numpy (flat ids + lengths -> padded 2-D array -> Arrow list
arrays), with no per-token Python objects.

- `encode_padded` (classification): pad/truncate to max_length, or with `stride` cut long documents
  into overlapping windows, one row each.
- `pack_causal_lm` (causal_lm): documents followed by EOS, concatenated in (split, id) order within
  a partition, cut into blocks of exactly max_length tokens; only a stream's last block is padded
  (or dropped). position_ids restart at 0 at each document start and at the start of every block;
  segment_ids number the documents of a block 1, 2, ... (0 for padding).

Besides the contract columns each row carries accounting columns (STAT_COLUMNS) that the shard
writer drops: documents starting in the row, whether the document was truncated, and the token
counts of the documents starting in the row.
"""
from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from pipeline import contract

SPLIT = "split"
DOCUMENTS = "_documents"  # int32: documents that start in this row (accounting)
TRUNCATED = "_truncated"  # int8: 1 when this row's document lost tokens to truncation
DOC_LENGTHS = "_doc_lengths"  # list<int32>: token counts of the documents starting in this row
DROPPED = "_dropped"  # bool: a causal_lm remainder block dropped by drop_remainder (not written)
STAT_COLUMNS = (DOCUMENTS, TRUNCATED, DOC_LENGTHS, DROPPED)

_INT_LIST = T.ArrayType(T.IntegerType(), False)
_STAT_FIELDS = [
    T.StructField(DOCUMENTS, T.IntegerType(), False),
    T.StructField(TRUNCATED, T.ByteType(), False),
    T.StructField(DOC_LENGTHS, _INT_LIST, False),
    T.StructField(DROPPED, T.BooleanType(), False),
]

# Spark reuses Python workers across tasks: cache the built tokenizer by the hash of its JSON.
_WORKER_TOKENIZERS: dict[str, object] = {}


def _worker_tokenizer(tokenizer_json: str, max_length: int | None, stride: int = 0):
    from tokenizers import Tokenizer

    key = f"{hashlib.sha256(tokenizer_json.encode()).hexdigest()}:{max_length}:{stride}"
    tokenizer = _WORKER_TOKENIZERS.get(key)
    if tokenizer is None:
        # One Rust thread per Spark task slot: Spark already runs one task per core.
        os.environ["RAYON_NUM_THREADS"] = "1"
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        tokenizer = Tokenizer.from_str(tokenizer_json)
        tokenizer.no_padding()  # padding is done in numpy: unpadded lengths are the real token counts
        if max_length is None:
            tokenizer.no_truncation()
        else:
            tokenizer.enable_truncation(max_length=max_length, stride=stride)
        _WORKER_TOKENIZERS[key] = tokenizer
    return tokenizer


def flat_ids(encodings: list) -> tuple[np.ndarray, np.ndarray]:
    """(all ids concatenated as int32, per-encoding lengths as int64), without per-row lists."""
    lengths = np.fromiter((len(e) for e in encodings), dtype=np.int64, count=len(encodings))
    ids = np.fromiter(
        itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.int32, count=int(lengths.sum())
    )
    return ids, lengths


def pad_rows(ids: np.ndarray, lengths: np.ndarray, row_length: int, pad_id: int) -> np.ndarray:
    """Flat ids cut by lengths into rows of row_length, right-padded with pad_id."""
    out = np.full((len(lengths), row_length), pad_id, dtype=np.int32)
    out[np.arange(row_length) < lengths[:, None]] = ids
    return out


def list_array(values: np.ndarray, arrow_type: pa.DataType) -> pa.ListArray:
    """Rows of a 2-D array as a list<...> array (Spark 3.5's Arrow path rejects FixedSizeList)."""
    num_rows, row_length = values.shape
    offsets = pa.array(np.arange(0, (num_rows + 1) * row_length, row_length, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1), type=arrow_type))


def _ragged_list(lengths_per_row: list[np.ndarray]) -> pa.ListArray:
    offsets = np.zeros(len(lengths_per_row) + 1, dtype=np.int32)
    np.cumsum([len(x) for x in lengths_per_row], out=offsets[1:])
    flat = np.concatenate(lengths_per_row) if lengths_per_row else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat.astype(np.int32), type=pa.int32()))


def _one_or_none_list(values: np.ndarray, present: np.ndarray) -> pa.ListArray:
    """Row i holds [values[i]] where present[i], else []: built from offsets, not per-row lists."""
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(present, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[present].astype(np.int32)))


def _token_fields(*names: str) -> list[T.StructField]:
    return [T.StructField(name, _INT_LIST, False) for name in names]


def padded_fields(max_length: int) -> list[T.StructField]:
    """The token columns of a padded (classification) row, after the columns it keeps."""
    return (
        _token_fields(contract.INPUT_IDS)
        + [T.StructField(contract.ATTENTION_MASK, T.ArrayType(T.ByteType(), False), False),
           T.StructField(contract.NUM_TOKENS, T.IntegerType(), False)]
    )


class PaddedEncoder:
    """Text -> input_ids / attention_mask (max_length, padded), num_tokens and the accounting
    columns, one Arrow batch at a time; picklable (the Rust tokenizer is built in the worker).

    Without stride a long document is truncated (TRUNCATED=1); with stride it becomes several
    windows overlapping by `stride` tokens, ids suffixed `#1`, `#2`, ... after the first.
    """

    def __init__(self, tokenizer_json: str, max_length: int, pad_id: int, stride: int | None = None):
        self.tokenizer_json, self.max_length, self.pad_id, self.stride = tokenizer_json, max_length, pad_id, stride
        # Without stride only the first max_length tokens are kept: a text can be cut before the
        # tokenizer sees it, where that provably keeps those tokens (see cut_texts).
        self.cut_chars = max_length * _CHARS_PER_TOKEN_BOUND if not stride and cuts_are_exact(tokenizer_json) else None

    def encode(self, batch: pa.RecordBatch, keep_names: list[str], text_column: str = "text") -> list[pa.Array]:
        """The kept columns (repeated per window with stride), then the token and stat columns."""
        tokenizer = _worker_tokenizer(self.tokenizer_json, self.max_length, self.stride or 0)
        texts = batch.column(text_column).to_pylist()
        encodings = self._encode_texts(tokenizer, texts)
        truncated = np.fromiter((bool(e.overflowing) for e in encodings), dtype=np.int8, count=len(encodings))
        columns = [batch.column(name) for name in keep_names]
        if self.stride and truncated.any():
            windows = [len(e.overflowing) + 1 for e in encodings]
            take = pa.array(np.repeat(np.arange(len(encodings)), windows))
            columns = [c.take(take) for c in columns]
            id_index = keep_names.index(contract.ID_COLUMN)
            suffixes = [f"#{k}" if k else "" for n in windows for k in range(n)]
            columns[id_index] = pa.array([i + s for i, s in zip(columns[id_index].to_pylist(), suffixes)])
            first = np.array([k == 0 for n in windows for k in range(n)])
            encodings = [w for e in encodings for w in (e, *e.overflowing)]
            truncated = np.zeros(len(encodings), dtype=np.int8)
        else:
            first = np.ones(len(encodings), dtype=bool)
        ids, lengths = flat_ids(encodings)
        padded = pad_rows(ids, lengths, self.max_length, self.pad_id)
        mask = (np.arange(self.max_length) < lengths[:, None]).astype(np.int8)
        num_tokens = lengths.astype(np.int32)
        return columns + [
            list_array(padded, pa.int32()),
            list_array(mask, pa.int8()),
            pa.array(num_tokens),
            pa.array(first.astype(np.int32)),
            pa.array(truncated),
            _one_or_none_list(num_tokens, first),
            pa.array(np.zeros(len(encodings), dtype=bool)),
        ]

    def _encode_texts(self, tokenizer, texts: list[str]) -> list:
        if self.cut_chars is None:
            return tokenizer.encode_batch_fast(texts)
        cut, was_cut = cut_texts(texts, self.cut_chars)
        encodings = tokenizer.encode_batch_fast(cut)
        # A cut text that did not overflow max_length may have lost tokens: encode it whole.
        again = [i for i in was_cut if not encodings[i].overflowing]
        for i, encoding in zip(again, tokenizer.encode_batch_fast([texts[i] for i in again]) if again else []):
            encodings[i] = encoding
        if len(again) * _REENCODED_BEFORE_WIDENING > len(was_cut):
            # Text with longer tokens than the bound assumes: each re-encode costs a whole text's
            # tokenization again, so later batches cut wider. The output is the same either way.
            self.cut_chars = self.cut_chars * 3 // 2
        return encodings


def batch_by_batch(encode_batch):
    """mapInArrow's function: encode_batch on each batch, nothing of a batch kept while the next
    is encoded. A loop body that binds the tokenizer's encodings (about 100 MB per 10,000-row batch,
    in Rust objects) to a local keeps them alive until the next batch's are built: two batches'
    worth at the peak of every task with more than one batch, where a one-batch task holds one."""

    def encode_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield encode_batch(batch)

    return encode_batches


# A cut at max_length * this many characters keeps max_length tokens for nearly all text (English
# WordPiece averages 4-5 characters a token); a cut text that falls short is re-encoded whole, so
# the bound only moves cost. At max_length 128, 6 against 8: on ~3,300-character documents (GCIDE
# entries joined 12 at a time) 30-37 % less tokenizer CPU; on the 126k entries themselves (3.7 %
# over 1,024 characters) 5 % fewer characters and 0-5 % less CPU; neither re-encodes any text.
_CHARS_PER_TOKEN_BOUND = 6
# More than 1 in this many cut texts re-encoded: the bound widens by half for the task's later batches.
_REENCODED_BEFORE_WIDENING = 50


def cut_texts(texts: list[str], cut_chars: int) -> tuple[list[str], list[int]]:
    """Each text longer than cut_chars cut at its first ASCII space at or after cut_chars, and the
    indices of the texts that were cut."""
    out, was_cut = list(texts), []
    for i, text in enumerate(texts):
        if len(text) > cut_chars:
            space = text.find(" ", cut_chars)
            if space > 0:
                out[i] = text[:space]
                was_cut.append(i)
    return out, was_cut


# Pre-tokenizers that split on whitespace and never join pieces across it, and normalizers that
# map characters one by one (or canonically, where a space is a starter that nothing composes
# across): with them, the tokens of a text cut at a space are the first tokens of the whole text.
_WHITESPACE_SPLITTERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
_PIECEWISE_SPLITTERS = _WHITESPACE_SPLITTERS | {"Punctuation", "Digits"}
_CHARWISE_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents"}


def cuts_are_exact(tokenizer_json: str) -> bool:
    """True when cutting a text at an ASCII space keeps every token before the cut unchanged: the
    pre-tokenizer splits at whitespace, the normalizer works per character, and no added token
    contains a space (added tokens are matched in the raw text, before splitting)."""
    import json

    spec = json.loads(tokenizer_json)

    def kinds(node: dict | None, key: str) -> list[str]:
        if node is None:
            return []
        if node.get("type") == "Sequence":
            return [k for child in node.get(key, []) for k in kinds(child, key)]
        return [node.get("type")]

    splitters = kinds(spec.get("pre_tokenizer"), "pretokenizers")
    normalizers = kinds(spec.get("normalizer"), "normalizers")
    return (
        bool(set(splitters) & _WHITESPACE_SPLITTERS)
        and set(splitters) <= _PIECEWISE_SPLITTERS
        and set(normalizers) <= _CHARWISE_NORMALIZERS
        and not any(any(c.isspace() for c in t.get("content", "")) for t in spec.get("added_tokens", []))
    )


BatchFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def padded_batches(input_schema: T.StructType, tokenizer_json: str, max_length: int, pad_id: int,
                   stride: int | None = None, text_column: str = "text") -> tuple[BatchFunction, T.StructType]:
    """(a task's batches -> padded rows, their schema): every input column but the text, then
    input_ids / attention_mask (max_length, padded), num_tokens and the accounting columns."""
    keep = [f for f in input_schema.fields if f.name != text_column]
    out_schema = T.StructType(keep + padded_fields(max_length) + _STAT_FIELDS)
    keep_names = [f.name for f in keep]
    encoder = PaddedEncoder(tokenizer_json, max_length, pad_id, stride)

    def encode_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(encoder.encode(batch, keep_names, text_column), names=out_schema.fieldNames())

    return batch_by_batch(encode_batch), out_schema


def encode_padded(
    df: DataFrame, tokenizer_json: str, max_length: int, pad_id: int, stride: int | None = None,
    text_column: str = "text",
) -> DataFrame:
    """Replace text by input_ids / attention_mask (max_length, padded) and num_tokens (PaddedEncoder)."""
    return df.mapInArrow(*padded_batches(df.schema, tokenizer_json, max_length, pad_id, stride, text_column))


def packed_batches(tokenizer_json: str, max_length: int, pad_id: int, eos_id: int, drop_remainder: bool = False,
                   text_column: str = "text") -> tuple[BatchFunction, T.StructType]:
    """(a task's batches of documents -> packed blocks, their schema); see pack_causal_lm."""
    out_schema = T.StructType(
        [T.StructField(contract.ID_COLUMN, T.StringType(), False), T.StructField(SPLIT, T.StringType(), False)]
        + _token_fields(contract.INPUT_IDS)
        + [T.StructField(contract.ATTENTION_MASK, T.ArrayType(T.ByteType(), False), False)]
        + _token_fields(contract.POSITION_IDS, contract.SEGMENT_IDS)
        + [T.StructField(contract.NUM_TOKENS, T.IntegerType(), False)]
        + _STAT_FIELDS
    )

    def pack_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tokenizer = _worker_tokenizer(tokenizer_json, None)
        packer = BlockPacker(max_length, pad_id, eos_id, drop_remainder)
        for batch in batches:
            splits = batch.column(SPLIT).to_pylist()
            ids = batch.column(contract.ID_COLUMN).to_pylist()
            # Neither the texts nor their encodings outlive this call: only flat ids are kept.
            tokens, lengths = flat_ids(tokenizer.encode_batch_fast(batch.column(text_column).to_pylist(),
                                                                   add_special_tokens=False))
            token_starts = np.concatenate([[0], np.cumsum(lengths)])
            start = 0
            for split_name, run in itertools.groupby(splits):
                stop = start + len(list(run))
                if split_name != packer.split:
                    yield from _blocks_batch(packer.finish())
                    packer.split = split_name
                run_tokens = tokens[token_starts[start]:token_starts[stop]]
                yield from _blocks_batch(packer.add(run_tokens, lengths[start:stop], ids[start:stop]))
                start = stop
        yield from _blocks_batch(packer.finish())

    def _blocks_batch(blocks: "PackedBlocks | None") -> Iterator[pa.RecordBatch]:
        if blocks is None or not len(blocks.block_ids):
            return
        n = len(blocks.block_ids)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(blocks.block_ids, type=pa.string()),
                pa.array([blocks.split] * n, type=pa.string()),
                list_array(blocks.input_ids, pa.int32()),
                list_array((blocks.segment_ids > 0).astype(np.int8), pa.int8()),
                list_array(blocks.position_ids, pa.int32()),
                list_array(blocks.segment_ids, pa.int32()),
                pa.array((blocks.segment_ids > 0).sum(axis=1).astype(np.int32)),
                pa.array(blocks.documents),
                pa.array(np.zeros(n, dtype=np.int8)),
                _ragged_list(blocks.doc_lengths),
                pa.array(blocks.dropped),
            ],
            names=out_schema.fieldNames(),
        )

    return pack_batches, out_schema


def pack_causal_lm(
    df: DataFrame, tokenizer_json: str, max_length: int, pad_id: int, eos_id: int,
    drop_remainder: bool = False, text_column: str = "text",
) -> DataFrame:
    """Pack the documents of each (partition, split) stream into blocks of max_length tokens.

    Expects rows sorted by (split, id) within partitions (the order documents are packed in).
    Output columns: id (first document's id @ its position), split, the four token columns,
    num_tokens, and the accounting columns.
    """
    return df.mapInArrow(*packed_batches(tokenizer_json, max_length, pad_id, eos_id, drop_remainder, text_column))


class PackedBlocks:
    """Blocks cut from one split's token stream: arrays of shape (blocks, max_length)."""

    def __init__(self, split, block_ids, input_ids, position_ids, segment_ids, documents, doc_lengths, dropped):
        self.split, self.block_ids = split, block_ids
        self.input_ids, self.position_ids, self.segment_ids = input_ids, position_ids, segment_ids
        self.documents, self.doc_lengths, self.dropped = documents, doc_lengths, dropped


class BlockPacker:
    """Streams documents into fixed blocks; carries the unfinished tail from one batch to the next.

    Per stream token arrays: token id, document number (global within the stream) and position
    within the document. A block's segment ids renumber its documents from 1; positions of a
    document continued from the previous block restart at 0.
    """

    def __init__(self, max_length: int, pad_id: int, eos_id: int, drop_remainder: bool):
        self.max_length, self.pad_id, self.eos_id, self.drop_remainder = max_length, pad_id, eos_id, drop_remainder
        self.split: str | None = None
        self._reset()

    def _reset(self) -> None:
        self.tokens = np.zeros(0, dtype=np.int32)
        self.doc = np.zeros(0, dtype=np.int64)
        self.pos = np.zeros(0, dtype=np.int64)
        self.doc_base = 0  # stream number of doc_ids[0]; finished documents are forgotten
        self.doc_ids: list[str] = []  # ids of the documents numbered doc_base, doc_base + 1, ...
        self.doc_lengths: list[int] = []

    def add(self, tokens: np.ndarray, lengths: np.ndarray, doc_ids: list[str]) -> PackedBlocks:
        with_eos = lengths + 1
        total = int(with_eos.sum())
        stream = np.empty(total, dtype=np.int32)
        ends = np.cumsum(with_eos)
        is_eos = np.zeros(total, dtype=bool)
        is_eos[ends - 1] = True
        stream[is_eos] = self.eos_id
        stream[~is_eos] = tokens
        first_doc = self.doc_base + len(self.doc_ids)
        doc = np.repeat(np.arange(first_doc, first_doc + len(lengths)), with_eos)
        pos = np.arange(total) - np.repeat(ends - with_eos, with_eos)
        self.tokens = np.concatenate([self.tokens, stream])
        self.doc = np.concatenate([self.doc, doc])
        self.pos = np.concatenate([self.pos, pos])
        self.doc_ids.extend(doc_ids)
        self.doc_lengths.extend(with_eos.tolist())
        full = len(self.tokens) // self.max_length
        return self._cut(full * self.max_length)

    def finish(self) -> PackedBlocks | None:
        """The stream's last, partial block: padded, or marked dropped with drop_remainder."""
        if self.split is None:
            return None
        blocks = self._cut(len(self.tokens), pad=True)
        self._reset()
        return blocks

    def _cut(self, num_tokens: int, pad: bool = False) -> PackedBlocks:
        length = self.max_length
        tokens, doc, pos = self.tokens[:num_tokens], self.doc[:num_tokens], self.pos[:num_tokens]
        self.tokens, self.doc, self.pos = self.tokens[num_tokens:], self.doc[num_tokens:], self.pos[num_tokens:]
        real = np.ones(num_tokens, dtype=bool)
        if pad and num_tokens % length:
            fill = length - num_tokens % length
            tokens = np.concatenate([tokens, np.full(fill, self.pad_id, dtype=np.int32)])
            doc = np.concatenate([doc, np.full(fill, doc[-1])])
            pos = np.concatenate([pos, np.zeros(fill, dtype=np.int64)])
            real = np.concatenate([real, np.zeros(fill, dtype=bool)])
        num_blocks = len(tokens) // length
        tokens, doc, pos, real = (a.reshape(num_blocks, length) for a in (tokens, doc, pos, real))
        first_doc, first_pos = doc[:, :1], pos[:, :1]
        segment = np.where(real, doc - first_doc + 1, 0).astype(np.int32)
        position = np.where(real, np.where(doc == first_doc, pos - first_pos, pos), 0).astype(np.int32)
        starts = real & (pos == 0)  # a document starts where its own position is 0
        documents = starts.sum(axis=1).astype(np.int32)
        base = self.doc_base
        doc_lengths = [np.array([self.doc_lengths[d - base] for d in doc[b][starts[b]]], dtype=np.int32)
                       for b in range(num_blocks)]
        block_ids = [f"{self.doc_ids[doc[b, 0] - base]}@{pos[b, 0]}" for b in range(num_blocks)]
        dropped = np.full(num_blocks, pad and self.drop_remainder, dtype=bool)
        # Forget the documents that ended inside the blocks just cut.
        forget = int(self.doc[0]) - base if len(self.doc) else len(self.doc_ids)
        if forget:
            del self.doc_ids[:forget], self.doc_lengths[:forget]
            self.doc_base += forget
        return PackedBlocks(self.split, block_ids, tokens, position, segment, documents, doc_lengths, dropped)
