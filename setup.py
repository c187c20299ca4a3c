"""The quality stage's hot loops in C; everything else about the package is in pyproject.toml.

All are optional: where the build has no C compiler, spark_jobs/english_words.py,
spark_jobs/text_filters.py and spark_jobs/minhash.py run their Python (and numpy), and
spark_jobs/lid176.py fasttext, with the same results. They are declared here rather than in
pyproject.toml, where setuptools still calls ext-modules experimental.
"""
from setuptools import Extension, setup

setup(ext_modules=[
    # The word tokenizer for chunks that are all ASCII (spark_jobs.english_words).
    Extension("spark_jobs._english_words_c", ["spark_jobs/_english_words_c.c"], optional=True),
    # The heuristic filters' rules that read the text (spark_jobs.text_filters).
    Extension("spark_jobs._text_filters_c", ["spark_jobs/_text_filters_c.c"], optional=True),
    # gopher_repetition's word n-grams (spark_jobs.text_filters.repeated_word_ngrams).
    Extension("spark_jobs._word_ngrams_c", ["spark_jobs/_word_ngrams_c.c"], optional=True),
    # MinHash signatures for near-dedup (spark_jobs.minhash).
    Extension("spark_jobs._minhash_c", ["spark_jobs/_minhash_c.c"], optional=True),
    # fastText's prediction for lid.176.ftz (spark_jobs.lid176). Its floats must round as fastText's
    # do, one operation at a time: no fused multiply-adds.
    Extension("spark_jobs._lid176_c", ["spark_jobs/_lid176_c.c"], optional=True,
              extra_compile_args=["-ffp-contract=off"]),
])
