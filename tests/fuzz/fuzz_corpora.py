"""Generated multi-file corpora of bad input, each with what the job must make of it.

A corpus is a handful of files; each file is a list of lines (or csv rows), every one tagged with the
class of input it exercises. The generator knows, by construction, how many records each file holds:
a record line always carries a non-whitespace byte, a separator line never does, and a file whose
decompressed content is empty or cannot be decompressed is exactly one record (`empty_file`,
`corrupt_file`) after the lines read before the damage.
"""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import strategies as st

LABELS = ["a", "b", "c"]
WORDS = ["loop", "event", "future", "task", "the", "of", "Café", "naïve", "ﬁle", "ＡＢＣ", "日本語", "x", "😀",
         "e\u0301", "don't", "3.14", "<tag>", "#1", "über", "ß"]
SEPARATORS = [b"", b" ", b"\t", b"\r", b" \t ", b"\x0b\x0c"]  # bytes.strip() removes all of these
NON_WHITESPACE = b"!~\x01\x7f\xff"
# The reasons the README lists; every reject must carry one of them.
REASONS = {"malformed_record", "invalid_utf8", "wrong_type", "null_text", "empty_text", "too_short", "too_long",
           "missing_label", "unknown_label", "missing_id", "empty_file", "corrupt_file"}


@dataclass
class Line:
    kind: str  # the class of input this line exercises
    data: bytes
    record: bool = True  # False: a whitespace-only separator line, not a record
    copy_of: int | None = None  # a planted duplicate: index (in its file) of the good line it copies


@dataclass
class CorpusFile:
    name: str
    compression: str  # "", ".gz" or ".bz2"
    lines: list[Line]
    ending: bytes = b"\n"
    final_newline: bool = True
    damage: str = ""  # "", "empty_bytes", "garbage_tail", "garbage_only"
    kinds: set[str] = field(default_factory=set)

    def content(self) -> bytes:
        """The decompressed bytes the job reads."""
        body = self.ending.join(line.data for line in self.lines)
        return body + (self.ending if self.final_newline and self.lines else b"")

    def file_bytes(self) -> bytes:
        if self.damage == "empty_bytes":
            return b""
        if self.damage == "garbage_only":
            return b"\xff not a compressed stream \x00\x01"
        data = self.content()
        packed = gzip.compress(data, mtime=0) if self.compression == ".gz" else bz2.compress(data) if self.compression == ".bz2" else data
        if self.damage == "garbage_tail":
            # gzip: a byte that starts no member ("Not a gzipped file"); bz2: a second stream cut short
            # (Python's bz2 would silently skip garbage that starts no stream at all).
            packed += b"\xffjunk" if self.compression == ".gz" else bz2.compress(b"lost\n")[:12]
        return packed

    def intact_lines(self) -> list[Line]:
        """The lines the job reads as lines. Before damage, a last line without its newline is not
        known to be complete: it becomes part of the corrupt_file record (whose offset is its start)."""
        if self.damage in ("empty_bytes", "garbage_only"):
            return []
        if self.damage == "garbage_tail" and not self.final_newline:
            return self.lines[:-1]
        return self.lines

    def expected_records(self) -> int:
        if self.damage in ("empty_bytes", "garbage_only"):
            return 1
        lines = sum(1 for line in self.intact_lines() if line.record)
        if self.damage == "garbage_tail":
            return lines + 1
        return 1 if not self.content() else lines

    def expected_file_reject(self) -> str | None:
        """The reject the file as a whole produces, if any."""
        if self.damage == "empty_bytes":
            return "corrupt_file" if self.compression == ".bz2" else "empty_file"  # a 0-byte bz2 is truncated
        if self.damage in ("garbage_only", "garbage_tail"):
            return "corrupt_file"
        return "empty_file" if not self.content() else None


@dataclass
class Corpus:
    format: str  # "jsonl", "text" or "csv"
    task: str
    with_ids: bool
    files: list[CorpusFile]

    def write(self, directory: Path) -> list[Path]:
        directory.mkdir(parents=True)
        paths = []
        for f in self.files:
            path = directory / f.name
            path.write_bytes(f.file_bytes())
            paths.append(path)
        return paths

    @property
    def kinds(self) -> set[str]:
        return set().union(*(f.kinds | {line.kind for line in f.lines} for f in self.files))

    def expected_records(self) -> int:
        return sum(f.expected_records() for f in self.files)

    def planted_duplicates(self) -> int:
        """Lines planted as copies (exact, or equal once cleaned) of a good line that is read intact."""
        planted = 0
        for f in self.files:
            intact = f.intact_lines()
            planted += sum(1 for line in intact if line.copy_of is not None and line.copy_of < len(intact))
        return planted


