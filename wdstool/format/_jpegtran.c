/* Add restart markers to a JPEG without changing a pixel: libjpeg's coefficient API.
 *
 * A JPEG's entropy-coded data must be decoded from the start of the scan up to the last row a
 * decoder wants, and across every column of the rows it keeps, unless the file has restart
 * markers: each restart interval then decodes on its own, and a decoder that wants one
 * rectangle can take only the intervals that cover it (wdstool/format/_jpegcrop.c). Cameras
 * and encoders rarely write them. This module rewrites a file the way `jpegtran -restart N
 * -optimize -copy all` does: the quantized DCT coefficients are read and written back
 * unchanged (no decode to pixels, no re-quantization), with
 *   - a restart interval of k MCUs, k a divisor of the MCUs of a row (so that no interval
 *     straddles two rows) chosen near a target width in pixels;
 *   - optimized Huffman tables (which pays for most of the markers' bytes);
 *   - one baseline sequential scan (a progressive file becomes baseline: the same coefficients);
 *   - every APPn and COM marker of the original kept (EXIF, ICC profiles).
 * Then it checks its work: the written file is read back and its coefficients compared with
 * the original's, block by block, with the quantization tables and sampling factors. Equal
 * coefficients, tables and sampling decode to equal pixels with any decoder.
 *
 * restart(data, target_width=64, verify=True) -> (bytes | None, str)
 *   The rewritten file and its interval in MCUs as text ("k=4"), or None and the reason the
 *   original is better kept: arithmetic coding, a colour space other than grey/YCbCr/RGB
 *   (CMYK, YCCK), libjpeg warned about corrupt data, or the check failed.
 *   Raises ValueError with libjpeg's message when the data cannot be read at all.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "_jpegguard.h"

/* The interval in MCUs: the divisor of per_row whose width in pixels is nearest the target
 * (by ratio), so that every row holds whole intervals. */
static unsigned int interval_for(unsigned int per_row, unsigned int mcu_w, unsigned int target) {
  unsigned int best = 1;
  double best_cost = 1e300;
  for (unsigned int d = 1; d <= per_row; d++) {
    if (per_row % d) continue;
    double ratio = (double)d * mcu_w / target;
    double cost = ratio >= 1 ? ratio : 1 / ratio;
    if (cost < best_cost) {
      best_cost = cost;
      best = d;
    }
  }
  return best;
}

/* 1 if the two files hold the same coefficients, tables and sampling. */
static int same_coefficients(j_decompress_ptr a, jvirt_barray_ptr *ca, j_decompress_ptr b,
                             jvirt_barray_ptr *cb) {
  if (a->image_width != b->image_width || a->image_height != b->image_height ||
      a->num_components != b->num_components || a->jpeg_color_space != b->jpeg_color_space)
    return 0;
  for (int c = 0; c < a->num_components; c++) {
    jpeg_component_info *x = &a->comp_info[c], *y = &b->comp_info[c];
    if (x->h_samp_factor != y->h_samp_factor || x->v_samp_factor != y->v_samp_factor ||
        x->width_in_blocks != y->width_in_blocks || x->height_in_blocks != y->height_in_blocks)
      return 0;
    JQUANT_TBL *qx = x->quant_table, *qy = y->quant_table;
    if (qx == NULL || qy == NULL || memcmp(qx->quantval, qy->quantval, sizeof qx->quantval))
      return 0;
    for (JDIMENSION row = 0; row < x->height_in_blocks; row += (JDIMENSION)x->v_samp_factor) {
      JDIMENSION n = (JDIMENSION)x->v_samp_factor;
      if (row + n > x->height_in_blocks) n = x->height_in_blocks - row;
      JBLOCKARRAY ra = (*a->mem->access_virt_barray)((j_common_ptr)a, ca[c], row, n, FALSE);
      JBLOCKARRAY rb = (*b->mem->access_virt_barray)((j_common_ptr)b, cb[c], row, n, FALSE);
      for (JDIMENSION i = 0; i < n; i++)
        if (memcmp(ra[i], rb[i], sizeof(JBLOCK) * x->width_in_blocks)) return 0;
    }
  }
  return 1;
}

enum { WRITTEN = 0, KEPT = 1, FAILED = 2 };

