/* MinHash signatures (minhash.MinHasher.signatures) one document at a time in C: the same values
 * as the numpy version, which stays as the fallback where this is not built.
 * tests/unit/test_minhash.py compares both.
 *
 * The numpy version hashes a batch at a time through arrays the size of its shingles times its
 * permutations; here a document's tokens, its shingles and its 112 running minima stay in cache.
 * What each step computes is minhash.py's, in the same uint64 arithmetic:
 * - the text normalized (lowercased, whitespace runs one space, trimmed): here for a text that
 *   is all ASCII, where str.lower() changes A-Z only and str.split() splits on the ten ASCII
 *   characters Python calls whitespace; minhash.normalize (passed in) for any other text;
 * - tokens: a word's hash (a polynomial over its UTF-8 bytes, its length mixed in, fmix64), or a
 *   character's code point;
 * - a shingle's hash over its n tokens (fewer for a text shorter than n), fmix64;
 * - permutation k: a[k] * x + b[k], the minimum over the shingles, its high 32 bits kept. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define WORD_BASE 0x100000001B3ULL
#define SHINGLE_BASE 0x9E3779B97F4A7C15ULL

static inline uint64_t fmix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static int is_ascii_space(unsigned char c) { /* str.isspace() below 128 */
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

typedef struct {
    uint64_t *values;
    Py_ssize_t count, capacity;
} Tokens;

static int push(Tokens *t, uint64_t value) {
    if (t->count == t->capacity) {
        Py_ssize_t capacity = t->capacity ? 2 * t->capacity : 1024;
        uint64_t *grown = PyMem_Realloc(t->values, capacity * sizeof(uint64_t));
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        t->values = grown;
        t->capacity = capacity;
    }
    t->values[t->count++] = value;
    return 0;
}

static uint64_t word_token(uint64_t raw, uint64_t length) { return fmix64(raw ^ (length * SHINGLE_BASE)); }

/* The words of bytes split on spaces: normalized text, or (lower_ascii) raw ASCII text, which is
 * lowercased and split on runs of ASCII whitespace as it is read. */
static int word_tokens(const unsigned char *bytes, Py_ssize_t size, int lower_ascii, Tokens *out) {
    Py_ssize_t i = 0;
    while (i < size) {
        if (lower_ascii ? is_ascii_space(bytes[i]) : bytes[i] == ' ') {
            i++;
            continue;
        }
        uint64_t raw = 0, power = 1, length = 0;
        for (; i < size && !(lower_ascii ? is_ascii_space(bytes[i]) : bytes[i] == ' '); i++, length++) {
            unsigned char c = bytes[i];
            if (lower_ascii && c >= 'A' && c <= 'Z') c += 'a' - 'A';
            raw += c * power;
            power *= WORD_BASE;
        }
        if (push(out, word_token(raw, length)) < 0) return -1;
    }
    return 0;
}

/* The code points of raw ASCII text as normalized: lowercased, one space between words. */
static int ascii_char_tokens(const unsigned char *bytes, Py_ssize_t size, Tokens *out) {
    int gap = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char c = bytes[i];
        if (is_ascii_space(c)) {
            gap = out->count > 0;
            continue;
        }
        if (gap && push(out, ' ') < 0) return -1;
        gap = 0;
        if (push(out, c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c) < 0) return -1;
    }
    return 0;
}

static int char_tokens(PyObject *text, Tokens *out) {
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t i = 0, n = PyUnicode_GET_LENGTH(text); i < n; i++)
        if (push(out, PyUnicode_READ(kind, data, i)) < 0) return -1;
    return 0;
}

static int tokens_of(PyObject *text, PyObject *normalize, int words, Tokens *out) {
    out->count = 0;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "texts must be str");
        return -1;
    }
    if (PyUnicode_IS_ASCII(text)) {
        const unsigned char *bytes = PyUnicode_DATA(text);
        Py_ssize_t size = PyUnicode_GET_LENGTH(text);
        return words ? word_tokens(bytes, size, 1, out) : ascii_char_tokens(bytes, size, out);
    }
    PyObject *normalized = PyObject_CallOneArg(normalize, text);
    if (!normalized) return -1;
    int status;
    if (!PyUnicode_Check(normalized)) {
        PyErr_SetString(PyExc_TypeError, "normalize must return str");
        status = -1;
    } else if (words) {
        Py_ssize_t size;
        const char *bytes = PyUnicode_AsUTF8AndSize(normalized, &size);
        status = bytes ? word_tokens((const unsigned char *)bytes, size, 0, out) : -1;
    } else {
        status = char_tokens(normalized, out);
    }
    Py_DECREF(normalized);
    return status;
}

/* The shingle hashes of the tokens into xs (room for tokens->count): their number. */
static Py_ssize_t shingle_hashes(const Tokens *tokens, Py_ssize_t n, uint64_t *xs) {
    Py_ssize_t count = tokens->count;
    Py_ssize_t shingles = count == 0 ? 0 : (count < n ? 1 : count - n + 1);
    Py_ssize_t length = count < n ? count : n;
    for (Py_ssize_t s = 0; s < shingles; s++) {
        uint64_t h = 0;
        for (Py_ssize_t j = 0; j < length; j++) h = h * SHINGLE_BASE + tokens->values[s + j] + 1;
        xs[s] = fmix64(h ^ (uint64_t)length);
    }
    return shingles;
}

