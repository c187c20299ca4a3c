"""spark_jobs.text_filters: each rule on a document just past its threshold and one just short of it,
with the other rules of its filter off; the order of the filters; the batch call; each with the
rules in C (spark_jobs/_text_filters_c.c, built by the setup) and in Python. The two compared on
real and drawn texts: test_text_filters_in_c.py. Parity with datatrove itself on a real corpus is
tests/current_stack/test_filter_parity.py."""
import pickle

import pytest

from pipeline.config import (
    C4QualityConfig,
    FineWebQualityConfig,
    GopherQualityConfig,
    GopherRepetitionConfig,
    QualityConfig,
)
from spark_jobs.english_words import spacy_english_words
from spark_jobs.text_filters import RULES, TextFilters

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True, params=["c", "python"])
def rules_in(request, monkeypatch) -> str:
    """Every test here runs twice: with the rules in C, and in Python, as where the C is not built."""
    from spark_jobs import text_filters

    if request.param == "c":
        assert text_filters._text_filters_c is not None, "spark_jobs._text_filters_c is not built (make setup)"
    else:
        monkeypatch.setattr(text_filters, "_text_filters_c", None)
    return request.param


def gopher_quality(**rules) -> TextFilters:
    off = dict.fromkeys(GopherQualityConfig.model_fields)
    return TextFilters(QualityConfig(gopher_quality=GopherQualityConfig(**{**off, **rules})))


def gopher_repetition(**rules) -> TextFilters:
    off = {**dict.fromkeys(("dup_line_frac", "dup_para_frac", "dup_line_char_frac", "dup_para_char_frac")),
           "top_n_grams": {}, "dup_n_grams": {}}
    return TextFilters(QualityConfig(gopher_repetition=GopherRepetitionConfig(**{**off, **rules})))


def c4(**rules) -> TextFilters:
    off = {"filter_no_terminal_punct": False, "min_num_sentences": None, "min_words_per_line": None,
           "max_word_length": None, "filter_lorem_ipsum": False, "filter_javascript": False,
           "filter_curly_bracket": False, "filter_policy": False}
    return TextFilters(QualityConfig(c4=C4QualityConfig(**{**off, **rules})))


def fineweb(**rules) -> TextFilters:
    off = dict.fromkeys(("line_punct_thr", "short_line_thr", "char_duplicates_ratio", "new_line_ratio"))
    return TextFilters(QualityConfig(fineweb=FineWebQualityConfig(**{**off, **rules})))


