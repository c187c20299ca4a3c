"""Tokenizer sources: a local Hugging Face tokenizer, or one trained from the corpus.

Whatever the source, the run keeps its own copy in `run_dir/tokenizer/` (a `save_pretrained`
directory), and every later stage loads that copy, so the dataset, the model and the sha256 in the
manifest always refer to the same bytes.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from pipeline.config import TokenizerTrainConfig, resolve_local_path

TOKENIZER_JSON = "tokenizer.json"


def train_tokenizer(texts: Iterable[str], cfg: TokenizerTrainConfig) -> PreTrainedTokenizerFast:
    """Train a BERT-style (wordpiece) or GPT-style (byte-level BPE) tokenizer on `texts`.

    The same texts and settings give the same tokenizer.json bytes in every process: see
    `wordpiece_vocab` for the wordpiece case; the byte-level BPE trainer is reproducible as it is
    (its whole alphabet is given up front and numbered in sorted order, and it breaks ties between
    equally frequent pairs by those numbers).
    """
    specials = list(cfg.special_tokens)
    if cfg.kind == "wordpiece":
        unk, pad, cls, sep = _pick(specials, "[UNK]", "[PAD]", "[CLS]", "[SEP]")
        normalizer = normalizers.BertNormalizer(lowercase=True)
        pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        vocab = wordpiece_vocab(count_words(texts, normalizer, pre_tokenizer), cfg.vocab_size, specials)
        tokenizer = Tokenizer(models.WordPiece(vocab, unk_token=unk, continuing_subword_prefix=CONTINUATION))
        tokenizer.normalizer = normalizer
        tokenizer.pre_tokenizer = pre_tokenizer
        tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION)
        tokenizer.add_special_tokens(specials)
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}",
            pair=f"{cls} $A {sep} $B:1 {sep}:1",
            special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))],
        )
    else:
        unk, pad, cls, sep = _pick(specials, "<unk>", "<pad>", "<s>", "</s>")
        tokenizer = Tokenizer(models.BPE(unk_token=unk))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=cfg.vocab_size,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token=unk, pad_token=pad, cls_token=cls, sep_token=sep,
        bos_token=cls if cfg.kind == "bpe" else None, eos_token=sep if cfg.kind == "bpe" else None,
    )


CONTINUATION = "##"  # WordPiece's mark on a piece that continues a word


def count_words(texts: Iterable[str], normalizer, pre_tokenizer) -> Counter:
    """How often each word occurs, as the tokenizer's normalizer and pre-tokenizer cut the texts."""
    counts: Counter = Counter()
    for text in texts:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    return counts


def wordpiece_vocab(word_counts: Counter, vocab_size: int, specials: list[str]) -> dict[str, int]:
    """A WordPiece vocabulary learnt by BPE merges over `word_counts`, the same in every process.

    tokenizers' WordPieceTrainer numbers each continuation symbol (`##x`) in the order it meets it
    while iterating a hash map of the words, and breaks ties between equally frequent pairs by
    those numbers, so the same words give a different vocabulary in every process
    (huggingface/tokenizers#1794). Here the BPE trainer that WordPieceTrainer wraps is given every
    `##x` up front, in sorted order, as reserved tokens, so all symbols are numbered the same way
    each time; the merges, and so the vocabulary, follow. The words are fed from the count table
    (each word `count` times), so the trainer sees exactly the words the alphabet was taken from.
    """
    continuations = sorted({CONTINUATION + c for word in word_counts for c in word[1:]} - set(specials))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials + continuations,
        continuing_subword_prefix=CONTINUATION, show_progress=False,
    )
    merger = Tokenizer(models.BPE(continuing_subword_prefix=CONTINUATION))
    merger.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # the words hold no whitespace: one word each
    merger.train_from_iterator(_repeated_words(word_counts), trainer=trainer)
    return merger.get_vocab(with_added_tokens=False)


def _repeated_words(word_counts: Counter, per_text: int = 4096) -> Iterator[str]:
    for word, count in sorted(word_counts.items(), key=lambda item: (-item[1], item[0])):
        for start in range(0, count, per_text):
            yield " ".join([word] * min(per_text, count - start))


def _pick(specials: list[str], *wanted: str) -> tuple[str, ...]:
    missing = [token for token in wanted if token not in specials]
    if missing:
        raise ValueError(f"tokenizer.train.special_tokens must include {missing}")
    return wanted


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer directory, a bare tokenizer.json, a pkg:// directory, or (online only) a hub name."""
    path = resolve_local_path(str(path))
    path_obj = Path(path)
    if path_obj.is_file():
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(path_obj))
    elif path_obj.is_dir() or not _looks_like_hub_name(str(path)):
        if not path_obj.exists():
            raise FileNotFoundError(f"tokenizer.path {path} does not exist")
        tokenizer = AutoTokenizer.from_pretrained(str(path_obj))
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    if not tokenizer.is_fast:
        raise ValueError(f"tokenizer at {path} has no fast (Rust) implementation; shardline needs one")
    if tokenizer.pad_token_id is None:
        # A bare tokenizer.json carries no special-token roles; adopt a conventional pad token.
        found = [t for t in _CONVENTIONAL_PAD_TOKENS if tokenizer.convert_tokens_to_ids(t) != tokenizer.unk_token_id
                 and t in tokenizer.get_vocab()]
        if found:
            tokenizer.pad_token = found[0]
    if tokenizer.pad_token_id is None:
        raise ValueError(f"tokenizer at {path} defines no pad token; add one (e.g. [PAD]) and save it")
    return tokenizer


_CONVENTIONAL_PAD_TOKENS = ("[PAD]", "<pad>", "<|pad|>", "<|padding|>")


def _looks_like_hub_name(text: str) -> bool:
    return "/" in text and not text.startswith((".", "/", "~")) and text.count("/") == 1


def backend_json(tokenizer: PreTrainedTokenizerFast) -> str:
    """The Rust tokenizer as a JSON string: what Spark workers rebuild the tokenizer from."""
    return tokenizer.backend_tokenizer.to_str()