# --- values ----------------------------------------------------------------------------------------

good_text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
long_text = st.lists(st.sampled_from(WORDS), min_size=20, max_size=60).map(" ".join)
label_value = st.sampled_from(LABELS)
odd_label = st.one_of(st.sampled_from(["zz", "", " a ", "A"]), st.integers(-3, 3), st.none())
wrong_value = st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(),
                        st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
doc_id = st.one_of(st.text(alphabet="abcdef0123", min_size=1, max_size=6), st.integers(0, 999))


def _json(obj: dict, ascii_only: bool) -> bytes:
    return json.dumps(obj, ensure_ascii=ascii_only).encode()


def _with_marker(data: bytes, position: int, marker: int) -> bytes:
    """Random bytes made a record: one non-whitespace byte inserted, and no newline."""
    data = data.replace(b"\n", b"")
    position %= len(data) + 1
    return data[:position] + bytes([NON_WHITESPACE[marker % len(NON_WHITESPACE)]]) + data[position:]


@st.composite
def jsonl_line(draw, keys: dict, with_ids: bool) -> Line:
    text_key, label_key = keys["text"], keys["label"]
    kind = draw(st.sampled_from([
        "good", "good", "good", "random_bytes", "invalid_utf8", "bom", "nul", "cr", "deep_json", "huge_json",
        "wrong_type", "duplicate_keys", "lone_surrogate", "odd_label", "separator",
    ]))
    ascii_only = draw(st.booleans())
    record = {text_key: draw(good_text), label_key: draw(label_value)}
    if with_ids and draw(st.integers(0, 9)):  # now and then no id: missing_id
        record["id"] = draw(doc_id)
    if kind == "good":
        return Line(kind, _json(record, ascii_only))
    if kind == "separator":
        return Line(kind, draw(st.sampled_from(SEPARATORS)), record=False)
    if kind == "random_bytes":
        return Line(kind, _with_marker(draw(st.binary(max_size=120)), draw(st.integers()), draw(st.integers())))
    if kind == "invalid_utf8":
        bad = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xc0\xaf"]))
        raw = _json(record, True)
        cut = raw.index(b'": "') + 4
        return Line(kind, raw[:cut] + bad + raw[cut:])
    if kind == "bom":
        return Line(kind, b"\xef\xbb\xbf" + _json(record, ascii_only))
    if kind == "nul":
        if draw(st.booleans()):
            record[text_key] = record[text_key] + "\x00" + draw(good_text)  # escaped: \u0000
            return Line(kind, _json(record, ascii_only))
        raw = _json(record, True)
        return Line(kind, raw.replace(b'": "', b'": "\x00', 1))  # a raw NUL inside a JSON string
    if kind == "cr":
        raw = _json(record, True)
        where = draw(st.sampled_from(["between_tokens", "inside_string", "line_end"]))
        if where == "between_tokens":
            return Line(kind, raw.replace(b'": ', b'":\r', 1))  # JSON whitespace: still a document
        if where == "inside_string":
            cut = raw.index(b'": "') + 4
            return Line(kind, raw[:cut] + b"\r" + raw[cut:])  # a raw control character: malformed
        return Line(kind, raw + b"\r\r")
    if kind == "deep_json":
        depth = draw(st.sampled_from([2, 100, 1000, 5000, 50_000]))
        if draw(st.booleans()):
            return Line(kind, b"[" * depth + b"]" * depth)
        return Line(kind, _json(record, True)[:-1] + b', "meta": ' + b"[" * depth + b"]" * depth + b"}")
    if kind == "huge_json":
        width = draw(st.sampled_from([1000, 20_000]))
        record["meta"] = {f"k{i}": i for i in range(width)} if draw(st.booleans()) else list(range(width))
        return Line(kind, _json(record, True))
    if kind == "wrong_type":
        target = draw(st.sampled_from([text_key, label_key] + (["id"] if with_ids else [])))
        record[target] = draw(wrong_value)
        return Line(kind, _json(record, ascii_only))
    if kind == "duplicate_keys":
        raw = _json(record, True)
        return Line(kind, b'{"%s": %s, ' % (text_key.encode(), json.dumps(draw(good_text)).encode()) + raw[1:])
    if kind == "lone_surrogate":
        surrogate = draw(st.sampled_from([b"\\ud800", b"\\udfff", b"\\ud83d"]))
        raw = _json(record, True)
        cut = raw.index(b'": "') + 4
        return Line(kind, raw[:cut] + surrogate + raw[cut:])
    if kind == "odd_label":
        record[label_key] = draw(odd_label)
        if record[label_key] is None:
            del record[label_key]
        return Line(kind, _json(record, ascii_only))
    raise AssertionError(kind)


