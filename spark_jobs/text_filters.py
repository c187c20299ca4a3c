r"""Heuristic corpus quality filters: Gopher quality, Gopher repetition, C4 and FineWeb, with
datatrove 0.10.1's rules and published thresholds (pipeline.config's *QualityConfig models).

`TextFilters(quality)(texts)` names, per document, the first rule it fails (`"<filter>.<rule>"`,
one of RULES) or None to keep it. Filters run in the order gopher_quality, gopher_repetition, c4,
fineweb; inside a filter the rules run in datatrove's order. No download: it runs in the Spark tasks
that read the corpus. The rules that read the text are in C where pip compiled
spark_jobs/_text_filters_c.c (gopher_quality, c4, fineweb but list_ratio, gopher_repetition's
paragraphs and lines), else in the Python below, which decides the same (tests/unit/
test_text_filters_in_c.py compares both): on GCIDE entries, one core, 2026-12-07, gopher_quality 4.6 us a
document against 20.8, gopher_repetition 7.8 against 16.5, c4 3.5 against 13.6, fineweb 2.1 against
11.6, all four with the words 42.0 (90.0 in a run of the code before, minutes earlier).

Words are spaCy's English tokens (spark_jobs.english_words), as datatrove 0.10.1 counts them: on
the parity corpus of tests/current_stack/test_filter_parity.py all four filters decide as datatrove
does on 100 % of the documents.

Cost, same corpus (average 1,570 characters, 309 words), one core, warm, best of 3 passes
(2026-12-06, two runs each, alternating with the code before b14be05, whose figures are in
brackets): tokenizing 40-41 us a document (chunks are cached, as spaCy caches them); with the
words given, gopher_quality 50 us (54-56), gopher_repetition 110-127 us (109-111), c4 29-30 us,
fineweb 21-22 us; all four in order, words included, 104-108 us (112-113) (a document leaves at
the first rule it fails). datatrove with spaCy took 9.5 / 10.3 / 3.1 / 3.3 ms a document, in an
earlier run.

Earlier, on 40,000 GCIDE entries (320 characters, a dictionary's markup: 45 % of the chunks need
splitting) all four took 160 us a document, the words 50 us, with english_words._simple_split
taking "word," "[word" and the like past the regexes and gopher_repetition counting no longer
n-grams once shorter ones are all distinct (196 and 73 us without either); since then the n-gram
rules look only where shorter n-grams repeat, numbered for a run of documents at once
(repeated_word_ngrams, now in C where built), and `benchmarks/bench_quality.py --parts filters`
gives each filter's cost.

Deliberate differences from datatrove: a threshold of 0 is a threshold (datatrove's truthiness test
turns it off; here only null does); empty texts and ratios over zero words do not raise; repeated
word n-grams are compared as tuples of words, where datatrove compares them joined without a
separator (so "ab c" and "a bc" only collide there).
"""
from __future__ import annotations

import math
import re
from itertools import chain, filterfalse
from typing import TYPE_CHECKING

import numpy as np

from spark_jobs.english_words import count_sentences, spacy_english_words

if TYPE_CHECKING:  # pipeline.config imports pydantic and yaml; the executors only need the values
    from pipeline.config import QualityConfig

RULES = (
    "gopher_quality.short_doc",
    "gopher_quality.long_doc",
    "gopher_quality.below_avg_word_length",
    "gopher_quality.above_avg_word_length",
    "gopher_quality.too_many_hashes",
    "gopher_quality.too_many_ellipsis",
    "gopher_quality.too_many_bullets",
    "gopher_quality.too_many_end_ellipsis",
    "gopher_quality.below_alpha_threshold",
    "gopher_quality.few_stop_words",
    "gopher_repetition.empty",
    "gopher_repetition.dup_para_frac",
    "gopher_repetition.dup_para_char_frac",
    "gopher_repetition.dup_line_frac",
    "gopher_repetition.dup_line_char_frac",
    *(f"gopher_repetition.top_{n}_gram" for n in range(1, 11)),
    *(f"gopher_repetition.duplicated_{n}_n_grams" for n in range(1, 21)),
    "c4.lorem_ipsum",
    "c4.curly_bracket",
    "c4.too_few_sentences",
    "fineweb.empty",
    "fineweb.line_punct_ratio",
    "fineweb.short_line_ratio",
    "fineweb.char_dup_ratio",
    "fineweb.list_ratio",
)
"""Every reason TextFilters can name (the manifest counts removals by these). The n-gram rules
exist for each n the config may set: top_{1..10}_gram, duplicated_{1..20}_n_grams."""

