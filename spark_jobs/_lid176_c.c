/* fastText's prediction for lid.176.ftz (spark_jobs.lid176) in C: the same label and the same float
 * score as fasttext-predict 0.9.2.4, which stays as the fallback where this is not built.
 * tests/unit/test_lid176.py compares both.
 *
 * It follows fastText's Dictionary::getLine, Model::computeHidden and the hierarchical softmax's
 * dfs for k = 1 step by step, with every float operation in fastText's order and precision (and
 * built with -ffp-contract=off, as fastText's x86-64 wheel has no fused multiply-adds). What it
 * does not share is the slow part: fastText looks each character n-gram's bucket up in a
 * std::unordered_map twice and builds a vector of row ids a text; here one open-addressing table
 * is probed once and each row is added as it is found. The rows come premultiplied by their
 * quantized norm (the same float product fastText forms in ProductQuantizer::addcode). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define LABEL_PREFIX "__label__" /* an unknown word starting so is a label, never a word */
#define LABEL_PREFIX_SIZE 9

typedef struct {
    PyObject_HEAD
    int32_t dim, nwords, nlabels, bucket, minn, maxn, eos;
    Py_buffer words, word_ends, rows, output, left, right;  /* kept for the predictor's life */
    uint32_t word_mask, bucket_mask;
    int32_t *word_slots;     /* word id + 1, 0 when empty */
    int32_t *bucket_keys;    /* a pruned bucket + 1, 0 when empty */
    int32_t *bucket_rows;    /* its row in rows */
    int32_t *subword_starts; /* an in-vocabulary word's rows: subwords[subword_starts[w] ..] */
    int32_t *subwords;
    float *hidden;
} Predictor;

/* fastText's FNV-1a, with each byte sign-extended as the released models were trained. */
static inline uint32_t fnv_step(uint32_t h, unsigned char byte) {
    return (h ^ (uint32_t)(int32_t)(int8_t)byte) * 16777619u;
}

static uint32_t fnv(const char *s, Py_ssize_t n) {
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = 0; i < n; i++) h = fnv_step(h, (unsigned char)s[i]);
    return h;
}

static const char *word_at(Predictor *p, int32_t w, Py_ssize_t *n) {
    const int32_t *ends = p->word_ends.buf;
    int32_t start = w ? ends[w - 1] : 0;
    *n = ends[w] - start;
    return (const char *)p->words.buf + start;
}

static int32_t find_word(Predictor *p, const char *s, Py_ssize_t n, uint32_t h) {
    for (uint32_t slot = h & p->word_mask;; slot = (slot + 1) & p->word_mask) {
        int32_t w = p->word_slots[slot] - 1;
        if (w < 0) return -1;
        Py_ssize_t wn;
        const char *ws = word_at(p, w, &wn);
        if (wn == n && memcmp(ws, s, n) == 0) return w;
    }
}

static int32_t find_bucket(Predictor *p, int32_t bucket) {
    for (uint32_t slot = ((uint32_t)bucket * 2654435761u) & p->bucket_mask;; slot = (slot + 1) & p->bucket_mask) {
        int32_t key = p->bucket_keys[slot] - 1;
        if (key < 0) return -1;
        if (key == bucket) return p->bucket_rows[slot];
    }
}

/* Dictionary::computeSubwords over "<" word ">": every n-gram of minn..maxn characters (UTF-8),
 * hashed into a bucket; the pruned model keeps a row for some buckets only. Calls emit(row) in
 * fastText's order; returns how many rows it emitted. */
typedef void (*Emit)(Predictor *, int32_t, void *);

static int32_t subword_rows(Predictor *p, const char *word, Py_ssize_t n, Emit emit, void *ctx) {
    int32_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (((unsigned char)word[i] & 0xC0) == 0x80) continue;
        uint32_t h = 2166136261u;
        Py_ssize_t j = i;
        for (int32_t chars = 1; j < n && chars <= p->maxn; chars++) {
            h = fnv_step(h, (unsigned char)word[j++]);
            while (j < n && ((unsigned char)word[j] & 0xC0) == 0x80) h = fnv_step(h, (unsigned char)word[j++]);
            if (chars >= p->minn && !(chars == 1 && (i == 0 || j == n))) {
                int32_t row = find_bucket(p, (int32_t)(h % (uint32_t)p->bucket));
                if (row >= 0) {
                    emit(p, p->nwords + row, ctx);
                    count++;
                }
            }
        }
    }
    return count;
}

static void add_row(Predictor *p, int32_t row, void *ctx) {
    (void)ctx;
    const float *r = (const float *)p->rows.buf + (Py_ssize_t)row * p->dim;
    float *hidden = p->hidden;
    for (int32_t k = 0; k < p->dim; k++) hidden[k] += r[k];
}

typedef struct {
    int32_t *out;
    int32_t used;
} RowList;

static void list_row(Predictor *p, int32_t row, void *ctx) {
    (void)p;
    RowList *list = ctx;
    if (list->out) list->out[list->used] = row;
    list->used++;
}

