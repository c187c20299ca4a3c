/* spark_jobs.english_words' tokenizer in C for the chunks that are all ASCII: most of an English
 * corpus. It follows english_words._split_chunk step by step (prefix, suffix, special cases, URL,
 * infixes, special cases merged back), with each of its regexes written out as the characters they
 * match among ASCII ones. Chunks with any other character, the URL test and the merging of split
 * special cases go back to the Python, whose objects words() takes as arguments.
 * tests/unit/test_english_words.py checks that both give the same tokens. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef struct {
    PyObject *exceptions;   /* dict: chunk -> tuple of tokens (english_words._EXCEPTIONS) */
    PyObject *affix_exceptions; /* dict: the exceptions the affixes cut up (_AFFIX_EXCEPTIONS) */
    PyObject *affix_starts; /* frozenset: their beginnings (_AFFIX_EXCEPTION_STARTS) */
    PyObject *merge;        /* english_words._merge_affix_exceptions */
    PyObject *url_match;    /* english_words._url_match */
    PyObject *other_chunk;  /* english_words._chunk_tokens, for chunks that are not all ASCII */
} Rules;

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_lower(char c) { return c >= 'a' && c <= 'z'; }
static int is_upper(char c) { return c >= 'A' && c <= 'Z'; }
static int is_alpha(char c) { return is_lower(c) || is_upper(c); }
static int is_quote(char c) { return c == '\'' || c == '"' || c == '`' || c == ','; }
static int is_punct(char c) { return c != '\0' && strchr(",:;!?()[]{}<>_#*&", c) != NULL; }

/* _PREFIXES at the start of s: the first alternative that matches. */
static Py_ssize_t prefix_len(const char *s, Py_ssize_t n) {
    char c = s[0];
    if (c != '\0' && strchr("%=,:;!?()[]{}<>_#*&'\"`$", c)) return 1;
    if (c == '+') return (n > 1 && is_digit(s[1])) ? 0 : 1;
    if (c == '.' && n > 1 && s[1] == '.') {
        Py_ssize_t i = 2;
        while (i < n && s[i] == '.') i++;
        return i;
    }
    if (n >= 3 && c == 'U' && s[1] == 'S' && s[2] == '$') return 3;
    if (n >= 2 && (c == 'C' || c == 'A') && s[1] == '$') return 2;
    return 0;
}

/* The units and currencies a suffix rule splits off after a digit. */
static const struct { const char *text; Py_ssize_t len; } UNITS[] = {
#define U(s) {s, sizeof(s) - 1}
    U("km"), U("m"), U("dm"), U("cm"), U("mm"), U("ha"), U("nm"), U("yd"), U("in"), U("ft"), U("kg"), U("g"),
    U("mg"), U("t"), U("lb"), U("oz"), U("m/s"), U("km/h"), U("kmh"), U("mph"), U("hPa"), U("Pa"), U("mbar"),
    U("mb"), U("MB"), U("kb"), U("KB"), U("gb"), U("GB"), U("tb"), U("TB"), U("T"), U("G"), U("M"), U("K"),
    U("%"), U("$"), U("US$"), U("C$"), U("A$"), {NULL, 0}};
#undef U

static int is_unit_or_currency(const char *t, Py_ssize_t m) {
    for (Py_ssize_t i = 0; UNITS[i].text; i++)
        if (UNITS[i].len == m && memcmp(UNITS[i].text, t, m) == 0) return 1;
    return 0;
}