# --- Character sets, as datatrove.utils.text defines them -------------------------------------------

# datatrove's PUNCTUATION: ASCII and CJK punctuation plus the C0/C1 control characters but \t and \n.
_PUNCTUATION = "!/—”:％１〈&(、━\\【#%「」，】；+^]~“《„';’{|∶´[=-`*．（–？！：$～«〉,><》)?）。…@_.\"}►»" + "".join(
    chr(x) for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for x in range(a, b))
# Sentence-terminal characters (Unicode's Sentence_Terminal property), as datatrove lists them.
TERMINAL_PUNCTUATION = tuple(
    "!.?։؝؞؟۔܀܁܂߹࠷࠹࠽࠾।॥၊။።፧፨᙮᜵᜶។៕៖៙៚᠃᠉᥄᥅᪨᪩᪪᪫᭚᭛᭞᭟\u1b7d\u1b7e᰻᰼᱾᱿‼‽⁇⁈⁉⸮⸼\u2e53\u2e54꓿꘎꘏꛳꛷꡶꡷꣎꣏꤯꧈꧉꩝꩞꩟꫰꫱꯫"
    "﹒﹖﹗！．？｡。𐩖𐩗𐽕𐽖𐽗𐽘𐽙\U00010f86\U00010f87\U00010f88\U00010f89𑁇𑁈𑂾𑂿𑃀𑃁𑅁𑅂𑅃𑇅𑇆𑇍𑇞𑇟𑈸𑈹𑈻𑈼𑊩𑑋𑑌"
    "𑗂𑗃𑗉𑗊𑗋𑗌𑗍𑗎𑗏𑗐𑗑𑗒𑗓𑗔𑗕𑗖𑗗𑙁𑙂𑜼𑜽𑜾𑥄𑥆𑩂𑩃𑪛𑪜𑱁𑱂𑻷𑻸\U00011f43\U00011f44𖩮𖩯𖫵𖬷𖬸𖭄𖺘𛲟𝪈")
PUNCTUATION_SET = frozenset(_PUNCTUATION) | frozenset(TERMINAL_PUNCTUATION)

STOP_WORDS = frozenset(("the", "be", "to", "of", "and", "that", "have", "with"))
_C4_END_PUNCTUATION = (".", "?", "!", '"', "'")
_C4_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_C4_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")
_C4_POLICY_SEARCH = re.compile("|".join(map(re.escape, _C4_POLICY))).search  # any of them, in one scan
_PARAGRAPH_BREAK = re.compile(r"\n{2,}")
_LINE_BREAKS = re.compile("\n+")


# --- The filters ------------------------------------------------------------------------------------

class _Doc:
    """One text and its word tokens, computed once for the filters that need them."""

    __slots__ = ("text", "_words")

    def __init__(self, text: str):
        self.text, self._words = text, None

    @property
    def words(self) -> list[str]:
        if self._words is None:
            self._words = spacy_english_words(self.text)
        return self._words


def _duplicates(items: list[str]) -> tuple[int, int]:
    """(elements equal to an earlier one, their characters): datatrove's find_duplicates. Every
    element but the first of each distinct one is a duplicate, so both are what the distinct ones
    leave: counted in C, no loop in Python."""
    distinct = set(items)
    return len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))


_ASCII_WORD_WITH_A_LETTER = re.compile("[A-Za-z][^ ]*")  # from a word's first letter to its end


def _words_with_a_letter(words: list[str], others: list[str] | None = None) -> int:
    """How many words have an alphabetic character (others: those of words that are not all
    letters, when the caller has them). Words hold no whitespace (they are pieces of str.split's
    chunks), so the ASCII ones that are not all letters (markup, numbers, "--") are counted by one
    regex scan over them joined by spaces: a third of the time of testing them one by one on
    GCIDE's entries, 44 % of whose words are not all letters."""
    if others is None:
        others = list(filterfalse(str.isalpha, words))
    joined = " ".join(others)
    if joined.isascii():
        with_letter = len(_ASCII_WORD_WITH_A_LETTER.findall(joined))
    else:
        with_letter = sum(1 for w in others if any(c.isalpha() for c in w))
    return len(words) - len(others) + with_letter


