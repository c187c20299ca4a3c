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
