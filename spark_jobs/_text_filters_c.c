/* The heuristic filters' rules that read the text itself (spark_jobs.text_filters): gopher_quality,
 * c4, fineweb's line rules and gopher_repetition's paragraph and line rules, one document a call,
 * deciding as the Python does, which stays as the fallback where this is not built.
 * tests/unit/test_text_filters_in_c.py compares both on real and drawn texts.
 *
 * The text is read as Python's str: copied to UCS-4 once, with Python's own tests of a character
 * (Py_UNICODE_ISSPACE, _ISLINEBREAK, _ISALPHA, _ISDECIMAL), so str.strip, str.split, splitlines and
 * the regexes' \d are matched, not approximated. Each function returns the index of the first rule
 * the document fails, in its filter's order in text_filters.RULES, or -1 to keep it; a threshold of
 * NaN is a rule switched off. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Set once by setup(): text_filters' character sets, stop words and sentence counter. */
static Py_UCS4 *punctuation, *terminal; /* sorted */
static Py_ssize_t n_punctuation, n_terminal;
static PyObject *stop_words;      /* a tuple of str */
static PyObject *count_sentences; /* english_words.count_sentences */

static int by_value(const void *a, const void *b) {
    Py_UCS4 x = *(const Py_UCS4 *)a, y = *(const Py_UCS4 *)b;
    return (x > y) - (x < y);
}

static int is_in(Py_UCS4 ch, const Py_UCS4 *set, Py_ssize_t n) {
    return bsearch(&ch, set, (size_t)n, sizeof(Py_UCS4), by_value) != NULL;
}

/* A str's characters, sorted, in a new buffer. */
static Py_UCS4 *sorted_characters(PyObject *s, Py_ssize_t *n) {
    Py_UCS4 *chars = PyUnicode_AsUCS4Copy(s);
    if (!chars) return NULL;
    *n = PyUnicode_GET_LENGTH(s);
    qsort(chars, (size_t)*n, sizeof(Py_UCS4), by_value);
    return chars;
}

static PyObject *setup(PyObject *self, PyObject *args) {
    PyObject *punct, *term, *stops, *counter;
    if (!PyArg_ParseTuple(args, "UUO!O", &punct, &term, &PyTuple_Type, &stops, &counter)) return NULL;
    Py_UCS4 *p = sorted_characters(punct, &n_punctuation), *t = p ? sorted_characters(term, &n_terminal) : NULL;
    if (!t) {
        PyMem_Free(p);
        return NULL;
    }
    PyMem_Free(punctuation);
    PyMem_Free(terminal);
    punctuation = p, terminal = t;
    Py_XSETREF(stop_words, Py_NewRef(stops));
    Py_XSETREF(count_sentences, Py_NewRef(counter));
    Py_RETURN_NONE;
}

/* --- Spans of the text ------------------------------------------------------------------------- */

typedef struct {
    Py_ssize_t start, end;
} Span;

typedef struct {
    Span *items;
    Py_ssize_t count, capacity;
} Spans;

static int add(Spans *s, Py_ssize_t start, Py_ssize_t end) {
    if (s->count == s->capacity) {
        Py_ssize_t capacity = s->capacity ? 2 * s->capacity : 64;
        Span *items = PyMem_Realloc(s->items, (size_t)capacity * sizeof(Span));
        if (!items) {
            PyErr_NoMemory();
            return -1;
        }
        s->items = items, s->capacity = capacity;
    }
    s->items[s->count++] = (Span){start, end};
    return 0;
}

/* str.splitlines(): lines end at any line break, "\r\n" being one; no line after the last break. */
static int split_lines(const Py_UCS4 *s, Py_ssize_t n, Spans *out) {
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t start = i;
        while (i < n && !Py_UNICODE_ISLINEBREAK(s[i])) i++;
        if (add(out, start, i) < 0) return -1;
        if (i < n) i += (s[i] == '\r' && i + 1 < n && s[i + 1] == '\n') ? 2 : 1;
    }
    return 0;
}

