r"""English words as spaCy's blank English pipeline makes them, which is what datatrove 0.10.1's
filters count (spark_jobs.text_filters), and the sentences spaCy's sentencizer finds (C4's rule).

datatrove 0.10.1 splits English into words with spaCy (`spacy.blank("en")`: its rule-based
tokenizer, no model), not NLTK: its tokenizer_assignment.csv maps eng to SpaCyTokenizer("en"), and
C4 counts sentences with spaCy's rule-based sentencizer. spaCy (with thinc, ~60 MB, builds for
numpy 2 only) is too heavy to ship to executors for this, so `spacy_english_words` re-implements
spaCy's tokenizer algorithm (split on whitespace, then prefixes, suffixes, special cases, URLs,
infixes, then special cases merged back) with its English rules written for Python's `re` (letter
classes from str.islower/isupper) and its English exceptions (abbreviations such as "Mr.",
contractions such as "don't" -> "do", "n't", emoticons), generated as spaCy generates them.
Measured on the parity corpus of tests/current_stack/test_filter_parity.py (1,403 package
descriptions and standard-library docstrings, 2.2 MB): every document gets spaCy's exact tokens.
Simpler tokenizers do not let the filters reach the 99.5 % parity asked for: str.split 62.4 / 93.4
/ 97.4 / 98.2 % (gopher_quality / repetition / c4 / fineweb), the regex \w+|[^\w\s]+ 94.1 / 91.7 /
96.6 / 100 %.

Chunks (what str.split makes) are cached, as spaCy caches them; `_simple_split` takes "word,"
"[word" and the like past the regexes. Importing this module builds the regexes: 0.2 s once per
Python worker.

Where pip compiled spark_jobs/_english_words_c.c, chunks that are all ASCII are split in C, which
follows `_split_chunk` with each regex written out as the ASCII characters it matches: the same
tokens (tests/unit/test_english_words.py; spaCy itself in tests/current_stack), 19-25 us a GCIDE
entry against 76-83 us (one core, 2026-12-07).
"""
from __future__ import annotations

import re
import unicodedata


def _letter_classes() -> tuple[str, str, str, str]:
    """Regex class bodies (letters, lower-or-uncased, upper-or-uncased, other symbols) over the BMP
    and the emoji planes: spaCy lists its classes by hand; Unicode's categories give nearly the same."""
    members: list[list[int]] = [[], [], [], []]
    for cp in (*range(0x10000), *range(0x1F000, 0x1FB00)):
        c = chr(cp)
        if c.isalpha():
            members[0].append(cp)
            cased = c.islower() or c.isupper()
            if not c.isupper():
                members[1].append(cp)
            if c.isupper() or not cased:
                members[2].append(cp)
        elif unicodedata.category(c) == "So":
            members[3].append(cp)

    def ranges(points: list[int]) -> str:
        out, start, prev = [], None, None
        for cp in points + [-2]:
            if start is None:
                start = prev = cp
            elif cp == prev + 1:
                prev = cp
            else:
                first, last = re.escape(chr(start)), re.escape(chr(prev))
                out.append(first if start == prev else f"{first}{'' if prev == start + 1 else '-'}{last}")
                start = prev = cp
        return "".join(out)

    return tuple(ranges(m) for m in members)  # type: ignore[return-value]


_ALPHA, _ALPHA_LOWER, _ALPHA_UPPER, _ICONS = _letter_classes()
_PUNCT = ["…", "……", ",", ":", ";", r"\!", r"\?", "¿", "؟", "¡", r"\(", r"\)", r"\[", r"\]", r"\{", r"\}", "<", ">",
          "_", "#", r"\*", "&", "。", "？", "！", "，", "、", "；", "：", "～", "·", "।", "،", "۔", "؛", "٪"]
