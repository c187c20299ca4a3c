import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spark_jobs.minhash import EMPTY, MinHasher, detection_probability, estimated_jaccard, jaccard

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[2]
TEXT = ("Return a new set with elements from the set and all others. The union of two sets holds every "
        "element found in either of them, each once, and leaves both operands unchanged.")


@pytest.fixture(scope="module")
def long_texts(docstring_records):
    texts = [r["text"] for r in docstring_records if len(r["text"].split()) >= 80]
    assert len(texts) >= 100
    return texts[:150]


def test_identical_texts_get_identical_signatures_and_whitespace_and_case_do_not_count():
    hasher = MinHasher()
    signatures = hasher.signatures([TEXT, "x " * 30, TEXT, "  " + TEXT.upper().replace(" ", "\n ")])
    assert signatures.dtype == np.uint32 and signatures.shape == (4, 112)
    assert np.array_equal(signatures[0], signatures[2]) and np.array_equal(signatures[0], signatures[3])
    assert not np.array_equal(signatures[0], signatures[1])


def test_a_signature_does_not_depend_on_the_batch_it_is_computed_in():
    hasher = MinHasher()
    alone = hasher.signatures([TEXT])[0]
    others = ["ünïcödé words and more words here " * 5, "", "short", TEXT + " extra"]
    assert np.array_equal(hasher.signatures(others + [TEXT])[-1], alone)


def test_the_seed_and_the_shingle_kind_change_the_signature():
    first = MinHasher(seed=1).signatures([TEXT])
    assert not np.array_equal(first, MinHasher(seed=2).signatures([TEXT]))
    assert not np.array_equal(first, MinHasher(ngram="chars", ngram_size=5).signatures([TEXT]))


_CHILD = """
import json, sys
from spark_jobs.minhash import MinHasher
texts = json.loads(sys.stdin.read())
hasher = MinHasher(ngram=sys.argv[1], ngram_size=int(sys.argv[2]))
signatures = hasher.signatures(texts)
print(json.dumps([signatures.tolist(), hasher.band_keys(signatures).tolist()]))
"""


@pytest.mark.parametrize("ngram, size", [("words", 5), ("chars", 24)])
def test_signatures_and_band_keys_are_the_same_in_processes_with_different_hash_seeds(ngram, size):
    texts = [TEXT, "Ein Text mit Umlauten: äöü ß, und noch ein paar Wörter dazu.", "two words", ""]
    outputs = []
    for hash_seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO_ROOT)}
        result = subprocess.run([sys.executable, "-c", _CHILD, ngram, str(size)], input=json.dumps(texts),
                                capture_output=True, text=True, env=env, check=True, timeout=60)
        outputs.append(json.loads(result.stdout))
    assert outputs[0] == outputs[1]
    hasher = MinHasher(ngram=ngram, ngram_size=size)
    here = hasher.signatures(texts)
    assert outputs[0] == [here.tolist(), hasher.band_keys(here).tolist()]


def _variant(words: list[str], rng: np.random.Generator, share: float) -> str:
    changed = list(words)
    for position in rng.choice(len(words), size=max(1, round(share * len(words))), replace=False):
        changed[position] = f"w{rng.integers(10**9)}"
    return " ".join(changed)


def test_estimated_jaccard_is_close_to_the_true_one_over_many_pairs(long_texts):
    hasher = MinHasher()
    rng = np.random.default_rng(7)
    pairs = [(t, _variant(t.split(), rng, share)) for t in long_texts for share in (0.01, 0.03, 0.08)]
    truth = np.array([jaccard(hasher.shingle_set(a), hasher.shingle_set(b)) for a, b in pairs])
    left, right = hasher.signatures([a for a, _ in pairs]), hasher.signatures([b for _, b in pairs])
    estimate = np.array([estimated_jaccard(a, b) for a, b in zip(left, right)])
    error = estimate - truth
    assert 0.3 < truth.min() and truth.max() < 1.0  # the pairs span the interesting range
    ideal_rms = np.sqrt(np.mean(truth * (1 - truth) / hasher.num_perm))  # 112 independent permutations
    assert abs(np.mean(error)) < 0.01  # unbiased
    assert np.sqrt(np.mean(error ** 2)) < 1.3 * ideal_rms
    assert np.max(np.abs(error)) < 0.2


def test_texts_without_a_common_shingle_have_an_estimate_of_zero(long_texts):
    hasher = MinHasher()
    signatures = hasher.signatures(long_texts[:60])
    disjoint = [(i, i + 1) for i in range(0, 60, 2)
                if jaccard(hasher.shingle_set(long_texts[i]), hasher.shingle_set(long_texts[i + 1])) == 0]
    assert len(disjoint) >= 10
    assert all(estimated_jaccard(signatures[i], signatures[j]) == 0 for i, j in disjoint)


def test_band_keys_agree_exactly_where_a_band_of_the_signature_agrees():
    hasher = MinHasher(num_bands=4, rows_per_band=3)
    signatures = hasher.signatures([TEXT, TEXT + " and one more sentence at the end of it", "something else"])
    keys = hasher.band_keys(signatures)
    assert keys.dtype == np.int64 and keys.shape == (3, 4)
    for i in range(3):
        for j in range(3):
            for band in range(4):
                rows = slice(band * 3, band * 3 + 3)
                assert (keys[i, band] == keys[j, band]) == np.array_equal(signatures[i, rows], signatures[j, rows])
    # A key depends on the values alone, not on the band: buckets are grouped by (band, key).
    swapped = signatures.copy()
    swapped[0, 0:3], swapped[0, 3:6] = signatures[0, 3:6], signatures[0, 0:3]
    assert hasher.band_keys(swapped)[0, 0] == keys[0, 1]