def _gopher_quality(cfg, doc: _Doc) -> str | None:
    text, words = doc.text, doc.words
    n_words = len(words)
    # A word of letters is no symbol (no letter is in PUNCTUATION_SET): only the others are tested.
    others = list(filterfalse(str.isalpha, words))
    symbols = [w for w in others if PUNCTUATION_SET.issuperset(w)]
    n_non_symbol = n_words - len(symbols)
    if cfg.min_doc_words is not None and n_non_symbol < cfg.min_doc_words:
        return "gopher_quality.short_doc"
    if cfg.max_doc_words is not None and n_non_symbol > cfg.max_doc_words:
        return "gopher_quality.long_doc"
    if n_non_symbol:
        avg = (sum(map(len, words)) - sum(map(len, symbols))) / n_non_symbol
        if cfg.min_avg_word_length is not None and avg < cfg.min_avg_word_length:
            return "gopher_quality.below_avg_word_length"
        if cfg.max_avg_word_length is not None and avg > cfg.max_avg_word_length:
            return "gopher_quality.above_avg_word_length"
    if cfg.max_symbol_word_ratio is not None and n_words:
        if text.count("#") / n_words > cfg.max_symbol_word_ratio:
            return "gopher_quality.too_many_hashes"
        if (text.count("...") + text.count("…")) / n_words > cfg.max_symbol_word_ratio:
            return "gopher_quality.too_many_ellipsis"
    lines = text.splitlines()
    if lines:
        if cfg.max_bullet_lines_ratio is not None:
            bullets = sum(1 for s in lines if s.lstrip().startswith(("•", "-")))
            if bullets / len(lines) > cfg.max_bullet_lines_ratio:
                return "gopher_quality.too_many_bullets"
        if cfg.max_ellipsis_lines_ratio is not None:
            ellipses = sum(1 for s in lines if s.rstrip().endswith(("...", "…")))
            if ellipses / len(lines) > cfg.max_ellipsis_lines_ratio:
                return "gopher_quality.too_many_end_ellipsis"
    if cfg.max_non_alpha_words_ratio is not None and n_words:
        alpha = _words_with_a_letter(words, others)
        if alpha / n_words < cfg.max_non_alpha_words_ratio:
            return "gopher_quality.below_alpha_threshold"
    if cfg.min_stop_words is not None and len(STOP_WORDS.intersection(words)) < cfg.min_stop_words:
        return "gopher_quality.few_stop_words"
    return None


def _gopher_repetition(cfg, docs: list[_Doc]) -> list[str | None]:
    """The first gopher_repetition rule each document fails: its paragraph and line rules one
    document at a time, then the word n-gram rules of those that pass, all at once."""
    if _text_filters_c is not None:
        limits = paragraph_and_line_limits(cfg)
        reasons = [_PARAGRAPH_AND_LINE_RULES[_text_filters_c.paragraphs_and_lines(doc.text, limits)] for doc in docs]
    else:
        reasons = [_repeated_paragraphs_and_lines(cfg, doc.text) for doc in docs]
    pending = [i for i, reason in enumerate(reasons) if reason is None]
    if not pending or not (cfg.top_n_grams or cfg.dup_n_grams):
        return reasons
    top, duplicated = repeated_word_ngrams([docs[i].words for i in pending], cfg.top_n_grams, cfg.dup_n_grams)
    # Each rule's verdict for every pending document at once (the same float64 division and
    # comparison as one at a time), then the first rule each fails, in the rules' order.
    sizes = np.fromiter((len(docs[i].text) for i in pending), np.int64, len(pending))
    # top[n] is -1 without an n-gram, never above a fraction, which the config keeps >= 0.
    rules = [(f"gopher_repetition.top_{n}_gram", top[n] / sizes > frac)
             for n, frac in sorted(cfg.top_n_grams.items())]
    rules += [(f"gopher_repetition.duplicated_{n}_n_grams", duplicated[n] / sizes > frac)
              for n, frac in sorted(cfg.dup_n_grams.items())]
    fails = np.vstack([failed for _, failed in rules])
    first = fails.argmax(axis=0)
    for j in np.flatnonzero(fails.any(axis=0)).tolist():
        reasons[pending[j]] = rules[first[j]][0]
    return reasons