_QUOTES_CHARS = "'\"”“`‘´’‚,„»«「」『』（）〔〕【】《》〈〉〈〉⟦⟧"
_QUOTES = [re.escape(c) for c in _QUOTES_CHARS]
_ELLIPSES = [r"\.\.+", "…"]
_CURRENCY = [r"\$", "£", "€", "¥", "฿", r"US\$", r"C\$", r"A\$", "₽", "﷼", "₴"] + [chr(c) for c in range(0x20A0, 0x20C0)]
_UNITS = ("km km² km³ m m² m³ dm dm² dm³ cm cm² cm³ mm mm² mm³ ha µm nm yd in ft kg g mg µg t lb oz m/s km/h kmh "
          "mph hPa Pa mbar mb MB kb KB gb GB tb TB T G M K % км км² км³ м м² м³ дм дм² дм³ см см² см³ мм мм² мм³ нм "
          "кг г мг м/с км/ч кПа Па мбар Кб КБ кб Мб МБ мб Гб ГБ гб Тб ТБ тбكم كم² كم³ م م² م³ سم سم² سم³").split()
_ICON = f"[{_ICONS}]"
_PUNCT_CLASS = "".join(p.lstrip("\\") if len(p.lstrip("\\")) == 1 else "" for p in _PUNCT)

_PREFIXES = (["§", "%", "=", "—", "–", r"\+(?![0-9])"] + _PUNCT + _ELLIPSES + _QUOTES + _CURRENCY + [_ICON])
_SUFFIXES = (_PUNCT + _ELLIPSES + _QUOTES + [_ICON] + ["'s", "'S", "’s", "’S", "—", "–"] + [
    r"(?<=[0-9])\+",
    r"(?<=°[FfCcKk])\.",
    r"(?<=[0-9])(?:{})".format("|".join(_CURRENCY)),
    r"(?<=[0-9])(?:{})".format("|".join(re.escape(u) for u in _UNITS)),
    r"(?<=[0-9{al}%²\-\+{p}{q}|])\.".format(al=_ALPHA_LOWER, p=re.escape(_PUNCT_CLASS), q=re.escape(_QUOTES_CHARS)),
    r"(?<=[{au}][{au}])\.".format(au=_ALPHA_UPPER),
])
_INFIXES = _ELLIPSES + [_ICON] + [
    r"(?<=[0-9])[+\-\*^](?=[0-9-])",
    r"(?<=[{al}{q}])\.(?=[{au}{q}])".format(al=_ALPHA_LOWER, au=_ALPHA_UPPER, q=re.escape(_QUOTES_CHARS)),
    r"(?<=[{a}]),(?=[{a}])".format(a=_ALPHA),
    r"(?<=[{a}0-9])(?:-|–|—|--|---|——|~)(?=[{a}])".format(a=_ALPHA),
    r"(?<=[{a}0-9])[:<>=/](?=[{a}])".format(a=_ALPHA),
]
_prefix_match = re.compile("|".join("^" + p for p in _PREFIXES)).match
_suffix_regex = re.compile("|".join(p + "$" for p in _SUFFIXES))
_SUFFIX_MAX = 4  # the longest suffix but a run of periods ("km/h", "US$"); a search needs only the tail


def _suffix_search(string: str):
    """The leftmost suffix, as spaCy's search over the whole string finds it, but searching only
    the tail (lookbehinds still see what precedes it): re tries every alternative at every position."""
    if string.endswith(".."):
        return _suffix_regex.search(string)
    return _suffix_regex.search(string, max(0, len(string) - _SUFFIX_MAX))


_infix_finditer = re.compile("|".join(_INFIXES)).finditer
# spaCy's URL_MATCH (after Diego Perini's), less the IPv4 range checks.
_url_match = re.compile(
    r"^(?:[\w+\-.]{2,}://)?(?:\S+(?::\S*)?@)?"
    r"(?:\d{1,3}(?:\.\d{1,3}){3}|(?:(?:[A-Za-z0-9\u00a1-\uffff][A-Za-z0-9\u00a1-\uffff_-]{0,62})?"
    r"[A-Za-z0-9\u00a1-\uffff]\.)+" f"[{_ALPHA_LOWER}]" r"{2,63})(?::\d{2,5})?(?:[/?#]\S*)?$").match