/* Whether one of _SUFFIXES matches s[i:] to its end, its lookbehinds seeing s[:i]. */
static int suffix_at(const char *s, Py_ssize_t n, Py_ssize_t i) {
    const char *t = s + i;
    Py_ssize_t m = n - i;
    char before = i > 0 ? s[i - 1] : '\0';
    if (m == 1) {
        char c = t[0];
        if (is_punct(c) || is_quote(c)) return 1;
        if (c == '.') {
            if (before != '\0' && (is_digit(before) || is_lower(before) || is_punct(before) || is_quote(before) ||
                                   strchr("%-+|", before)))
                return 1;
            if (i >= 2 && is_upper(s[i - 1]) && is_upper(s[i - 2])) return 1;
        }
    } else {
        Py_ssize_t k = 0;
        while (k < m && t[k] == '.') k++;
        if (k == m) return 1; /* a run of periods */
        if (m == 2 && t[0] == '\'' && (t[1] == 's' || t[1] == 'S')) return 1;
    }
    if (t[0] == '+' && m == 1 && is_digit(before)) return 1;
    return is_digit(before) && is_unit_or_currency(t, m);
}

/* english_words._suffix_search: the leftmost suffix, searched in the last _SUFFIX_MAX characters
 * unless s ends in a run of periods. */
static Py_ssize_t suffix_len(const char *s, Py_ssize_t n) {
    Py_ssize_t from = (n >= 2 && s[n - 1] == '.' && s[n - 2] == '.') ? 0 : (n > 4 ? n - 4 : 0);
    for (Py_ssize_t i = from; i < n; i++)
        if (suffix_at(s, n, i)) return n - i;
    return 0;
}

/* The length of the _INFIXES match at s[p], the first alternative that matches; 0 for none. */
static Py_ssize_t infix_at(const char *s, Py_ssize_t n, Py_ssize_t p) {
    char c = s[p], before = p > 0 ? s[p - 1] : '\0', after = p + 1 < n ? s[p + 1] : '\0';
    if (c == '.' && after == '.') {
        Py_ssize_t e = p + 2;
        while (e < n && s[e] == '.') e++;
        return e - p;
    }
    if ((c == '+' || c == '-' || c == '*' || c == '^') && is_digit(before) && (is_digit(after) || after == '-'))
        return 1;
    if (c == '.' && (is_lower(before) || is_quote(before)) && (is_upper(after) || is_quote(after))) return 1;
    if (c == ',' && is_alpha(before) && is_alpha(after)) return 1;
    if (!(is_alpha(before) || is_digit(before))) return 0;
    if (c == '-') {
        for (Py_ssize_t k = 1; k <= 3 && p + k <= n; k++) { /* -, --, ---: the first one an alpha follows */
            if (s[p + k - 1] != '-') break;
            if (p + k < n && is_alpha(s[p + k])) return k;
        }
        return 0;
    }
    if ((c == '~' || c == ':' || c == '<' || c == '>' || c == '=' || c == '/') && is_alpha(after)) return 1;
    return 0;
}

static PyObject *slice(PyObject *chunk, Py_ssize_t lo, Py_ssize_t hi) {
    if (lo == 0 && hi == PyUnicode_GET_LENGTH(chunk)) {
        Py_INCREF(chunk);
        return chunk;
    }
    return PyUnicode_Substring(chunk, lo, hi);
}

/* 1 when chunk[lo:hi] is an exception, 0 when not, -1 on error. */
static int is_exception(const Rules *r, PyObject *chunk, Py_ssize_t lo, Py_ssize_t hi) {
    PyObject *s = slice(chunk, lo, hi);
    if (!s) return -1;
    int found = PyDict_Contains(r->exceptions, s);
    Py_DECREF(s);
    return found;
}

static int append_slice(PyObject *list, PyObject *chunk, Py_ssize_t lo, Py_ssize_t hi) {
    PyObject *s = slice(chunk, lo, hi);
    if (!s) return -1;
    int rc = PyList_Append(list, s);
    Py_DECREF(s);
    return rc;
}

static int extend(PyObject *list, PyObject *items) {
    Py_ssize_t m = PyList_GET_SIZE(list);
    return PyList_SetSlice(list, m, m, items);
}