def _repeated_paragraphs_and_lines(cfg, text: str) -> str | None:
    if not text:
        return "gopher_repetition.empty"
    size = len(text)
    # Without a blank line the regexes split nothing str.split("\n") would not: skipped when so.
    blank_line = "\n\n" in text
    paragraphs = _PARAGRAPH_BREAK.split(text.strip()) if blank_line else [text.strip()]
    dups, chars = _duplicates(paragraphs)
    if cfg.dup_para_frac is not None and dups / len(paragraphs) > cfg.dup_para_frac:
        return "gopher_repetition.dup_para_frac"
    if cfg.dup_para_char_frac is not None and chars / size > cfg.dup_para_char_frac:
        return "gopher_repetition.dup_para_char_frac"
    lines = _LINE_BREAKS.split(text) if blank_line else text.split("\n")
    dups, chars = _duplicates(lines)
    if cfg.dup_line_frac is not None and dups / len(lines) > cfg.dup_line_frac:
        return "gopher_repetition.dup_line_frac"
    if cfg.dup_line_char_frac is not None and chars / size > cfg.dup_line_char_frac:
        return "gopher_repetition.dup_line_char_frac"
    return None


try:
    from spark_jobs import _word_ngrams_c
except ImportError:  # not compiled at install, or imported from spark-submit's --py-files zip
    _word_ngrams_c = None


def repeated_word_ngrams(word_lists: list[list[str]], top_ns,
                         dup_ns) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """gopher_repetition's word n-gram figures for a batch of documents, for each n of top_ns and
    dup_ns (one array each, a value per document):
    - top[n]: (the characters of the most common n-gram's words + n - 1) times its occurrences, as
      datatrove measures it: the n-gram seen first among ties, the first n-gram once when none
      repeats; -1 when the document has fewer than n words;
    - duplicated[n]: the characters of n-grams that repeat an earlier one, skipping past each
      repeat (datatrove's find_all_duplicate).

    Counted in C a document at a time where pip compiled spark_jobs/_word_ngrams_c.c (7-10 us a
    GCIDE entry against 25-34 us for numpy, one core, 2026-12-07), else by numpy_word_ngrams: the
    same numbers."""
    if _word_ngrams_c is None:
        return numpy_word_ngrams(word_lists, top_ns, dup_ns)
    top_ns, dup_ns = tuple(top_ns), tuple(dup_ns)
    top, duplicated = _word_ngrams_c.figures(list(word_lists), top_ns, dup_ns)
    return ({n: np.array(values, np.int64) for n, values in zip(top_ns, top)},
            {n: np.array(values, np.int64) for n, values in zip(dup_ns, duplicated)})


