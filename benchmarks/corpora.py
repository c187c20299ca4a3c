"""Real-text corpora for the benchmarks, built offline from Debian packages: `dict-gcide`, and the
manual pages (`manpages`, `manpages-dev` in English, `manpages-de`/`-fr`/... translated).

GCIDE (the Collaborative International Dictionary of English, GPL) is ~126,000 dictionary entries
of real English prose with markup, line breaks and indentation, so cleaning has real work to do.
The package is fetched with apt (Debian's registry is reachable where PyPI is) and unpacked into
the work directory; nothing is installed system-wide:

    apt-get download dict-gcide && dpkg-deb -x dict-gcide_*.deb <dir>

`gcide_entries` returns the entries; `write_jsonl` writes them as one JSONL file, as many small
files, or repeated `copies` times with a unique prefix per copy (every document stays unique, so
dedup removes nothing and the output grows with the input: the memory benchmark's >= 1 GB corpus).
"""
from __future__ import annotations

import glob
import gzip
import json
import os
import re
import subprocess
from pathlib import Path

_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
_LABELS = ("a-e", "f-l", "m-r", "s-z")  # headword's first letter: a 4-way label for classification


def _b64(text: str) -> int:
    value = 0
    for char in text:
        value = value * 64 + _B64[char]
    return value


def gcide_dir(workdir: Path) -> Path:
    """The unpacked dict-gcide package under workdir (downloaded with apt-get the first time)."""
    if Path("/usr/share/dictd/gcide.index").exists():
        return Path("/")
    return debian_package(workdir, "dict-gcide")


def debian_package(workdir: Path, package: str) -> Path:
    """A Debian package unpacked under workdir/package (downloaded with apt-get the first time)."""
    root = workdir / package
    if (root / ".unpacked").exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", package], cwd=root, check=True, capture_output=True)
    deb = sorted(glob.glob(str(root / f"{package}_*.deb")))[-1]
    subprocess.run(["dpkg-deb", "-x", deb, str(root)], check=True)
    os.remove(deb)
    (root / ".unpacked").write_text("")
    return root


# Manual pages: groff source to plain text, well enough for prose (requests dropped or reduced to
# their words, font and character escapes removed). Paragraphs are what .PP/.TP/.IP/.SH separate.
_GROFF_ESCAPES = [
    (re.compile(r"\\f(\(..|\[[^]]*\]|.)"), ""),  # font changes: \fB \fI \fR \f(CW \f[B]
    (re.compile(r"\\[(]em|\\\[em\]"), "\u2014"), (re.compile(r"\\[(]en|\\\[en\]"), "\u2013"),
    (re.compile(r"\\[(]aq|\\\[aq\]"), "'"), (re.compile(r"\\[(]dq|\\\[dq\]"), '"'),
    (re.compile(r"\\[(]lq|\\[(]rq"), '"'), (re.compile(r"\\[(]bu"), "\u2022"),
    (re.compile(r"\\\*(\(..|\[[^]]*\]|.)"), ""),  # strings
    (re.compile(r"\\[(]..|\\\[[^]]*\]"), ""),  # other special characters
    (re.compile(r"\\-"), "-"), (re.compile(r"\\[&|^%]"), ""), (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\ "), " "), (re.compile(r"\\[cs][-+]?\d*"), ""),
]
_BREAKS = {"PP", "LP", "P", "TP", "IP", "SH", "SS", "HP", "RS", "RE", "TQ", "sp", "br", "in"}
_WORD_REQUESTS = {"B", "I", "SM", "BR", "BI", "IB", "IR", "RB", "RI", "SB", "UR", "MT", "Nm", "Ar", "Fl"}


def groff_paragraphs(source: str) -> list[str]:
    """The prose paragraphs of a man page's groff source, each with its line breaks."""
    paragraphs, current = [], []
    for line in source.splitlines():
        if line.startswith((".\\\"", "'\\\"")):
            continue
        if line.startswith((".", "'")):
            request, _, rest = line[1:].strip().partition(" ")
            if request in _BREAKS:
                if current:
                    paragraphs.append("\n".join(current))
                current = []
                if request in ("SH", "SS", "TP") and rest:
                    paragraphs.append(rest.strip('"'))
            elif request in _WORD_REQUESTS and rest:
                current.append(" ".join(part.strip('"') for part in rest.split()))
            continue
        for pattern, replacement in _GROFF_ESCAPES:
            line = pattern.sub(replacement, line)
        if line.strip():
            current.append(line.strip())
    if current:
        paragraphs.append("\n".join(current))
    return [p for p in paragraphs if p.strip()]


def manpages(workdir: Path, package: str) -> list[tuple[str, str]]:
    """(page path, its text: paragraphs separated by blank lines) for every page of a manpages
    package that is not a one-line redirect (.so)."""
    root = debian_package(workdir, package)
    pages = []
    for path in sorted(root.glob("usr/share/man/**/*.gz")):
        source = gzip.open(path).read().decode("utf-8", errors="replace")
        if source.lstrip().startswith(".so "):
            continue
        text = "\n\n".join(groff_paragraphs(source))
        if text:
            pages.append((str(path.relative_to(root)), text))
    return pages


def gcide_entries(workdir: Path) -> list[tuple[str, str]]:
    """(headword, entry text) for every distinct entry, in file order."""
    root = gcide_dir(workdir)
    data = gzip.open(root / "usr/share/dictd/gcide.dict.dz").read()
    spans: dict[tuple[int, int], str] = {}
    with open(root / "usr/share/dictd/gcide.index", encoding="utf-8") as index:
        for line in index:
            word, offset, length = line.rstrip("\n").split("\t")
            if not word.startswith("00-database"):
                spans.setdefault((_b64(offset), _b64(length)), word)
    entries = []
    for (offset, length), word in sorted(spans.items()):
        raw = data[offset:offset + length]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")  # three entries carry stray cp1252 bytes
        entries.append((word, text))
    return entries


def _label(word: str) -> str:
    first = word[:1].lower()
    for label in _LABELS:
        if label[0] <= first <= label[-1]:
            return label
    return _LABELS[0]


def write_jsonl(entries: list[tuple[str, str]], out: Path, num_files: int = 1, copies: int = 1) -> int:
    """Write the entries (x copies) as JSONL: `out` itself when num_files is 1, else num_files files
    in the directory `out`. Returns the number of documents."""
    if num_files > 1:
        out.mkdir(parents=True, exist_ok=True)
        handles = [open(out / f"part-{i:05d}.jsonl", "w", encoding="utf-8") for i in range(num_files)]
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        handles = [open(out, "w", encoding="utf-8")]
    docs = 0
    try:
        for copy in range(copies):
            prefix = f"[{copy}] " if copies > 1 else ""
            for i, (word, text) in enumerate(entries):
                line = json.dumps({"word": word, "text": prefix + text, "label": _label(word)})
                handles[(i * len(handles)) // len(entries)].write(line + "\n")
                docs += 1
    finally:
        for handle in handles:
            handle.close()
    return docs
