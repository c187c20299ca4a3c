"""The job's own accounting check (spark_jobs.preprocess.check_accounting), without Spark."""
import pytest

pytest.importorskip("pyspark")  # spark_jobs imports it; the Spark-free test environment has none

from spark_jobs.preprocess import AccountingError, check_accounting


def test_counts_that_add_up_pass():
    check_accounting(10, documents=7, rejected=2, duplicates=1, dataset_dir="s")


def test_a_record_missing_from_every_term_is_refused_naming_each_term():
    with pytest.raises(AccountingError, match=r"not published: input_records 10 != documents 6 \+ rejected 2 \+ "
                                              r"duplicates_removed 1 \(\+1 records unaccounted for\).* in s for"):
        check_accounting(10, documents=6, rejected=2, duplicates=1, dataset_dir="s")