def _english_exceptions() -> dict[str, tuple[str, ...]]:
    """spaCy's English tokenizer exceptions, generated the way spacy/lang/en/tokenizer_exceptions.py
    does: contractions (with ' and ’, lower and title case) split, abbreviations kept whole."""
    exc: dict[str, tuple[str, ...]] = {}
    exclude = {"Ill", "ill", "Its", "its", "Hell", "hell", "Shell", "shell", "Shed", "shed", "were", "Were",
               "Well", "well", "Whore", "whore"}

    def add(parts: tuple[str, ...]) -> None:
        orth = "".join(parts)
        if orth not in exclude:
            exc[orth] = parts

    def both_cases(word: str):
        return (word, word[0].upper() + word[1:])

    for orth in both_cases("i"):
        for parts in ((orth, "'m"), (orth, "m"), (orth, "'m", "a"), (orth, "m", "a")):
            add(parts)
    for pron in ("i", "you", "he", "she", "it", "we", "they"):
        for orth in both_cases(pron):
            for tail in (("'ll",), ("ll",), ("'ll", "'ve"), ("ll", "ve"), ("'d",), ("d",), ("'d", "'ve"), ("d", "ve")):
                add((orth, *tail))
    for pron in ("i", "you", "we", "they"):
        for orth in both_cases(pron):
            add((orth, "'ve"))
            add((orth, "ve"))
    for pron in ("you", "we", "they"):
        for orth in both_cases(pron):
            add((orth, "'re"))
            add((orth, "re"))
    for pron in ("he", "she", "it"):
        for orth in both_cases(pron):
            add((orth, "'s"))
            add((orth, "s"))
    for word in ("who", "what", "when", "where", "why", "how", "there", "that", "this", "these", "those"):
        tails = [("'ll",), ("ll",), ("'ll", "'ve"), ("ll", "ve"), ("'d",), ("d",), ("'d", "'ve"), ("d", "ve")]
        if word not in ("these", "those"):
            tails += [("'s",), ("s",)]
        if word not in ("that", "this"):
            tails += [("'re",), ("re",), ("'ve",), ("ve",)]
        for orth in both_cases(word):
            for tail in tails:
                add((orth, *tail))
    for verb in ("ca", "could", "do", "does", "did", "had", "may", "might", "must", "need", "ought", "sha", "should",
                 "wo", "would"):
        for orth in both_cases(verb):
            for tail in (("n't",), ("nt",), ("n't", "'ve"), ("nt", "ve")):
                add((orth, *tail))
    for verb in ("could", "might", "must", "should", "would"):
        for orth in both_cases(verb):
            add((orth, "'ve"))
            add((orth, "ve"))
    for verb in ("ai", "are", "is", "was", "were", "have", "has", "dare"):
        for orth in both_cases(verb):
            add((orth, "n't"))
            add((orth, "nt"))
    for parts in (("y'", "all"), ("y", "all"), ("How", "'d", "'y"), ("how", "'d", "'y"), ("not", "'ve"),
                  ("not", "ve"), ("Not", "'ve"), ("Not", "ve"), ("can", "not"), ("Can", "not"), ("gon", "na"),
                  ("Gon", "na"), ("got", "ta"), ("Got", "ta"), ("let", "'s"), ("Let", "'s"), ("c'm", "on"),
                  ("C'm", "on"), ("I", "'m", "a")):
        add(parts)
    for hour in range(1, 13):
        for period in ("a.m.", "am", "p.m.", "pm"):
            add((str(hour), period))
    whole = ["'S", "'s", "'d", "'em", "'ll", "'re", "'cause", "'cos", "'coz", "'cuz", "'bout", "'nuff", "'Cause",
             "'Cos", "'Coz", "'Cuz", "ma'am", "Ma'am", "o'clock", "O'clock", "em", "ll", "nuff"]
    for word in ("doin", "goin", "havin", "lovin", "nothin", "nuthin", "somethin", "ol"):
        for orth in both_cases(word):
            whole += [orth, orth + "'"]
    for key in whole:
        exc[key] = (key,)
    for key, parts in list(exc.items()):
        if "'" in key:
            exc[key.replace("'", "’")] = tuple(p.replace("'", "’") for p in parts)
    # Kept whole: abbreviations ending in a period, and the emoticons and symbols spaCy lists.
    whole = (
        "Mt. Ak. Ala. Apr. Ariz. Ark. Aug. Calif. Colo. Conn. Dec. Del. Feb. Fla. Ga. Ia. Id. Ill. Ind. Jan. "
        "Jul. Jun. Kan. Kans. Ky. La. Mar. Mass. Mich. Minn. Miss. N.C. N.D. N.H. N.J. N.M. N.Y. Neb. Nebr. Nev. "
        "Nov. Oct. Okla. Ore. Pa. S.C. Sep. Sept. Tenn. Va. Wash. Wis. "
        "a.m. Adm. Bros. co. Co. Corp. D.C. Dr. e.g. E.g. E.G. Gen. Gov. i.e. I.e. I.E. Inc. "
        "Jr. Ltd. Md. Messrs. Mo. Mont. Mr. Mrs. Ms. p.m. Ph.D. Prof. Rep. Rev. Sen. St. vs. v.s. "
        "a. b. c. d. e. f. g. h. i. j. k. l. m. n. o. p. q. r. s. t. u. v. w. x. y. z. ä. ö. ü. "
        "' '' ’ ’’ ‘s ‘S — C++ and/or w/o \\n \\t \\\") <space> \xa0 "
        ":) :-) :)) :-)) :))) :-))) (: (-: :( :-( :(( :-(( :((( :-((( ): )-: :() :'( :'-( :') :'-) :’( :’-( :’) "
        ":’-) :* :-* :/ :-/ =/ :0 :-0 :1 :3 :-3 =3 :> :-> :D :-D ;D ;-D =D 8D 8-D :O :-O :o :-o :o) (o: :P :-P "
        ":p :-p :X :-X :x :-x :| :-| =| :] :-] :} :-} [: [-: [= ]= =( =) =[ =] (= ;) ;-) (; (-; ;_; 8) 8-) (-8 "
        "<3 <33 <333 </3 >:( >:o xD XD xDD XDD ^_^ ^__^ ^___^ (^_^) -_- -__- (-_-) ._. (._.) (*_*) (>_<) (¬_¬) "
        "o.O O.o o.o O.O o.0 0.o 0.0 o_O O_o o_o O_O o_0 0_o 0_0 v.v V.V v_v V_V <.< >.< >.> @_@ ಠ_ಠ (ಠ_ಠ) ಠ︵ಠ "
        "¯\\(ツ)/¯ (╯°□°）╯︵┻━┻ ><(((*>").split()
    for key in whole:
        exc[key] = (key,)
    for unit in ("°C", "°F", "°K", "°c", "°f", "°k"):
        exc[unit + "."] = ("°", unit[1], ".")
    return exc