/* The text split at runs of at least `least` newlines (re.split("\n+") or "\n{2,}"). */
static int split_at_newlines(const Py_UCS4 *s, Py_ssize_t start, Py_ssize_t end, int least, Spans *out) {
    Py_ssize_t piece = start;
    for (Py_ssize_t i = start; i < end;) {
        if (s[i] != '\n') {
            i++;
            continue;
        }
        Py_ssize_t run = i;
        while (i < end && s[i] == '\n') i++;
        if (i - run < least) continue;
        if (add(out, piece, run) < 0) return -1;
        piece = i;
    }
    return add(out, piece, end);
}

static Span stripped(const Py_UCS4 *s, Py_ssize_t start, Py_ssize_t end) {
    while (start < end && Py_UNICODE_ISSPACE(s[start])) start++;
    while (end > start && Py_UNICODE_ISSPACE(s[end - 1])) end--;
    return (Span){start, end};
}

static int ends_with(const Py_UCS4 *s, Py_ssize_t n, const char *suffix) {
    Py_ssize_t k = (Py_ssize_t)strlen(suffix);
    if (n < k) return 0;
    for (Py_ssize_t i = 0; i < k; i++)
        if (s[n - k + i] != (Py_UCS4)suffix[i]) return 0;
    return 1;
}

/* (spans equal to an earlier one, their characters): text_filters._duplicates, with an
 * open-addressing set of the distinct spans. */
static int duplicates(const Py_UCS4 *s, const Spans *spans, Py_ssize_t *dups, Py_ssize_t *chars) {
    Py_ssize_t size = 16;
    while (size < 2 * spans->count) size <<= 1;
    Py_ssize_t *slots = PyMem_Malloc((size_t)size * sizeof(Py_ssize_t)); /* a span's index + 1; 0 empty */
    uint64_t *hashes = PyMem_Malloc((size_t)(spans->count ? spans->count : 1) * sizeof(uint64_t));
    if (!slots || !hashes) {
        PyMem_Free(slots);
        PyMem_Free(hashes);
        PyErr_NoMemory();
        return -1;
    }
    memset(slots, 0, (size_t)size * sizeof(Py_ssize_t));
    *dups = *chars = 0;
    for (Py_ssize_t k = 0; k < spans->count; k++) {
        Span a = spans->items[k];
        uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)(a.end - a.start);
        for (Py_ssize_t i = a.start; i < a.end; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
        h ^= h >> 29;
        hashes[k] = h;
        for (Py_ssize_t slot = (Py_ssize_t)(h & (uint64_t)(size - 1));; slot = (slot + 1) & (size - 1)) {
            if (!slots[slot]) {
                slots[slot] = k + 1;
                break;
            }
            Span b = spans->items[slots[slot] - 1];
            if (hashes[slots[slot] - 1] == h && b.end - b.start == a.end - a.start &&
                !memcmp(s + a.start, s + b.start, (size_t)(a.end - a.start) * sizeof(Py_UCS4))) {
                *dups += 1;
                *chars += a.end - a.start;
                break;
            }
        }
    }
    PyMem_Free(slots);
    PyMem_Free(hashes);
    return 0;
}

/* A call's arguments: the text as UCS-4 and its thresholds (a tuple of floats, NaN for off). */
typedef struct {
    Py_UCS4 *s;
    Py_ssize_t n;
    double limit[10];
} Call;

static int read_call(PyObject *text, PyObject *limits, Py_ssize_t n_limits, Call *call) {
    if (!PyUnicode_Check(text) || !PyTuple_Check(limits) || PyTuple_GET_SIZE(limits) != n_limits) {
        PyErr_Format(PyExc_TypeError, "expected a str and a tuple of %zd floats", n_limits);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n_limits; i++) {
        call->limit[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(limits, i));
        if (call->limit[i] == -1.0 && PyErr_Occurred()) return -1;
    }
    call->n = PyUnicode_GET_LENGTH(text);
    call->s = PyUnicode_AsUCS4Copy(text);
    return call->s ? 0 : -1;
}

#define ON(x) (!isnan(x))

/* --- gopher_quality ---------------------------------------------------------------------------- */

/* gopher_quality(text, words, (min_doc_words, max_doc_words, min_avg_word_length,
 * max_avg_word_length, max_symbol_word_ratio, max_bullet_lines_ratio, max_ellipsis_lines_ratio,
 * max_non_alpha_words_ratio, min_stop_words)) */
