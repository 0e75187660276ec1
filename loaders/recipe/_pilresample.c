/* Pillow's resampling (Image.resize with BILINEAR, BICUBIC, LANCZOS, BOX, HAMMING) of an RGB
 * image, bit for bit, on a packed HWC uint8 array, with the GIL released.
 *
 * timm's and torchvision v1's pipelines resize PIL images: their pixels are Pillow's. This is
 * Pillow's own arithmetic (src/libImaging/Resample.c: the same filters, the same coefficients in
 * double precision, normalized to 22-bit fixed point, int32 accumulation from one half, clipped
 * after each pass; the horizontal pass first, over the rows the vertical pass reads), laid out
 * so that the compiler vectorizes it: both passes run as a "rows" pass (each output row a
 * weighted sum of whole input rows: one coefficient for a whole row, contiguous bytes), the
 * horizontal one on the transposed image. Integer sums do not depend on their order, so the
 * result is Pillow's whatever the order of the additions. The order of the two passes (each
 * rounds to 8 bits) is Pillow 13's; loaders.recipe.resample checks this module against the
 * installed Pillow before it uses it.
 *
 * resample(...): a window of the resize (a centre crop after a resize costs only the crop),
 * from the part of the image it reads (support(...) says which: a JPEG's region decode need
 * not decode the rest); filter is Pillow's code (1 LANCZOS, 2 BILINEAR, 3 BICUBIC, 4 BOX,
 * 5 HAMMING).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define PRECISION_BITS (32 - 8 - 2)

struct filter {
    double (*filter)(double x);
    double support;
};

static double box_filter(double x) {
    if (x > -0.5 && x <= 0.5) {
        return 1.0;
    }
    return 0.0;
}

static double bilinear_filter(double x) {
    if (x < 0.0) {
        x = -x;
    }
    if (x < 1.0) {
        return 1.0 - x;
    }
    return 0.0;
}

static double hamming_filter(double x) {
    if (x < 0.0) {
        x = -x;
    }
    if (x == 0.0) {
        return 1.0;
    }
    if (x >= 1.0) {
        return 0.0;
    }
    x = x * M_PI;
    return sin(x) / x * (0.54f + 0.46f * cos(x));
}

static double bicubic_filter(double x) {
#define a -0.5
    if (x < 0.0) {
        x = -x;
    }
    if (x < 1.0) {
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    }
    if (x < 2.0) {
        return (((x - 5) * x + 8) * x - 4) * a;
    }
    return 0.0;
#undef a
}

static double sinc_filter(double x) {
    if (x == 0.0) {
        return 1.0;
    }
    x = x * M_PI;
    return sin(x) / x;
}

static double lanczos_filter(double x) {
    if (-3.0 <= x && x < 3.0) {
        return sinc_filter(x) * sinc_filter(x / 3);
    }
    return 0.0;
}

static const struct filter LANCZOS = {lanczos_filter, 3.0};
static const struct filter BILINEAR = {bilinear_filter, 1.0};
static const struct filter BICUBIC = {bicubic_filter, 2.0};
static const struct filter BOX = {box_filter, 0.5};
static const struct filter HAMMING = {hamming_filter, 1.0};

static int ksize_of(int inSize, int outSize, const struct filter *f) {
    double filterscale = (double)(float)inSize / outSize;
    if (filterscale < 1.0) {
        filterscale = 1.0;
    }
    return (int)ceil(f->support * filterscale) * 2 + 1;
}

/* Pillow's precompute_coeffs for the box (0, inSize) and normalize_coeffs_8bpc: bounds[2*i]
 * (first input index), bounds[2*i+1] (count), kk[i*ksize + x] fixed-point coefficients. */
static void coeffs(
    int inSize, int outSize, const struct filter *f, int ksize, int *bounds, int32_t *kk,
    double *pre
) {
    float in0 = 0.0f, in1 = (float)inSize;
    double scale, filterscale, support;
    filterscale = scale = (double)(in1 - in0) / outSize;
    if (filterscale < 1.0) {
        filterscale = 1.0;
    }
    support = f->support * filterscale;
    double inv_filterscale = 1.0 / filterscale;
    for (int xx = 0; xx < outSize; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) {
            xmin = 0;
        }
        int xmax = (int)(center + support + 0.5);
        if (xmax > inSize) {
            xmax = inSize;
        }
        xmax -= xmin;
        double *k = &pre[xx * ksize];
        int x;
        for (x = 0; x < xmax; x++) {
            double w = f->filter((x + xmin - center + 0.5) * inv_filterscale);
            k[x] = w;
            ww += w;
        }
        if (ww != 0.0) {
            for (x = 0; x < xmax; x++) {
                k[x] /= ww;
            }
        }
        for (; x < ksize; x++) {
            k[x] = 0;
        }
        bounds[xx * 2 + 0] = xmin;
        bounds[xx * 2 + 1] = xmax;
    }
    for (int i = 0; i < outSize * ksize; i++) {
        if (pre[i] < 0) {
            kk[i] = (int)(-0.5 + pre[i] * (1 << PRECISION_BITS));
        } else {
            kk[i] = (int)(0.5 + pre[i] * (1 << PRECISION_BITS));
        }
    }
}