def test_a_text_shorter_than_n_is_one_shingle_of_all_of_it():
    hasher = MinHasher(ngram_size=5)
    hashes, offsets = hasher.shingle_hashes(["one two three", "one two three four five", "one two three four five six"])
    assert np.diff(offsets).tolist() == [1, 1, 2]
    assert hashes[0] != hashes[1]  # the 3-gram is not the 5-gram
    short = hasher.signatures(["one two three", "One  two three", "one two"])
    assert np.array_equal(short[0], short[1]) and not np.array_equal(short[0], short[2])
    chars = MinHasher(ngram="chars", ngram_size=24)
    assert np.diff(chars.shingle_hashes(["abc", "x" * 24, "x" * 26])[1]).tolist() == [1, 1, 3]


def test_texts_without_shingles_get_the_empty_signature_and_no_shared_estimate():
    hasher = MinHasher()
    signatures = hasher.signatures(["", "   \n\t ", TEXT])
    assert (signatures[:2] == EMPTY).all() and not (signatures[2] == EMPTY).any()
    assert hasher.shingle_set("").size == 0
    assert jaccard(hasher.shingle_set(""), hasher.shingle_set("")) == 0.0
    assert jaccard(hasher.shingle_set(""), hasher.shingle_set(TEXT)) == 0.0
    assert hasher.signatures([]).shape == (0, 112)


def test_true_jaccard_counts_distinct_shingles():
    hasher = MinHasher(ngram_size=1)
    a, b = hasher.shingle_set("a b c d a a"), hasher.shingle_set("c d e f")
    assert jaccard(a, b) == pytest.approx(2 / 6)
    assert jaccard(a, a) == 1.0


def test_detection_probability_is_the_s_curve():
    assert detection_probability(0.0, 14, 8) == 0.0 and detection_probability(1.0, 14, 8) == 1.0
    threshold = (1 / 14) ** (1 / 8)
    assert 0.5 < detection_probability(threshold, 14, 8) < 0.7
    assert detection_probability(0.9, 14, 8) > 0.99 > 0.1 > detection_probability(0.5, 14, 8)


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="ngram"):
        MinHasher(ngram="lines")
    with pytest.raises(ValueError, match="at least 1"):
        MinHasher(num_bands=0)


@pytest.mark.parametrize("implementation", ["c", "numpy"])
def test_signatures_are_pinned_so_a_change_to_the_hashing_is_a_deliberate_one(implementation):
    # A different signature removes different documents on a rebuild: a change must show up here.
    text = "The quick brown fox jumps over the lazy dog."
    words = MinHasher()
    signatures = _implementation(implementation)
    signature = signatures(words, [text])
    assert signature[0, :4].tolist() == [1437274387, 712436778, 206141872, 1274998852]
    assert words.band_keys(signature)[0, :2].tolist() == [1484087356976432142, 3835008716973336137]
    chars = MinHasher(ngram="chars", ngram_size=24, num_bands=20, rows_per_band=13)
    assert signatures(chars, [text])[0, :4].tolist() == [356256975, 11155210, 105155761, 223877970]


def _implementation(name: str):
    """MinHasher.signatures in C (spark_jobs/_minhash_c.c, built by the setup) or in numpy."""
    from spark_jobs import minhash

    if name == "c":
        assert minhash._minhash_c is not None, "spark_jobs._minhash_c is not built (make setup compiles it)"
        return MinHasher.signatures
    return MinHasher.numpy_signatures


@pytest.mark.parametrize("ngram, size, bands, rows", [("words", 5, 14, 8), ("words", 1, 3, 2), ("words", 3, 5, 3),
                                                      ("chars", 24, 20, 13), ("chars", 2, 4, 4)])
def test_signatures_in_c_are_those_of_numpy(ngram, size, bands, rows, docstring_records):
    """The C normalizes ASCII text itself (A-Z lowered, Python's ten ASCII whitespace characters
    split on) and any other text through minhash.normalize: both must give numpy's signature, on
    real text and on texts made of every kind of whitespace, non-ASCII letters whose lower case
    differs in length, and texts shorter than n."""
    import random

    rng = random.Random(11)
    pieces = ["Straße", "ΑΒΓ", "ÀB", "İ", "日本語", "😀", "word", "WORD", "x", "a\x00b", "", " ", "\t\n",
              "\x0b\x0c\r", "\x1c", "\x1d\x1e\x1f", "\x85", "\xa0", "\u2028", "\u3000"]
    texts = [record["text"] for record in docstring_records[:400]]
    texts += [text.upper() for text in texts[:50]] + [TEXT, "", " \t ", "one", "two words"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40))) for _ in range(3000)]
    hasher = MinHasher(ngram, size, bands, rows)
    in_c, in_numpy = _implementation("c")(hasher, texts), _implementation("numpy")(hasher, texts)
    assert in_c.dtype == in_numpy.dtype and in_c.shape == in_numpy.shape == (len(texts), bands * rows)
    differing = [texts[i][:40] for i in np.flatnonzero((in_c != in_numpy).any(axis=1))]
    assert not differing, differing[:5]
    assert (in_c == EMPTY).all(axis=1).sum() >= 2  # the empty and whitespace-only texts