def words(n: int) -> str:
    """n distinct lowercase words of 4 to 7 letters (no stop word among them)."""
    return " ".join("w" + "abcdef"[: 3 + i % 4] + chr(ord("a") + i // 26 % 26) + chr(ord("a") + i % 26)
                    for i in range(n))


# --- Gopher quality ----------------------------------------------------------------------------------

def test_short_doc_counts_words_without_punctuation_tokens():
    f = gopher_quality(min_doc_words=50)
    assert f.removal_reason(words(50)) is None
    assert f.removal_reason(words(49) + " . , ;") == "gopher_quality.short_doc"


def test_long_doc():
    f = gopher_quality(max_doc_words=100)
    assert f.removal_reason(words(100)) is None
    assert f.removal_reason(words(101)) == "gopher_quality.long_doc"


def test_average_word_length_bounds():
    below = gopher_quality(min_avg_word_length=3)
    assert below.removal_reason(" ".join(["abc"] * 10)) is None  # exactly 3
    assert below.removal_reason(" ".join(["abc"] * 9 + ["ab"])) == "gopher_quality.below_avg_word_length"
    above = gopher_quality(max_avg_word_length=10)
    assert above.removal_reason(" ".join(["a" * 10] * 10)) is None
    assert above.removal_reason(" ".join(["a" * 10] * 9 + ["a" * 11])) == "gopher_quality.above_avg_word_length"


@pytest.mark.parametrize(("symbol", "reason"), [("#", "too_many_hashes"), ("...", "too_many_ellipsis"),
                                                ("…", "too_many_ellipsis")])
def test_symbol_to_word_ratio(symbol, reason):
    f = gopher_quality(max_symbol_word_ratio=0.1)
    for n_plain, fires in ((8, True), (9, False)):
        text = words(n_plain) + f" {symbol}"  # one symbol in n_plain + 1 tokens
        ratio = 1 / len(spacy_english_words(text))
        assert (ratio > 0.1) is fires
        assert f.removal_reason(text) == (f"gopher_quality.{reason}" if fires else None)


def test_bullet_lines():
    f = gopher_quality(max_bullet_lines_ratio=0.9)
    bullets = ["- item one", "  • item two"] * 5  # 10 lines, leading blanks ignored
    assert f.removal_reason("\n".join(bullets)) == "gopher_quality.too_many_bullets"  # 10/10
    assert f.removal_reason("\n".join(bullets[:9] + ["plain line"])) is None  # 9/10 is not above 0.9


def test_lines_ending_in_an_ellipsis():
    f = gopher_quality(max_ellipsis_lines_ratio=0.3)
    lines = [f"line {i}" for i in range(10)]
    assert f.removal_reason("\n".join([line + "..." for line in lines[:3]] + lines[3:])) is None  # 3/10
    assert f.removal_reason("\n".join([line + "…  " for line in lines[:4]] + lines[4:])) == \
        "gopher_quality.too_many_end_ellipsis"  # 4/10, trailing blanks ignored


def test_share_of_words_with_a_letter():
    f = gopher_quality(max_non_alpha_words_ratio=0.8)
    assert f.removal_reason(words(8) + " 12 34") is None  # 8/10 words have a letter
    assert f.removal_reason(words(7) + " 12 34 56") == "gopher_quality.below_alpha_threshold"  # 7/10
    assert f.removal_reason(words(7) + " 1a 2b 3c") is None  # one letter is enough


def test_stop_words_are_distinct_and_lowercase():
    f = gopher_quality(min_stop_words=2)
    assert f.removal_reason(words(20) + " the of") is None
    assert f.removal_reason(words(20) + " the the the") == "gopher_quality.few_stop_words"
    assert f.removal_reason(words(20) + " The Of") == "gopher_quality.few_stop_words"


def test_a_null_threshold_turns_only_that_rule_off():
    assert gopher_quality(min_doc_words=None).removal_reason(words(3)) is None
    f = TextFilters(QualityConfig(gopher_quality=GopherQualityConfig(min_doc_words=None)))
    assert f.removal_reason(words(3)) == "gopher_quality.few_stop_words"  # the other defaults still apply


# --- Gopher repetition -------------------------------------------------------------------------------

def test_duplicate_paragraphs():
    f = gopher_repetition(dup_para_frac=0.3)
    unique = [f"paragraph {i}" for i in range(7)]
    assert f.removal_reason("\n\n".join(unique + ["again"] * 4)) is None  # 3 repeats in 11
    assert f.removal_reason("\n\n".join(unique[:6] + ["again"] * 5)) == "gopher_repetition.dup_para_frac"  # 4/11


def test_duplicate_lines():
    f = gopher_repetition(dup_line_frac=0.3)
    unique = [f"line {i}" for i in range(7)]
    assert f.removal_reason("\n".join(unique + ["again"] * 4)) is None  # 3/11
    assert f.removal_reason("\n".join(unique[:6] + ["again"] * 5)) == "gopher_repetition.dup_line_frac"  # 4/11
    assert f.removal_reason("\n\n\n".join(unique + ["again"] * 4)) is None  # runs of newlines split once


@pytest.mark.parametrize(("separator", "field", "reason"), [
    ("\n\n", "dup_para_char_frac", "dup_para_char_frac"),
    ("\n", "dup_line_char_frac", "dup_line_char_frac"),
])
def test_characters_in_duplicates(separator, field, reason):
    f = gopher_repetition(**{field: 0.2})
    repeated = "r" * 20
    just_under_100 = 99 - 2 * len(separator) - 2 * len(repeated)
    for filler_size, fires in ((just_under_100, True), (just_under_100 + 1, False)):
        text = separator.join(["f" * filler_size, repeated, repeated])
        assert (len(repeated) / len(text) > 0.2) is fires
        assert f.removal_reason(text) == (f"gopher_repetition.{reason}" if fires else None)


def test_most_frequent_bigram_share():
    f = gopher_repetition(top_n_grams={2: 0.2})
    for filler_size, fires in ((37, True), (38, False)):
        text = "aa bb aa bb " + "c" * filler_size  # "aa bb" twice: 2 * 5 characters in 49 or 50
        assert (2 * len("aa bb") / len(text) > 0.2) is fires
        assert f.removal_reason(text) == ("gopher_repetition.top_2_gram" if fires else None)


def test_overlapping_top_grams_can_count_more_characters_than_the_text_has():
    # "a a" five times over overlapping words: 5 * 3 characters of 11, a share of 1.36, so a
    # threshold above 1 (which the config allows) still decides.
    text = "a a a a a a"
    assert gopher_repetition(top_n_grams={2: 1.3}).removal_reason(text) == "gopher_repetition.top_2_gram"
    assert gopher_repetition(top_n_grams={2: 1.4}).removal_reason(text) is None


def test_top_gram_ties_take_the_first_seen():
    # Every bigram occurs once: the first, "aaaaaaaaaa b", is what counts (12 of 25 characters).
    text = "aaaaaaaaaa b c d e f g h"
    assert gopher_repetition(top_n_grams={2: 0.45}).removal_reason(text) == "gopher_repetition.top_2_gram"
    assert gopher_repetition(top_n_grams={2: 0.5}).removal_reason(text) is None


def test_longer_top_grams_after_one_without_repeats_take_the_first_seen_once():
    # No bigram repeats, so no longer n-gram does: the trigram that counts is the first, seen once,
    # "aaaaaaaaaa b c" (12 characters + 2 for the spaces datatrove's count adds, of 26).
    f = gopher_repetition(top_n_grams={2: 1.0, 3: 0.5}, dup_n_grams={5: 0.0})
    assert f.removal_reason("aaaaaaaaaa b c d e f g h i") == "gopher_repetition.top_3_gram"
    assert f.removal_reason("b c d e f g h i aaaaaaaaaa") is None
    # A repeated bigram: the trigrams are counted, "aa bb cc" twice (2 * 8 of 20 characters).
    f = gopher_repetition(top_n_grams={2: 1.0, 3: 0.5})
    assert f.removal_reason("aa bb cc aa bb cc dd") == "gopher_repetition.top_3_gram"
    assert f.removal_reason("aa bb") is None  # two words: no trigram to count


def test_the_first_failing_n_gram_rule_names_the_removal():
    # "aa bb cc dd ee" twice: every top and duplicated n-gram rule at 0 fails; the top rules come
    # first, each kind by n.
    text = "aa bb cc dd ee aa bb cc dd ee"
    assert gopher_repetition(top_n_grams={2: 0.0, 3: 0.0}, dup_n_grams={5: 0.0}).removal_reason(text) == \
        "gopher_repetition.top_2_gram"
    assert gopher_repetition(top_n_grams={4: 0.0, 3: 0.0}, dup_n_grams={5: 0.0}).removal_reason(text) == \
        "gopher_repetition.top_3_gram"
    assert gopher_repetition(top_n_grams={}, dup_n_grams={6: 0.0, 5: 0.0}).removal_reason(text) == \
        "gopher_repetition.duplicated_5_n_grams"


def test_characters_in_repeated_five_grams():
    f = gopher_repetition(dup_n_grams={5: 0.15})
    gram = "aa bb cc dd ee"  # repeated once: its 10 letters count (words joined without spaces)
    for n_other, fires in ((4, True), (6, False)):
        text = f"{gram} {words(n_other)} {gram}"
        assert (10 / len(text) > 0.15) is fires
        assert f.removal_reason(text) == ("gopher_repetition.duplicated_5_n_grams" if fires else None)


def test_overlapping_repeats_are_counted_once():
    # "x x x x x x x": the first 5-gram is new, the one at 1 repeats it (5 characters), then the walk
    # jumps past it: 5 of 13 characters (0.385), not the 10 that counting every repeated position gives.
    text = " ".join("x" * 7)
    assert gopher_repetition(dup_n_grams={5: 0.38}).removal_reason(text) == "gopher_repetition.duplicated_5_n_grams"
    assert gopher_repetition(dup_n_grams={5: 0.39}).removal_reason(text) is None


def test_an_empty_text_is_removed():
    assert gopher_repetition().removal_reason("") == "gopher_repetition.empty"


# --- C4 ----------------------------------------------------------------------------------------------

SENTENCE = "This line is a sentence."


def test_too_few_sentences_counts_only_lines_that_pass():
    f = c4(min_num_sentences=5, filter_no_terminal_punct=True, min_words_per_line=3, filter_javascript=True,
           filter_policy=True)
    assert f.removal_reason("\n".join([SENTENCE] * 5)) is None
    assert f.removal_reason("\n".join([SENTENCE] * 4)) == "c4.too_few_sentences"
    assert f.removal_reason("\n".join([SENTENCE] * 3 + ["One is here. Two is here."])) is None  # 3 + 2
    for line in ("No terminal punctuation here", "Too short.", "Enable javascript to see this.",
                 "We use cookies on this site.", "It trails off..."):
        assert f.removal_reason("\n".join([SENTENCE] * 4 + [line])) == "c4.too_few_sentences", line


def test_citations_are_removed_before_the_punctuation_check():
    f = c4(min_num_sentences=1, filter_no_terminal_punct=True)
    assert f.removal_reason("A claim with a source.[1]") is None
    assert f.removal_reason("A claim with a source.[a]") == "c4.too_few_sentences"


def test_a_line_with_an_overlong_word_does_not_count():
    f = c4(min_num_sentences=1, max_word_length=10)
    assert f.removal_reason("a " + "x" * 10 + " word.") is None
    assert f.removal_reason("a " + "x" * 11 + " word.") == "c4.too_few_sentences"


@pytest.mark.parametrize(("rule", "text"), [("filter_lorem_ipsum", "Lorem Ipsum dolor sit amet."),
                                            ("filter_curly_bracket", "Call f() { return 1; } now.")])
def test_document_rules_fire_on_a_counting_line(rule, text):
    reason = "c4.lorem_ipsum" if rule == "filter_lorem_ipsum" else "c4.curly_bracket"
    on = c4(**{rule: True}, filter_no_terminal_punct=True)
    assert on.removal_reason(f"{SENTENCE}\n{text}") == reason
    assert on.removal_reason(f"{SENTENCE}\n{text[:-1]}") is None  # that line does not count: no '.'
    assert c4(filter_no_terminal_punct=True).removal_reason(f"{SENTENCE}\n{text}") is None  # rule off


# --- FineWeb -----------------------------------------------------------------------------------------

def test_share_of_lines_ending_in_punctuation():
    f = fineweb(line_punct_thr=0.12)
    assert f.removal_reason("\n".join(["Ends here."] + ["no end"] * 7)) is None  # 1/8 = 0.125
    assert f.removal_reason("\n".join(["Ends here."] + ["no end"] * 8)) == "fineweb.line_punct_ratio"  # 1/9
    assert f.removal_reason("\n".join(["Ends here!"] + ["", "  "] * 20 + ["no end"] * 7)) is None  # blanks skipped
    exclude_zero = fineweb(line_punct_thr=0.12, line_punct_exclude_zero=True)
    assert exclude_zero.removal_reason("no end\nat all") is None


def test_share_of_short_lines():
    f = fineweb(short_line_thr=0.67, short_line_length=30)
    short, long = "s" * 30, "l" * 31
    assert f.removal_reason("\n".join([short] * 67 + [long] * 33)) is None  # 0.67 is not above
    assert f.removal_reason("\n".join([short] * 68 + [long] * 32)) == "fineweb.short_line_ratio"


def test_characters_in_duplicated_lines():
    f = fineweb(char_duplicates_ratio=0.01)
    unique = "\n".join(f"{i:04d}" + "u" * 96 for i in range(10))  # 1000 characters but newlines
    assert f.removal_reason(unique + "\n" + "\n".join(["dup"] * 4)) is None  # 9 of 1012
    assert f.removal_reason(unique + "\n" + "\n".join(["dupe"] * 4)) == "fineweb.char_dup_ratio"  # 12 of 1016


def test_newlines_per_word():
    f = fineweb(new_line_ratio=0.3)
    for n_lines, fires in ((10, False), (11, True)):  # 9 newlines for 30 words, then 10 for 33
        text = "\n".join(["three short words"] * n_lines)
        assert (text.count("\n") / len(spacy_english_words(text)) > 0.3) is fires
        assert f.removal_reason(text) == ("fineweb.list_ratio" if fires else None)


def test_a_blank_text_is_removed():
    assert fineweb().removal_reason(" \n\t\n") == "fineweb.empty"


# --- The whole -----------------------------------------------------------------------------------------

def test_the_first_failing_filter_names_the_reason():
    text = "short text without a sentence"
    everything = QualityConfig(gopher_quality={}, gopher_repetition={}, c4={}, fineweb={})
    assert TextFilters(everything).removal_reason(text) == "gopher_quality.short_doc"
    assert TextFilters(QualityConfig(c4={}, fineweb={})).removal_reason(text) == "c4.too_few_sentences"
    assert TextFilters(QualityConfig(fineweb={})).removal_reason(text) == "fineweb.line_punct_ratio"


def test_a_good_document_passes_every_filter():
    text = "\n".join([
        "The history of the printing press is a long one, and it has been told many times.",
        "Each of the early printers had to solve the problem of casting type that would last.",
        "Gutenberg used an alloy of lead, tin and antimony that melted at a low temperature.",
        "His press was adapted from the screw presses that were used to make wine and oil.",
        "Within fifty years, printing shops had opened in more than two hundred European towns.",
        "Books became cheaper, and with them came a steady growth in the number of readers.",
    ])
    everything = TextFilters(QualityConfig(gopher_quality={}, gopher_repetition={}, c4={}, fineweb={}))
    assert everything.active
    assert everything.removal_reason(text) is None


def test_batch_call_and_activity():
    f = TextFilters(QualityConfig(gopher_quality={}))
    assert f(["too short", None, words(60) + " the and"]) == ["gopher_quality.short_doc", None, None]
    assert not TextFilters(QualityConfig()).active
    assert TextFilters(QualityConfig()).removal_reason("anything") is None


def test_a_batch_is_judged_in_runs_as_each_text_alone(docstring_records, monkeypatch):
    """TextFilters cuts a batch into runs (of documents, of characters) and numbers each run's
    n-grams together: every text gets the reason it gets alone, nulls and empty texts included,
    across runs cut by either limit."""
    from spark_jobs import text_filters

    texts = [record["text"] for record in docstring_records[:400]]
    texts[5:5] = [None, "", "again " * 30]
    everything = TextFilters(QualityConfig(gopher_quality={"min_doc_words": 20}, fineweb={},
                                           gopher_repetition={"top_n_grams": {2: 0.08, 3: 0.06}}))
    alone = [None if text is None else everything.removal_reason(text) for text in texts]
    assert len(set(alone)) >= 4  # several rules decide, and some texts are kept
    monkeypatch.setattr(text_filters, "_RUN_DOCUMENTS", 37)
    monkeypatch.setattr(text_filters, "_RUN_CHARACTERS", 8_000)
    runs = text_filters._runs(texts)
    assert [text for run in runs for text in run] == texts
    assert 37 in map(len, runs) and any(len(run) < 37 for run in runs[:-1])  # both limits cut
    assert everything(texts) == alone


def test_every_reason_is_listed_once():
    assert len(RULES) == len(set(RULES))
    reasons = {gopher_quality(min_doc_words=5).removal_reason("x"), gopher_repetition().removal_reason(""),
               c4(min_num_sentences=2).removal_reason("x"), fineweb().removal_reason("")}
    reasons |= {gopher_repetition(top_n_grams={n: 0.0}).removal_reason(" ".join("x" * 12)) for n in range(1, 11)}
    assert reasons <= set(RULES)


def test_n_gram_sizes_without_a_rule_name_are_refused():
    with pytest.raises(ValueError, match="top_11_gram"):
        gopher_repetition(top_n_grams={11: 0.1})
    with pytest.raises(ValueError, match="duplicated_21_n_grams"):
        gopher_repetition(dup_n_grams={21: 0.1})


def test_filters_survive_pickling_as_a_spark_task_carries_them():
    f = TextFilters(QualityConfig(gopher_quality={}, c4={}))
    texts = ["too short", words(60) + " the and"]
    assert pickle.loads(pickle.dumps(f))(texts) == f(texts) == ["gopher_quality.short_doc", "c4.too_few_sentences"]


def _counted_in_full(words: list[str], n: int) -> tuple[int, int, int]:
    """(characters in repeats by datatrove's find_all_duplicate, the top n-gram's occurrences and
    first position) from every n-gram counted, as datatrove counts them (as tuples here)."""
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    seen, repeated, idx = set(), 0, 0
    while idx < len(grams):
        if grams[idx] in seen:
            repeated += sum(map(len, grams[idx]))
            idx += n
        else:
            seen.add(grams[idx])
            idx += 1
    occurrences = max((grams.count(g) for g in grams), default=0)
    first = next((i for i, g in enumerate(grams) if grams.count(g) == occurrences), None)
    return repeated, occurrences, first


@pytest.mark.parametrize("implementation", ["c", "numpy"])
def test_n_grams_numbered_in_batches_match_counting_every_n_gram_of_each_document(implementation, docstring_records):
    """repeated_word_ngrams counts in C (spark_jobs/_word_ngrams_c.c, built by the setup) and
    numpy_word_ngrams numbers the n-grams of a whole batch at once, looking for a repeated n-gram
    only where the (n-1)-grams at p and p + 1 repeat: the duplicated and top n-gram figures of both
    must be those of counting every n-gram of each document on its own, on real text and on texts
    of few distinct words (long runs of repeats, overlapping ones, equal strings that are different
    objects), batched together (so that no n-gram is matched across documents) and in batches of one."""
    import random

    from spark_jobs import text_filters

    assert text_filters._word_ngrams_c is not None, "spark_jobs._word_ngrams_c is not built: make setup compiles it, with a C compiler"
    count = text_filters.repeated_word_ngrams if implementation == "c" else text_filters.numpy_word_ngrams

    rng = random.Random(7)
    texts = [record["text"] for record in docstring_records[:300]]
    texts += [" ".join(rng.choice(("a", "b", "ab", "c")) for _ in range(rng.randint(0, 80))) for _ in range(300)]
    texts += [" ".join(["x"] * k + ["y"] + ["x"] * k) for k in range(12)]
    word_lists = [spacy_english_words(text) for text in texts]
    ns = (7, 2, 1, 3, 12, 4, 5)  # out of order, and past some documents' length
    top, duplicated = count(word_lists, ns, ns)
    repeating = 0
    for d, words in enumerate(word_lists):
        alone = count([words], ns, ns)
        for n in ns:
            repeated, occurrences, first = _counted_in_full(words, n)
            expected_top = -1 if first is None else (sum(map(len, words[first:first + n])) + n - 1) * occurrences
            assert (duplicated[n][d], top[n][d]) == (repeated, expected_top), (texts[d][:60], n)
            assert (alone[1][n][0], alone[0][n][0]) == (repeated, expected_top), (texts[d][:60], n)
            repeating += repeated > 0
    assert repeating > 500  # the texts do repeat


def test_words_with_a_letter_are_those_with_an_alphabetic_character(docstring_records):
    """gopher_quality's alphabetic-words ratio counts ASCII words by one regex scan: it must count
    what testing each word's characters counts, with a non-ASCII word among them or not."""
    from spark_jobs.text_filters import _words_with_a_letter

    def each(words: list[str]) -> int:
        return sum(1 for w in words if any(c.isalpha() for c in w))

    odd = ["--", "1.5", "a1", "_", "x_y", "[WordNet", "...", "#", "Z9", "9Z", "'s", "n't", ":)"]
    for record in docstring_records[:200]:
        words = spacy_english_words(record["text"])
        assert _words_with_a_letter(words) == each(words)
        assert _words_with_a_letter(words + odd) == each(words + odd)
    for unusual in ("é1", "²", "Ⅻ", "１", "日本", "٣", "ǅ"):  # non-ASCII: letters or not, by str.isalpha
        assert _words_with_a_letter(odd + [unusual]) == each(odd + [unusual]), unusual
    assert _words_with_a_letter([]) == 0