static PyObject *gopher_quality(PyObject *self, PyObject *args) {
    PyObject *text, *words, *limits;
    Call c;
    if (!PyArg_ParseTuple(args, "OO!O", &text, &PyList_Type, &words, &limits) || read_call(text, limits, 9, &c) < 0)
        return NULL;
    const double *L = c.limit;
    Py_ssize_t n_words = PyList_GET_SIZE(words), n_symbols = 0, symbol_chars = 0, all_chars = 0, with_letter = 0;
    uint64_t stops_seen = 0;
    for (Py_ssize_t k = 0; k < n_words; k++) {
        PyObject *w = PyList_GET_ITEM(words, k);
        if (!PyUnicode_Check(w)) {
            PyMem_Free(c.s);
            return PyErr_Format(PyExc_TypeError, "a word is not a str");
        }
        Py_ssize_t len = PyUnicode_GET_LENGTH(w);
        int kind = PyUnicode_KIND(w), all_alpha = len > 0, any_alpha = 0, all_punctuation = 1;
        const void *data = PyUnicode_DATA(w);
        for (Py_ssize_t i = 0; i < len; i++) {
            Py_UCS4 ch = PyUnicode_READ(kind, data, i);
            int alpha = Py_UNICODE_ISALPHA(ch);
            all_alpha &= alpha, any_alpha |= alpha;
            if (all_punctuation && !is_in(ch, punctuation, n_punctuation)) all_punctuation = 0;
        }
        all_chars += len;
        if (!all_alpha && all_punctuation) n_symbols++, symbol_chars += len;  /* str.isalpha, then the set */
        with_letter += any_alpha;
        for (Py_ssize_t j = 0; all_alpha && j < PyTuple_GET_SIZE(stop_words) && j < 64; j++) {
            PyObject *stop = PyTuple_GET_ITEM(stop_words, j);
            if (PyUnicode_GET_LENGTH(stop) == len && PyUnicode_KIND(stop) == kind &&
                !memcmp(PyUnicode_DATA(stop), data, (size_t)len * kind))
                stops_seen |= 1ULL << j;
        }
    }
    int rule = -1;
    Py_ssize_t n_non_symbol = n_words - n_symbols;
    if (ON(L[0]) && n_non_symbol < L[0]) rule = 0;
    else if (ON(L[1]) && n_non_symbol > L[1]) rule = 1;
    if (rule < 0 && n_non_symbol) {
        double average = (double)(all_chars - symbol_chars) / (double)n_non_symbol;
        if (ON(L[2]) && average < L[2]) rule = 2;
        else if (ON(L[3]) && average > L[3]) rule = 3;
    }
    if (rule < 0 && ON(L[4]) && n_words) {
        Py_ssize_t hashes = 0, ellipses = 0;
        for (Py_ssize_t i = 0; i < c.n; i++) {
            if (c.s[i] == '#') hashes++;
            else if (c.s[i] == 0x2026) ellipses++;
            else if (c.s[i] == '.' && i + 2 < c.n && c.s[i + 1] == '.' && c.s[i + 2] == '.') ellipses++, i += 2;
        }
        if ((double)hashes / (double)n_words > L[4]) rule = 4;
        else if ((double)ellipses / (double)n_words > L[4]) rule = 5;
    }
    if (rule < 0 && (ON(L[5]) || ON(L[6]))) {
        Spans lines = {0};
        if (split_lines(c.s, c.n, &lines) < 0) {
            PyMem_Free(c.s);
            return NULL;
        }
        Py_ssize_t bullets = 0, ending_in_ellipsis = 0;
        for (Py_ssize_t k = 0; k < lines.count; k++) {
            Span line = stripped(c.s, lines.items[k].start, lines.items[k].end);
            bullets += line.end > line.start && (c.s[line.start] == 0x2022 || c.s[line.start] == '-');
            /* rstrip, then "..." or "…" at the end */
            const Py_UCS4 *at = c.s + line.start;
            Py_ssize_t len = line.end - line.start;
            ending_in_ellipsis += ends_with(at, len, "...") || (len && at[len - 1] == 0x2026);
        }
        if (lines.count) {
            if (ON(L[5]) && (double)bullets / (double)lines.count > L[5]) rule = 6;
            else if (ON(L[6]) && (double)ending_in_ellipsis / (double)lines.count > L[6]) rule = 7;
        }
        PyMem_Free(lines.items);
    }
    if (rule < 0 && ON(L[7]) && n_words && (double)with_letter / (double)n_words < L[7]) rule = 8;
    int distinct_stops = 0;
    for (; stops_seen; stops_seen &= stops_seen - 1) distinct_stops++;
    if (rule < 0 && ON(L[8]) && distinct_stops < L[8]) rule = 9;
    PyMem_Free(c.s);
    return PyLong_FromLong(rule);
}