static int transcode(const unsigned char *data, size_t size, unsigned int target, int verify,
                     unsigned char **out, unsigned long *out_size, const char **why,
                     unsigned int *interval, struct guard *g) {
  struct jpeg_decompress_struct src, check;
  struct jpeg_compress_struct dst;
  volatile int have_src = 0, have_dst = 0, have_check = 0;
  guard_setup(g, (j_common_ptr)&src);
  dst.err = src.err;
  check.err = src.err;
  *out = NULL;
  if (setjmp(g->jump)) {
    if (have_check) jpeg_destroy_decompress(&check);
    if (have_dst) jpeg_destroy_compress(&dst);
    if (have_src) jpeg_destroy_decompress(&src);
    free(*out);
    *out = NULL;
    return FAILED;
  }
  jpeg_create_decompress(&src);
  have_src = 1;
  jpeg_mem_src(&src, data, (unsigned long)size);
  jpeg_save_markers(&src, JPEG_COM, 0xFFFF);
  for (int m = 0; m < 16; m++) jpeg_save_markers(&src, JPEG_APP0 + m, 0xFFFF);
  jpeg_read_header(&src, TRUE);
  int status = KEPT;
  if (src.arith_code) {
    *why = "arithmetic coding";
  } else if (src.jpeg_color_space != JCS_YCbCr && src.jpeg_color_space != JCS_GRAYSCALE &&
             src.jpeg_color_space != JCS_RGB) {
    *why = "CMYK/YCCK colour";
  } else {
    status = WRITTEN;
  }
  if (status == KEPT) {
    jpeg_destroy_decompress(&src);
    return KEPT;
  }
  jvirt_barray_ptr *coefs = jpeg_read_coefficients(&src);
  if (g->warned) {
    jpeg_destroy_decompress(&src);
    *why = "corrupt data (libjpeg warned)";
    return KEPT;
  }
  unsigned int mcu_w = src.num_components > 1 ? 8u * (unsigned)src.max_h_samp_factor : 8u;
  unsigned int per_row = (src.image_width + mcu_w - 1) / mcu_w;
  *interval = interval_for(per_row, mcu_w, target);

  jpeg_create_compress(&dst);
  have_dst = 1;
  jpeg_mem_dest(&dst, out, out_size);
  jpeg_copy_critical_parameters(&src, &dst); /* defaults: one baseline scan */
  dst.restart_interval = *interval;
  dst.optimize_coding = TRUE;
  jpeg_write_coefficients(&dst, coefs);
  for (jpeg_saved_marker_ptr m = src.marker_list; m != NULL; m = m->next) {
    /* libjpeg writes its own JFIF (APP0) and Adobe (APP14) markers when it needs them */
    if (dst.write_JFIF_header && m->marker == JPEG_APP0 && m->data_length >= 5 &&
        memcmp(m->data, "JFIF", 5) == 0)
      continue;
    if (dst.write_Adobe_marker && m->marker == JPEG_APP0 + 14 && m->data_length >= 5 &&
        memcmp(m->data, "Adobe", 5) == 0)
      continue;
    jpeg_write_marker(&dst, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(&dst);
  jpeg_destroy_compress(&dst);
  have_dst = 0;

  if (!verify) {
    jpeg_finish_decompress(&src);
    jpeg_destroy_decompress(&src);
    return WRITTEN;
  }
  /* the check: read the new file's coefficients back and compare */
  jpeg_create_decompress(&check);
  have_check = 1;
  jpeg_mem_src(&check, *out, *out_size);
  jpeg_read_header(&check, TRUE);
  jvirt_barray_ptr *back = jpeg_read_coefficients(&check);
  int same = !g->warned && check.restart_interval == *interval &&
             same_coefficients(&src, coefs, &check, back);
  jpeg_destroy_decompress(&check);
  have_check = 0;
  jpeg_finish_decompress(&src);
  jpeg_destroy_decompress(&src);
  have_src = 0;
  if (!same) {
    free(*out);
    *out = NULL;
    *why = "the rewritten file did not read back to the same coefficients";
    return KEPT;
  }
  return WRITTEN;
}

static PyObject *restart(PyObject *self, PyObject *args) {
  Py_buffer data;
  unsigned int target = 64, interval = 0;
  int verify = 1;
  unsigned char *out = NULL;
  unsigned long out_size = 0;
  const char *why = "";
  struct guard g;
  int status;
  (void)self;
  if (!PyArg_ParseTuple(args, "y*|Ip", &data, &target, &verify)) return NULL;
  if (target == 0) target = 1;
  Py_BEGIN_ALLOW_THREADS
  status = transcode((const unsigned char *)data.buf, (size_t)data.len, target, verify, &out,
                     &out_size, &why, &interval, &g);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&data);
  if (status == FAILED) {
    PyErr_SetString(PyExc_ValueError, g.message[0] ? g.message : "cannot read JPEG");
    return NULL;
  }
  if (status == KEPT) return Py_BuildValue("(Os)", Py_None, why);
  PyObject *result = Py_BuildValue("(y#s)", out, (Py_ssize_t)out_size, "");
  free(out);
  if (result == NULL) return NULL;
  PyObject *k = PyUnicode_FromFormat("k=%u", interval);
  if (k == NULL) {
    Py_DECREF(result);
    return NULL;
  }
  PyTuple_SetItem(result, 1, k); /* steals k, replaces "" */
  return result;
}

static PyMethodDef methods[] = {
    {"restart", restart, METH_VARARGS,
     "restart(data, target_width=64, verify=True) -> (bytes | None, str): the JPEG with restart markers every "
     "k MCUs (k divides a row's MCUs, near target_width pixels), optimized Huffman tables, one "
     "baseline scan, the same coefficients (checked); None and the reason where the original "
     "is kept."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpegtran", "Lossless restart-marker transcode with libjpeg.", -1,
    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jpegtran(void) { return PyModule_Create(&module); }
