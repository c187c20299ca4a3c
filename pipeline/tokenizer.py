"""Tokenizer sources: a local Hugging Face tokenizer, or one trained from the corpus.

Whatever the source, the run keeps its own copy in `run_dir/tokenizer/` (a `save_pretrained`
directory), and every later stage loads that copy, so the dataset, the model and the sha256 in the
manifest always refer to the same bytes.
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from pipeline.config import TokenizerTrainConfig, resolve_local_path
from pipeline.errors import MissingPathError, ShardlineError

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
        tokenizer.decoder = readable_wordpiece_decoder()
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


# BERT's pre-tokenizer splits at every punctuation character and keeps no record of the spaces, so
# the plain WordPiece decoder puts a space around each: `set _ event _ loop ( )`. These rewrites of
# the decoded string (literal replacements at places found by lookarounds) undo the spacings that
# are the usual ones in the demo's docstrings (`non-blocking` 641 times, `a - b` 116; `word:` 220,
# `word :` 14); spaces that cannot be told apart (`asyncio. run`, `f (x)`) stay. Encoding is unaffected.
_DECODE_REWRITES = (
    (r"(?<=\w) / (?=\w)", "/"),  # i / o -> i/o
    (r" ?_ ?", "_"),  # set _ event _ loop -> set_event_loop
    (r"(?<=[(\[{]) ", ""),  # ( x -> (x
    (r" (?=[)\]}])", ""),  # x ) -> x)
    (r" (?=[;:%])", ""),  # headers : -> headers:
    (r"(?<=\w) ' (?=(?:t|s|re|ve|ll|d|m)\b)", "'"),  # don ' t -> don't
    (r"(?<=\w) - (?=\w)", "-"),  # non - blocking -> non-blocking
    (r"(?<=-) (?=-)", ""),  # - - -> --
    (r"(?<=\d)\. (?=\d)", "."),  # 3. 11 -> 3.11
    (r"(?<=\b\w)\. (?=\w\.)", "."),  # e. g. -> e.g.
    (r"(?<=\w) \(\)", "()"),  # loop () -> loop()
    (r"(?<=\$) (?=\d)", ""),  # $ 5 -> $5
)


def readable_wordpiece_decoder() -> decoders.Decoder:
    """WordPiece decoding (`##` continuations joined, ` .` and ` ,` cleaned up), then the rewrites above."""
    return decoders.Sequence([
        decoders.WordPiece(prefix="##", cleanup=True),
        decoders.Fuse(),  # one string, so the rewrites see the spaces between tokens
        *[decoders.Replace(Regex(pattern), replacement) for pattern, replacement in _DECODE_REWRITES],
    ])


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
    """Load a tokenizer directory or a bare tokenizer.json (local or on any store), a pkg://
    directory, or (online only) a hub name."""
    from pipeline import storage

    path = resolve_local_path(str(path))
    if not storage.is_local(path):
        if path.endswith(".json"):
            with tempfile.TemporaryDirectory() as tmp:
                local = os.path.join(tmp, storage.basename(path))
                with open(local, "wb") as handle:
                    handle.write(storage.read_bytes(path))
                return load_tokenizer(local)
        if not storage.exists(path):
            raise MissingPathError(f"tokenizer directory {path} does not exist")
        with storage.local_dir_for(path) as local:
            return load_tokenizer(local)
    path_obj = Path(path)
    if path_obj.is_file():
        tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(path_obj))
    elif path_obj.is_dir() or not _looks_like_hub_name(str(path)):
        if not path_obj.exists():
            raise MissingPathError(f"tokenizer.path {path} does not exist")
        tokenizer = (_named_tokenizer_class(path_obj) or _auto_tokenizer()).from_pretrained(str(path_obj))
    else:
        tokenizer = _auto_tokenizer().from_pretrained(str(path))
    if not tokenizer.is_fast:
        raise ShardlineError(f"tokenizer at {path} has no fast (Rust) implementation; shardline needs one")
    if tokenizer.pad_token_id is None:
        # A bare tokenizer.json carries no special-token roles; adopt a conventional pad token.
        found = [t for t in _CONVENTIONAL_PAD_TOKENS if tokenizer.convert_tokens_to_ids(t) != tokenizer.unk_token_id
                 and t in tokenizer.get_vocab()]
        if found:
            tokenizer.pad_token = found[0]
    if tokenizer.pad_token_id is None:
        raise ShardlineError(f"tokenizer at {path} defines no pad token; add one (e.g. [PAD]) and save it")
    return tokenizer


_CONVENTIONAL_PAD_TOKENS = ("[PAD]", "<pad>", "<|pad|>", "<|padding|>")


def _named_tokenizer_class(directory: Path) -> type | None:
    """The fast class a directory's tokenizer_config.json names (`tokenizer_class`), as AutoTokenizer
    would pick it, found without AutoTokenizer; None when the directory names none, or a class this
    transformers does not have or cannot import."""
    try:
        name = json.loads((directory / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(name, str) or not name.isidentifier():
        return None
    import transformers

    # transformers 4 names the slow class and AutoTokenizer takes its Fast twin; in 5 the named class is fast.
    for candidate in dict.fromkeys((name if name.endswith("Fast") else f"{name}Fast", name)):
        try:
            found = getattr(transformers, candidate)
        except (AttributeError, ImportError):
            continue
        if isinstance(found, type) and issubclass(found, PreTrainedTokenizerFast):
            return found
    return None


def _auto_tokenizer():
    """transformers.AutoTokenizer, imported only where a directory's class is not named plainly in
    its tokenizer_config.json (`_named_tokenizer_class`): it imports torch (~1.5 s), which the Spark
    job's driver never uses otherwise."""
    from transformers import AutoTokenizer

    return AutoTokenizer


def _looks_like_hub_name(text: str) -> bool:
    return "/" in text and not text.startswith((".", "/", "~")) and text.count("/") == 1


def backend_json(tokenizer: PreTrainedTokenizerFast) -> str:
    """The Rust tokenizer as a JSON string: what Spark workers rebuild the tokenizer from."""
    return tokenizer.backend_tokenizer.to_str()
