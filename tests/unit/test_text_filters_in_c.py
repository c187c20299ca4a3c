"""spark_jobs/_text_filters_c.c against the Python rules of spark_jobs.text_filters, document by
document, on real and drawn texts under drawn thresholds. (Each rule's own tests, in
test_text_filters.py, run on both.)"""
import random

import pytest

from pipeline.config import C4QualityConfig, FineWebQualityConfig, GopherQualityConfig, GopherRepetitionConfig
from spark_jobs import text_filters
from spark_jobs.text_filters import RULES, _Doc

pytestmark = pytest.mark.unit


# Pieces of drawn texts: every kind of whitespace and line break Python knows, the characters the
# rules look for, in ASCII and beyond it (digits of other scripts, the two characters whose lower
# case is ASCII), and words that are stop words, symbols or neither.
_PIECES = (
    [" ", "  ", "\t", "\n", "\n\n", "\n\n\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f",
     "\x85", "\xa0", "\u2028", "\u2029", "\u3000", "\u200b", "\n \n"]
    + ["#", "##", "...", "....", "......", "…", "• item", "- item", "  - item", "--", "'", '"', "!", "?", ".", "。",
       "؟", "\U00011f43", "{", "}", "[", "]", "[1]", "[12]", "[]", "[١٢]", "[edit]", "[citation needed]", "[x]",
       "[Edit]"]
    + ["Lorem ipsum", "LOREM IPSUM", "lorem  ipsum", "Lorem \u0130psum", "javascript", "JavaScript",
       "javascr\u0130pt", "cookie policy", "Cookie Policy", "uses coo\u212aies", "terms of use", "privacy policy",
       "use cookies"]
    + ["the", "The", "be", "to", "of", "and", "that", "have", "with", "word", "words", "a", "I", "x1", "1.5", "é",
       "ß", "İ", "Ⅻ", "²", "日本語", "λόγος", "🙂", "\x00", "\x07", "It is.", "Yes!", "No?", "Mr. Smith went.",
       "e.g. this", "A sentence here.", "Another one, with words."]
    + ["w" * 40, "long" * 300])


def _drawn_texts(rng, count: int) -> list[str]:
    texts = []
    for _ in range(count):
        pieces = rng.choices(_PIECES, k=rng.randint(0, 60))
        texts.append("".join(piece + rng.choice(("", " ", " ", "\n")) for piece in pieces))
    return texts + ["", " ", "\n", "\n\n", "...", "[1]", "x\r\ny\r\n", "a\n\n\na\n\na"]


def _drawn_config(rng, model, fields: dict):
    """A config of model with each field drawn from its choices (None turns a rule off)."""
    return model(**{name: rng.choice(choices) for name, choices in fields.items()})


def test_rules_in_c_decide_as_those_in_python(docstring_records):
    """Each filter's rules in C against the Python's, document by document, on 400 real docstrings
    (200 of them again with other line breaks), 3,000 drawn texts, and 40 drawn configs a filter,
    so that every rule decides some documents both ways."""
    assert text_filters._text_filters_c is not None, "spark_jobs._text_filters_c is not built (make setup)"
    rng = random.Random(11)
    real = [record["text"] for record in docstring_records[:400]]
    texts = real + [text.replace("\n", rng.choice(("\r\n", "\u2028", "\x1e", "\n\n"))) for text in real[:200]]
    texts += _drawn_texts(rng, 3_000)
    docs = [_Doc(text) for text in texts]
    ratio = [None, 0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.9, 1.0]
    filters = {
        "gopher_quality": (text_filters._gopher_quality, text_filters._gopher_quality_in_c,
                           text_filters.gopher_quality_limits, GopherQualityConfig, {
                               "min_doc_words": [None, 0, 1, 5, 20, 50], "max_doc_words": [None, 1, 10, 40, 200],
                               "min_avg_word_length": [None, 0, 1.5, 3, 4], "max_avg_word_length": [None, 3, 5, 10],
                               "max_symbol_word_ratio": ratio, "max_bullet_lines_ratio": ratio,
                               "max_ellipsis_lines_ratio": ratio, "max_non_alpha_words_ratio": ratio,
                               "min_stop_words": [None, 0, 1, 2, 3, 6]}),
        "c4": (text_filters._c4, text_filters._c4_in_c, text_filters.c4_limits, C4QualityConfig, {
            "filter_no_terminal_punct": [True, False], "min_num_sentences": [None, 0, 1, 2, 5],
            "min_words_per_line": [None, 0, 1, 3, 5], "max_word_length": [None, 1, 5, 30, 1000],
            "filter_lorem_ipsum": [True, False], "filter_javascript": [True, False],
            "filter_curly_bracket": [True, False], "filter_policy": [True, False]}),
        "fineweb": (text_filters._fineweb, text_filters._fineweb_in_c, text_filters.fineweb_limits,
                    FineWebQualityConfig, {
                        "line_punct_thr": ratio, "line_punct_exclude_zero": [True, False], "short_line_thr": ratio,
                        "short_line_length": [1, 5, 30, 100], "char_duplicates_ratio": ratio,
                        "new_line_ratio": [None, 0.0, 0.1, 0.3, 1.0]}),
        "gopher_repetition": (text_filters._repeated_paragraphs_and_lines,
                              lambda limits, doc: text_filters._PARAGRAPH_AND_LINE_RULES[
                                  text_filters._text_filters_c.paragraphs_and_lines(doc.text, limits)],
                              text_filters.paragraph_and_line_limits,
                              lambda **fields: GopherRepetitionConfig(**fields, top_n_grams={}, dup_n_grams={}), {
                                  "dup_line_frac": ratio, "dup_para_frac": ratio, "dup_line_char_frac": ratio,
                                  "dup_para_char_frac": ratio}),
    }
    for name, (in_python, in_c, limits, model, fields) in filters.items():
        decided = set()
        for _ in range(40):
            cfg = _drawn_config(rng, model, fields)
            arguments = limits(cfg)
            for doc in docs:
                expected = in_python(cfg, doc.text if name == "gopher_repetition" else doc)
                got = in_c(arguments, doc)
                assert got == expected, (name, cfg, doc.text[:300])
                decided.add(expected)
        rules = {rule for rule in RULES if rule.startswith(name + ".")}
        if name == "gopher_repetition":
            rules = {rule for rule in rules if "gram" not in rule}
        assert decided == rules | {None}, (name, rules - decided)  # every rule removed some document
