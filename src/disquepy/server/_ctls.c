/* The TLS record layer of a client connection, in C.

   Python's ssl module does the handshake, the certificate checks and the close
   (server/tls.py); once a connection is established, every request and reply crosses
   the record layer: ciphertext into the incoming memory BIO, SSL_read until OpenSSL
   wants more, and a reply through SSL_write out of the outgoing memory BIO. Through
   ssl.SSLObject that is a Python call for each step, a 16 KiB bytes object per read
   and the GIL released and taken around every OpenSSL call: twice the OpenSSL work
   itself. Records(sslobj._sslobj, incoming, outgoing) drives the same SSL object and
   the same BIOs directly: receive(ciphertext) -> plaintext and send(plaintext) ->
   ciphertext, one call each.

   The SSL and BIO pointers are read from the _ssl module's objects, whose first fields
   have been stable since Python 3.7 (an _SSLSocket: the socket weakref then the SSL*;
   a MemoryBIO: its BIO*). This module is built only for the Python versions whose
   layout is checked here, each Records checks the pointers against each other (the
   SSL object's BIOs must be the MemoryBIOs given), and server/tls.py uses it only when
   _ssl and this module run on the same OpenSSL; otherwise it keeps the Python path,
   which gives the same results (DISQUEPY_PURE_TLS=1 forces it, for the tests). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "_ctls knows the _ssl object layout of Python 3.11 to 3.13 only"
#endif

/* the leading fields of _ssl's objects (Modules/_ssl.c) */
typedef struct {
    PyObject_HEAD
    PyObject *socket_weakref;
    SSL *ssl;
} SslSocketHead;

typedef struct {
    PyObject_HEAD
    BIO *bio;
} MemoryBioHead;

static PyObject *TlsError; /* _ctls.Error: the OpenSSL reason, e.g. DECRYPTION_FAILED... */

#define READ_CHUNK 16384 /* a record's plaintext at most: SSL_read returns one record */

typedef struct {
    PyObject_HEAD
    PyObject *owner[3]; /* the _SSLSocket and both MemoryBIOs: they own ssl, rbio, wbio */
    SSL *ssl;
    BIO *wbio;
    BIO *rbio;
    int eof; /* the peer sent close_notify */
} Records;

/* Raise _ctls.Error with OpenSSL's reason in the form ssl.SSLError.reason has
   ("decryption failed or bad record mac" -> "DECRYPTION_FAILED_OR_BAD_RECORD_MAC"). */
static PyObject *
raise_tls(const char *what)
{
    unsigned long e = ERR_peek_last_error();
    const char *reason = e ? ERR_reason_error_string(e) : NULL;
    char msg[160];
    size_t i = 0;
    if (reason == NULL)
        reason = what;
    for (; reason[i] && i < sizeof msg - 1; i++) {
        char c = reason[i];
        msg[i] = c == ' ' ? '_' : (c >= 'a' && c <= 'z') ? (char)(c - 32) : c;
    }
    msg[i] = '\0';
    ERR_clear_error();
    PyErr_SetString(TlsError, msg);
    return NULL;
}

static int
has_type(PyObject *o, const char *name)
{
    return strcmp(Py_TYPE(o)->tp_name, name) == 0;
}

static int
Records_init(Records *self, PyObject *args, PyObject *kwds)
{
    PyObject *sock, *in, *out;
    if (!PyArg_ParseTuple(args, "OOO:Records", &sock, &in, &out))
        return -1;
    if (!has_type(sock, "_ssl._SSLSocket") || !has_type(in, "_ssl.MemoryBIO") ||
        !has_type(out, "_ssl.MemoryBIO")) {
        PyErr_SetString(PyExc_TypeError,
                        "Records(_ssl._SSLSocket, incoming MemoryBIO, outgoing MemoryBIO)");
        return -1;
    }
    SSL *ssl = ((SslSocketHead *)sock)->ssl;
    BIO *rbio = ((MemoryBioHead *)in)->bio, *wbio = ((MemoryBioHead *)out)->bio;
    if (ssl == NULL || rbio == NULL || wbio == NULL || SSL_get_rbio(ssl) != rbio ||
        SSL_get_wbio(ssl) != wbio) {
        PyErr_SetString(PyExc_ValueError, "the SSL object does not use these BIOs");
        return -1;
    }
    PyObject *objs[3] = {sock, in, out};
    for (int i = 0; i < 3; i++) {
        Py_INCREF(objs[i]);
        Py_XSETREF(self->owner[i], objs[i]);
    }
    self->ssl = ssl;
    self->rbio = rbio;
    self->wbio = wbio;
    self->eof = 0;
    return 0;
}

