"""A trained tokenizer is the same bytes in every process: trained in fresh interpreters under
different PYTHONHASHSEEDs (set and dict order of str keys differ between them), as Spark's driver
and the tests' own process each have their own."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN_IN_A_PROCESS = """
import hashlib, json, sys, tempfile
from pathlib import Path
from pipeline.config import TokenizerTrainConfig
from pipeline.demo import demo_records
from pipeline.tokenizer import train_tokenizer

kind, specials = sys.argv[1], json.loads(sys.argv[2])
texts = [r["text"] for r in demo_records()[:400]]
with tempfile.TemporaryDirectory() as out:
    train_tokenizer(texts, TokenizerTrainConfig(kind=kind, vocab_size=800, special_tokens=specials)).save_pretrained(out)
    print(json.dumps({p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(Path(out).iterdir())}))
"""


@pytest.mark.parametrize("kind, specials", [
    ("wordpiece", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]),
    ("bpe", ["<pad>", "<unk>", "<s>", "</s>"]),
])
def test_the_tokenizer_trained_under_three_hash_seeds_is_the_same_bytes(kind, specials):
    found = []
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO_ROOT)}
        result = subprocess.run([sys.executable, "-c", TRAIN_IN_A_PROCESS, kind, json.dumps(specials)], env=env,
                                cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        found.append(json.loads(result.stdout.strip().splitlines()[-1]))
    assert "tokenizer.json" in found[0]
    assert found[0] == found[1] == found[2], {seed: f["tokenizer.json"][:12] for seed, f in zip("0 1 4242".split(), found)}
    assert hashlib.sha256(b"").hexdigest() not in found[0].values()
