"""MinHash signatures: throughput and accuracy of four implementations, and the LSH curve, in one run.

    python benchmarks/bench_minhash.py [--workdir runs/bench] [--limit 0] [--datasketch-docs 5000]

Corpus: GCIDE's dictionary entries (corpora.py; offline once unpacked), or the standard library's
docstrings when it cannot be had. Word 5-grams and 14 x 8 permutations (NearDedupConfig's
defaults), one process, one core.

(1) documents/s, shingling included, for spark_jobs.minhash (in C where built, and in numpy),
    rensa 0.5.0's RMinHash (on the shingles as strings, and on spark_jobs.minhash's shingle
    hashes) and datasketch 2.0.0's MinHash.bulk (on a subset: it is slow). An implementation
    that is not installed is skipped.
(2) Jaccard estimates: pairs made from real entries of >= 100 words by replacing a share of their
    words with words of other entries; each pair's true Jaccard of its 5-gram sets against each
    implementation's estimate (mean absolute error, RMS error, and the RMS that 112 ideal
    permutations give, sqrt(J(1 - J) / 112)).
(3) LSH detection: for s = 0.50 .. 0.95, the share of pairs with a true Jaccard within 0.025 of s
    that share at least one band key (spark_jobs.minhash's band keys), against 1 - (1 - s^r)^b
    (averaged over the same pairs' true Jaccard, and at s itself).
Nothing is asserted; the figures are printed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from spark_jobs.minhash import MinHasher, detection_probability, normalize  # noqa: E402

NGRAM, NUM_BANDS, ROWS, SEED = 5, 14, 8, 1
NUM_PERM = NUM_BANDS * ROWS


def load_texts(workdir: Path) -> tuple[str, list[str]]:
    try:
        import corpora

        return "GCIDE", [text for _, text in corpora.gcide_entries(workdir)]
    except Exception as error:  # noqa: BLE001 - any failure to fetch it: fall back to what is local
        from pipeline.demo import demo_records

        print(f"GCIDE unavailable ({error.__class__.__name__}: {error}); using stdlib docstrings")
        return "stdlib docstrings", [r["text"] for r in demo_records()]


def string_shingles(text: str) -> list[str]:
    """The same shingles as spark_jobs.minhash (normalized words, 5-grams), as strings."""
    words = normalize(text).split()
    if not words:
        return []
    if len(words) < NGRAM:
        return [" ".join(words)]
    return [" ".join(words[i:i + NGRAM]) for i in range(len(words) - NGRAM + 1)]


class Implementation:
    name = ""

    def signatures(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError


class NumpyMinHash(Implementation):
    name = "numpy (spark_jobs.minhash)"

    def __init__(self):
        self.hasher = MinHasher("words", NGRAM, NUM_BANDS, ROWS, SEED)

    def signatures(self, texts):
        return self.hasher.numpy_signatures(texts)


class CMinHash(NumpyMinHash):
    name = "C (spark_jobs.minhash, _minhash_c)"

    def __init__(self):
        from spark_jobs import minhash

        if minhash._minhash_c is None:
            raise ImportError("spark_jobs._minhash_c is not built (make setup compiles it, with a C compiler)")
        super().__init__()

    def signatures(self, texts):
        return self.hasher.signatures(texts)


class RensaStrings(Implementation):
    name = "rensa 0.5.0, shingle strings"

    def __init__(self):
        from rensa import RMinHash

        self.rminhash = RMinHash

    def signatures(self, texts):
        matrix = self.rminhash.digest_matrix_from_token_sets([string_shingles(t) for t in texts], NUM_PERM, SEED)
        return np.array(matrix.to_rows(), dtype=np.uint32).reshape(len(texts), NUM_PERM)  # no buffer protocol


class RensaHashes(RensaStrings):
    name = "rensa 0.5.0, numpy shingle hashes"

    def __init__(self):
        super().__init__()
        self.hasher = MinHasher("words", NGRAM, NUM_BANDS, ROWS, SEED)

    def signatures(self, texts):
        hashes, offsets = self.hasher.shingle_hashes(texts)
        matrix = self.rminhash.digest_matrix_from_flat_token_hashes(hashes, offsets.astype(np.uint64), NUM_PERM, SEED)
        return np.array(matrix.to_rows(), dtype=np.uint32).reshape(len(texts), NUM_PERM)  # no buffer protocol


class Datasketch(Implementation):
    name = "datasketch 2.0.0 MinHash.bulk"

    def __init__(self):
        from datasketch import MinHash

        self.minhash = MinHash

    def signatures(self, texts):
        sets = [[s.encode() for s in string_shingles(t)] for t in texts]
        return np.stack([m.hashvalues.astype(np.uint64) for m in self.minhash.bulk(sets, num_perm=NUM_PERM, seed=SEED)])


def available() -> list[Implementation]:
    found = []
    for kind in (CMinHash, NumpyMinHash, RensaStrings, RensaHashes, Datasketch):
        try:
            found.append(kind())
        except ImportError as error:
            print(f"skipped {kind.name}: {error} (pip install rensa==0.5.0 datasketch==2.0.0)")
    return found


def make_pairs(texts: list[str], rng: np.random.Generator, variants: int = 3) -> list[tuple[str, str]]:
    """(original, variant): a random share (0.2 % .. 12 %) of an entry's words replaced."""
    long_texts = [t.split() for t in texts if len(t.split()) >= 100]
    vocabulary = [w for words in long_texts[:2000] for w in words]
    pairs = []
    for words in long_texts:
        for _ in range(variants):
            share = float(np.exp(rng.uniform(np.log(0.002), np.log(0.12))))
            changed = list(words)
            for position in rng.choice(len(words), size=max(1, round(share * len(words))), replace=False):
                changed[position] = vocabulary[rng.integers(len(vocabulary))]
            pairs.append((" ".join(words), " ".join(changed)))
    return pairs


