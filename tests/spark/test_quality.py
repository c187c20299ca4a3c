"""Corpus quality in the job (preprocess.quality): removals counted by rule, sampled into removed/,
capped, done before the tokenizer is trained; the language kept as a column."""
import hashlib
import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dataset_reads import listed_rows
from pipeline import contract, storage
from pipeline.config import build_config
from pipeline.demo import write_jsonl
from spark_job_names import descriptions_since, last_job_id, near_dedup_phases
from spark_jobs.preprocess import build_dataset
from spark_jobs.quality import NEAR_DUPLICATE, RemovalCapError

pytestmark = pytest.mark.spark

# A word no kept document holds: only the removed lorem-ipsum pages repeat it, so a tokenizer trained
# on the removed text too would learn it whole.
PLANTED_WORD = "quixotically"
LOREM = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " + f"{PLANTED_WORD} " * 40).strip() + "."
GERMAN = ("Der Wald liegt still unter dem Schnee, und die Kinder laufen lachend über die Felder zum alten "
          "Bauernhof. Am Abend sitzen alle zusammen am Ofen, erzählen Geschichten und trinken warmen Tee.")


def _corpus(docstring_records):
    records = [r for r in docstring_records[::6] if len(r["text"].split()) >= 12]
    original = max(records, key=lambda r: len(r["text"]))
    words = original["text"].split(" ")
    near_copy = " ".join(words[:-3] + ["altered"] + words[-2:])  # one word changed near the end
    planted = [
        {"text": LOREM, "label": "email"},
        {"text": LOREM + " Second page.", "label": "email"},
        {"text": GERMAN, "label": "logging"},
        {"text": near_copy, "label": original["label"]},
        dict(records[0]),  # an exact copy: de-duplication's, not a quality rule's
        # The read task's judge calls this lorem ipsum c4's, then the label check rejects it: a reject.
        {"text": LOREM + " Unlabelled.", "label": None},
    ]
    return records + planted, original["text"], near_copy


def _config(root, corpus, **quality):
    return build_config({
        "run_dir": str(root / "run"),
        "data": {"input": str(corpus), "label_column": "label"},
        "tokenizer": {"train": {"vocab_size": 800}},
        "preprocess": {
            "max_length": 32, "seed": 3, "num_partitions": 2, "collapse_whitespace": False,
            "quality": {"c4": {"min_num_sentences": None, "filter_curly_bracket": False},
                        "language": {"keep": ["en"], "min_score": 0.3}, "near_dedup": {},
                        "num_removed_samples": 1000, **quality},
        },
    })


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory, docstring_records):
    root = tmp_path_factory.mktemp("quality")
    records, original, near_copy = _corpus(docstring_records)
    corpus = write_jsonl(records, root / "corpus.jsonl")
    config = _config(root, corpus)
    before = last_job_id(spark)
    manifest = build_dataset(spark, config)
    return config, manifest, records, original, near_copy, descriptions_since(spark, before)


def test_every_input_record_is_a_document_a_reject_a_duplicate_or_removed_by_one_rule(built):
    config, manifest, records, _, _, _ = built
    documents = sum(s.documents for s in manifest.splits.values())
    assert manifest.input_records == len(records)
    assert manifest.input_records == (documents + manifest.rejected_records + manifest.duplicates_removed
                                      + sum(manifest.removed_by_rule.values()))
    assert manifest.removed_by_rule["c4.lorem_ipsum"] == 2
    assert manifest.removed_by_rule[NEAR_DUPLICATE] == 1
    assert manifest.rejected_by_reason == {"missing_label": 1}  # counted there only, not also as c4's
    # With a sample bigger than any rule's removals, removed/ holds every one: the counts the writers
    # reported are what they saw.
    rows = listed_rows(config.dataset_dir, manifest.removed_files)
    removed_texts = {row["text"] for row in rows}
    kept = [r["text"] for r in records if r["text"] not in removed_texts]
    assert manifest.duplicates_removed == len(kept) - len(set(kept)) >= 1  # the planted copy, at least
    by_rule = {}
    for row in rows:
        by_rule[row["removed_by"]] = by_rule.get(row["removed_by"], 0) + 1
    assert by_rule == manifest.removed_by_rule


def test_each_planted_document_is_removed_by_its_rule_with_what_explains_it(built):
    config, manifest, _, original, near_copy, _ = built
    rows = {row["text"]: row for row in listed_rows(config.dataset_dir, manifest.removed_files)}
    assert rows[LOREM]["removed_by"] == "c4.lorem_ipsum"
    assert rows[GERMAN]["removed_by"] == "language.other" and rows[GERMAN]["language"] == "de"
    # Of the near-duplicate pair the smaller id stays; the other names it.
    ids = {text: contract_id(text) for text in (original, near_copy)}
    kept, removed = sorted((original, near_copy), key=ids.get)
    assert rows[removed]["removed_by"] == NEAR_DUPLICATE and rows[removed]["duplicate_of"] == ids[kept]
    assert kept not in rows
    assert all(row["source"].endswith("corpus.jsonl") and row["offset"] is not None for row in rows.values())


