/* Reading member bytes out of a memory-mapped shard, safely.

   copy(mapping, offset, length, drop) -> bytearray copies length bytes at offset of a buffer
   (an mmap of a local shard) into a new bytearray, with the GIL released. A file truncated or
   rewritten under the mapping makes that read fault (SIGBUS): here the fault is caught
   (sigsetjmp around the copy, a SIGBUS handler that siglongjmps back when the fault happened
   inside a guarded copy of this thread, and hands every other SIGBUS to the handler that was
   there before) and becomes OSError, never a dead process. With drop, the pages just read are
   dropped from this process's page tables afterwards (MADV_DONTNEED): the page cache keeps
   them, the process does not hold them as resident memory.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static __thread sigjmp_buf guard_env;
static __thread volatile sig_atomic_t guard_on = 0;
static struct sigaction previous;
static int installed = 0; /* set once ours was installed in this process (or its parent) */

static void on_sigbus(int sig, siginfo_t *info, void *ctx) {
    if (guard_on) {
        guard_on = 0;
        siglongjmp(guard_env, 1);
    }
    /* not a guarded copy: whoever handled SIGBUS before us (faulthandler, the default) */
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != NULL) {
            previous.sa_sigaction(sig, info, ctx);
            return;
        }
    } else if (previous.sa_handler == SIG_IGN) {
        return;
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != NULL) {
        previous.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static int install(void) {
    struct sigaction sa, current;
    /* checked on every copy, not once: a handler installed after ours (torch sets its own in
       every DataLoader worker it forks) would otherwise take the faults we guard */
    if (installed && sigaction(SIGBUS, NULL, &current) == 0 &&
        (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigbus)
        return 0;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &previous) != 0)
        return -1;
    installed = 1;
    return 0;
}

static PyObject *copy(PyObject *self, PyObject *args) {
    Py_buffer src;
    Py_ssize_t off, len;
    int drop = 0;
    PyObject *out;
    char *dst;
    const char *base;
    volatile int failed = 0;

    if (!PyArg_ParseTuple(args, "y*nn|p", &src, &off, &len, &drop))
        return NULL;
    if (off < 0 || len < 0 || off > src.len || len > src.len - off) {
        PyBuffer_Release(&src);
        PyErr_SetString(PyExc_ValueError, "range outside the mapping");
        return NULL;
    }
    if (install() != 0) {
        PyBuffer_Release(&src);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    out = PyByteArray_FromStringAndSize(NULL, len);
    if (out == NULL) {
        PyBuffer_Release(&src);
        return NULL;
    }
    dst = PyByteArray_AS_STRING(out);
    base = (const char *)src.buf + off;
    Py_BEGIN_ALLOW_THREADS
    if (sigsetjmp(guard_env, 1) == 0) {
        guard_on = 1;
        memcpy(dst, base, (size_t)len);
        guard_on = 0;
    } else {
        failed = 1;
    }
    if (!failed && drop && len > 0) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t a = (uintptr_t)base & ~(page - 1);
        uintptr_t b = ((uintptr_t)base + (uintptr_t)len + page - 1) & ~(page - 1);
        uintptr_t lo = (uintptr_t)src.buf & ~(page - 1);
        uintptr_t hi = ((uintptr_t)src.buf + (uintptr_t)src.len + page - 1) & ~(page - 1);
        if (a < lo)
            a = lo;
        if (b > hi)
            b = hi;
        if (b > a)
            (void)madvise((void *)a, b - a, MADV_DONTNEED);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    if (failed) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_OSError, "the file changed under its memory mapping (SIGBUS)");
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"copy", copy, METH_VARARGS,
     "copy(mapping, offset, length, drop=False) -> bytearray; OSError if the file changed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_mapread", "Guarded reads out of memory-mapped shards.", -1, methods,
};

PyMODINIT_FUNC PyInit__mapread(void) { return PyModule_Create(&module); }