def true_jaccard(a: str, b: str) -> float:
    x, y = set(string_shingles(a)), set(string_shingles(b))
    return len(x & y) / len(x | y)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="runs/bench")
    parser.add_argument("--limit", type=int, default=0, help="time only the first N documents (0: all)")
    parser.add_argument("--datasketch-docs", type=int, default=5000, help="documents datasketch is timed on")
    args = parser.parse_args(argv)
    corpus, texts = load_texts(Path(args.workdir).resolve())
    if args.limit:
        texts = texts[:args.limit]
    print(f"corpus: {corpus}, {len(texts)} documents, {sum(map(len, texts)) / 2**20:.1f} MB; word {NGRAM}-grams, "
          f"{NUM_BANDS} bands x {ROWS} rows; load average {os.getloadavg()[0]:.2f}")
    implementations = available()

    print("\n(1) throughput, shingling included, one core")
    for impl in implementations:
        sample = texts[:args.datasketch_docs] if isinstance(impl, Datasketch) else texts
        impl.signatures(sample[:200])  # warm-up (imports, cached powers)
        start = time.perf_counter()
        impl.signatures(sample)
        seconds = time.perf_counter() - start
        print(f"  {impl.name:36s} {len(sample):7d} docs {seconds:7.2f} s {len(sample) / seconds:9.0f} docs/s")

    rng = np.random.default_rng(0)
    pairs = make_pairs(texts, rng)
    truth = np.array([true_jaccard(a, b) for a, b in pairs])
    left, right = [a for a, _ in pairs], [b for _, b in pairs]
    ideal = np.sqrt(np.mean(truth * (1 - truth) / NUM_PERM))
    print(f"\n(2) Jaccard estimate vs truth on {len(pairs)} pairs (true J {truth.min():.2f} .. {truth.max():.2f}); "
          f"ideal RMS error with {NUM_PERM} permutations {ideal:.4f}")
    for impl in implementations:
        estimate = np.mean(impl.signatures(left) == impl.signatures(right), axis=1)
        error = estimate - truth
        print(f"  {impl.name:36s} mean |error| {np.mean(np.abs(error)):.4f}  RMS {np.sqrt(np.mean(error ** 2)):.4f}"
              f"  bias {np.mean(error):+.4f}")

    hasher = MinHasher("words", NGRAM, NUM_BANDS, ROWS, SEED)
    keys_left, keys_right = hasher.band_keys(hasher.signatures(left)), hasher.band_keys(hasher.signatures(right))
    detected = np.any(keys_left == keys_right, axis=1)
    print(f"\n(3) LSH detection, {NUM_BANDS} bands x {ROWS} rows (threshold (1/b)^(1/r) = {(1 / NUM_BANDS) ** (1 / ROWS):.3f})")
    print("     s   pairs  detected  theory(pairs' J)  theory(s)")
    for s in np.arange(0.50, 0.951, 0.05):
        inside = np.abs(truth - s) < 0.025
        if not inside.any():
            print(f"  {s:.2f}  {0:6d}  (no pairs)")
            continue
        theory = np.mean([detection_probability(j, NUM_BANDS, ROWS) for j in truth[inside]])
        print(f"  {s:.2f}  {inside.sum():6d}  {detected[inside].mean():8.3f}  {theory:16.3f}  "
              f"{detection_probability(s, NUM_BANDS, ROWS):9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