@st.composite
def text_line(draw) -> Line:
    kind = draw(st.sampled_from(["good", "good", "random_bytes", "invalid_utf8", "bom", "nul", "cr", "separator"]))
    text = draw(good_text).encode()
    if kind == "good":
        return Line(kind, text)
    if kind == "separator":
        return Line(kind, draw(st.sampled_from(SEPARATORS)), record=False)
    if kind == "random_bytes":
        return Line(kind, _with_marker(draw(st.binary(max_size=120)), draw(st.integers()), draw(st.integers())))
    if kind == "invalid_utf8":
        return Line(kind, text + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xe2\x82"])))
    if kind == "bom":
        return Line(kind, b"\xef\xbb\xbf" + text)
    if kind == "nul":
        return Line(kind, text + b"\x00" + text)
    if kind == "cr":
        return Line(kind, text.replace(b" ", b"\r", 1) + b"x")
    raise AssertionError(kind)


def _duplicate_of(line: Line, variant: int) -> bytes:
    """A planted duplicate of a good line: the same bytes, or equal once whitespace is collapsed."""
    if variant == 0:
        return line.data
    if line.data.startswith(b"{"):
        record = json.loads(line.data)
        key = next(iter(record))
        record[key] = "  " + record[key].replace(" ", " \t ") + "\u3000"
        return _json(record, variant % 2 == 0)
    return b"  " + line.data.replace(b" ", b" \t ") + b" "


near_edit = st.tuples(st.sampled_from(["replace", "append"]), st.integers(0, 99), st.sampled_from(WORDS))


def _near_duplicate_of(line: Line, edit: tuple[str, int, str]) -> bytes:
    """A good line with one word of its text replaced, or one added at the end: a near duplicate of
    it (or, where the word replaced was the same, an exact one). Its other fields are the line's."""
    how, position, word = edit

    def edited(text: str) -> str:
        words = text.split(" ")
        if how == "append":
            return text + " " + word
        words[position % len(words)] = word
        return " ".join(words)

    if line.data.startswith(b"{"):
        record = json.loads(line.data)
        record["text"] = edited(record["text"])
        return _json(record, True)
    return edited(line.data.decode()).encode()  # a text line's words are non-whitespace: still a record


@st.composite
def record_file(draw, fmt: str, index: int, with_ids: bool) -> CorpusFile:
    extension = {"jsonl": ".jsonl", "text": ".txt"}[fmt]
    compression = draw(st.sampled_from(["", "", ".gz", ".bz2"]))
    damage = draw(st.sampled_from(["", "", "", "empty_bytes"] + (["garbage_tail", "garbage_only"] if compression else [])))
    # A file may name the text field differently (mixed schemas across files): its records are null_text.
    keys = {"text": "text", "label": "label"}
    kinds = set()
    if fmt == "jsonl" and draw(st.integers(0, 4)) == 0:
        keys = {"text": draw(st.sampled_from(["body", "Text"])), "label": "label"}
        kinds.add("mixed_schema")
    strategy = jsonl_line(keys, with_ids) if fmt == "jsonl" else text_line()
    lines = [] if damage in ("empty_bytes", "garbage_only") else draw(st.lists(strategy, min_size=0, max_size=40))
    # Only lines that surely become documents are duplicated (with ids: only those that have one).
    goods = [i for i, line in enumerate(lines) if line.kind == "good" and keys["text"] == "text"
             and (not with_ids or b'"id":' in line.data)]
    if goods:
        for pick, variant in draw(st.lists(st.tuples(st.sampled_from(goods), st.integers(0, 3)), max_size=4)):
            lines.append(Line("duplicate", _duplicate_of(lines[pick], variant), copy_of=pick))  # after its original
    if keys["text"] == "text" and damage not in ("empty_bytes", "garbage_only") and draw(st.booleans()):
        # Half the files: pages of 20-60 words, each beside its near copy (one word changed or added):
        # long enough for word 5-grams, so near-dedup has pairs to find.
        for text, edit in draw(st.lists(st.tuples(long_text, near_edit), min_size=1, max_size=3)):
            record = {"text": text, "label": draw(label_value), **({"id": draw(doc_id)} if with_ids else {})}
            page = Line("good", _json(record, True) if fmt == "jsonl" else text.encode())
            lines += [page, Line("near_duplicate", _near_duplicate_of(page, edit))]
    ending = draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))
    if ending == b"\r\n":
        kinds.add("crlf")
    if compression:
        kinds.add("compressed")
    if damage:
        kinds.add(f"{damage}{compression or '_plain'}")
    name = f"part-{index:02d}{extension}{compression}"
    return CorpusFile(name, compression, lines, ending, draw(st.booleans()), damage, kinds)