def test_the_spark_ui_names_each_stage_of_the_job_and_near_dedup_names_its_phases(built):
    phases = list(dict.fromkeys(built[-1]))  # in the order they started, each once
    near_dedup = phases[2:-3]
    assert phases[:2] + phases[-3:] == ["preprocess: read_clean", "preprocess: count_input", "preprocess: quality",
                                        "preprocess: tokenizer", "preprocess: tokenize_write"]
    assert near_dedup == near_dedup_phases(None)  # a small graph: its components in one task


def test_near_dedup_hashes_the_documents_as_the_tokenizing_stage_does_so_their_texts_cross_once(spark, built):
    """mark_near_duplicates joins the records to the removals hashed by content into the job's
    partitions. Persisted and computed, as the job does, that is the partitioning
    documents_by_content asks for: its plan shuffles nothing more, and its documents are those of
    the same records shuffled afresh."""
    from pyspark.testing import assertDataFrameEqual

    from spark_jobs import clean, quality, read
    from spark_jobs.preprocess import documents_by_content, read_clean

    config, manifest = built[:2]
    pre = config.preprocess
    records = read_clean(spark, config, read.resolve_input_files(config.data.input))
    good = read.split_rejects(records)[0].transform(lambda d: clean.with_ids(d, id_from_input=False))

    def documents(near_marked):
        return documents_by_content(quality.split_removed(good, near_marked)[0], config, manifest.label_map,
                                    pre.num_partitions)

    def exchanges_above_the_cache(frame) -> int:
        return frame._jdf.queryExecution().executedPlan().toString().split("InMemoryRelation")[0].count("Exchange")

    near_marked = quality.mark_near_duplicates(good, pre.quality, pre.num_partitions).persist()
    try:
        near_marked.count()
        hashed_once = documents(near_marked)
        assert exchanges_above_the_cache(hashed_once) == 0
        afresh = documents(quality.mark_near_duplicates(good, pre.quality, pre.num_partitions))
        assert exchanges_above_the_cache(afresh) >= 1  # uncached, the plan shows its shuffles
        assertDataFrameEqual(hashed_once, afresh)
        assert hashed_once.count() == sum(s.documents for s in manifest.splits.values())
    finally:
        near_marked.unpersist()


