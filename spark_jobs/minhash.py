"""MinHash signatures and LSH band keys for near-duplicate detection, in numpy (no Spark here).

A document is lowercased and its whitespace collapsed; its shingles are the word (or character)
n-grams of that text, and a document with fewer than n words (characters) is one shingle of all of
them; an empty one has none. Every hash is computed from the bytes alone, in numpy uint64
arithmetic that wraps the same way on numpy 1.26 and 2.x, and never with Python's `hash()`, so two
processes (any PYTHONHASHSEED), two machines and two numpy versions give the same signature:

- a word's hash is a polynomial over its UTF-8 bytes mod 2^64 (prefix sums over the whole batch,
  no Python loop per word), finished with murmur3's fmix64; a character's token is its code point;
- a shingle's hash is a polynomial over its n tokens, finished with fmix64;
- permutation k is h_k(x) = (a_k * x + b_k) mod 2^64 (a_k odd) and the signature keeps the high 32
  bits of the minimum (multiply-add-shift hashing); a_k, b_k come from blake2b(seed, k), not from a
  numpy random stream, whose values numpy does not promise to keep across versions;
- a band's key folds its rows_per_band values through fmix64 into one signed 64-bit integer (a
  Spark long). Two different bands collide with probability 2^-64: ~0.03 expected false buckets
  per band at 10^9 documents, which verification (min_jaccard) removes.

Which signature implementation: measured by benchmarks/bench_minhash.py in one run on GCIDE's
126,240 dictionary entries (38 MB), word 5-grams, 14 x 8 = 112 permutations, one core, shingling
and the conversion to a numpy matrix included; Jaccard errors over 32,040 pairs of real entries
with 0.2-12 % of their words replaced (true J 0.28-1.0; ideal RMS for 112 independent permutations
0.0350):

    numpy (this module)                  62,900 docs/s   mean |error| 0.027  RMS 0.035
    rensa 0.5.0 RMinHash, shingle strings 39,400 docs/s  mean |error| 0.021  RMS 0.028
    rensa 0.5.0, this module's hashes    42,200 docs/s   mean |error| 0.021  RMS 0.028
    datasketch 2.0.0 MinHash.bulk        16,400 docs/s   mean |error| 0.027  RMS 0.035

(2026-12-06, numpy 1.26; a run just before, with this module as it was before _min_into wrote in
place, permutations by shingles: 48,400 docs/s, rensa's figures the same.) This module's LSH detection
rates follow 1 - (1 - s^8)^14 within sampling error (0.052 vs 0.053 at s = 0.5, 0.572 vs 0.565 at
0.7, 0.913 vs 0.924 at 0.8, 0.999 at 0.9). numpy is the choice: it is 1.5x faster than rensa once
rensa's result is turned into an array (rensa's matrix has no buffer protocol), its estimates are
exactly as good as 112 independent permutations allow (rensa's are ~20 % tighter, its sketch not
being independent permutations: a slightly sharper S-curve, not measured here, that min_jaccard
verification gives anyway), and it adds no dependency: rensa is a compiled package to pin and vet
on every platform and Python, whose hashing (it carries an ALGORITHM_VERSION) is its own to change
between releases, and a signature that changes with a package upgrade silently changes which
documents a rebuild removes.
datasketch is 4x slower (a Python sha1 per shingle).

Where pip compiled spark_jobs/_minhash_c.c, signatures are computed in C a document at a time (its
shingles and running minima in cache, a permutation at a time over the shingles), the same values
as numpy (tests/unit/test_minhash.py): 180,100 docs/s against numpy's 28,100 in the same run
(bench_minhash.py, 2026-12-07, numpy 1.26, the same estimates and detection rates). On GCIDE x4
with every quality rule on, the signatures were most of the near-dedup phase's Python time.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal

import numpy as np

EMPTY = np.uint32(0xFFFFFFFF)  # every value of the signature of a document without shingles

try:
    from spark_jobs import _minhash_c
except ImportError:  # not compiled at install, or imported from spark-submit's --py-files zip
    _minhash_c = None

_U64 = np.uint64
_MASK = (1 << 64) - 1
_WORD_BASE = 0x100000001B3  # odd: invertible mod 2^64 (the FNV prime)
_WORD_BASE_INVERSE = pow(_WORD_BASE, -1, 1 << 64)
_SHINGLE_BASE = 0x9E3779B97F4A7C15  # odd (the golden ratio constant)
_CHUNK_CHARS = 1 << 21  # texts are shingled about this many characters at a time (bounded memory)
_CHUNK_SHINGLES = 1 << 10  # shingles (columns of the permutations x shingles matrix) at once: 0.9 MB, cache-sized


def fmix64(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finalizer: every input bit affects every output bit."""
    x = x ^ (x >> _U64(33))
    x = x * _U64(0xFF51AFD7ED558CCD)
    x = x ^ (x >> _U64(33))
    x = x * _U64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> _U64(33))