static inline uint8_t clip8(int32_t in) {
    int32_t v = in >> PRECISION_BITS; /* arithmetic shift, as Pillow's lookup index */
    return v < 0 ? 0 : (v > 255 ? 255 : (uint8_t)v);
}

/* out row yy (n bytes) = clip8(half + sum over y of in row (ymin + y) * k[y]) */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
static void rows_pass(
    const uint8_t *restrict in, size_t in_stride, uint8_t *restrict out, size_t out_stride,
    int n, int out_rows, int ksize, const int *bounds, const int32_t *kk, int32_t *restrict acc
) {
    for (int yy = 0; yy < out_rows; yy++) {
        int ymin = bounds[yy * 2], ymax = bounds[yy * 2 + 1];
        const int32_t *k = &kk[yy * ksize];
        for (int j = 0; j < n; j++) {
            acc[j] = 1 << (PRECISION_BITS - 1);
        }
        for (int y = 0; y < ymax; y++) {
            const uint8_t *restrict row = in + (size_t)(ymin + y) * in_stride;
            int32_t kv = k[y];
            for (int j = 0; j < n; j++) {
                acc[j] += (int32_t)row[j] * kv;
            }
        }
        uint8_t *restrict o = out + (size_t)yy * out_stride;
        for (int j = 0; j < n; j++) {
            o[j] = clip8(acc[j]);
        }
    }
}

/* dst[x][r][c] = src[r][x][c] for r < rows, x < cols (3-byte pixels), in tiles */
static void transpose3(const uint8_t *src, int rows, int cols, uint8_t *dst) {
    const int T = 16;
    for (int r0 = 0; r0 < rows; r0 += T) {
        int r1 = r0 + T < rows ? r0 + T : rows;
        for (int x0 = 0; x0 < cols; x0 += T) {
            int x1 = x0 + T < cols ? x0 + T : cols;
            for (int r = r0; r < r1; r++) {
                const uint8_t *s = src + ((size_t)r * cols + x0) * 3;
                for (int x = x0; x < x1; x++, s += 3) {
                    uint8_t *d = dst + ((size_t)x * rows + r) * 3;
                    d[0] = s[0];
                    d[1] = s[1];
                    d[2] = s[2];
                }
            }
        }
    }
}

/* the horizontal pass of src (rows x w) into dst (rows x ow), through the transposed image */
static void horizontal(
    const uint8_t *src, int rows, int w, uint8_t *dst, int ow, int kh, const int *bh,
    const int32_t *kkh, int32_t *acc, uint8_t *t1, uint8_t *t2
) {
    transpose3(src, rows, w, t1);
    rows_pass(t1, (size_t)rows * 3, t2, (size_t)rows * 3, rows * 3, ow, kh, bh, kkh, acc);
    transpose3(t2, ow, rows, dst);
}

/* The rows and columns the window reads: [*r0, *r1) and [*c0, *c1) of the (h x w) image. */
static void window_bounds(
    int h, int w, int oh, int ow, int wy0, int wx0, int wh, int ww, const struct filter *f,
    int *bv, int32_t *kkv, int *bh, int32_t *kkh, double *pre, int *r0, int *r1, int *c0,
    int *c1
) {
    int kv = ksize_of(h, oh, f), kh = ksize_of(w, ow, f);
    if (oh != h) {
        coeffs(h, oh, f, kv, bv, kkv, pre);
        *r0 = bv[wy0 * 2];
        *r1 = bv[(wy0 + wh - 1) * 2] + bv[(wy0 + wh - 1) * 2 + 1];
    } else {
        *r0 = wy0;
        *r1 = wy0 + wh;
    }
    if (ow != w) {
        coeffs(w, ow, f, kh, bh, kkh, pre);
        *c0 = bh[wx0 * 2];
        *c1 = bh[(wx0 + ww - 1) * 2] + bh[(wx0 + ww - 1) * 2 + 1];
    } else {
        *c0 = wx0;
        *c1 = wx0 + ww;
    }
}

/* Pillow's resize of an (h x w) image to (oh x ow), only the window (wy0, wx0, wh, ww) of the
 * result computed (each output pixel depends only on its own coefficients: the window of a
 * whole resize), from a source holding the part (sy0, sx0, sh, sw) of the image. 0 on success,
 * -1 out of memory, -2 the source lacks rows or columns the window reads. The order of the
 * passes is Pillow 13's: the vertical one first where the height shrinks by more than twice
 * as many pixels as the width, else the horizontal one first, over the rows the vertical one
 * reads. */