_EXCEPTIONS = _english_exceptions()
# Exceptions the affix rules would cut up (":)", "c." after an infix): spaCy merges such pieces
# back after splitting a chunk, the longest run first.
_AFFIX_EXCEPTIONS = {k: v for k, v in _EXCEPTIONS.items()
                     if _prefix_match(k) or _suffix_search(k) or next(_infix_finditer(k), None)}
# Every beginning of one: a run of tokens can only join into an exception through these, so the
# search stops at the first token that leads to none.
_AFFIX_EXCEPTION_STARTS = frozenset(key[:end] for key in _AFFIX_EXCEPTIONS for end in range(1, len(key) + 1))


def _merge_affix_exceptions(tokens: list[str]) -> list[str]:
    """spaCy's Tokenizer._apply_special_cases for the tokens of one chunk."""
    spans = []
    for i in range(len(tokens)):
        text = tokens[i]
        if text not in _AFFIX_EXCEPTION_STARTS:  # most tokens: no exception begins with them
            continue
        for j in range(i, len(tokens)):
            if j > i:
                text += tokens[j]
                if text not in _AFFIX_EXCEPTION_STARTS:
                    break
            if text in _AFFIX_EXCEPTIONS:
                spans.append((i, j + 1))
    if not spans:
        return tokens
    taken: set[int] = set()
    chosen = []
    for start, end in sorted(spans, key=lambda s: (s[0] - s[1], s[0])):
        if start not in taken and end - 1 not in taken:
            chosen.append((start, end))
        taken.update(range(start, end))
    merged, pos = [], 0
    for start, end in sorted(chosen):
        merged.extend(tokens[pos:start])
        merged.extend(_AFFIX_EXCEPTIONS["".join(tokens[start:end])])
        pos = end
    merged.extend(tokens[pos:])
    return merged