/* --- c4 ---------------------------------------------------------------------------------------- */

/* Whether needle (lowercase ASCII) is in the line as str.lower() writes it. Only A-Z, KELVIN SIGN
 * (k) and I WITH DOT ABOVE (i + U+0307) lower to ASCII letters; any other character that is not
 * ASCII matches no character of the needle, whatever its lowercase. */
static int lower_contains(const Py_UCS4 *lowered, Py_ssize_t n, const char *needle) {
    Py_ssize_t k = (Py_ssize_t)strlen(needle);
    for (Py_ssize_t i = 0; i + k <= n; i++) {
        Py_ssize_t j = 0;
        while (j < k && lowered[i + j] == (Py_UCS4)needle[j]) j++;
        if (j == k) return 1;
    }
    return 0;
}

static Py_ssize_t lower(const Py_UCS4 *s, Py_ssize_t n, Py_UCS4 *out) {
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 ch = s[i];
        if (ch >= 'A' && ch <= 'Z') out[m++] = ch + 32;
        else if (ch == 0x212A) out[m++] = 'k';
        else if (ch == 0x130) out[m++] = 'i', out[m++] = 0x307;
        else out[m++] = ch;
    }
    return m;
}

static const char *POLICY[] = {"terms of use",  "privacy policy", "cookie policy",
                                "uses cookies",  "use of cookies", "use cookies"};

/* The length of the citation mark at s[i] (\[\d*]|\[edit]|\[citation needed]), or 0. */
static Py_ssize_t citation_at(const Py_UCS4 *s, Py_ssize_t i, Py_ssize_t n) {
    if (s[i] != '[') return 0;
    Py_ssize_t j = i + 1;
    while (j < n && Py_UNICODE_ISDECIMAL(s[j])) j++;
    if (j < n && s[j] == ']') return j + 1 - i;
    static const char *words[] = {"[edit]", "[citation needed]"};
    for (int w = 0; w < 2; w++) {
        Py_ssize_t k = (Py_ssize_t)strlen(words[w]), m = 0;
        while (m < k && i + m < n && s[i + m] == (Py_UCS4)words[w][m]) m++;
        if (m == k) return k;
    }
    return 0;
}

/* c4(text, (filter_no_terminal_punct, min_num_sentences, min_words_per_line, max_word_length,
 * filter_lorem_ipsum, filter_javascript, filter_curly_bracket, filter_policy)), booleans as 1.0 or
 * 0.0. Rules: 0 lorem_ipsum, 1 curly_bracket, 2 too_few_sentences. */