def numpy_word_ngrams(word_lists: list[list[str]], top_ns,
                      dup_ns) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """repeated_word_ngrams in numpy, vectorised over the whole batch: numbered in a Python loop per
    document, gopher_repetition took 45.5 us a GCIDE entry and 552 us for entries joined 12 at a
    time; 27.0 and 334 us so (one core, bench_quality.py --parts filters, the same decisions on
    every document). An n-gram's number is a code of its (n-1)-gram's and its last word's, both scoped to the document;
    pandas.factorize hashes them and codes in order of first appearance, so the smallest code among
    ties is the n-gram seen first. A longer n-gram at p can repeat only where the (n-1)-grams at p
    and p + 1 both do, so each n after 2 looks at those positions only (on GCIDE entries 18 % of the
    positions hold a repeated 2-gram, 4.8 % a repeated 4-gram)."""
    import pandas as pd  # here, not at the top: the driver imports this module, and pandas takes 0.3 s

    lengths = np.fromiter(map(len, word_lists), np.int64, len(word_lists))
    words = list(chain.from_iterable(word_lists))
    starts = np.cumsum(lengths) - lengths
    document = np.repeat(np.arange(len(word_lists), dtype=np.int64), lengths)  # each position's document
    end = (starts + lengths)[document]  # each position's document end
    chars_before = np.zeros(len(words) + 1, np.int64)  # at p: the characters of the words before p
    np.cumsum(np.fromiter(map(len, words), np.int64, len(words)), out=chars_before[1:])
    word_codes, distinct = pd.factorize(np.array(words, dtype=object))
    word_keys = pd.factorize(document * max(len(distinct), 1) + word_codes)[0]  # (document, word)
    radix = len(words) + 1  # more than any code
    top = {n: np.full(len(word_lists), -1, np.int64) for n in top_ns}
    duplicated = {n: np.zeros(len(word_lists), np.int64) for n in dup_ns}
    everywhere = np.arange(len(words), dtype=np.int64)
    codes_at = np.zeros(len(words), np.int64)  # the (n-1)-gram's code at each position looked at
    repeats_at = np.zeros(len(words) + 1, bool)  # whether the (n-1)-gram at a position repeats
    repeated = everywhere
    for n in range(1, max((*top_ns, *dup_ns), default=0) + 1):
        at = everywhere if n <= 2 else repeated[repeats_at[repeated + 1]]
        at = at[at + n <= end[at]]
        codes = word_keys if n == 1 else pd.factorize(codes_at[at] * radix + word_keys[at + n - 1])[0]
        counts = np.bincount(codes, minlength=1)
        twice = counts[codes] > 1
        repeats_at[repeated] = False
        repeated, repeated_codes = at[twice], codes[twice]
        codes_at[at] = codes
        repeats_at[repeated] = True
        n_chars = chars_before[n:] - chars_before[:max(len(words) + 1 - n, 0)]  # at p: the n words' characters
        if n in top:
            with_n = lengths >= n
            top[n][with_n] = n_chars[starts[with_n]] + n - 1  # the first n-gram, once
            # Each repeated n-gram where it first occurs: codes are in order of first appearance.
            first = np.ones(len(repeated_codes), bool)
            first[1:] = repeated_codes[1:] > np.maximum.accumulate(repeated_codes)[:-1]
            where, code = repeated[first], repeated_codes[first]
            occurrences, owner = counts[code], document[where]
            order = np.lexsort((code, -occurrences, owner))  # per document: most occurrences, then first seen
            leading = np.ones(len(order), bool)
            leading[1:] = owner[order][1:] != owner[order][:-1]
            best = order[leading]
            top[n][owner[best]] = (n_chars[where[best]] + n - 1) * occurrences[best]
        if n in duplicated:
            _add_skipping_repeats(duplicated[n], repeated.tolist(), repeated_codes.tolist(),
                                  document[repeated].tolist(), n_chars[repeated].tolist(), n)
    return top, duplicated


def _add_skipping_repeats(totals: np.ndarray, positions: list[int], codes: list[int], owners: list[int],
                          chars: list[int], n: int) -> None:
    """datatrove's find_all_duplicate over the positions of n-grams that occur more than once, in
    order (codes scoped to their documents): at any other position its walk records an n-gram never
    seen again and moves on by one. A repeat adds its characters to its document's total and the walk
    resumes after it; a document's n-grams end where it does, so one walk serves the batch."""
    seen: set[int] = set()
    resume = 0
    for position, code, owner, length in zip(positions, codes, owners, chars):
        if position < resume:
            continue  # inside the n-gram just counted as a repeat
        if code in seen:
            totals[owner] += length
            resume = position + n
        else:
            seen.add(code)
            resume = position + 1


def _c4(cfg, doc: _Doc) -> str | None:
    sentences = 0
    for line in doc.text.splitlines():
        line = line.strip()
        words = line.split()
        if cfg.max_word_length is not None and len(line) > cfg.max_word_length and max(map(len, words)) > cfg.max_word_length:
            continue
        if "[" in line:  # every citation mark starts with one
            line = _C4_CITATION.sub("", line)
        if cfg.filter_no_terminal_punct and (not line.endswith(_C4_END_PUNCTUATION) or line.endswith("...")):
            continue
        if cfg.min_words_per_line is not None and len(words) < cfg.min_words_per_line:
            continue
        lower = line.lower()
        if cfg.filter_lorem_ipsum and "lorem ipsum" in lower:
            return "c4.lorem_ipsum"
        if cfg.filter_javascript and "javascript" in lower:
            continue
        if cfg.filter_curly_bracket and "{" in line:
            return "c4.curly_bracket"
        if cfg.filter_policy and _C4_POLICY_SEARCH(lower):
            continue
        if cfg.min_num_sentences is not None and sentences < cfg.min_num_sentences:
            sentences += count_sentences(line)  # only counted up to the minimum: it decides nothing more
    if cfg.min_num_sentences is not None and sentences < cfg.min_num_sentences:
        return "c4.too_few_sentences"
    return None


