/* gopher_repetition's word n-gram figures (text_filters.repeated_word_ngrams) one document at a
 * time in C: the same numbers as the numpy version, which stays as the fallback where this is not
 * built. tests/unit/test_text_filters.py compares both.
 *
 * A document's words are numbered in order of first appearance (equal strings, equal numbers); an
 * n-gram's number is that of the pair (its (n-1)-gram's number, its last word's), again in order
 * of first appearance, so the smallest number among ties is the n-gram seen first. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_ssize_t size;  /* slots in use: a power of two, at least twice the entries */
    uint64_t *keys;   /* words: the str's hash; pairs: (first << 32) | second, plus one (0 is empty) */
    PyObject **words; /* words only: the str in the slot */
    int32_t *numbers;
} Table;

static int table_init(Table *t, Py_ssize_t entries, int with_words) {
    t->size = 16;
    while (t->size < 2 * entries) t->size <<= 1;
    t->keys = PyMem_Calloc(t->size, sizeof(uint64_t));
    t->numbers = PyMem_Malloc(t->size * sizeof(int32_t));
    t->words = with_words ? PyMem_Calloc(t->size, sizeof(PyObject *)) : NULL;
    return t->keys && t->numbers && (!with_words || t->words) ? 0 : -1;
}

static void table_free(Table *t) {
    PyMem_Free(t->keys);
    PyMem_Free(t->numbers);
    PyMem_Free(t->words);
}

/* Empty the table and size it for entries (at most what table_init was given): a document's own
 * size, so a short one clears few slots. */
static void table_reset(Table *t, Py_ssize_t entries) {
    t->size = 16;
    while (t->size < 2 * entries) t->size <<= 1;
    memset(t->keys, 0, t->size * sizeof(uint64_t));
    if (t->words) memset(t->words, 0, t->size * sizeof(PyObject *));
}

static uint64_t mix(uint64_t x) { /* murmur3's fmix64: spreads the pair keys over the slots */
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static int same_str(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    int kind = PyUnicode_KIND(a);
    return n == PyUnicode_GET_LENGTH(b) && kind == PyUnicode_KIND(b) &&
           memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * kind) == 0;
}

/* The number of word w (hash h), a new one (*next) when first seen. */
static int32_t word_number(Table *t, PyObject *w, Py_hash_t h, int32_t *next) {
    uint64_t key = (uint64_t)h | 1; /* never 0, the empty slot */
    Py_ssize_t i = (Py_ssize_t)(mix((uint64_t)h) & (uint64_t)(t->size - 1));
    while (t->keys[i]) {
        if (t->keys[i] == key && same_str(t->words[i], w)) return t->numbers[i];
        i = (i + 1) & (t->size - 1);
    }
    t->keys[i] = key;
    t->words[i] = w;
    return t->numbers[i] = (*next)++;
}

static int32_t pair_number(Table *t, int32_t first, int32_t second, int32_t *next) {
    uint64_t key = (((uint64_t)(uint32_t)first << 32) | (uint32_t)second) + 1;
    Py_ssize_t i = (Py_ssize_t)(mix(key) & (uint64_t)(t->size - 1));
    while (t->keys[i]) {
        if (t->keys[i] == key) return t->numbers[i];
        i = (i + 1) & (t->size - 1);
    }
    t->keys[i] = key;
    return t->numbers[i] = (*next)++;
}

/* Set lists[index][doc] to value; nothing when index is -1 (an n nobody asked for). */
static int put(PyObject *lists, Py_ssize_t index, Py_ssize_t doc, long long value) {
    if (index < 0) return 0;
    PyObject *v = PyLong_FromLongLong(value);
    if (!v) return -1;
    PyList_SET_ITEM(PyList_GET_ITEM(lists, index), doc, v);
    return 0;
}

static PyObject *new_lists(Py_ssize_t count, Py_ssize_t docs) {
    PyObject *lists = PyList_New(count);
    for (Py_ssize_t i = 0; lists && i < count; i++) {
        PyObject *list = PyList_New(docs);
        if (!list) Py_CLEAR(lists);
        else PyList_SET_ITEM(lists, i, list);
    }
    return lists;
}

/* figures(word_lists, top_ns, dup_ns) -> (top, duplicated): for each n of top_ns a list of a value
 * per document, (the characters of the most common n-gram's words + n - 1) times its occurrences,
 * -1 with fewer than n words; for each n of dup_ns, the characters of n-grams that repeat an
 * earlier one, skipping past each repeat. */