static int resample_rgb(
    const uint8_t *src, int sy0, int sx0, int sh, int sw, int h, int w, uint8_t *dst, int oh,
    int ow, int wy0, int wx0, int wh, int ww, const struct filter *f
) {
    int need_h = ow != w, need_v = oh != h;
    int vertical_first = (h - oh) > 0 && (h - oh) > (w - ow) * 2;
    int kv = ksize_of(h, oh, f), kh = ksize_of(w, ow, f);
    int *bv = malloc(sizeof(int) * 2 * oh), *bh = malloc(sizeof(int) * 2 * ow);
    int32_t *kkv = malloc(sizeof(int32_t) * oh * kv), *kkh = malloc(sizeof(int32_t) * ow * kh);
    size_t npre = (size_t)(oh * kv > ow * kh ? oh * kv : ow * kh);
    double *pre = malloc(sizeof(double) * npre);
    int widest = sw > ww ? sw : ww;
    widest = widest > sh ? widest : sh; /* a pass sums rows of at most this many pixels */
    int32_t *acc = malloc(sizeof(int32_t) * 3 * (size_t)widest);
    uint8_t *t1 = NULL, *t2 = NULL, *tmp = NULL;
    int rc = -1, r0, r1, c0, c1;
    if (!bv || !bh || !kkv || !kkh || !pre || !acc) {
        goto done;
    }
    window_bounds(h, w, oh, ow, wy0, wx0, wh, ww, f, bv, kkv, bh, kkh, pre, &r0, &r1, &c0, &c1);
    if (r0 < sy0 || r1 > sy0 + sh || c0 < sx0 || c1 > sx0 + sw) {
        rc = -2;
        goto done;
    }
    /* the window's coefficients, their bounds in the source's own rows and columns */
    int *wbv = bv + 2 * wy0, *wbh = bh + 2 * wx0;
    const int32_t *wkv = kkv + (size_t)wy0 * kv, *wkh = kkh + (size_t)wx0 * kh;
    for (int i = 0; need_v && i < wh; i++) {
        wbv[i * 2] -= sy0;
    }
    for (int i = 0; need_h && i < ww; i++) {
        wbh[i * 2] -= sx0;
    }
    size_t stride = (size_t)sw * 3;
    if (!need_h && !need_v) {
        for (int y = 0; y < wh; y++) {
            memcpy(dst + (size_t)y * ww * 3, src + (wy0 - sy0 + y) * stride + (size_t)(wx0 - sx0) * 3,
                   (size_t)ww * 3);
        }
    } else if (!need_h) {
        rows_pass(src + (size_t)(wx0 - sx0) * 3, stride, dst, (size_t)ww * 3, ww * 3, wh, kv, wbv, wkv, acc);
    } else if (!need_v || !vertical_first) {
        /* horizontal first, over the rows the vertical pass reads */
        int first = need_v ? wbv[0] : wy0 - sy0;
        int rows = need_v ? wbv[(wh - 1) * 2] + wbv[(wh - 1) * 2 + 1] - first : wh;
        t1 = malloc((size_t)sw * rows * 3);
        t2 = malloc((size_t)ww * rows * 3);
        tmp = need_v ? malloc((size_t)ww * rows * 3) : NULL;
        if (!t1 || !t2 || (need_v && !tmp)) {
            goto done;
        }
        horizontal(src + first * stride, rows, sw, need_v ? tmp : dst, ww, kh, wbh, wkh, acc, t1, t2);
        if (need_v) {
            for (int i = 0; i < wh; i++) {
                wbv[i * 2] -= first;
            }
            rows_pass(tmp, (size_t)ww * 3, dst, (size_t)ww * 3, ww * 3, wh, kv, wbv, wkv, acc);
        }
    } else {
        /* vertical first, over every source column, then horizontal */
        tmp = malloc((size_t)wh * sw * 3);
        t1 = malloc((size_t)wh * sw * 3);
        t2 = malloc((size_t)wh * ww * 3);
        if (!tmp || !t1 || !t2) {
            goto done;
        }
        rows_pass(src, stride, tmp, stride, sw * 3, wh, kv, wbv, wkv, acc);
        horizontal(tmp, wh, sw, dst, ww, kh, wbh, wkh, acc, t1, t2);
    }
    rc = 0;
done:
    free(bv);
    free(bh);
    free(kkv);
    free(kkh);
    free(pre);
    free(acc);
    free(t1);
    free(t2);
    free(tmp);
    return rc;
}