def _fineweb(cfg, doc: _Doc) -> str | None:
    text = doc.text
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return "fineweb.empty"
    if cfg.line_punct_thr is not None:
        ratio = sum(1 for line in lines if line.endswith(TERMINAL_PUNCTUATION)) / len(lines)
        if ratio < cfg.line_punct_thr and not (ratio == 0 and cfg.line_punct_exclude_zero):
            return "fineweb.line_punct_ratio"
    if cfg.short_line_thr is not None:
        ratio = sum(1 for line in lines if len(line) <= cfg.short_line_length) / len(lines)
        if ratio > cfg.short_line_thr:
            return "fineweb.short_line_ratio"
    if cfg.char_duplicates_ratio is not None:
        if _duplicates(lines)[1] / (len(text) - text.count("\n")) > cfg.char_duplicates_ratio:
            return "fineweb.char_dup_ratio"
    return _list_ratio(cfg.new_line_ratio, doc)


def _list_ratio(new_line_ratio: float | None, doc: _Doc) -> str | None:
    if new_line_ratio is not None:
        n_words = len(doc.words)
        if n_words and doc.text.count("\n") / n_words > new_line_ratio:
            return "fineweb.list_ratio"
    return None


# --- The same rules in C, where pip compiled spark_jobs/_text_filters_c.c ----------------------------
# Each C function returns the index of the first rule a document fails among its filter's rules (in
# RULES' order), or -1 to keep it: the last entry of these tuples.
_GOPHER_QUALITY_RULES = (*(rule for rule in RULES if rule.startswith("gopher_quality.")), None)
_PARAGRAPH_AND_LINE_RULES = ("gopher_repetition.empty", "gopher_repetition.dup_para_frac",
                             "gopher_repetition.dup_para_char_frac", "gopher_repetition.dup_line_frac",
                             "gopher_repetition.dup_line_char_frac", None)
_C4_RULES = ("c4.lorem_ipsum", "c4.curly_bracket", "c4.too_few_sentences", None)
_FINEWEB_LINE_RULES = ("fineweb.empty", "fineweb.line_punct_ratio", "fineweb.short_line_ratio",
                       "fineweb.char_dup_ratio", None)

try:
    from spark_jobs import _text_filters_c
except ImportError:  # not compiled at install, or imported from spark-submit's --py-files zip
    _text_filters_c = None
else:
    _text_filters_c.setup("".join(sorted(PUNCTUATION_SET)), "".join(TERMINAL_PUNCTUATION), tuple(sorted(STOP_WORDS)),
                          count_sentences)


def _limits(*values) -> tuple[float, ...]:
    """A config's thresholds as the C reads them: floats, NaN for a rule that is off (null), a flag
    1.0 or 0.0."""
    return tuple(math.nan if value is None else float(value) for value in values)


def gopher_quality_limits(cfg) -> tuple[float, ...]:
    return _limits(cfg.min_doc_words, cfg.max_doc_words, cfg.min_avg_word_length, cfg.max_avg_word_length,
                   cfg.max_symbol_word_ratio, cfg.max_bullet_lines_ratio, cfg.max_ellipsis_lines_ratio,
                   cfg.max_non_alpha_words_ratio, cfg.min_stop_words)


def paragraph_and_line_limits(cfg) -> tuple[float, ...]:
    return _limits(cfg.dup_para_frac, cfg.dup_para_char_frac, cfg.dup_line_frac, cfg.dup_line_char_frac)


def c4_limits(cfg) -> tuple[float, ...]:
    return _limits(cfg.filter_no_terminal_punct, cfg.min_num_sentences, cfg.min_words_per_line, cfg.max_word_length,
                   cfg.filter_lorem_ipsum, cfg.filter_javascript, cfg.filter_curly_bracket, cfg.filter_policy)


def fineweb_limits(cfg) -> tuple[tuple[float, ...], float | None]:
    """The line rules' thresholds for the C, and list_ratio's, which needs the words (Python's)."""
    return (_limits(cfg.line_punct_thr, cfg.line_punct_exclude_zero, cfg.short_line_thr, cfg.short_line_length,
                    cfg.char_duplicates_ratio), cfg.new_line_ratio)


def _gopher_quality_in_c(limits, doc: _Doc) -> str | None:
    return _GOPHER_QUALITY_RULES[_text_filters_c.gopher_quality(doc.text, doc.words, limits)]


def _c4_in_c(limits, doc: _Doc) -> str | None:
    return _C4_RULES[_text_filters_c.c4(doc.text, limits)]