def long_line_file(fmt: str, index: int, length: int) -> CorpusFile:
    """One very long line (longer than data.chunk_mb, so chunks cut through it) between two short ones."""
    text = ("long " * (length // 5)).strip()
    if fmt == "jsonl":
        lines = [Line("good", _json({"text": "before the long line", "label": "a"}, True)),
                 Line("very_long_line", _json({"text": text, "label": "b"}, True)),
                 Line("good", _json({"text": "after the long line", "label": "c"}, True))]
    else:
        lines = [Line("good", b"before the long line"), Line("very_long_line", text.encode()),
                 Line("good", b"after the long line")]
    return CorpusFile(f"part-{index:02d}-long{'.jsonl' if fmt == 'jsonl' else '.txt'}", "", lines)


csv_text = st.one_of(
    good_text,
    st.text(alphabet=st.sampled_from(list('ab ,"\'\n\r\t;|\\') + ["é", "日", "\u2028", "\x00"]), max_size=30),
    st.text(max_size=20),
)
if sys.version_info < (3, 11):  # Python 3.10's csv.writer cannot write NUL without an escapechar
    csv_text = csv_text.map(lambda text: text.replace("\x00", ""))


@st.composite
def csv_file(draw, index: int) -> CorpusFile:
    quoting = draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC]))
    terminator = draw(st.sampled_from(["\n", "\r\n"]))
    rows = draw(st.lists(st.tuples(csv_text, st.one_of(label_value, st.sampled_from(["", "zz"]))), max_size=30))
    buffer = io.StringIO()
    if quoting == csv.QUOTE_MINIMAL and any("\r" in field for row in rows for field in row):
        terminator = "\r\n"  # csv.writer quotes only the terminator's characters: an unquoted "\r" ends a row
    writer = csv.writer(buffer, quoting=quoting, lineterminator=terminator)
    writer.writerow(["text", "label"])
    writer.writerows(rows)
    lines = [Line("csv_quoting", b"")] * len(rows)  # one record per row; content lives in `raw`
    compression = draw(st.sampled_from(["", "", ".gz", ".bz2"]))
    return CsvCorpusFile(f"part-{index:02d}.csv{compression}", compression, lines, kinds={"csv_quoting"},
                    raw=buffer.getvalue().encode())


@dataclass
class CsvCorpusFile(CorpusFile):
    raw: bytes = b""

    def content(self) -> bytes:
        return self.raw

    def expected_records(self) -> int:
        return len(self.lines)  # Spark's csv reader: a header-only file is no record

    def expected_file_reject(self) -> str | None:
        return None