static const struct filter *filter_of(int code) {
    switch (code) {
        case 1: return &LANCZOS;
        case 2: return &BILINEAR;
        case 3: return &BICUBIC;
        case 4: return &BOX;
        case 5: return &HAMMING;
    }
    PyErr_Format(PyExc_ValueError, "resample: unsupported filter %d", code);
    return NULL;
}

/* support(h, w, oh, ow, filter, wy0, wx0, wh, ww) -> (top, left, bottom, right): the part of
 * the (h x w) image the window of its (oh x ow) resize reads */
static PyObject *support(PyObject *self, PyObject *args) {
    int h, w, oh, ow, code, wy0, wx0, wh, ww, r0, r1, c0, c1;
    if (!PyArg_ParseTuple(args, "iiiiiiiii", &h, &w, &oh, &ow, &code, &wy0, &wx0, &wh, &ww)) {
        return NULL;
    }
    const struct filter *f = filter_of(code);
    if (f == NULL) {
        return NULL;
    }
    if (h < 1 || w < 1 || oh < 1 || ow < 1 || wy0 < 0 || wx0 < 0 || wh < 1 || ww < 1 ||
        wy0 + wh > oh || wx0 + ww > ow) {
        PyErr_SetString(PyExc_ValueError, "support: bad sizes or window");
        return NULL;
    }
    int kv = ksize_of(h, oh, f), kh = ksize_of(w, ow, f);
    int *bv = malloc(sizeof(int) * 2 * oh), *bh = malloc(sizeof(int) * 2 * ow);
    int32_t *kkv = malloc(sizeof(int32_t) * oh * kv), *kkh = malloc(sizeof(int32_t) * ow * kh);
    double *pre = malloc(sizeof(double) * (size_t)(oh * kv > ow * kh ? oh * kv : ow * kh));
    PyObject *result = NULL;
    if (!bv || !bh || !kkv || !kkh || !pre) {
        PyErr_NoMemory();
    } else {
        window_bounds(h, w, oh, ow, wy0, wx0, wh, ww, f, bv, kkv, bh, kkh, pre, &r0, &r1, &c0, &c1);
        result = Py_BuildValue("(iiii)", r0, c0, r1, c1);
    }
    free(bv);
    free(bh);
    free(kkv);
    free(kkh);
    free(pre);
    return result;
}

/* resample(src, sy0, sx0, sh, sw, h, w, dst, oh, ow, filter, wy0, wx0, wh, ww) */
static PyObject *resample(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    int sy0, sx0, sh, sw, h, w, oh, ow, code, wy0, wx0, wh, ww;
    if (!PyArg_ParseTuple(args, "y*iiiiiiw*iiiiiii", &src, &sy0, &sx0, &sh, &sw, &h, &w, &dst,
                          &oh, &ow, &code, &wy0, &wx0, &wh, &ww)) {
        return NULL;
    }
    const struct filter *f = filter_of(code);
    PyObject *result = NULL;
    if (f == NULL) {
        /* the error is set */
    } else if (h < 1 || w < 1 || oh < 1 || ow < 1 || sh < 1 || sw < 1 || wh < 1 || ww < 1 ||
               sy0 < 0 || sx0 < 0 || sy0 + sh > h || sx0 + sw > w || wy0 < 0 || wx0 < 0 ||
               wy0 + wh > oh || wx0 + ww > ow) {
        PyErr_SetString(PyExc_ValueError, "resample: bad sizes, source part or window");
    } else if (src.len < (Py_ssize_t)sh * sw * 3 || dst.len < (Py_ssize_t)wh * ww * 3) {
        PyErr_SetString(PyExc_ValueError, "resample: a buffer is smaller than its size");
    } else {
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = resample_rgb(src.buf, sy0, sx0, sh, sw, h, w, dst.buf, oh, ow, wy0, wx0, wh, ww, f);
        Py_END_ALLOW_THREADS
        if (rc == -1) {
            PyErr_NoMemory();
        } else if (rc == -2) {
            PyErr_SetString(PyExc_ValueError, "resample: the source lacks what the window reads");
        } else {
            result = Py_NewRef(Py_None);
        }
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    return result;
}

static PyMethodDef methods[] = {
    {"resample", resample, METH_VARARGS,
     "resample(src, sy0, sx0, sh, sw, h, w, dst, oh, ow, filter, wy0, wx0, wh, ww): the window "
     "(wy0, wx0, wh, ww) of Pillow's resize of an RGB HWC uint8 (h x w) image to (oh x ow), from "
     "the part (sy0, sx0, sh, sw) of it in src"},
    {"support", support, METH_VARARGS,
     "support(h, w, oh, ow, filter, wy0, wx0, wh, ww) -> (top, left, bottom, right): the part of "
     "the image that window of its resize reads"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pilresample", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pilresample(void) { return PyModule_Create(&module); }
