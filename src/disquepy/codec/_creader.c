/*
 * disquepy.codec._creader: the client request reader in C.
 *
 * Same API and the same results, byte for byte and error for error, as
 * resp.PyRequestReader (the reference, whose docstring states the parsing
 * rules); the tests run both over the same inputs, whole and byte at a time.
 * Inline requests are rare and their quoting rules subtle: their lines are
 * split by resp.split_args, called back from here, so those rules live in
 * one place.
 *
 * Pure like the rest of the codec: no I/O.  resp.py calls _init() once with
 * the Python objects the reader needs (its exception classes and helpers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static PyObject *ProtocolError;        /* resp.ProtocolError */
static PyObject *QueryBufferLimitError; /* resp.QueryBufferLimitError */
static PyObject *split_args;           /* resp.split_args */
static PyObject *expected_dollar;      /* resp._expected_dollar(byte) -> ProtocolError */

#define E_MBULK_LEN "Protocol error: invalid multibulk length"
#define E_BULK_LEN "Protocol error: invalid bulk length"
#define E_QUOTES "Protocol error: unbalanced quotes in request"
#define E_BIG_INLINE "Protocol error: too big inline request"
#define E_BIG_MBULK "Protocol error: too big mbulk count string"
#define E_BIG_BULK "Protocol error: too big bulk count string"
#define E_QBUF "client reached max query buffer length"
#define E_UNAUTH_MBULK "Protocol error: unauthenticated multibulk length"
#define E_UNAUTH_BULK "Protocol error: unauthenticated bulk length"
/* Redis 7's limits on a request from a client that must AUTH first */
#define UNAUTH_MAX_MBULK 10
#define UNAUTH_MAX_BULK 16384

/* a buffer this big is given back to the allocator once drained */
#define KEEP_CAPACITY (16 * 1024)

typedef struct {
    PyObject_HEAD
    char *buf;           /* unparsed input starts at pos */
    Py_ssize_t len;      /* bytes in buf */
    Py_ssize_t cap;      /* allocated size of buf */
    Py_ssize_t pos;      /* start of the unparsed part */
    Py_ssize_t scan;     /* resume point when looking for a line end */
    Py_ssize_t left;     /* multibulk elements still to read (0: between requests) */
    Py_ssize_t bulklen;  /* length of the bulk being read, -1 if its header is not read */
    PyObject *args;      /* list: elements of the request being read, or NULL */
    /* the error raised, raised again (as a new exception) forever after. Only its
     * class and message are kept: an exception object would hold its traceback,
     * whose frames hold the connection holding this reader, a cycle the GC could
     * not break since readers are not GC-tracked */
    PyObject *err_type;
    PyObject *err_msg;
    long long max_bulk;
    Py_ssize_t max_inline;
    long long max_mbulk;
    long long qb_limit;
    long long lim_bulk;  /* the limits in force: the max_* ones, lower before AUTH */
    long long lim_mbulk;
} Reader;

/* Keep the class and message of `exc` (a new reference, consumed) as the reader's
 * error for good, and raise it; always returns NULL. */