/* The infix split of chunk[lo:hi] (not a special case, not a URL) onto out. */
static int split_infixes(PyObject *out, PyObject *chunk, const char *b, Py_ssize_t lo, Py_ssize_t hi) {
    const char *s = b + lo;
    Py_ssize_t n = hi - lo, start = 0, p = 0;
    while (p < n) {
        Py_ssize_t len = infix_at(s, n, p);
        if (!len) {
            p++;
            continue;
        }
        if (p != 0) { /* spaCy skips an infix at the start */
            if (p != start && append_slice(out, chunk, lo + start, lo + p) < 0) return -1;
            if (append_slice(out, chunk, lo + p, lo + p + len) < 0) return -1;
            start = p + len;
        }
        p += len;
    }
    if (start < n && append_slice(out, chunk, lo + start, hi) < 0) return -1;
    return 0;
}

/* Whether a run of tokens joins into an affix exception: _merge_affix_exceptions' search, which
 * finds no span (and changes nothing) for most chunks; 1 found, 0 not, -1 on error. */
static int joins_affix_exception(const Rules *r, PyObject *tokens) {
    Py_ssize_t n = PyList_GET_SIZE(tokens);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *text = PyList_GET_ITEM(tokens, i);
        int starts = PySet_Contains(r->affix_starts, text);
        if (starts <= 0) {
            if (starts < 0) return -1;
            continue;
        }
        Py_INCREF(text);
        for (Py_ssize_t j = i; j < n; j++) {
            if (j > i) {
                Py_SETREF(text, PyUnicode_Concat(text, PyList_GET_ITEM(tokens, j)));
                if (!text || (starts = PySet_Contains(r->affix_starts, text)) < 0) {
                    Py_XDECREF(text);
                    return -1;
                }
                if (!starts) break;
            }
            int found = PyDict_Contains(r->affix_exceptions, text);
            if (found) {
                Py_DECREF(text);
                return found;
            }
        }
        Py_DECREF(text);
    }
    return 0;
}

/* english_words._split_chunk for an all-ASCII chunk that is not itself an exception. */
static PyObject *split_ascii(const Rules *r, PyObject *chunk) {
    const char *b = (const char *)PyUnicode_1BYTE_DATA(chunk);
    Py_ssize_t n = PyUnicode_GET_LENGTH(chunk), lo = 0, hi = n, last = -1, found;
    Py_ssize_t *cuts = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (n + 1)); /* prefix ends, then suffix starts */
    Py_ssize_t n_pre = 0, n_suf = 0;
    PyObject *out = NULL;
    if (!cuts) return PyErr_NoMemory();
    Py_ssize_t *pre_ends = cuts, *suf_starts = cuts + n + 1;
    while (hi > lo && hi - lo != last) {
        last = hi - lo;
        Py_ssize_t pre = prefix_len(b + lo, hi - lo);
        if (pre) {
            if ((found = is_exception(r, chunk, lo + pre, hi)) < 0) goto done;
            if (found) {
                pre_ends[n_pre++] = lo += pre;
                break;
            }
        }
        Py_ssize_t suf = suffix_len(b + lo + pre, hi - lo - pre);
        if (suf) {
            if ((found = is_exception(r, chunk, lo, hi - suf)) < 0) goto done;
            if (found) {
                suf_starts[n_suf++] = hi -= suf;
                break;
            }
        }
        if (pre && suf && pre + suf <= hi - lo) {
            pre_ends[n_pre++] = lo += pre;
            suf_starts[n_suf++] = hi -= suf;
        } else if (pre) {
            pre_ends[n_pre++] = lo += pre;
        } else if (suf) {
            suf_starts[n_suf++] = hi -= suf;
        }
        if ((found = is_exception(r, chunk, lo, hi)) < 0) goto done;
        if (found) break;
    }
    if (!(out = PyList_New(0))) goto done;
    for (Py_ssize_t i = 0, from = 0; i < n_pre; from = pre_ends[i++])
        if (append_slice(out, chunk, from, pre_ends[i]) < 0) goto fail;
    if (hi > lo) {
        PyObject *core = slice(chunk, lo, hi), *special;
        if (!core) goto fail;
        if ((special = PyDict_GetItemWithError(r->exceptions, core))) {
            int rc = extend(out, special);
            Py_DECREF(core);
            if (rc < 0) goto fail;
        } else if (PyErr_Occurred()) {
            Py_DECREF(core);
            goto fail;
        } else if (memchr(b + lo, '.', hi - lo)) { /* a URL has a dotted host */
            PyObject *match = PyObject_CallOneArg(r->url_match, core);
            int rc = match ? (match == Py_None ? split_infixes(out, chunk, b, lo, hi) : PyList_Append(out, core)) : -1;
            Py_XDECREF(match);
            Py_DECREF(core);
            if (rc < 0) goto fail;
        } else {
            Py_DECREF(core);
            if (split_infixes(out, chunk, b, lo, hi) < 0) goto fail;
        }
    }
    for (Py_ssize_t i = n_suf - 1; i >= 0; i--)
        if (append_slice(out, chunk, suf_starts[i], i > 0 ? suf_starts[i - 1] : n) < 0) goto fail;
    if (PyList_GET_SIZE(out) > 1) {
        int found = joins_affix_exception(r, out);
        if (found < 0) goto fail;
        if (found) Py_SETREF(out, PyObject_CallOneArg(r->merge, out));
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    PyMem_Free(cuts);
    return out;
}