static PyObject *c4(PyObject *self, PyObject *args) {
    PyObject *text, *limits;
    Call c;
    if (!PyArg_ParseTuple(args, "OO", &text, &limits) || read_call(text, limits, 8, &c) < 0) return NULL;
    const double *L = c.limit;
    int rule = -1, failed = 0;
    Py_ssize_t sentences = 0;
    Spans lines = {0};
    Py_UCS4 *line = PyMem_Malloc((size_t)(3 * c.n + 1) * sizeof(Py_UCS4)); /* the line, then it lowered */
    if (!line || split_lines(c.s, c.n, &lines) < 0) {
        if (!line) PyErr_NoMemory();
        failed = 1;
        goto done;
    }
    for (Py_ssize_t k = 0; k < lines.count && rule < 0; k++) {
        Span span = stripped(c.s, lines.items[k].start, lines.items[k].end);
        Py_ssize_t n_words = 0, longest = 0, has_bracket = 0;
        for (Py_ssize_t i = span.start; i < span.end;) {
            while (i < span.end && Py_UNICODE_ISSPACE(c.s[i])) i++;
            Py_ssize_t start = i;
            while (i < span.end && !Py_UNICODE_ISSPACE(c.s[i])) has_bracket |= c.s[i] == '[', i++;
            if (i > start) n_words++, longest = i - start > longest ? i - start : longest;
        }
        if (ON(L[3]) && span.end - span.start > L[3] && longest > L[3]) continue;
        Py_ssize_t n = 0;
        for (Py_ssize_t i = span.start; i < span.end;) { /* the line without its citation marks */
            Py_ssize_t mark = has_bracket ? citation_at(c.s, i, span.end) : 0;
            if (mark) i += mark;
            else line[n++] = c.s[i++];
        }
        if (L[0] != 0 && !(n && (line[n - 1] == '.' || line[n - 1] == '?' || line[n - 1] == '!' ||
                                 line[n - 1] == '"' || line[n - 1] == '\'') && !ends_with(line, n, "...")))
            continue;
        if (ON(L[2]) && n_words < L[2]) continue;
        Py_UCS4 *lowered = line + n;
        Py_ssize_t n_lowered = lower(line, n, lowered);
        if (L[4] != 0 && lower_contains(lowered, n_lowered, "lorem ipsum")) {
            rule = 0;
            break;
        }
        if (L[5] != 0 && lower_contains(lowered, n_lowered, "javascript")) continue;
        if (L[6] != 0) {
            int curly = 0;
            for (Py_ssize_t i = 0; i < n && !curly; i++) curly = line[i] == '{';
            if (curly) {
                rule = 1;
                break;
            }
        }
        int policy = 0;
        for (int p = 0; L[7] != 0 && p < 6 && !policy; p++) policy = lower_contains(lowered, n_lowered, POLICY[p]);
        if (policy) continue;
        if (ON(L[1]) && sentences < L[1]) { /* only counted up to the minimum: it decides nothing more */
            PyObject *str = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, line, n);
            PyObject *count = str ? PyObject_CallOneArg(count_sentences, str) : NULL;
            Py_XDECREF(str);
            Py_ssize_t value = count ? PyLong_AsSsize_t(count) : -1;
            Py_XDECREF(count);
            if (value == -1 && PyErr_Occurred()) {
                failed = 1;
                goto done;
            }
            sentences += value;
        }
    }
    if (rule < 0 && ON(L[1]) && sentences < L[1]) rule = 2;
done:
    PyMem_Free(lines.items);
    PyMem_Free(line);
    PyMem_Free(c.s);
    return failed ? NULL : PyLong_FromLong(rule);
}

/* --- fineweb ----------------------------------------------------------------------------------- */

/* fineweb(text, (line_punct_thr, line_punct_exclude_zero, short_line_thr, short_line_length,
 * char_duplicates_ratio)): the rules that read the text (list_ratio needs the words: the caller's).
 * Rules: 0 empty, 1 line_punct_ratio, 2 short_line_ratio, 3 char_dup_ratio. */