def _split_chunk(chunk: str) -> list[str]:
    """spaCy's Tokenizer._split_affixes, _attach_tokens and _apply_special_cases for one
    whitespace-free chunk."""
    special = _EXCEPTIONS.get(chunk)
    if special is not None:
        return list(special)
    out: list[str] = []
    prefixes: list[str] = []
    suffixes: list[str] = []
    string = chunk
    last_size = -1
    while string and len(string) != last_size:
        if string in _EXCEPTIONS:
            break
        last_size = len(string)
        m = _prefix_match(string)
        pre_len = m.end() if m else 0
        if pre_len:
            minus_pre = string[pre_len:]
            if minus_pre in _EXCEPTIONS:
                prefixes.append(string[:pre_len])
                string = minus_pre
                break
        m = _suffix_search(string[pre_len:])
        suf_len = (len(string) - pre_len - m.start()) if m else 0
        if suf_len:
            minus_suf = string[:-suf_len]
            if minus_suf in _EXCEPTIONS:
                suffixes.append(string[-suf_len:])
                string = minus_suf
                break
        if pre_len and suf_len and pre_len + suf_len <= len(string):
            prefixes.append(string[:pre_len])
            suffixes.append(string[-suf_len:])
            string = string[pre_len:len(string) - suf_len]
        elif pre_len:
            prefixes.append(string[:pre_len])
            string = string[pre_len:]
        elif suf_len:
            suffixes.append(string[-suf_len:])
            string = string[:-suf_len]
        if string in _EXCEPTIONS:
            break
    out.extend(prefixes)
    if string:
        special = _EXCEPTIONS.get(string)
        if special is not None:
            out.extend(special)
        elif "." in string and _url_match(string):  # a URL has a dotted host
            out.append(string)
        else:
            start = 0
            for m in _infix_finditer(string):
                if m.start() == 0:
                    continue
                if m.start() != start:
                    out.append(string[start:m.start()])
                if m.start() != m.end():
                    out.append(string[m.start():m.end()])
                start = m.end()
            if start < len(string):
                out.append(string[start:])
    out.extend(reversed(suffixes))
    return _merge_affix_exceptions(out) if len(out) > 1 else out


_CHUNK_CACHE: dict[str, list[str]] = {}
_CHUNK_CACHE_SIZE = 100_000  # chunks (spaCy caches them too); cleared when full, so memory stays bounded


# One character that the suffix rules always split off a word or number (no lookbehind), and one
# the prefix rules always split off the front.
_SPLIT_AFTER = frozenset(",;:!?)]}")
_SPLIT_BEFORE = frozenset("([{")


def _simple_split(chunk: str) -> list[str] | None:
    """The tokens of chunk when it is a word or an ASCII number with one character split off, and
    nothing else applies: "word," "word." "[word" "(1" "3." (a period after a letter that is not
    upper case: one after capitals may stay). The commonest chunks to split, found here without the
    regexes and kept out of the cache; None for any other chunk."""
    first, last = chunk[0], chunk[-1]
    if last in _SPLIT_AFTER or last == ".":
        core, parts = chunk[:-1], [chunk[:-1], last]
        # The period's rule looks behind at letter classes built over the BMP and the emoji planes only.
        if last == "." and (core[-1:].isupper() or core[-1:] > "\uffff"):
            return None
    elif first in _SPLIT_BEFORE:
        core, parts = chunk[1:], [first, chunk[1:]]
    else:
        return None
    if not (core.isalpha() or (core.isascii() and core.isdigit())) or core in _EXCEPTIONS or chunk in _EXCEPTIONS:
        return None
    return parts