static int all_alpha_or_all_digits(const char *b, Py_ssize_t n) {
    int alpha = 1, digits = 1;
    for (Py_ssize_t i = 0; i < n && (alpha || digits); i++) {
        alpha &= is_alpha(b[i]);
        digits &= is_digit(b[i]);
    }
    return alpha || digits;
}

static int chunk_tokens(const Rules *r, PyObject *chunk, PyObject *out) {
    if (!PyUnicode_IS_ASCII(chunk)) {
        PyObject *tokens = PyObject_CallOneArg(r->other_chunk, chunk);
        int rc = tokens ? extend(out, tokens) : -1;
        Py_XDECREF(tokens);
        return rc;
    }
    PyObject *special = PyDict_GetItemWithError(r->exceptions, chunk);
    if (special) return extend(out, special);
    if (PyErr_Occurred()) return -1;
    if (all_alpha_or_all_digits((const char *)PyUnicode_1BYTE_DATA(chunk), PyUnicode_GET_LENGTH(chunk)))
        return PyList_Append(out, chunk);
    PyObject *tokens = split_ascii(r, chunk);
    int rc = tokens ? extend(out, tokens) : -1;
    Py_XDECREF(tokens);
    return rc;
}

static PyObject *words(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyUnicode_Check(args[0]) || !PyDict_Check(args[1]) || !PyDict_Check(args[2]) ||
        !PyAnySet_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "words(text, exceptions: dict, affix_exceptions: dict, "
                                         "affix_starts: frozenset, merge, url_match, other_chunk)");
        return NULL;
    }
    Rules r = {args[1], args[2], args[3], args[4], args[5], args[6]};
    PyObject *chunks = PyUnicode_Split(args[0], NULL, -1), *out = NULL;
    if (!chunks || !(out = PyList_New(0))) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(chunks); i++)
        if (chunk_tokens(&r, PyList_GET_ITEM(chunks, i), out) < 0) goto fail;
    Py_DECREF(chunks);
    return out;
fail:
    Py_XDECREF(chunks);
    Py_XDECREF(out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"words", (PyCFunction)(void (*)(void))words, METH_FASTCALL,
     "words(text, exceptions, affix_exceptions, affix_starts, merge, url_match, other_chunk): "
     "english_words.spacy_english_words(text)"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_english_words_c", NULL, -1, methods};
PyMODINIT_FUNC PyInit__english_words_c(void) { return PyModule_Create(&module); }