@st.composite
def corpora(draw) -> Corpus:
    fmt = draw(st.sampled_from(["jsonl", "jsonl", "text", "csv"]))
    task = draw(st.sampled_from(["classification", "causal_lm"])) if fmt != "text" else "causal_lm"
    with_ids = fmt == "jsonl" and draw(st.booleans())
    count = draw(st.integers(2, 5))
    if fmt == "csv":
        files = [draw(csv_file(i)) for i in range(count)]
    else:
        files = [draw(record_file(fmt, i, with_ids)) for i in range(count)]
        if draw(st.integers(0, 3)) == 0:
            files.append(long_line_file(fmt, count, draw(st.sampled_from([150_000, 1_200_000, 2_500_000]))))
    return Corpus(fmt, task, with_ids, files)


# --- quality sections (preprocess.quality) ---------------------------------------------------------

_share = st.floats(0, 1)
_language = st.fixed_dictionaries({
    "keep": st.lists(st.sampled_from(["en", "de", "fr", "ja"]), min_size=1, max_size=2, unique=True), "min_score": _share,
    "before_filters": st.booleans()})


def _rule(draw, settings: dict) -> dict | None:
    """A rule off (None), on with its published defaults ({}), or with some thresholds drawn: each a
    third of the time (st.one_of would favour its first)."""
    how = draw(st.sampled_from(["off", "defaults", "drawn"]))
    return None if how == "off" else {} if how == "defaults" else draw(st.fixed_dictionaries({}, optional=settings))


_NEAR_DEDUP = {"ngram": st.sampled_from(["words", "chars"]), "ngram_size": st.integers(1, 6),
               "num_bands": st.integers(1, 14), "rows_per_band": st.integers(1, 8),
               "min_jaccard": st.one_of(st.none(), _share), "one_task_max_pairs": st.sampled_from([0, 1_000_000])}


@st.composite
def quality_sections(draw) -> dict | None:
    """A preprocess.quality section, or None (no section): a quarter of the time near-dedup alone
    (the filters, when on, often remove both pages of a planted pair first), else each heuristic
    filter and near-dedup off, at its defaults or with drawn thresholds (on these short texts the
    defaults remove nearly everything, drawn ones some), and the language off or on. No cap
    (max_removed_fraction 1), and a sample bigger than any corpus, so removed/ holds every removal."""
    kind = draw(st.sampled_from(["none", "near_dedup", "mixed", "mixed"]))
    if kind == "none":
        return None
    unlimited = {"max_removed_fraction": 1.0, "num_removed_samples": 100_000}
    if kind == "near_dedup":
        return {"near_dedup": _rule(draw, _NEAR_DEDUP) or {}, **unlimited}
    n_grams = st.dictionaries(st.integers(1, 10), _share, max_size=3)
    section = {
        "gopher_quality": _rule(draw, {
            "min_doc_words": st.integers(0, 8), "max_doc_words": st.one_of(st.none(), st.integers(1, 30)),
            "min_avg_word_length": st.floats(0, 5), "max_avg_word_length": st.one_of(st.none(), st.floats(1, 20)),
            "max_symbol_word_ratio": st.one_of(st.none(), _share), "max_bullet_lines_ratio": _share,
            "max_non_alpha_words_ratio": _share, "min_stop_words": st.integers(0, 3)}),
        "gopher_repetition": _rule(draw, {
            "dup_line_frac": _share, "dup_para_frac": _share, "dup_line_char_frac": _share, "dup_para_char_frac": _share,
            "top_n_grams": n_grams, "dup_n_grams": st.dictionaries(st.integers(1, 20), _share, max_size=3)}),
        "c4": _rule(draw, {
            "filter_no_terminal_punct": st.booleans(), "min_num_sentences": st.one_of(st.none(), st.integers(0, 5)),
            "min_words_per_line": st.one_of(st.none(), st.integers(0, 5)), "max_word_length": st.integers(1, 20),
            "filter_lorem_ipsum": st.booleans(), "filter_javascript": st.booleans(),
            "filter_curly_bracket": st.booleans(), "filter_policy": st.booleans()}),
        "fineweb": _rule(draw, {
            "line_punct_thr": st.one_of(st.none(), _share), "short_line_thr": st.one_of(st.none(), _share),
            "char_duplicates_ratio": st.one_of(st.none(), _share), "new_line_ratio": st.one_of(st.none(), st.floats(0, 2))}),
        "language": draw(_language) if draw(st.booleans()) else None,
        "near_dedup": _rule(draw, _NEAR_DEDUP),
    }
    return {**section, **unlimited}