static PyObject *
keep_and_raise(Reader *r, PyObject *exc)
{
    PyObject *msg = PyObject_GetAttrString(exc, "message");
    if (msg == NULL) {
        PyErr_Clear();
        msg = PyObject_Str(exc);
        if (msg == NULL) {
            Py_DECREF(exc);
            return NULL;
        }
    }
    PyObject *type = (PyObject *)Py_TYPE(exc);
    Py_INCREF(type);
    Py_XSETREF(r->err_type, type);
    Py_XSETREF(r->err_msg, msg);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

/* Fail with a new `cls(msg)`; always returns NULL. */
static PyObject *
fail(Reader *r, PyObject *cls, const char *msg)
{
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (exc == NULL)
        return NULL;
    return keep_and_raise(r, exc);
}

static PyObject *
raise_kept(Reader *r)
{
    PyObject *exc = PyObject_CallOneArg(r->err_type, r->err_msg);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* first `c` in buf[from:until) (until clipped to len), or -1 */
static Py_ssize_t
find(Reader *r, char c, Py_ssize_t from, Py_ssize_t until)
{
    if (until > r->len)
        until = r->len;
    if (from >= until)
        return -1;
    const char *p = memchr(r->buf + from, c, (size_t)(until - from));
    return p ? (Py_ssize_t)(p - r->buf) : -1;
}

/* The end of the line starting at pos: 1 with *nl at its `c` (for '\r', one more
 * byte must be there too: Redis skips it unchecked), 0 when more data is needed,
 * -1 with the reader failed with `too_big` when the line exceeds the inline limit. */
static int
line_end(Reader *r, char c, Py_ssize_t pos, const char *too_big, Py_ssize_t *nl)
{
    Py_ssize_t at = find(r, c, r->scan > pos ? r->scan : pos, pos + r->max_inline + 1);
    if (at < 0) {
        if (r->len - pos > r->max_inline) {
            fail(r, ProtocolError, too_big);
            return -1;
        }
        r->scan = r->len;
        return 0;
    }
    if (c == '\r' && at + 1 >= r->len)
        return 0;
    *nl = at;
    return 1;
}

/* Redis's string2ll(): strict base-10 signed 64-bit; 0 when not a number */
static int
str2ll(const char *s, Py_ssize_t n, long long *out)
{
    int neg = 0;
    unsigned long long v = 0;
    Py_ssize_t i = 0;
    if (n == 0 || n > 20)
        return 0;
    if (s[0] == '-') {
        if (n == 1 || s[1] == '0')
            return 0;
        neg = 1;
        i = 1;
    } else if (s[0] == '0') {
        if (n > 1)
            return 0;
        *out = 0;
        return 1;
    }
    for (; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9)
            return 0;
        if (v > (ULLONG_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)LLONG_MAX + 1)
            return 0;
        *out = v == (unsigned long long)LLONG_MAX + 1 ? LLONG_MIN : -(long long)v;
    } else {
        if (v > (unsigned long long)LLONG_MAX)
            return 0;
        *out = (long long)v;
    }
    return 1;
}

/* An inline request at pos. Returns a new reference: the argument list, an
 * empty list (blank line), Py_None (more data needed), or NULL on error. */
static PyObject *
parse_inline(Reader *r)
{
    Py_ssize_t pos = r->pos, nl;
    int found = line_end(r, '\n', pos, E_BIG_INLINE, &nl);
    if (found <= 0) {
        if (found < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    Py_ssize_t stop = (nl > pos && r->buf[nl - 1] == '\r') ? nl - 1 : nl;
    PyObject *line = PyBytes_FromStringAndSize(r->buf + pos, stop - pos);
    if (line == NULL)
        return NULL;
    PyObject *argv = PyObject_CallOneArg(split_args, line);
    Py_DECREF(line);
    if (argv == NULL)
        return NULL;
    if (argv == Py_None) {
        Py_DECREF(argv);
        return fail(r, ProtocolError, E_QUOTES);
    }
    if (!PyList_Check(argv)) {
        Py_DECREF(argv);
        PyErr_SetString(PyExc_TypeError, "split_args must return a list");
        return NULL;
    }
    r->pos = nl + 1;
    /* Disque (like Redis < 4) drops the empty arguments of inline requests */
    Py_ssize_t n = PyList_GET_SIZE(argv), kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyList_GET_ITEM(argv, i);
        if (PyBytes_GET_SIZE(a) == 0)
            continue;
        if (kept != i) {
            Py_INCREF(a);
            PyList_SetItem(argv, kept, a); /* steals; drops the old item */
        }
        kept++;
    }
    if (kept != n && PyList_SetSlice(argv, kept, n, NULL) < 0) {
        Py_DECREF(argv);
        return NULL;
    }
    return argv;
}

/* One request. Same returns as parse_inline. */
static PyObject *
parse(Reader *r)
{
    Py_ssize_t pos = r->pos, end = r->len, nl;
    Py_ssize_t left = r->left, bulklen;
    int found;
    const char *buf = r->buf;

    if (left) {
        bulklen = r->bulklen;
    } else {
        if (pos >= end)
            Py_RETURN_NONE;
        if (buf[pos] != '*')
            return parse_inline(r);
        /* the multibulk count line: "*<count>\r\n" */
        found = line_end(r, '\r', pos, E_BIG_MBULK, &nl);
        if (found <= 0) {
            if (found < 0)
                return NULL;
            Py_RETURN_NONE;
        }
        long long count;
        if (!str2ll(buf + pos + 1, nl - pos - 1, &count) || count > r->max_mbulk)
            return fail(r, ProtocolError, E_MBULK_LEN);
        if (count > r->lim_mbulk)
            return fail(r, ProtocolError, E_UNAUTH_MBULK);
        pos = nl + 2;
        if (count <= 0) {
            r->pos = pos;
            return PyList_New(0);
        }
        left = (Py_ssize_t)count;
        /* grown as elements arrive: a huge count must not allocate up front */
        Py_XSETREF(r->args, PyList_New(0));
        if (r->args == NULL)
            return NULL;
        bulklen = -1;
    }

    while (left) {
        if (bulklen < 0) {
            /* a bulk header line: "$<len>\r\n" */
            found = line_end(r, '\r', pos, E_BIG_BULK, &nl);
            if (found < 0)
                return NULL;
            if (found == 0)
                break;
            if (buf[pos] != '$') {
                PyObject *exc = PyObject_CallFunction(expected_dollar, "i",
                                                      (int)(unsigned char)buf[pos]);
                if (exc == NULL)
                    return NULL;
                return keep_and_raise(r, exc);
            }
            /* digits only (a negative length is invalid too), no leading zero */
            Py_ssize_t width = nl - pos; /* '$' and the digits */
            if (width < 2 || width > 20 || (buf[pos + 1] == '0' && width > 2))
                return fail(r, ProtocolError, E_BULK_LEN);
            unsigned long long v = 0;
            for (Py_ssize_t i = pos + 1; i < nl; i++) {
                unsigned d = (unsigned char)buf[i] - '0';
                if (d > 9)
                    return fail(r, ProtocolError, E_BULK_LEN);
                v = v * 10 + d; /* at most 19 digits: no overflow */
            }
            if (v > (unsigned long long)r->lim_bulk)
                return fail(r, ProtocolError,
                            v > (unsigned long long)r->max_bulk ? E_BULK_LEN : E_UNAUTH_BULK);
            bulklen = (Py_ssize_t)v;
            pos = nl + 2;
        }
        if (end - pos < bulklen + 2) /* payload + 2 (unchecked) bytes */
            break;
        PyObject *arg = PyBytes_FromStringAndSize(buf + pos, bulklen);
        if (arg == NULL)
            return NULL;
        int rc = PyList_Append(r->args, arg);
        Py_DECREF(arg);
        if (rc < 0)
            return NULL;
        pos += bulklen + 2;
        bulklen = -1;
        left--;
    }
    r->pos = pos;
    r->left = left;
    r->bulklen = bulklen;
    if (left)
        Py_RETURN_NONE;
    PyObject *args = r->args;
    r->args = NULL;
    return args;
}

static void
release(Reader *r)
{
    /* everything parsed: an idle client does not pin its last big request */
    if (r->pos == r->len) {
        r->len = r->pos = r->scan = 0;
        if (r->cap > KEEP_CAPACITY) {
            PyMem_Free(r->buf);
            r->buf = NULL;
            r->cap = 0;
        }
    }
}

static PyObject *
Reader_gets(Reader *r, PyObject *Py_UNUSED(ignored))
{
    if (r->err_type != NULL)
        return raise_kept(r);
    for (;;) {
        PyObject *argv = parse(r);
        if (argv == NULL) {
            if (r->err_type == NULL && PyErr_Occurred()) {
                /* not a protocol error (e.g. MemoryError): the reader's state may be
                 * half-updated, so it fails for good with that error */
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyErr_NormalizeException(&type, &value, &tb);
                Py_XDECREF(type);
                Py_XDECREF(tb);
                if (value != NULL)
                    return keep_and_raise(r, value);
            }
            return NULL;
        }
        if (argv == Py_None) {
            Py_DECREF(argv);
            release(r);
            Py_RETURN_FALSE;
        }
        if (PyList_GET_SIZE(argv))
            return argv;
        Py_DECREF(argv); /* "*0", "*-1", a blank inline line: no command, go on */
    }
}

static PyObject *
Reader_feed(Reader *r, PyObject *data)
{
    Py_buffer view;
    if (r->err_type != NULL)
        return raise_kept(r);
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t n = view.len;
    if ((long long)(r->len - r->pos) + n > r->qb_limit) {
        PyBuffer_Release(&view);
        return fail(r, QueryBufferLimitError, E_QBUF);
    }
    if (r->pos) {
        Py_ssize_t rest = r->len - r->pos;
        if (rest)
            memmove(r->buf, r->buf + r->pos, (size_t)rest);
        r->scan = r->scan > r->pos ? r->scan - r->pos : 0;
        r->len = rest;
        r->pos = 0;
    }
    if (r->len + n > r->cap) {
        Py_ssize_t cap = r->cap ? r->cap : 256;
        while (cap < r->len + n)
            cap *= 2;
        char *nb = PyMem_Realloc(r->buf, (size_t)cap);
        if (nb == NULL) {
            PyBuffer_Release(&view);
            return PyErr_NoMemory();
        }
        r->buf = nb;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, view.buf, (size_t)n);
    r->len += n;
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

static Py_ssize_t
Reader_len(Reader *r)
{
    return r->len - r->pos;
}

static int
Reader_init(Reader *r, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_bulk_len", "max_inline", "max_multibulk",
                             "query_buffer_limit", NULL};
    long long max_bulk = 512LL * 1024 * 1024, max_mbulk = 1024 * 1024;
    long long qb_limit = 1024LL * 1024 * 1024;
    Py_ssize_t max_inline = 64 * 1024;
    if (ProtocolError == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_creader._init() was not called");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|LnLL", kwlist, &max_bulk, &max_inline,
                                     &max_mbulk, &qb_limit))
        return -1;
    if (max_inline < 0 || max_bulk < 0) {
        PyErr_SetString(PyExc_ValueError, "limits must not be negative");
        return -1;
    }
    r->max_bulk = max_bulk;
    r->max_inline = max_inline;
    r->max_mbulk = max_mbulk;
    r->qb_limit = qb_limit;
    r->lim_bulk = max_bulk;
    r->lim_mbulk = max_mbulk;
    r->bulklen = -1;
    return 0;
}

static void
Reader_dealloc(Reader *r)
{
    PyMem_Free(r->buf);
    Py_XDECREF(r->args);
    Py_XDECREF(r->err_type);
    Py_XDECREF(r->err_msg);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *
Reader_set_unauthenticated(Reader *r, PyObject *on)
{
    int yes = PyObject_IsTrue(on);
    if (yes < 0)
        return NULL;
    r->lim_bulk = yes && r->max_bulk > UNAUTH_MAX_BULK ? UNAUTH_MAX_BULK : r->max_bulk;
    r->lim_mbulk = yes && r->max_mbulk > UNAUTH_MAX_MBULK ? UNAUTH_MAX_MBULK : r->max_mbulk;
    Py_RETURN_NONE;
}

static PyMethodDef Reader_methods[] = {
    {"feed", (PyCFunction)Reader_feed, METH_O, "Append bytes read from the client."},
    {"gets", (PyCFunction)Reader_gets, METH_NOARGS,
     "The next command's arguments, or False if more data is needed."},
    {"set_unauthenticated", (PyCFunction)Reader_set_unauthenticated, METH_O,
     "Apply (True) or lift Redis's limits for a client that must AUTH first."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Reader_as_sequence = {
    .sq_length = (lenfunc)Reader_len,
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "disquepy.codec._creader.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Client request reader (see resp.PyRequestReader for the rules).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_methods = Reader_methods,
    .tp_as_sequence = &Reader_as_sequence,
};

static PyObject *
mod_init(PyObject *self, PyObject *args)
{
    PyObject *pe, *qe, *sa, *ed;
    if (!PyArg_ParseTuple(args, "OOOO", &pe, &qe, &sa, &ed))
        return NULL;
    Py_INCREF(pe);
    Py_INCREF(qe);
    Py_INCREF(sa);
    Py_INCREF(ed);
    Py_XSETREF(ProtocolError, pe);
    Py_XSETREF(QueryBufferLimitError, qe);
    Py_XSETREF(split_args, sa);
    Py_XSETREF(expected_dollar, ed);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"_init", mod_init, METH_VARARGS,
     "_init(ProtocolError, QueryBufferLimitError, split_args, expected_dollar)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_creader", "Client request reader in C.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__creader(void)
{
    if (PyType_Ready(&ReaderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