/* minima[k]: the smallest a[k] * x + b[k] over the shingle hashes xs (all ones for none). A
 * permutation at a time, over all the shingles, with four running minima: each a[k] and b[k] is
 * read once, and the four comparisons do not wait on one another. */
static void fill_minima(const uint64_t *xs, Py_ssize_t shingles, const uint64_t *a, const uint64_t *b,
                        Py_ssize_t num_perm, uint64_t *minima) {
    for (Py_ssize_t k = 0; k < num_perm; k++) {
        uint64_t ak = a[k], bk = b[k];
        uint64_t m0 = UINT64_MAX, m1 = UINT64_MAX, m2 = UINT64_MAX, m3 = UINT64_MAX;
        Py_ssize_t s = 0;
        for (; s + 4 <= shingles; s += 4) {
            uint64_t v0 = ak * xs[s] + bk, v1 = ak * xs[s + 1] + bk, v2 = ak * xs[s + 2] + bk, v3 = ak * xs[s + 3] + bk;
            m0 = v0 < m0 ? v0 : m0;
            m1 = v1 < m1 ? v1 : m1;
            m2 = v2 < m2 ? v2 : m2;
            m3 = v3 < m3 ? v3 : m3;
        }
        for (; s < shingles; s++) {
            uint64_t v = ak * xs[s] + bk;
            m0 = v < m0 ? v : m0;
        }
        m0 = m1 < m0 ? m1 : m0;
        m2 = m3 < m2 ? m3 : m2;
        minima[k] = m2 < m0 ? m2 : m0;
    }
}

static int get_buffer(PyObject *obj, Py_buffer *view, int flags, Py_ssize_t itemsize, const char *name) {
    if (PyObject_GetBuffer(obj, view, flags | PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", name, view->len,
                     itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *signatures(PyObject *self, PyObject *args) {
    PyObject *texts, *normalize, *a_obj, *b_obj, *out_obj;
    Py_ssize_t n;
    int words;
    if (!PyArg_ParseTuple(args, "O!OOOnpO", &PyList_Type, &texts, &normalize, &a_obj, &b_obj, &n, &words, &out_obj))
        return NULL;
    if (n < 1) return PyErr_Format(PyExc_ValueError, "ngram_size must be at least 1, got %zd", n);
    Py_buffer a = {0}, b = {0}, out = {0};
    Tokens tokens = {0};
    uint64_t *minima = NULL, *xs = NULL;  /* xs: a text's shingle hashes, at most one per token */
    Py_ssize_t xs_capacity = 0;
    PyObject *result = NULL;
    if (get_buffer(a_obj, &a, PyBUF_SIMPLE, 8, "a") < 0 || get_buffer(b_obj, &b, PyBUF_SIMPLE, 8, "b") < 0 ||
        get_buffer(out_obj, &out, PyBUF_WRITABLE, 4, "out") < 0)
        goto done;
    Py_ssize_t num_perm = a.len / 8, num_texts = PyList_GET_SIZE(texts);
    if (b.len != a.len || out.len != num_texts * num_perm * 4) {
        PyErr_SetString(PyExc_ValueError, "a and b must have num_perm values, out len(texts) * num_perm");
        goto done;
    }
    if (!(minima = PyMem_Malloc((num_perm ? num_perm : 1) * sizeof(uint64_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    uint32_t *rows = out.buf;
    for (Py_ssize_t i = 0; i < num_texts; i++) {
        if (tokens_of(PyList_GET_ITEM(texts, i), normalize, words, &tokens) < 0) goto done;
        if (tokens.count > xs_capacity) {
            PyMem_Free(xs);
            xs_capacity = tokens.capacity;
            if (!(xs = PyMem_Malloc(xs_capacity * sizeof(uint64_t)))) {
                PyErr_NoMemory();
                goto done;
            }
        }
        fill_minima(xs, shingle_hashes(&tokens, n, xs), a.buf, b.buf, num_perm, minima);
        for (Py_ssize_t k = 0; k < num_perm; k++) rows[i * num_perm + k] = (uint32_t)(minima[k] >> 32);
    }
    result = Py_NewRef(Py_None);
done:
    if (a.obj) PyBuffer_Release(&a);
    if (b.obj) PyBuffer_Release(&b);
    if (out.obj) PyBuffer_Release(&out);
    PyMem_Free(tokens.values);
    PyMem_Free(minima);
    PyMem_Free(xs);
    return result;
}

static PyMethodDef methods[] = {
    {"signatures", signatures, METH_VARARGS,
     "signatures(texts, normalize, a, b, ngram_size, words, out): writes each text's MinHash signature "
     "(uint32, num_perm a text) into out, as minhash.MinHasher.signatures computes it"},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_minhash_c", NULL, -1, methods};
PyMODINIT_FUNC PyInit__minhash_c(void) { return PyModule_Create(&module); }