def _fineweb_in_c(limits, doc: _Doc) -> str | None:
    line_limits, new_line_ratio = limits
    return _FINEWEB_LINE_RULES[_text_filters_c.fineweb(doc.text, line_limits)] or _list_ratio(new_line_ratio, doc)


class TextFilters:
    """The configured filters of a QualityConfig, in a fixed order; the first failing rule is the
    removal reason. Picklable (plain config values), so a Spark task can carry it."""

    def __init__(self, quality: "QualityConfig"):
        repetition = quality.gopher_repetition
        if repetition is not None:
            configured = ({f"top_{n}_gram" for n in repetition.top_n_grams}
                          | {f"duplicated_{n}_n_grams" for n in repetition.dup_n_grams})
            unnamed = sorted(configured - {rule.split(".", 1)[1] for rule in RULES})
            if unnamed:
                raise ValueError(f"preprocess.quality.gopher_repetition: no rule {', '.join(unnamed)}; "
                                 "top_n_grams takes n from 1 to 10, dup_n_grams from 1 to 20")
        self._filters = [(check, getattr(quality, name)) for name, check in FILTERS.items()
                         if getattr(quality, name) is not None]

    @property
    def active(self) -> bool:
        return bool(self._filters)

    def removal_reason(self, text: str) -> str | None:
        return self([text])[0]

    def __call__(self, texts: list) -> list:
        """The first rule each text fails, or None to keep it (and for a null text)."""
        return [reason for run in _runs(texts) for reason in self._judge(run)]

    def _judge(self, texts: list) -> list:
        """Filter by filter over the texts no earlier filter removed: gopher_repetition numbers
        the n-grams of many documents at once."""
        reasons = [None] * len(texts)
        docs = [None if text is None else _Doc(text) for text in texts]
        undecided = [i for i, doc in enumerate(docs) if doc is not None]
        for check, cfg in self._filters:
            if not undecided:
                break
            verdicts = check(cfg, [docs[i] for i in undecided])
            for i, verdict in zip(undecided, verdicts):
                reasons[i] = verdict
            undecided = [i for i, verdict in zip(undecided, verdicts) if verdict is None]
        return reasons


# A run's documents and their words are alive until its last filter: the numpy arrays of
# repeated_word_ngrams take a few int64s a word, and each live word list lengthens the collector's
# passes (GCIDE entries, default rules, one core: 54 us a document in runs of 40,000, 51 in runs of
# 1,000, against 49.6 for one document at a time; every rule computed, 96 against 91).
_RUN_DOCUMENTS, _RUN_CHARACTERS = 1_000, 1 << 20


def _runs(texts: list) -> list[list]:
    """texts cut, in order, into runs of at most _RUN_DOCUMENTS texts and about _RUN_CHARACTERS
    characters (a longer text alone)."""
    runs, start, characters = [], 0, 0
    for end, text in enumerate(texts):
        size = len(text) if text is not None else 0
        if end > start and (end - start == _RUN_DOCUMENTS or characters + size > _RUN_CHARACTERS):
            runs.append(texts[start:end])
            start, characters = end, 0
        characters += size
    return runs + [texts[start:]] if start < len(texts) else runs


class _EachDocument:
    """A filter that decides one document at a time, called as the batch filters are:
    (cfg, docs) -> reasons. In C where pip built spark_jobs/_text_filters_c.c (in_c, given
    limits(cfg)), else in Python (check): decided where it runs, as a Spark executor may import the
    --py-files zip, without the C, while the driver has it. A class, not a closure, so that
    TextFilters pickles."""

    def __init__(self, check, in_c=None, limits=None):
        self.check, self.in_c, self.limits = check, in_c, limits

    def __call__(self, cfg, docs: list[_Doc]) -> list[str | None]:
        if self.in_c is not None and _text_filters_c is not None:
            in_c, limits = self.in_c, self.limits(cfg)
            return [in_c(limits, doc) for doc in docs]
        check = self.check
        return [check(cfg, doc) for doc in docs]


FILTERS = {  # name -> check: (its config, a run's documents) -> the first rule each fails, in this order
    "gopher_quality": _EachDocument(_gopher_quality, _gopher_quality_in_c, gopher_quality_limits),
    "gopher_repetition": _gopher_repetition,
    "c4": _EachDocument(_c4, _c4_in_c, c4_limits),
    "fineweb": _EachDocument(_fineweb, _fineweb_in_c, fineweb_limits),
}
