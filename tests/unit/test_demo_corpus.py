"""The demo corpus ships with the package: the same records on any interpreter, tkinter or not."""
from __future__ import annotations

import subprocess
import sys
import sysconfig

import pytest

from pipeline.demo import DEMO_PACKAGES, demo_records, stdlib_docstrings


def test_the_corpus_needs_no_stdlib_sources(tmp_path, monkeypatch):
    # A stdlib without tkinter, as Debian's and Ubuntu's python3 have it without python3-tk.
    (tmp_path / "asyncio").mkdir()
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"stdlib": str(tmp_path)})
    with pytest.raises(FileNotFoundError, match="asyncio has no sources"):
        stdlib_docstrings()
    records = demo_records()
    assert len(records) == 1428
    assert [label for label in DEMO_PACKAGES if any(r["label"] == label for r in records)] == list(DEMO_PACKAGES)
    assert demo_records(("email", "logging")) == [r for r in records if r["label"] in ("email", "logging")]


@pytest.mark.skipif(sys.version_info[:3] != (3, 11, 7), reason="the shipped corpus is Python 3.11.7's stdlib")
def test_the_shipped_corpus_is_what_the_recipe_gives_on_python_3_11_7():
    try:
        from_stdlib = stdlib_docstrings()
    except FileNotFoundError as missing:
        pytest.skip(str(missing))  # e.g. a 3.11.7 without tkinter's sources
    assert demo_records() == from_stdlib


def test_the_demo_writes_the_shipped_corpus(tmp_path):
    """`python -m pipeline.demo` writes the shipped records, not this interpreter's, before running."""
    script = ("import sys, sysconfig; from pipeline import demo, cli, storage; "
              "sysconfig.get_paths = lambda: {'stdlib': sys.argv[1]}; cli.main = lambda argv: 3; "
              "sys.exit(demo.main(['--run-dir', sys.argv[2]]))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "empty-stdlib"), str(tmp_path / "run")],
                          capture_output=True, text=True)
    assert done.returncode == 3, done.stderr  # the chain itself is not run here: only the corpus it reads
    written = (tmp_path / "demo-corpus" / "docstrings.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(written) == len(demo_records())