_POWERS: dict[int, np.ndarray] = {}  # base -> base^0, base^1, ... mod 2^64, grown on demand per process


def _powers(base: int, count: int) -> np.ndarray:
    """base^0 .. base^(count-1) mod 2^64."""
    powers = _POWERS.get(base)
    if powers is None or len(powers) < count:
        powers = np.full(max(count, 1 << 16, 2 * len(powers) if powers is not None else 0), base, dtype=np.uint64)
        powers[0] = 1
        powers = _POWERS[base] = np.cumprod(powers, dtype=np.uint64)
    return powers[:count]


def normalize(text: str) -> str:
    """What shingles are taken from: lowercased, whitespace runs turned into one space, trimmed."""
    return " ".join(text.lower().split())


def _word_tokens(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(one uint64 hash per word, words per text): the texts are normalized."""
    counts = np.fromiter((t.count(" ") + 1 if t else 0 for t in texts), dtype=np.int64, count=len(texts))
    data = np.frombuffer(" ".join(t for t in texts if t).encode("utf-8"), dtype=np.uint8)
    if not len(data):
        return np.zeros(0, dtype=np.uint64), counts
    spaces = np.flatnonzero(data == 32)
    starts = np.concatenate(([0], spaces + 1))
    ends = np.concatenate((spaces, [len(data)]))
    # prefix[i] = sum_{k<i} byte_k * B^k, so a word's sum_k byte_k * B^(k - start) is
    # (prefix[end] - prefix[start]) * B^-start: the same for a word wherever it stands.
    prefix = np.zeros(len(data) + 1, dtype=np.uint64)
    np.cumsum(data.astype(np.uint64) * _powers(_WORD_BASE, len(data)), dtype=np.uint64, out=prefix[1:])
    inverse = _powers(_WORD_BASE_INVERSE, len(data))
    raw = (prefix[ends] - prefix[starts]) * inverse[starts]
    lengths = (ends - starts).astype(np.uint64)
    return fmix64(raw ^ (lengths * _U64(_SHINGLE_BASE))), counts


def _char_tokens(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(one code point per character, characters per text): the texts are normalized."""
    counts = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    points = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32)
    return points.astype(np.uint64), counts