/* fastText's std_log: log(x + 1e-5) in double, x and the result in float. */
static inline float std_log(float x) { return (float)log((double)x + 1e-5); }

typedef struct {
    float score;
    int32_t node;
} Best;

/* HierarchicalSoftmaxLoss::dfs with k = 1: the heap holds one leaf, and a leaf reached with a score
 * not below it replaces it (push_heap then pop_heap drops the older of two equal scores). */
static void dfs(Predictor *p, int32_t node, float score, float floor, Best *best) {
    if (score < floor) return;
    if (best->node >= 0 && score < best->score) return;
    const int32_t *left = p->left.buf, *right = p->right.buf;
    if (left[node] == -1 && right[node] == -1) {
        best->score = score;
        best->node = node;
        return;
    }
    const float *w = (const float *)p->output.buf + (Py_ssize_t)(node - p->nlabels) * p->dim;
    float f = 0.0f;
    for (int32_t k = 0; k < p->dim; k++) f += w[k] * p->hidden[k];
    f = (float)(1. / (1.0f + expf(-f)));
    dfs(p, left[node], score + std_log((float)(1.0 - (double)f)), floor, best);
    dfs(p, right[node], score + std_log(f), floor, best);
}

static int is_space(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f' || c == '\0';
}

/* predict(line) -> (label index, probability): fasttext's model.predict(line, k=1). */
static PyObject *predict(Predictor *p, PyObject *arg) {
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(arg, &n);
    if (text == NULL) return NULL;
    if (memchr(text, '\n', n) != NULL) {
        PyErr_SetString(PyExc_ValueError, "predict processes one line at a time (remove '\\n')");
        return NULL;
    }
    memset(p->hidden, 0, p->dim * sizeof(float));
    int64_t rows = 0;
    const int32_t *starts = p->subword_starts;
    Py_ssize_t i = 0;
    while (1) {
        while (i < n && is_space(text[i])) i++;
        Py_ssize_t start = i;
        while (i < n && !is_space(text[i])) i++;
        /* The "\n" fasttext appends ends the line with its end-of-sentence word. */
        int32_t w = start < n ? find_word(p, text + start, i - start, fnv(text + start, i - start)) : p->eos;
        if (w >= p->nwords) {
            /* a label: never a word */
        } else if (w >= 0) {
            for (int32_t s = starts[w]; s < starts[w + 1]; s++) add_row(p, p->subwords[s], NULL);
            rows += starts[w + 1] - starts[w];
        } else if (!(i - start >= LABEL_PREFIX_SIZE && memcmp(text + start, LABEL_PREFIX, LABEL_PREFIX_SIZE) == 0)) {
            char stack[256];
            Py_ssize_t size = i - start + 2;
            char *bracketed = size <= (Py_ssize_t)sizeof(stack) ? stack : PyMem_Malloc(size);
            if (bracketed == NULL) return PyErr_NoMemory();
            bracketed[0] = '<';
            memcpy(bracketed + 1, text + start, i - start);
            bracketed[size - 1] = '>';
            rows += subword_rows(p, bracketed, size, add_row, NULL);
            if (bracketed != stack) PyMem_Free(bracketed);
        }
        if (start >= n || w == p->eos) break; /* fastText's line ends at "</s>", written or appended */
    }
    float scale = (float)(1.0 / (double)rows);
    for (int32_t k = 0; k < p->dim; k++) p->hidden[k] *= scale;
    Best best = {0.0f, -1};
    dfs(p, 2 * p->nlabels - 2, 0.0f, std_log(0.0f), &best);
    if (best.node < 0) return Py_BuildValue("(iO)", -1, Py_None);
    return Py_BuildValue("(id)", best.node, (double)expf(best.score));
}

static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items", name, view->len,
                     itemsize);
        return -1;
    }
    return 0;
}