def contract_id(text: str) -> str:
    """A document's id without data.id_column: its content hash's first 32 hex digits (clean.with_ids)."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def test_rows_carry_the_detected_language_and_the_tokenizer_never_saw_removed_text(built):
    from pipeline.tokenizer import load_tokenizer

    config, manifest, _, _, _, _ = built
    table = pa.concat_tables(pq.read_table(uri) for name in contract.SPLITS
                             for uri in manifest.split_files(config.dataset_dir, name))
    assert set(table.column(contract.LANGUAGE).to_pylist()) == {"en"}
    assert pc.min(table.column(contract.LANGUAGE_SCORE)).as_py() >= 0.3
    assert table.schema.field(contract.LANGUAGE_SCORE).type == pa.float32()
    vocab = load_tokenizer(storage.join(config.dataset_dir, "tokenizer")).get_vocab()
    assert PLANTED_WORD not in vocab and "lorem" not in vocab and "Wald" not in vocab


def test_inspect_shows_what_a_rule_removed_and_names_the_rules_there_are(built, capsys):
    from pipeline.cli import main

    config, manifest, _, _, _, _ = built
    assert main(["inspect", config.run_dir, "--removed", "c4.lorem_ipsum", "--rows", "5"]) == 0
    shown = capsys.readouterr().out
    assert "c4.lorem_ipsum: 2 record(s) removed" in shown and shown.count(PLANTED_WORD) == 80
    assert main(["inspect", config.run_dir]) == 0
    assert "removed by quality rules:" in capsys.readouterr().out
    assert main(["inspect", config.run_dir, "--removed", "gopher_quality.short_doc"]) == 2
    assert "rules that did: c4.lorem_ipsum" in capsys.readouterr().err


def test_a_rule_removing_more_than_the_cap_stops_the_job_and_a_sample_still_counts_all(spark, tmp_path,
                                                                                     docstring_records):
    records, _, _ = _corpus(docstring_records)
    corpus = write_jsonl(records, tmp_path / "corpus.jsonl")
    config = _config(tmp_path, corpus, gopher_quality={"min_doc_words": 100_000}, max_removed_fraction=0.5)
    with pytest.raises(RemovalCapError, match=r"^quality rule gopher_quality.short_doc removed \d+ of "
                                              rf"{len(records)} input records \(\d+\.\d%\), over "
                                              r"preprocess.quality.max_removed_fraction 0.5"):
        build_dataset(spark, config)
    assert not storage.exists(storage.join(config.dataset_dir, contract.SUCCESS_FILE))

    sampled = _config(tmp_path, corpus, gopher_quality={"min_doc_words": 30}, num_removed_samples=1,
                      max_removed_fraction=0.9)
    manifest = build_dataset(spark, sampled)
    rows = listed_rows(sampled.dataset_dir, manifest.removed_files)
    per_file_rule = [(entry.path, row["removed_by"]) for entry in manifest.removed_files
                     for row in pq.read_table(storage.join(sampled.dataset_dir, entry.path)).to_pylist()]
    assert len(per_file_rule) == len(set(per_file_rule))  # at most one sample per rule and task
    assert manifest.removed_by_rule["gopher_quality.short_doc"] > len(manifest.removed_files) >= 1
    assert len(rows) < sum(manifest.removed_by_rule.values())


def test_the_language_before_the_filters_keeps_the_same_documents_and_credits_the_language(spark, tmp_path,
                                                                                           docstring_records):
    """language.before_filters changes only which rule a document both would remove counts under:
    German lorem ipsum is c4's in the default order, the language's with the language first."""
    records, _, _ = _corpus(docstring_records)
    german_lorem = GERMAN + " Lorem ipsum dolor sit amet, consectetur adipiscing elit."
    corpus = write_jsonl(records + [{"text": german_lorem, "label": "logging"}], tmp_path / "corpus.jsonl")
    removed = {}
    for first in (False, True):
        language = {"keep": ["en"], "min_score": 0.3, "before_filters": first}
        config = _config(tmp_path / str(first), corpus, language=language)
        manifest = build_dataset(spark, config)
        removed[first] = {row["text"]: row for row in listed_rows(config.dataset_dir, manifest.removed_files)}
        assert sum(manifest.removed_by_rule.values()) == len(removed[first])  # every removal sampled
    assert removed[False].keys() == removed[True].keys()  # the same documents removed, so the same kept
    moved = {text: (removed[False][text]["removed_by"], row["removed_by"]) for text, row in removed[True].items()
             if row["removed_by"] != removed[False][text]["removed_by"]}
    assert moved[german_lorem] == ("c4.lorem_ipsum", "language.other")
    assert all(after.startswith("language.") and not before.startswith("language.") for before, after in moved.values())
    assert removed[True][german_lorem]["language"] == "de"  # identified, as every document is now
    assert removed[False][german_lorem]["language"] is None


def test_a_filter_whose_rules_together_remove_more_than_the_cap_stops_the_job(spark, tmp_path, docstring_records):
    """gopher_repetition at its published thresholds removes about two fifths of these docstrings,
    through three top-n-gram rules that each remove about a fifth: the filter is over a cap of 0.3,
    no rule of it is."""
    records, _, _ = _corpus(docstring_records)
    corpus = write_jsonl(records, tmp_path / "corpus.jsonl")
    config = _config(tmp_path, corpus, c4=None, language=None, near_dedup=None, gopher_repetition={},
                     max_removed_fraction=0.3)
    with pytest.raises(RemovalCapError) as refused:
        build_dataset(spark, config)
    message = str(refused.value)
    found = re.fullmatch(rf"quality filter gopher_repetition removed (\d+) of {len(records)} input records "
                         r"\(\d+\.\d%: (.*)\), over preprocess.quality.max_removed_fraction 0.3; check its "
                         r"thresholds, or raise the cap", message)
    assert found, message
    rules = {rule: int(count) for rule, count in (part.rsplit(" ", 1) for part in found[2].split(", "))}
    assert len(rules) >= 2 and all(rule.startswith("gopher_repetition.") for rule in rules)
    assert sum(rules.values()) == int(found[1]) > 0.3 * len(records)
    assert max(rules.values()) <= 0.3 * len(records)
    assert not storage.exists(storage.join(config.dataset_dir, contract.SUCCESS_FILE))


@pytest.mark.e2e  # spark-submit in its own JVM
def test_local_1_through_spark_submit_removes_the_same_documents_and_builds_the_same_bytes(built, submit_preprocess,
                                                                                       contents_of, tmp_path):
    from pipeline.config import save_config

    config = built[0]
    single = build_config({**config.to_dict(), "run_dir": str(tmp_path / "single")})
    save_config(single, str(tmp_path / "single.yaml"))
    submit_preprocess(tmp_path / "single.yaml", "local[1]")
    first = contents_of(config.dataset_dir)
    assert first["manifest"]["removed_by_rule"] and first["rejects"]  # the removed samples' rows are compared too
    assert contents_of(single.dataset_dir) == first
