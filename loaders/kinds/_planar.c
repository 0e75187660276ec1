/* Interleaved (height-width-channel) uint8 pixels into planes (channel-height-width).

   to_planar(src, dst) copies src, 3 * n bytes r,g,b,r,g,b,... (an image as a JPEG decoder and
   torch's resize of a channels-last image leave it), into dst as n bytes of r, then of g, then
   of b: the [3,h,w] layout of a batch's images. The GIL is released during the copy.

   torch's copy_ of a permuted [3,h,w] view does this at ~1.5 GB/s here (2.3 ms for a 1 MP
   image); this loop, compiled for SSE4.1/AVX2 where the CPU has them (target_clones picks at
   load time), at ~12 GB/s (0.25 ms): a tenth of a packed vision-language worker's time was
   this copy.

   to_patches(src, dst, width, patch, merge) copies src (an h x width image, interleaved) into
   dst as a vision transformer's patches, merge block by merge block (Qwen2-VL's processor's
   order): [h/(p*m), width/(p*m), m, m, 3, p, p]. torch's copy_ of that 7-d permuted view of an
   interleaved image runs at ~0.6 GB/s (1 ms for a 448x448 image); this loop, one pass, at the
   speed of to_planar.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stddef.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "sse4.1", "default")))
#endif
static void planar(const uint8_t *restrict src, uint8_t *restrict dst, size_t n) {
    uint8_t *restrict r = dst;
    uint8_t *restrict g = dst + n;
    uint8_t *restrict b = dst + 2 * n;
    for (size_t i = 0; i < n; i++) {
        r[i] = src[3 * i];
        g[i] = src[3 * i + 1];
        b[i] = src[3 * i + 2];
    }
}

static PyObject *to_planar(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    if (!PyArg_ParseTuple(args, "y*w*", &src, &dst)) {
        return NULL;
    }
    if (src.len != dst.len || src.len % 3 != 0) {
        PyErr_Format(PyExc_ValueError, "to_planar: %zd bytes into %zd: both 3 * n", src.len,
                     dst.len);
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    planar((const uint8_t *)src.buf, (uint8_t *)dst.buf, (size_t)(src.len / 3));
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "sse4.1", "default")))
#endif
static void patches(const uint8_t *restrict src, uint8_t *restrict dst, size_t h, size_t w,
                    size_t p, size_t m) {
    size_t block = p * m;
    for (size_t by = 0; by < h / block; by++) {
        for (size_t bx = 0; bx < w / block; bx++) {
            for (size_t my = 0; my < m; my++) {
                for (size_t mx = 0; mx < m; mx++) {
                    for (size_t c = 0; c < 3; c++) {
                        for (size_t py = 0; py < p; py++) {
                            size_t row = (by * m + my) * p + py;
                            const uint8_t *s = src + (row * w + (bx * m + mx) * p) * 3 + c;
                            for (size_t px = 0; px < p; px++) {
                                *dst++ = s[3 * px];
                            }
                        }
                    }
                }
            }
        }
    }
}

static PyObject *to_patches(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    Py_ssize_t w, p, m;
    if (!PyArg_ParseTuple(args, "y*w*nnn", &src, &dst, &w, &p, &m)) {
        return NULL;
    }
    Py_ssize_t block = p * m;
    if (w < 1 || p < 1 || m < 1 || src.len != dst.len || src.len % (3 * w) != 0 ||
        w % block != 0 || (src.len / (3 * w)) % block != 0) {
        PyErr_Format(PyExc_ValueError,
                     "to_patches: %zd bytes into %zd, width %zd: both 3 * h * width, h and "
                     "width multiples of patch %zd * merge %zd",
                     src.len, dst.len, w, p, m);
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    size_t h = (size_t)(src.len / (3 * w));
    Py_BEGIN_ALLOW_THREADS
    patches((const uint8_t *)src.buf, (uint8_t *)dst.buf, h, (size_t)w, (size_t)p, (size_t)m);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"to_planar", to_planar, METH_VARARGS,
     "to_planar(src, dst): 3*n interleaved bytes (r,g,b,...) into 3 planes of n bytes"},
    {"to_patches", to_patches, METH_VARARGS,
     "to_patches(src, dst, width, patch, merge): an interleaved image into its patches"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_planar", NULL, -1, methods};

PyMODINIT_FUNC PyInit__planar(void) { return PyModule_Create(&module); }