static PyObject *fineweb(PyObject *self, PyObject *args) {
    PyObject *text, *limits;
    Call c;
    if (!PyArg_ParseTuple(args, "OO", &text, &limits) || read_call(text, limits, 5, &c) < 0) return NULL;
    const double *L = c.limit;
    Spans all = {0}, lines = {0};
    int rule = -1;
    if (split_at_newlines(c.s, 0, c.n, 1, &all) < 0) goto fail;
    Py_ssize_t newlines = 0, ending_a_sentence = 0, short_lines = 0;
    for (Py_ssize_t i = 0; i < c.n; i++) newlines += c.s[i] == '\n';
    /* text.split("\n") keeps the empty strings between newlines: blank either way, so runs of
     * newlines split the same non-blank lines. */
    for (Py_ssize_t k = 0; k < all.count; k++) {
        Span line = all.items[k], content = stripped(c.s, line.start, line.end);
        if (content.end == content.start) continue;
        if (add(&lines, line.start, line.end) < 0) goto fail;
        ending_a_sentence += is_in(c.s[line.end - 1], terminal, n_terminal);
        short_lines += line.end - line.start <= L[3];
    }
    if (!lines.count) rule = 0;
    if (rule < 0 && ON(L[0])) {
        double ratio = (double)ending_a_sentence / (double)lines.count;
        if (ratio < L[0] && !(ratio == 0 && L[1] != 0)) rule = 1;
    }
    if (rule < 0 && ON(L[2]) && (double)short_lines / (double)lines.count > L[2]) rule = 2;
    if (rule < 0 && ON(L[4])) {
        Py_ssize_t dups, chars;
        if (duplicates(c.s, &lines, &dups, &chars) < 0) goto fail;
        if ((double)chars / (double)(c.n - newlines) > L[4]) rule = 3;
    }
    PyMem_Free(all.items);
    PyMem_Free(lines.items);
    PyMem_Free(c.s);
    return PyLong_FromLong(rule);
fail:
    PyMem_Free(all.items);
    PyMem_Free(lines.items);
    PyMem_Free(c.s);
    return NULL;
}

/* --- gopher_repetition's paragraphs and lines ---------------------------------------------------- */

/* paragraphs_and_lines(text, (dup_para_frac, dup_para_char_frac, dup_line_frac, dup_line_char_frac)).
 * Rules: 0 empty, 1 dup_para_frac, 2 dup_para_char_frac, 3 dup_line_frac, 4 dup_line_char_frac. */
static PyObject *paragraphs_and_lines(PyObject *self, PyObject *args) {
    PyObject *text, *limits;
    Call c;
    if (!PyArg_ParseTuple(args, "OO", &text, &limits) || read_call(text, limits, 4, &c) < 0) return NULL;
    const double *L = c.limit;
    if (!c.n) {
        PyMem_Free(c.s);
        return PyLong_FromLong(0);
    }
    Spans pieces = {0};
    int rule = -1;
    Span text_stripped = stripped(c.s, 0, c.n);
    Py_ssize_t dups, chars, size = c.n;
    /* paragraphs: the stripped text split at blank lines (runs of two newlines or more) */
    if (split_at_newlines(c.s, text_stripped.start, text_stripped.end, 2, &pieces) < 0 ||
        duplicates(c.s, &pieces, &dups, &chars) < 0)
        goto fail;
    if (ON(L[0]) && (double)dups / (double)pieces.count > L[0]) rule = 1;
    else if (ON(L[1]) && (double)chars / (double)size > L[1]) rule = 2;
    if (rule < 0) { /* lines: the whole text split at runs of newlines */
        pieces.count = 0;
        if (split_at_newlines(c.s, 0, c.n, 1, &pieces) < 0 || duplicates(c.s, &pieces, &dups, &chars) < 0)
            goto fail;
        if (ON(L[2]) && (double)dups / (double)pieces.count > L[2]) rule = 3;
        else if (ON(L[3]) && (double)chars / (double)size > L[3]) rule = 4;
    }
    PyMem_Free(pieces.items);
    PyMem_Free(c.s);
    return PyLong_FromLong(rule);
fail:
    PyMem_Free(pieces.items);
    PyMem_Free(c.s);
    return NULL;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS,
     "setup(punctuation, terminal_punctuation, stop_words, count_sentences): text_filters' sets, once"},
    {"gopher_quality", gopher_quality, METH_VARARGS,
     "gopher_quality(text, words, limits) -> the first rule failed (text_filters' order), or -1"},
    {"c4", c4, METH_VARARGS, "c4(text, limits) -> the first rule failed, or -1"},
    {"fineweb", fineweb, METH_VARARGS, "fineweb(text, limits) -> the first line rule failed, or -1"},
    {"paragraphs_and_lines", paragraphs_and_lines, METH_VARARGS,
     "paragraphs_and_lines(text, limits) -> gopher_repetition's first paragraph or line rule failed, or -1"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_text_filters_c", NULL, -1, methods};
PyMODINIT_FUNC PyInit__text_filters_c(void) { return PyModule_Create(&module); }