def _shingles(tokens: np.ndarray, counts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(shingle hashes, shingles per text) from each text's run of tokens: one shingle per start
    position with n tokens after it, and one of all the tokens for a text with fewer than n."""
    num_shingles = np.where(counts > 0, np.maximum(counts - n + 1, 1), 0)
    text_starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    text_ends = text_starts + counts
    owner = np.repeat(np.arange(len(counts)), num_shingles)
    first_shingle = np.concatenate(([0], np.cumsum(num_shingles)[:-1])).astype(np.int64)
    starts = text_starts[owner] + (np.arange(len(owner)) - first_shingle[owner])
    ends = text_ends[owner]
    hashes = np.zeros(len(owner), dtype=np.uint64)
    for j in range(n):
        position = starts + j
        inside = position < ends
        step = hashes * _U64(_SHINGLE_BASE) + tokens[np.where(inside, position, 0)] + _U64(1)
        hashes = np.where(inside, step, hashes)
    return fmix64(hashes ^ np.minimum(ends - starts, n).astype(np.uint64)), num_shingles


def _seeded_uint64(seed: int, label: str, count: int) -> np.ndarray:
    words = [hashlib.blake2b(f"shardline.minhash:{seed}:{label}:{k}".encode(), digest_size=8).digest()
             for k in range(count)]
    return np.frombuffer(b"".join(words), dtype="<u8").astype(np.uint64)


class MinHasher:
    """Shingling, signatures and band keys for one configuration (picklable, cheap to build)."""

    def __init__(self, ngram: Literal["words", "chars"] = "words", ngram_size: int = 5, num_bands: int = 14,
                 rows_per_band: int = 8, seed: int = 1):
        if ngram not in ("words", "chars"):
            raise ValueError(f"ngram must be 'words' or 'chars', got {ngram!r}")
        if min(ngram_size, num_bands, rows_per_band) < 1:
            raise ValueError("ngram_size, num_bands and rows_per_band must be at least 1")
        self.ngram, self.ngram_size, self.seed = ngram, ngram_size, seed
        self.num_bands, self.rows_per_band = num_bands, rows_per_band
        self.num_perm = num_bands * rows_per_band
        self.a = _seeded_uint64(seed, "a", self.num_perm) | _U64(1)  # odd multipliers
        self.b = _seeded_uint64(seed, "b", self.num_perm)

    @classmethod
    def from_config(cls, cfg) -> "MinHasher":
        """From a pipeline.config.NearDedupConfig."""
        return cls(cfg.ngram, cfg.ngram_size, cfg.num_bands, cfg.rows_per_band, cfg.seed)

    def shingle_hashes(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(uint64 hashes of every text's shingles, concatenated; offsets, len(texts) + 1): text i's
        shingles are hashes[offsets[i]:offsets[i + 1]], repeated shingles included."""
        texts = [normalize(t) for t in texts]
        tokens, counts = (_word_tokens if self.ngram == "words" else _char_tokens)(texts)
        hashes, num_shingles = _shingles(tokens, counts, self.ngram_size)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(num_shingles, out=offsets[1:])
        return hashes, offsets

    def shingle_set(self, text: str) -> np.ndarray:
        """The sorted distinct shingle hashes of one text."""
        return np.unique(self.shingle_hashes([text])[0])

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """uint32 (len(texts), num_perm): the MinHash signature of each text; EMPTY throughout for a
        text without shingles (empty or whitespace only).

        In C a document at a time where pip compiled spark_jobs/_minhash_c.c, else numpy_signatures:
        the same values."""
        if _minhash_c is None:
            return self.numpy_signatures(texts)
        out = np.empty((len(texts), self.num_perm), dtype=np.uint32)
        _minhash_c.signatures(list(texts), normalize, self.a, self.b, self.ngram_size, self.ngram == "words", out)
        return out

    def numpy_signatures(self, texts: Sequence[str]) -> np.ndarray:
        """signatures in numpy, vectorised over the batch."""
        # Permutations by texts: each text's minimum is taken along a row, over contiguous values.
        out = np.full((self.num_perm, len(texts)), _MASK, dtype=np.uint64)
        for begin, end in _chunks(texts, _CHUNK_CHARS):
            hashes, offsets = self.shingle_hashes(texts[begin:end])
            self._min_into(out[:, begin:end], hashes, offsets)
        return np.ascontiguousarray((out >> _U64(32)).astype(np.uint32).T)

    def _min_into(self, out: np.ndarray, hashes: np.ndarray, offsets: np.ndarray) -> None:
        """out (num_perm, texts): lowered to each text's minimum of every permutation of its shingles
        (hashes, text i's at offsets[i]:offsets[i + 1]). Written in place into one cache-sized
        buffer, permutations by shingles: signatures took 1.31-1.37x less CPU on GCIDE's entries (one
        process, alternating) than with a fresh (shingles x permutations) product and sum per chunk,
        with the same values."""
        owner = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
        buffer = np.empty((self.num_perm, min(_CHUNK_SHINGLES, len(hashes))), dtype=np.uint64)
        a, b = self.a[:, None], self.b[:, None]
        for begin in range(0, len(hashes), _CHUNK_SHINGLES):
            end = min(begin + _CHUNK_SHINGLES, len(hashes))
            values = np.multiply(a, hashes[None, begin:end], out=buffer[:, :end - begin])
            values += b
            rows = owner[begin:end]
            firsts = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
            docs = rows[firsts]  # distinct: a text's shingles are contiguous
            out[:, docs] = np.minimum(out[:, docs], np.minimum.reduceat(values, firsts, axis=1))

    def band_keys(self, signatures: np.ndarray) -> np.ndarray:
        """int64 (n, num_bands): band i's key hashes signature values [i * r, (i + 1) * r)."""
        bands = signatures.astype(np.uint64).reshape(len(signatures), self.num_bands, self.rows_per_band)
        keys = np.full(bands.shape[:2], self.rows_per_band, dtype=np.uint64)
        for j in range(self.rows_per_band):
            keys = fmix64(keys * _U64(_SHINGLE_BASE) + bands[:, :, j])
        return keys.view(np.int64)


def _chunks(texts: Sequence[str], max_chars: int):
    """(begin, end) runs of texts of about max_chars characters (a longer text alone)."""
    begin, size = 0, 0
    for i, text in enumerate(texts):
        if size and size + len(text) > max_chars:
            yield begin, i
            begin, size = i, 0
        size += len(text)
    if begin < len(texts):
        yield begin, len(texts)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sets of shingle hashes (MinHasher.shingle_set); 0 when both are empty."""
    union = len(np.union1d(a, b))
    return len(np.intersect1d(a, b, assume_unique=True)) / union if union else 0.0


def estimated_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """The share of signature positions where two signatures agree."""
    return float(np.mean(a == b))


def detection_probability(similarity: float, num_bands: int, rows_per_band: int) -> float:
    """The chance that LSH makes a pair at this Jaccard similarity a candidate: 1 - (1 - s^r)^b."""
    return 1.0 - (1.0 - similarity ** rows_per_band) ** num_bands