static int predictor_init(Predictor *p, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"words", "word_ends", "nwords", "buckets", "bucket_rows", "rows", "output",
                               "left", "right", "dim", "bucket", "minn", "maxn", NULL};
    PyObject *words, *word_ends, *buckets, *bucket_rows, *rows, *output, *left, *right;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOiOOOOOOiiii", keywords, &words, &word_ends, &p->nwords,
                                     &buckets, &bucket_rows, &rows, &output, &left, &right, &p->dim, &p->bucket,
                                     &p->minn, &p->maxn))
        return -1;
    if (p->hidden != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Predictor is initialised once");
        return -1;
    }
    Py_buffer keys = {0}, values = {0};
    int result = -1;
    if (get_buffer(words, &p->words, 1, "words") < 0 || get_buffer(word_ends, &p->word_ends, 4, "word_ends") < 0 ||
        get_buffer(buckets, &keys, 4, "buckets") < 0 || get_buffer(bucket_rows, &values, 4, "bucket_rows") < 0 ||
        get_buffer(rows, &p->rows, 4, "rows") < 0 || get_buffer(output, &p->output, 4, "output") < 0 ||
        get_buffer(left, &p->left, 4, "left") < 0 || get_buffer(right, &p->right, 4, "right") < 0)
        goto done;
    int32_t size = (int32_t)(p->word_ends.len / 4), pruned = (int32_t)(keys.len / 4);
    p->nlabels = size - p->nwords;
    if (values.len != keys.len || p->nlabels < 1 || p->left.len != (2 * p->nlabels - 1) * 4 ||
        p->right.len != p->left.len || p->dim < 1 || p->output.len < (Py_ssize_t)p->nlabels * p->dim * 4 ||
        p->rows.len != (Py_ssize_t)(p->nwords + pruned) * p->dim * 4) {
        PyErr_SetString(PyExc_ValueError, "the model's arrays do not fit together");
        goto done;
    }
    uint32_t slots = 16;
    while (slots < 2u * (uint32_t)size) slots <<= 1;
    p->word_mask = slots - 1;
    p->word_slots = PyMem_Calloc(slots, sizeof(int32_t));
    slots = 16;
    while (slots < 2u * (uint32_t)pruned) slots <<= 1;
    p->bucket_mask = slots - 1;
    p->bucket_keys = PyMem_Calloc(slots, sizeof(int32_t));
    p->bucket_rows = PyMem_Malloc(slots * sizeof(int32_t));
    p->subword_starts = PyMem_Malloc((p->nwords + 1) * sizeof(int32_t));
    p->hidden = PyMem_Calloc(p->dim, sizeof(float));
    if (!p->word_slots || !p->bucket_keys || !p->bucket_rows || !p->subword_starts || !p->hidden) {
        PyErr_NoMemory();
        goto done;
    }
    for (int32_t w = 0; w < size; w++) {
        Py_ssize_t wn;
        const char *ws = word_at(p, w, &wn);
        uint32_t slot = fnv(ws, wn) & p->word_mask;
        while (p->word_slots[slot]) slot = (slot + 1) & p->word_mask;
        p->word_slots[slot] = w + 1;
    }
    const int32_t *key = keys.buf, *value = values.buf;
    for (int32_t b = 0; b < pruned; b++) {
        uint32_t slot = ((uint32_t)key[b] * 2654435761u) & p->bucket_mask;
        while (p->bucket_keys[slot]) slot = (slot + 1) & p->bucket_mask;
        p->bucket_keys[slot] = key[b] + 1;
        p->bucket_rows[slot] = value[b];
    }
    p->eos = find_word(p, "</s>", 4, fnv("</s>", 4));
    if (p->eos < 0 || p->eos >= p->nwords) {
        PyErr_SetString(PyExc_ValueError, "the model has no </s> word");
        goto done;
    }
    /* Dictionary::initNgrams: a word's own row, then its n-grams' (none for </s>); counted first. */
    char bracketed[1024];
    for (int pass = 0; pass < 2; pass++) {
        RowList list = {pass ? p->subwords : NULL, 0};
        for (int32_t w = 0; w < p->nwords; w++) {
            p->subword_starts[w] = list.used;
            list_row(p, w, &list);
            Py_ssize_t wn;
            const char *ws = word_at(p, w, &wn);
            if (w == p->eos) continue;
            if (wn + 2 > (Py_ssize_t)sizeof(bracketed)) {
                PyErr_SetString(PyExc_ValueError, "a vocabulary word is longer than 1,022 bytes");
                goto done;
            }
            bracketed[0] = '<';
            memcpy(bracketed + 1, ws, wn);
            bracketed[wn + 1] = '>';
            subword_rows(p, bracketed, wn + 2, list_row, &list);
        }
        p->subword_starts[p->nwords] = list.used;
        if (!pass && (p->subwords = PyMem_Malloc((list.used + 1) * sizeof(int32_t))) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    result = 0;
done:
    if (keys.obj) PyBuffer_Release(&keys);
    if (values.obj) PyBuffer_Release(&values);
    return result;
}

static void predictor_dealloc(Predictor *p) {
    Py_buffer *views[] = {&p->words, &p->word_ends, &p->rows, &p->output, &p->left, &p->right};
    for (size_t v = 0; v < sizeof(views) / sizeof(views[0]); v++)
        if (views[v]->obj) PyBuffer_Release(views[v]);
    PyMem_Free(p->word_slots);
    PyMem_Free(p->bucket_keys);
    PyMem_Free(p->bucket_rows);
    PyMem_Free(p->subword_starts);
    PyMem_Free(p->subwords);
    PyMem_Free(p->hidden);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyMethodDef predictor_methods[] = {
    {"predict", (PyCFunction)predict, METH_O,
     "predict(line) -> (label index, probability): fasttext's predict(line, k=1), no newline in line"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject PredictorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "spark_jobs._lid176_c.Predictor",
    .tp_basicsize = sizeof(Predictor),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "fastText's supervised prediction (hierarchical softmax, quantized input) for lid.176.ftz",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)predictor_init,
    .tp_dealloc = (destructor)predictor_dealloc,
    .tp_methods = predictor_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lid176_c", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__lid176_c(void) {
    if (PyType_Ready(&PredictorType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&PredictorType);
    if (PyModule_AddObject(m, "Predictor", (PyObject *)&PredictorType) < 0) {
        Py_DECREF(&PredictorType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
