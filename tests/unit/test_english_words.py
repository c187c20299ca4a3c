"""spark_jobs.english_words: spaCy's English tokens and sentences on texts that exercise each kind
of rule, the shortcut for the commonest chunks against the full rules, and the C tokenizer against
the Python. spaCy itself on a real corpus is tests/current_stack/test_filter_parity.py."""
import random

import pytest

from spark_jobs import english_words
from spark_jobs.english_words import count_sentences, spacy_english_words

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "tokens"), [
    ("plain words only", ["plain", "words", "only"]),
    ("It ends here.", ["It", "ends", "here", "."]),  # a period after a lowercase letter is split off
    ("Mr. Smith and e.g. this", ["Mr.", "Smith", "and", "e.g.", "this"]),  # listed abbreviations stay whole
    ("I don't know", ["I", "do", "n't", "know"]),  # contractions are split
    ("(quoted), \"yes\"!", ["(", "quoted", ")", ",", '"', "yes", '"', "!"]),
    ("a well-known fact", ["a", "well", "-", "known", "fact"]),  # hyphens between letters are infixes
    ("see https://example.org/a?b=c.", ["see", "https://example.org/a?b=c", "."]),  # URLs stay whole
    ("it costs $5 or 10km", ["it", "costs", "$", "5", "or", "10", "km"]),
    ("smile :) ok", ["smile", ":)", "ok"]),
    ("wait... what", ["wait", "...", "what"]),
    # Pieces the affix rules cut apart that join into an exception again: "):", "m.", "=(".
    ("(see n.): 44m., =(word", ["(", "see", "n.", "):", "44", "m.", ",", "=(", "word"]),
])
@pytest.mark.parametrize("words", [spacy_english_words, english_words.python_english_words], ids=["c", "python"])
def test_words_follow_spacys_english_rules(words, text, tokens):
    assert words(text) == tokens


def test_sentences_split_after_final_punctuation_but_not_after_abbreviations():
    assert count_sentences("One is here. Two is here! Three?") == 3
    assert count_sentences("Mr. Smith met Dr. Jones.") == 1
    assert count_sentences("It ends here...") == 1  # '...' is no sentence end for the sentencizer
    assert count_sentences("Really?! Yes.") == 2  # a run of final punctuation ends one sentence


def test_the_shortcut_for_a_word_with_one_character_split_off_agrees_with_the_affix_rules(docstring_records):
    """spacy_english_words splits "word," "word." "[word" "(1" and the like without the regexes;
    every chunk it takes that way must get what the full prefix/suffix/infix/exception path gives."""
    chunks = {chunk for record in docstring_records for chunk in record["text"].split()}
    cores = ("word", "Word", "WORD", "aB", "Ab", "A", "a", "USA", "Mr", "vs", "etc", "cannot", "Ill", "é", "日本",
             "\U0002000b", "x", "9", "12", "٣", "1a")
    chunks |= {core + last for core in cores for last in ",;:!?)]}.'\"-"} | {first + core for core in cores for first in "([{<'-"}
    taken = [chunk for chunk in chunks if english_words._simple_split(chunk) is not None]
    assert len(taken) > 1000
    assert [(c, english_words._split_chunk(c)) for c in taken if english_words._split_chunk(c) != english_words._simple_split(c)] == []
    assert spacy_english_words("Mr. Smith, aB. then cannot; (12 end.") == ["Mr.", "Smith", ",", "aB.", "then", "can", "not",
                                                                          ";", "(", "12", "end", "."]


def test_the_c_tokenizer_gives_the_tokens_of_the_python(docstring_records):
    """The setup compiles spark_jobs/_english_words_c.c, which re-implements the affix rules for
    ASCII chunks: on a real corpus and on generated chunks dense in what the rules look at, every
    token must be the Python's."""
    assert english_words._english_words_c is not None, "spark_jobs._english_words_c is not built: make setup compiles it, with a C compiler"
    texts = [record["text"] for record in docstring_records]
    assert [t for t in texts if spacy_english_words(t) != english_words.python_english_words(t)] == []
    pieces = [*"aAzQ09.,;:!?()[]{}<>_#*&'\"`$%+-=~^/|@\\§°é\x00", "US$", "C$", "km", "km/h", "mbar", "'s", "n't", "Mr.",
              "e.g.", "...", "--", "---", "http://", "www.", ".com", "Ph.D.", ":)", "C++", "a.m.", "'ll", "can", "not",
              "10", "o.O", "<3", "^_^"]
    rng = random.Random(0)
    chunks = {"".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(30_000)}
    assert [(c, english_words._split_chunk(c), spacy_english_words(c)) for c in chunks
            if spacy_english_words(c) != english_words._split_chunk(c)] == []
    text = " ".join(sorted(chunks))
    assert spacy_english_words(text) == english_words.python_english_words(text)