static void
Records_dealloc(Records *self)
{
    for (int i = 0; i < 3; i++)
        Py_CLEAR(self->owner[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* All of ``data`` into the SSL object (SSL_write: encrypted) or, ``to_ssl`` false, into
   its incoming BIO (ciphertext to decrypt); -1 with an exception set on failure. */
static int
put_all(Records *self, PyObject *data, int to_ssl)
{
    Py_buffer view;
    if (self->ssl == NULL) {
        PyErr_SetString(PyExc_ValueError, "Records not initialised");
        return -1;
    }
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return -1;
    ERR_clear_error();
    const char *p = view.buf;
    Py_ssize_t left = view.len;
    while (left > 0) {
        int chunk = left > INT_MAX ? INT_MAX : (int)left;
        int n = to_ssl ? SSL_write(self->ssl, p, chunk) : BIO_write(self->rbio, p, chunk);
        if (n <= 0) {
            PyBuffer_Release(&view);
            raise_tls(to_ssl ? "SSL_WRITE_FAILED" : "BIO_WRITE_FAILED");
            return -1;
        }
        p += n;
        left -= n;
    }
    PyBuffer_Release(&view);
    return 0;
}

/* receive(data) -> bytes: ``data`` (ciphertext, possibly empty) goes into the incoming
   BIO, then every whole record there is decrypted; the plaintext is returned, b"" if
   no record is complete yet. After the peer's close_notify ``eof`` is true (the
   plaintext before it is still returned). */
static PyObject *
Records_receive(Records *self, PyObject *data)
{
    if (put_all(self, data, 0) < 0)
        return NULL;
    char stack[2 * READ_CHUNK]; /* a few records: no allocation but the result's */
    char *buf = stack;
    size_t cap = sizeof stack, len = 0;
    PyObject *result = NULL;
    while (!self->eof) {
        if (cap - len < READ_CHUNK) {
            size_t ncap = cap * 2;
            char *nb = buf == stack ? PyMem_Malloc(ncap) : PyMem_Realloc(buf, ncap);
            if (nb == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            if (buf == stack)
                memcpy(nb, stack, len);
            buf = nb;
            cap = ncap;
        }
        size_t room = cap - len;
        int n = SSL_read(self->ssl, buf + len, room > INT_MAX ? INT_MAX : (int)room);
        if (n > 0) {
            len += (size_t)n;
            /* nothing left to decrypt: done without the read that would say so */
            if (BIO_ctrl_pending(self->rbio) == 0 && SSL_pending(self->ssl) == 0)
                break;
            continue;
        }
        int err = SSL_get_error(self->ssl, n);
        if (err == SSL_ERROR_WANT_READ)
            break;
        if (err == SSL_ERROR_ZERO_RETURN) {
            self->eof = 1;
            break;
        }
        raise_tls(err == SSL_ERROR_SYSCALL ? "UNEXPECTED_EOF_WHILE_READING" : "SSL_READ_FAILED");
        goto done;
    }
    result = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
done:
    if (buf != stack)
        PyMem_Free(buf);
    return result;
}

/* send(data) -> bytes: ``data`` encrypted; the records (and anything else OpenSSL had
   to say) taken from the outgoing BIO. */
static PyObject *
Records_send(Records *self, PyObject *data)
{
    if (put_all(self, data, 1) < 0)
        return NULL;
    size_t pending = BIO_ctrl_pending(self->wbio);
    if (pending > PY_SSIZE_T_MAX)
        return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)pending);
    if (out == NULL)
        return NULL;
    char *dst = PyBytes_AS_STRING(out);
    size_t got = 0;
    while (got < pending) {
        size_t want = pending - got;
        int n = BIO_read(self->wbio, dst + got, want > INT_MAX ? INT_MAX : (int)want);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got != pending && _PyBytes_Resize(&out, (Py_ssize_t)got) < 0)
        return NULL;
    return out;
}

static PyObject *
Records_get_eof(Records *self, void *closure)
{
    return PyBool_FromLong(self->eof);
}

static PyMethodDef Records_methods[] = {
    {"receive", (PyCFunction)Records_receive, METH_O,
     "Ciphertext in, the plaintext of every whole record out (b'' if none yet)."},
    {"send", (PyCFunction)Records_send, METH_O, "Plaintext in, its TLS records out."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Records_getset[] = {
    {"eof", (getter)Records_get_eof, NULL, "The peer sent close_notify.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RecordsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "disquepy.server._ctls.Records",
    .tp_basicsize = sizeof(Records),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Records(sslobj._sslobj, incoming, outgoing): the record layer of an "
              "established TLS connection over memory BIOs.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Records_init,
    .tp_dealloc = (destructor)Records_dealloc,
    .tp_methods = Records_methods,
    .tp_getset = Records_getset,
};

static PyObject *
openssl_version_number(PyObject *mod, PyObject *unused)
{
    return PyLong_FromUnsignedLong(OpenSSL_version_num());
}

static PyMethodDef module_methods[] = {
    {"openssl_version_number", openssl_version_number, METH_NOARGS,
     "OPENSSL_VERSION_NUMBER of the OpenSSL this module runs on (compare with ssl's)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "disquepy.server._ctls", "The TLS record layer in C.", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__ctls(void)
{
    if (PyType_Ready(&RecordsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    TlsError = PyErr_NewException("disquepy.server._ctls.Error", PyExc_OSError, NULL);
    if (TlsError == NULL || PyModule_AddObjectRef(m, "Error", TlsError) < 0 ||
        PyModule_AddObjectRef(m, "Records", (PyObject *)&RecordsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
