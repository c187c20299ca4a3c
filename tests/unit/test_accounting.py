"""The job's own accounting checks (spark_jobs.preprocess.check_accounting, the input counted apart
from the read pass, spark_jobs.input_count.check_input_counts, and the quality removal caps,
spark_jobs.quality.check_removal_caps), without Spark."""
import pytest

pytest.importorskip("pyspark")  # spark_jobs imports it; a GPU machine's training-only environment has none

from pipeline.storage import FileEntry
from spark_jobs.input_count import FileCount, InputCountError, check_input_counts
from spark_jobs.preprocess import AccountingError, check_accounting
from spark_jobs.quality import RemovalCapError, check_removal_caps


def test_counts_that_add_up_pass():
    check_accounting(10, documents=7, rejected=2, duplicates=1, removed_by_rule={}, dataset_dir="s")
    check_accounting(14, documents=7, rejected=2, duplicates=1, removed_by_rule={"c4.lorem_ipsum": 1,
                     "near_dedup.near_duplicate": 3}, dataset_dir="s")


def test_a_record_missing_from_every_term_is_refused_naming_each_term():
    with pytest.raises(AccountingError, match=r"not published: input_records 10 != documents 6 \+ rejected 2 \+ "
                                              r"duplicates_removed 1 \+ removed by quality rules 0 \(\+1 records "
                                              r"unaccounted for\).* in s for"):
        check_accounting(10, documents=6, rejected=2, duplicates=1, removed_by_rule={}, dataset_dir="s")
    with pytest.raises(AccountingError, match=r"removed by quality rules 5 \(-1 records"):
        check_accounting(14, documents=7, rejected=2, duplicates=1, removed_by_rule={"c4.lorem_ipsum": 2,
                         "near_dedup.near_duplicate": 3}, dataset_dir="s")


def _entry(name: str, size: int) -> FileEntry:
    return FileEntry(uri=f"/in/{name}", size=size, mtime_ns=None)


def test_removals_up_to_the_cap_pass_per_rule_and_per_filter():
    check_removal_caps(100, {"c4.lorem_ipsum": 50, "fineweb.short_line_ratio": 30}, 0.5)  # at the cap, not over
    # Each filter under the cap: the cap is a rule's or a filter's share, not all the rules' together.
    check_removal_caps(100, {"gopher_quality.short_doc": 40, "c4.lorem_ipsum": 40, "language.other": 15}, 0.5)
    check_removal_caps(0, {}, 0.5)


def test_one_rule_over_the_cap_is_refused_naming_it():
    with pytest.raises(RemovalCapError, match=r"^quality rule c4.lorem_ipsum removed 51 of 100 input records "
                                              r"\(51.0%\), over preprocess.quality.max_removed_fraction 0.5; "
                                              r"check its threshold, or raise the cap$"):
        check_removal_caps(100, {"c4.too_few_sentences": 49, "c4.lorem_ipsum": 51}, 0.5)


def test_a_filters_rules_together_over_the_cap_are_refused_naming_the_filter_and_each_rule():
    removed = {"gopher_repetition.dup_line_frac": 20, "gopher_repetition.duplicated_5_n_grams": 25,
               "gopher_repetition.top_2_gram": 13, "near_dedup.near_duplicate": 30}
    with pytest.raises(RemovalCapError, match=r"^quality filter gopher_repetition removed 58 of 100 input records "
                                              r"\(58.0%: gopher_repetition.duplicated_5_n_grams 25, "
                                              r"gopher_repetition.dup_line_frac 20, gopher_repetition.top_2_gram "
                                              r"13\), over preprocess.quality.max_removed_fraction 0.5; check its "
                                              r"thresholds, or raise the cap$"):
        check_removal_caps(100, removed, 0.5)
    with pytest.raises(RemovalCapError, match=r"^quality filter language removed 6 of 10 input records"):
        check_removal_caps(10, {"language.other": 3, "language.low_score": 3}, 0.5)


def test_input_counts_that_match_pass():
    files = [_entry("a.jsonl", 100), _entry("b.jsonl.gz", 40)]
    counted = {"file:///in/a.jsonl": FileCount(7, 100), "file:///in/b.jsonl.gz": FileCount(3, 250)}
    check_input_counts(counted, {"file:///in/a.jsonl": (7, 0), "file:///in/b.jsonl.gz": (3, 1)}, files, "jsonl", "s")


def test_a_file_read_short_or_not_counted_whole_is_refused_naming_it():
    files = [_entry("a.jsonl", 100), _entry("b.jsonl", 50)]
    counted = {"file:///in/a.jsonl": FileCount(7, 100), "file:///in/b.jsonl": FileCount(2, 49)}
    with pytest.raises(InputCountError, match=r"not published: file:///in/a.jsonl: 7 records in the file, 8 read \(\+1\); "
                                              r"file:///in/b.jsonl: 2 records in the file, 0 read \(-2\); "
                                              r"file:///in/b.jsonl: 49 of its 50 bytes counted\. .* in s for"):
        check_input_counts(counted, {"file:///in/a.jsonl": (8, 0)}, files, "jsonl", "s")


def test_a_parquet_file_with_a_damaged_row_group_may_hold_fewer_read_records_never_more():
    files = [_entry("a.parquet", 1000)]
    counted = {"file:///in/a.parquet": FileCount(300, -1)}
    check_input_counts(counted, {"file:///in/a.parquet": (101, 1)}, files, "parquet", "s")  # 100 rows, then the reject
    with pytest.raises(InputCountError, match="302 records read, more than the 300 its footer lists"):
        check_input_counts(counted, {"file:///in/a.parquet": (302, 1)}, files, "parquet", "s")
    with pytest.raises(InputCountError, match="300 records in the file, 299 read"):
        check_input_counts(counted, {"file:///in/a.parquet": (299, 0)}, files, "parquet", "s")
