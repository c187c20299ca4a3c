"""spark_jobs.text_filters against datatrove 0.10.1 itself: the same keep/drop decision, filter by
filter, on a real corpus, for at least 99.5 % of its documents.

datatrove (and spaCy, its English word tokenizer: `spacy.blank("en")`, rule-based, nothing to
download) is installed in the current stack only (.venv-current: datatrove needs numpy 2).

The corpus is real text found offline and in a fixed order, so the figures are the same on every
run of one environment (pinned by constraints-current.txt):
- the long description (the METADATA body: README markdown or reST, with lists, code blocks,
  links, badges, tables) of every distribution installed, sorted by name;
- every docstring of at least 200 characters (modules, classes, functions) in the standard
  library's Python sources, sorted by module name, in source order: prose paragraphs, doctest
  examples, argument lists.
Web text it is not, but it holds what the rules look at (short lines, bullets, code with braces,
repeated lines, few stop words) in quantity: each filter both keeps and drops hundreds of it
(asserted below). Run with `-s` to see every differing document.
"""
from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys
import time

import pytest

pytestmark = pytest.mark.unit

pytest.importorskip("datatrove")
pytest.importorskip("spacy")

from datatrove.data import Document  # noqa: E402
from datatrove.pipeline.filters import (  # noqa: E402
    C4QualityFilter,
    FineWebQualityFilter,
    GopherQualityFilter,
    GopherRepetitionFilter,
)

from pipeline.config import QualityConfig  # noqa: E402
from spark_jobs.text_filters import TextFilters  # noqa: E402

MIN_SAME_SHARE = 0.995
MIN_DOCUMENTS = 1000
MIN_KEPT = MIN_DROPPED = 100  # each filter must decide both ways on this corpus for the test to mean anything
MIN_DOCSTRING_CHARS = 200

DATATROVE_FILTERS = {  # datatrove's defaults: what QualityConfig's {} must reproduce
    "gopher_quality": GopherQualityFilter,
    "gopher_repetition": GopherRepetitionFilter,
    "c4": C4QualityFilter,
    "fineweb": FineWebQualityFilter,
}


def parity_corpus() -> list[tuple[str, str]]:
    """(id, text): installed distributions' long descriptions, then the standard library's docstrings."""
    docs = []
    dists = {(d.metadata["Name"] or "").lower(): d for d in importlib.metadata.distributions()}
    for name in sorted(dists):
        body = dists[name].metadata.get_payload() or dists[name].metadata.get("Description") or ""
        if body.strip():
            docs.append((f"pypi:{name}", body))
    for module in sorted(sys.stdlib_module_names):
        try:
            spec = importlib.util.find_spec(module)  # finds the source without importing it
        except (ImportError, ValueError):
            continue
        if spec is None or not (spec.origin or "").endswith(".py"):
            continue
        with open(spec.origin, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                text = ast.get_docstring(node, clean=True)
                if text and len(text) >= MIN_DOCSTRING_CHARS:
                    docs.append((f"stdlib:{module}:{getattr(node, 'name', '')}:{getattr(node, 'lineno', 1)}", text))
    return docs


@pytest.fixture(scope="module")
def corpus():
    docs = parity_corpus()
    assert len(docs) >= MIN_DOCUMENTS, f"only {len(docs)} documents found for the parity corpus"
    return docs


def datatrove_keeps(filter_, doc_id: str, text: str) -> bool:
    result = filter_.filter(Document(text=text, id=doc_id))
    return result if isinstance(result, bool) else result[0]


@pytest.fixture(scope="module")
def datatrove_decisions(corpus) -> dict[str, list[bool]]:
    """Keep (True) or drop, per filter and document. The filters see one document in turn, the
    three that split it into words first: datatrove keeps its last five splits (lru_cache), so
    spaCy tokenizes each text once (C4's per-line sentence splits would push it out)."""
    order = ("gopher_quality", "gopher_repetition", "fineweb", "c4")
    filters = {name: DATATROVE_FILTERS[name]() for name in order}
    decisions: dict[str, list[bool]] = {name: [] for name in filters}
    for doc_id, text in corpus:
        for name, filter_ in filters.items():
            decisions[name].append(datatrove_keeps(filter_, doc_id, text))
    return decisions


def excerpt(text: str, size: int = 160) -> str:
    return repr(text[:size] + ("..." if len(text) > size else ""))


@pytest.mark.parametrize("name", list(DATATROVE_FILTERS))
def test_same_decisions_as_datatrove(name, corpus, datatrove_decisions):
    ours = TextFilters(QualityConfig(**{name: {}}))
    differences, seconds = [], 0.0
    for (doc_id, text), keeps in zip(corpus, datatrove_decisions[name]):
        start = time.perf_counter()
        reason = ours.removal_reason(text)
        seconds += time.perf_counter() - start
        if keeps != (reason is None):
            differences.append(f"  {doc_id}: datatrove {'keeps' if keeps else 'drops'}, shardline "
                               f"{'keeps' if reason is None else 'drops (' + reason + ')'}: {excerpt(text)}")
    total, kept = len(corpus), sum(datatrove_decisions[name])
    dropped = total - kept
    same = 1 - len(differences) / total
    print(f"\n{name}: {total} documents, same decision for {same:.2%} ({len(differences)} differ); datatrove "
          f"keeps {kept}, drops {dropped}; shardline {seconds / total * 1e6:.0f} us a document")
    print("\n".join(differences))
    assert kept >= MIN_KEPT and dropped >= MIN_DROPPED, f"{name}: kept {kept}, dropped {dropped}: corpus too one-sided"
    assert same >= MIN_SAME_SHARE, f"{name}: {len(differences)} of {total} decisions differ:\n" + "\n".join(differences)


def test_words_are_spacys_on_the_corpus_and_on_generated_chunks(corpus):
    """The words every filter counts: spaCy's blank English tokenizer against spacy_english_words
    (its C for ASCII chunks) and the Python alone, token for token, on the corpus and on chunks
    generated dense in what the affix rules look at."""
    import random

    import spacy

    from spark_jobs import english_words

    assert english_words._english_words_c is not None, "spark_jobs._english_words_c is not built: make setup compiles it, with a C compiler"
    tokenizer = spacy.blank("en").tokenizer
    pieces = [*"aAzQ09.,;:!?()[]{}<>_#*&'\"`$%+-=~^/|@\\", "US$", "C$", "km", "km/h", "mbar", "'s", "n't", "Mr.",
              "e.g.", "...", "--", "---", "http://", "www.", ".com", "Ph.D.", ":)", "C++", "a.m.", "'ll", "can", "not",
              "10", "o.O", "<3", "^_^", "word", "The"]
    rng = random.Random(1)
    chunks = sorted({"".join(rng.choice(pieces) for _ in range(rng.randint(1, 6))) for _ in range(20_000)})
    differing = []
    for text in [text for _, text in corpus] + chunks:
        spacys = [token.text for token in tokenizer(text) if not token.is_space]
        if not spacys == english_words.spacy_english_words(text) == english_words.python_english_words(text):
            differing.append(excerpt(text))
    assert differing == []
