"""Real-text corpora for the benchmarks, built offline from Debian's `dict-gcide` package.

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
    root = workdir / "dict-gcide"
    index = root / "usr/share/dictd/gcide.index"
    if index.exists():
        return root
    system = Path("/usr/share/dictd/gcide.index")
    if system.exists():
        return Path("/")
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", "dict-gcide"], cwd=root, check=True, capture_output=True)
    deb = sorted(glob.glob(str(root / "dict-gcide_*.deb")))[-1]
    subprocess.run(["dpkg-deb", "-x", deb, str(root)], check=True)
    os.remove(deb)
    return root


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