static PyObject *figures(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(args[0]) || !PyTuple_Check(args[1]) || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "figures(word_lists: list, top_ns: tuple, dup_ns: tuple)");
        return NULL;
    }
    PyObject *word_lists = args[0], *top_ns = args[1], *dup_ns = args[2];
    Py_ssize_t docs = PyList_GET_SIZE(word_lists), longest = 0;
    long max_n = 0;
    for (int k = 1; k <= 2; k++)
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[k]); i++) {
            long n = PyLong_AsLong(PyTuple_GET_ITEM(args[k], i));
            if (n < 1 || n > 1000) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "n-gram sizes are from 1 to 1000");
                return NULL;
            }
            if (n > max_n) max_n = n;
        }
    Py_ssize_t top_at[1001], dup_at[1001]; /* for each n, its list in top / duplicated, or -1 */
    for (long n = 0; n <= max_n; n++) top_at[n] = dup_at[n] = -1;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(top_ns); i++) top_at[PyLong_AsLong(PyTuple_GET_ITEM(top_ns, i))] = i;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(dup_ns); i++) dup_at[PyLong_AsLong(PyTuple_GET_ITEM(dup_ns, i))] = i;
    for (Py_ssize_t d = 0; d < docs; d++) {
        PyObject *words = PyList_GET_ITEM(word_lists, d);
        if (!PyList_Check(words)) {
            PyErr_SetString(PyExc_TypeError, "word_lists holds lists of str");
            return NULL;
        }
        if (PyList_GET_SIZE(words) > longest) longest = PyList_GET_SIZE(words);
    }
    if (longest >= INT32_MAX) return PyErr_NoMemory();
    PyObject *top = new_lists(PyTuple_GET_SIZE(top_ns), docs), *dup = new_lists(PyTuple_GET_SIZE(dup_ns), docs);
    Table word_table = {0}, pair_table = {0};
    long long *chars_before = PyMem_Malloc((longest + 1) * sizeof(long long));
    int32_t *word_numbers = PyMem_Malloc((longest + 1) * sizeof(int32_t));
    int32_t *numbers = PyMem_Malloc((longest + 1) * sizeof(int32_t)), *counts = PyMem_Malloc((longest + 1) * sizeof(int32_t));
    char *seen = PyMem_Malloc(longest + 1);
    PyObject *result = NULL;
    if (!top || !dup || table_init(&word_table, longest, 1) < 0 || table_init(&pair_table, longest, 0) < 0 ||
        !chars_before || !word_numbers || !numbers || !counts || !seen) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t d = 0; d < docs; d++) {
        PyObject *words = PyList_GET_ITEM(word_lists, d);
        Py_ssize_t len = PyList_GET_SIZE(words);
        int32_t next = 0;
        table_reset(&word_table, len);
        chars_before[0] = 0;
        for (Py_ssize_t p = 0; p < len; p++) {
            PyObject *w = PyList_GET_ITEM(words, p);
            if (!PyUnicode_Check(w)) {
                PyErr_SetString(PyExc_TypeError, "word_lists holds lists of str");
                goto done;
            }
            Py_hash_t h = PyObject_Hash(w);
            if (h == -1) goto done;
            numbers[p] = word_numbers[p] = word_number(&word_table, w, h, &next);
            chars_before[p + 1] = chars_before[p] + PyUnicode_GET_LENGTH(w);
        }
        for (long n = 1; n <= max_n; n++) {
            Py_ssize_t positions = len - n + 1; /* of n-grams */
            if (positions <= 0) {
                if (put(top, top_at[n], d, -1) < 0 || put(dup, dup_at[n], d, 0) < 0) goto done;
                continue;
            }
            if (n > 1) { /* numbers[p]: the (n-1)-gram's at p, from now on the n-gram's */
                table_reset(&pair_table, positions);
                next = 0;
                for (Py_ssize_t p = 0; p < positions; p++)
                    numbers[p] = pair_number(&pair_table, numbers[p], word_numbers[p + n - 1], &next);
            }
            if (top_at[n] >= 0) {
                memset(counts, 0, (size_t)next * sizeof(int32_t));
                for (Py_ssize_t p = 0; p < positions; p++) counts[numbers[p]]++;
                Py_ssize_t best = 0; /* the first position of the most common, first seen among ties */
                for (Py_ssize_t p = 1; p < positions; p++)
                    if (counts[numbers[p]] > counts[numbers[best]]) best = p;
                long long value = (chars_before[best + n] - chars_before[best] + n - 1) * counts[numbers[best]];
                if (put(top, top_at[n], d, value) < 0) goto done;
            }
            if (dup_at[n] >= 0) { /* datatrove's find_all_duplicate */
                long long total = 0;
                memset(seen, 0, (size_t)next);
                for (Py_ssize_t p = 0; p < positions;) {
                    if (seen[numbers[p]]) {
                        total += chars_before[p + n] - chars_before[p];
                        p += n;
                    } else {
                        seen[numbers[p]] = 1;
                        p += 1;
                    }
                }
                if (put(dup, dup_at[n], d, total) < 0) goto done;
            }
        }
    }
    result = PyTuple_Pack(2, top, dup);
done:
    Py_XDECREF(top);
    Py_XDECREF(dup);
    table_free(&word_table);
    table_free(&pair_table);
    PyMem_Free(chars_before);
    PyMem_Free(word_numbers);
    PyMem_Free(numbers);
    PyMem_Free(counts);
    PyMem_Free(seen);
    return result;
}

static PyMethodDef methods[] = {
    {"figures", (PyCFunction)(void (*)(void))figures, METH_FASTCALL,
     "figures(word_lists, top_ns, dup_ns) -> (top, duplicated): text_filters.repeated_word_ngrams' numbers, "
     "as lists per n"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_word_ngrams_c", NULL, -1, methods};
PyMODINIT_FUNC PyInit__word_ngrams_c(void) { return PyModule_Create(&module); }