def _chunk_tokens(chunk: str) -> list[str]:
    """The tokens of one whitespace-free chunk (what the native words() hands back for chunks that
    are not all ASCII)."""
    tokens = _CHUNK_CACHE.get(chunk)
    if tokens is not None:
        return tokens
    if (chunk.isalpha() or chunk.isdecimal()) and chunk not in _EXCEPTIONS:  # nothing to split
        return [chunk]
    tokens = _simple_split(chunk)
    if tokens is not None:
        return tokens
    if len(_CHUNK_CACHE) >= _CHUNK_CACHE_SIZE:
        _CHUNK_CACHE.clear()
    tokens = _CHUNK_CACHE[chunk] = _split_chunk(chunk)
    return tokens


def python_english_words(text: str) -> list[str]:
    """The tokens spaCy's blank English pipeline makes of text, whitespace tokens left out (what
    datatrove's split_into_words returns for English), in Python only."""
    out: list[str] = []
    cache = _CHUNK_CACHE
    for chunk in text.split():
        tokens = cache.get(chunk)
        if tokens is None:  # _chunk_tokens with its commonest case inlined: no call for most chunks
            if (chunk.isalpha() or chunk.isdecimal()) and chunk not in _EXCEPTIONS:
                out.append(chunk)
                continue
            tokens = _chunk_tokens(chunk)
        out.extend(tokens)
    return out


try:
    from spark_jobs import _english_words_c
except ImportError:  # not compiled at install, or imported from spark-submit's --py-files zip
    _english_words_c = None

if _english_words_c is None:
    spacy_english_words = python_english_words
else:
    def spacy_english_words(text: str) -> list[str]:
        """python_english_words, with the all-ASCII chunks split in C (spark_jobs/_english_words_c.c):
        the same tokens, several times faster."""
        return _english_words_c.words(text, _EXCEPTIONS, _AFFIX_EXCEPTIONS, _AFFIX_EXCEPTION_STARTS,
                                      _merge_affix_exceptions, _url_match, _chunk_tokens)


_SENTENCE_PUNCT = frozenset(
    "!.?։؟۔܀܁܂߹।॥၊။።፧፨᙮᜵᜶᠃᠉᥄᥅᪨᪩᪪᪫᭚᭛᭞᭟᰻᰼᱾᱿‼‽⁇⁈⁉⸮⸼꓿꘎꘏꛳꛷꡶꡷꣎꣏꤯꧈꧉꩝꩞꩟꫰꫱꯫﹒﹖﹗！．？"
    "𐩖𐩗𑁇𑁈𑂾𑂿𑃀𑃁𑅁𑅂𑅃𑇅𑇆𑇍𑇞𑇟𑈸𑈹𑈻𑈼𑊩𑑋𑑌𑗂𑗃𑗉𑗊𑗋𑗌𑗍𑗎𑗏𑗐𑗑𑗒𑗓𑗔𑗕𑗖𑗗𑙁𑙂𑜼𑜽𑜾𑩂𑩃𑪛𑪜𑱁𑱂𖩮𖩯𖫵𖬷𖬸𖭄𛲟𝪈｡。")


def _is_punct(token: str) -> bool:
    return all(unicodedata.category(c).startswith("P") for c in token)


def count_sentences(line: str) -> int:
    """Sentences spaCy's sentencizer finds in a one-line text: a new one starts at the first token
    after a sentence-final punctuation token that is not punctuation itself."""
    sentences, seen_period = 1, False
    for token in spacy_english_words(line):
        is_final = token in _SENTENCE_PUNCT
        if seen_period and not is_final and not _is_punct(token):
            sentences += 1
            seen_period = False
        elif is_final:
            seen_period = True
    return sentences

