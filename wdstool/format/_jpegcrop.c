/* Decode one rectangle of a JPEG, with libjpeg-turbo's partial-decode API.
 *
 * A RandomResizedCrop keeps on average about half of an image; decoding the whole image to
 * throw the rest away is most of a data-loading worker's time. libjpeg-turbo can skip rows
 * (jpeg_skip_scanlines: no IDCT, no colour conversion) and decode only a band of columns
 * (jpeg_crop_scanline), and can stop after the last row wanted. No Python binding exposes
 * that (torchvision, PIL, simplejpeg and PyTurboJPEG decode whole images: pytorch/vision#7774),
 * so this module calls it, as DALI's CPU decoder does.
 *
 * decode_crop(data, left, top, width, height, out, scale_denom=1, restarts=True) -> bool
 *   data: the JPEG bytes (any contiguous buffer); out: a writable contiguous buffer of exactly
 *   height*width*3 bytes, filled with the RGB pixels (HWC) of the rectangle.
 *   scale_denom 2, 4 or 8 decodes at 1/2, 1/4 or 1/8 scale in the DCT domain (libjpeg's
 *   scaled IDCT: the 1/2 and 1/4 paths have SIMD, 1/8 keeps only the DC coefficient): the
 *   rectangle is then in the coordinates of the scaled image, whose size is the full size
 *   divided by scale_denom, rounded up; the pixels are those of a whole scaled decode there.
 *   Returns True when done, False when this decoder should not be trusted with the image
 *   (CMYK/YCCK colour, libjpeg warned about corrupt data, or a stray marker in the bytes
 *   below the rectangle): the caller decodes it whole.
 *   Raises ValueError with libjpeg's message when the data cannot be decoded.
 *   restarts: where the file has restart intervals that never straddle an MCU row, decode
 *   only the intervals that cover the rectangle (see "restart intervals" below); False: never.
 * sub_jpeg(data, left, top, width, height, scale_denom=1) -> (bytes, dx, dy) | None: that
 *   small JPEG itself (tests, diagnosis).
 *
 * The pixels are those of a whole-image decode with libjpeg's defaults (islow IDCT, fancy
 * upsampling): the rectangle is decoded with MARGIN extra pixels on every side (clamped to
 * the image), so the edge handling of a partial decode (chroma upsampling at the edge of the
 * decoded band) never reaches a pixel that is returned. Skipping and cropping work in output
 * coordinates (after jpeg_start_decompress), so with a scale the margin is MARGIN pixels of
 * the scaled image. The tests compare against torchvision.io.decode_jpeg for every chroma
 * subsampling, progressive and restart-marker files, and scaled rectangles against a whole
 * scaled decode (this module with no crop, and PIL's Image.draft).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#define MARGIN 8

#include "_jpegguard.h"

enum { DONE = 0, FAILED = 1, UNSUPPORTED = 2, NOT_USED = 3 };

static int is_rst(int code) { return code >= 0xD0 && code <= 0xD7; }

/* 1 if the input left unread holds a marker other than restart markers and the final EOI
 * (entropy-coded data escapes 0xFF as FF 00; FF FF is fill before a marker). */
static int stray_marker(j_decompress_ptr cinfo) {
  if (cinfo->unread_marker && cinfo->unread_marker != 0xD9 && !is_rst(cinfo->unread_marker))
    return 1;
  const unsigned char *p = cinfo->src->next_input_byte;
  const unsigned char *end = p + cinfo->src->bytes_in_buffer;
  while (p < end && (p = memchr(p, 0xFF, (size_t)(end - p))) != NULL) {
    if (++p == end) return 1; /* a lone 0xFF at the very end */
    int code = *p;
    if (code == 0x00 || code == 0xFF || is_rst(code)) continue;
    return !(code == 0xD9 && p + 1 == end); /* only the final EOI may follow */
  }
  return 0;
}

static int decode_roi(const unsigned char *data, size_t size, size_t scan,
                      j_decompress_ptr cinfo, JDIMENSION left, JDIMENSION top, JDIMENSION width,
                      JDIMENSION height, unsigned int denom, unsigned char *out, struct guard *g);

static int decode(const unsigned char *data, size_t size, JDIMENSION left, JDIMENSION top,
                  JDIMENSION width, JDIMENSION height, unsigned int denom, unsigned char *out,
                  struct guard *g, int roi) {
  struct jpeg_decompress_struct cinfo;
  /* volatile: read after a longjmp */
  unsigned char *volatile row = NULL;
  volatile int created = 0;

  guard_setup(g, (j_common_ptr)&cinfo);
  if (setjmp(g->jump)) {
    if (created) jpeg_destroy_decompress(&cinfo);
    free(row);
    return FAILED;
  }
  jpeg_create_decompress(&cinfo);
  created = 1;
  jpeg_mem_src(&cinfo, data, (unsigned long)size);
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space != JCS_YCbCr && cinfo.jpeg_color_space != JCS_GRAYSCALE &&
      cinfo.jpeg_color_space != JCS_RGB) {
    jpeg_destroy_decompress(&cinfo);
    return UNSUPPORTED;
  }
  if (roi && cinfo.restart_interval) {
    /* restart intervals: decode only the ones the rectangle covers, when they allow it */
    size_t scan = size - cinfo.src->bytes_in_buffer; /* the entropy-coded data starts here */
    int status = decode_roi(data, size, scan, &cinfo, left, top, width, height, denom, out, g);
    if (status != NOT_USED) {
      jpeg_destroy_decompress(&cinfo);
      return status;
    }
  }
  cinfo.out_color_space = JCS_RGB;
  cinfo.scale_num = 1;
  cinfo.scale_denom = denom;
  jpeg_start_decompress(&cinfo);
  if (left + width > cinfo.output_width || top + height > cinfo.output_height) {
    snprintf(g->message, sizeof(g->message), "crop %ux%u+%u+%u outside the %ux%u image",
             width, height, left, top, cinfo.output_width, cinfo.output_height);
    jpeg_destroy_decompress(&cinfo);
    return FAILED;
  }
  JDIMENSION x0 = left > MARGIN ? left - MARGIN : 0;
  JDIMENSION x1 = left + width + MARGIN < cinfo.output_width ? left + width + MARGIN
                                                             : cinfo.output_width;
  JDIMENSION y0 = top > MARGIN ? top - MARGIN : 0;
  JDIMENSION band_left = x0, band_width = x1 - x0;
  if (band_width < cinfo.output_width)
    jpeg_crop_scanline(&cinfo, &band_left, &band_width); /* widens to iMCU boundaries */
  JSAMPROW line = malloc((size_t)cinfo.output_width * 3);
  row = line;
  if (line == NULL) {
    snprintf(g->message, sizeof(g->message), "out of memory");
    jpeg_destroy_decompress(&cinfo);
    return FAILED;
  }
  if (y0 > 0 && jpeg_skip_scanlines(&cinfo, y0) != y0) longjmp(g->jump, 1);
  size_t skip = (size_t)(left - band_left) * 3, bytes = (size_t)width * 3;
  for (JDIMENSION y = y0; y < top + height; y++) {
    if (jpeg_read_scanlines(&cinfo, &line, 1) != 1) {
      snprintf(g->message, sizeof(g->message), "no data for row %u", y);
      longjmp(g->jump, 1);
    }
    if (y >= top) memcpy(out + (size_t)(y - top) * bytes, line + skip, bytes);
  }
  /* The rows below the rectangle are never decoded. A whole-image decode would still read
   * their bytes and reject a stray marker there ("Unsupported marker type", "two SOF
   * markers"): look for one, so such a file gets the whole decoder's verdict too. */
  int stray = stray_marker(&cinfo);
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  free(row);
  return g->warned || stray ? UNSUPPORTED : DONE;
}

/* --- restart intervals: decode only the intervals a rectangle covers -------------------------
 * A restart marker (RSTn) resets the DC predictors, so the entropy-coded data between two
 * markers decodes on its own. Where every MCU row is split into whole intervals (k MCUs an
 * interval, k dividing the MCUs of a row; or an interval of whole rows), the intervals that
 * cover the rectangle, plus one MCU of margin on every side (the reach of fancy upsampling at
 * the sub-image's border), form a valid JPEG of their own: the same header with the frame's
 * size rewritten, those intervals with their markers renumbered 0-7, and an end-of-image
 * marker. Decoding that small JPEG (with decode(), scaled as asked) gives the rectangle's
 * pixels of a whole decode; libjpeg then entropy-decodes only those intervals instead of
 * every row above the rectangle and every column of the rows it keeps.
 * wdstool's writer adds such markers losslessly at pack time (wdstool/format/_jpegtran.c). */

/* The offset of the first byte after the frame header's marker (SOF0/1/2) in [0, end); 0 if
 * the markers before the scan cannot be walked. */
static size_t sof_offset(const unsigned char *data, size_t end) {
  size_t p = 2;
  while (p + 4 <= end) {
    if (data[p] != 0xFF) return 0;
    int code = data[p + 1];
    if (code == 0xFF) { /* fill byte */
      p++;
      continue;
    }
    size_t len = ((size_t)data[p + 2] << 8) | data[p + 3];
    if (code == 0xC0 || code == 0xC1) return len >= 8 && p + 2 + len <= end ? p + 2 : 0;
    if (code == 0xDA || len < 2) return 0;
    p += 2 + len;
  }
  return 0;
}

/* The start of every interval of the scan at data[scan..size): starts[i] is where interval i
 * begins, starts[n] one past the end of the last one (the EOI marker). 0 when the data is not
 * exactly n intervals in order (RST0..7 cycling) followed by EOI at the very end. */
static int find_intervals(const unsigned char *data, size_t size, size_t scan, size_t n,
                          size_t *starts) {
  const unsigned char *p = data + scan, *end = data + size;
  size_t found = 0;
  starts[0] = scan;
  while (p < end && (p = memchr(p, 0xFF, (size_t)(end - p))) != NULL) {
    if (p + 1 == end) return 0;
    int code = p[1];
    if (code == 0x00) {
      p += 2;
      continue;
    }
    if (code == 0xFF) { /* fill before a marker */
      p++;
      continue;
    }
    if (is_rst(code)) {
      if (found + 1 >= n || code != 0xD0 + (int)(found % 8)) return 0;
      starts[++found] = (size_t)(p - data) + 2;
      p += 2;
      continue;
    }
    /* the end of the scan: EOI, last in the file, after exactly n intervals */
    if (code != 0xD9 || p + 2 != end || found + 1 != n) return 0;
    starts[n] = (size_t)(p - data) + 2; /* interval i's bytes: [starts[i], starts[i+1] - 2) */
    return 1;
  }
  return 0;
}

/* The sub-JPEG of the intervals that cover the rectangle (in the coordinates of the image
 * scaled by 1/denom), malloc'd, its size in *sub_size and the offset of its top-left corner in
 * (*dx, *dy); NULL where the file's intervals do not allow it, it would not pay (the rectangle's
 * intervals reach the top-left corner across the whole width: the partial decode reads no
 * more), or the scan is not what its header promises (the usual path gives the verdict). */
static unsigned char *sub_image(const unsigned char *data, size_t size, size_t scan,
                                j_decompress_ptr cinfo, JDIMENSION left, JDIMENSION top,
                                JDIMENSION width, JDIMENSION height, unsigned int denom,
                                size_t *sub_size, JDIMENSION *dx, JDIMENSION *dy) {
  if (cinfo->progressive_mode || cinfo->arith_code ||
      cinfo->comps_in_scan != cinfo->num_components || cinfo->num_components > 4)
    return NULL;
  size_t mcu_w = 8, mcu_h = 8;
  if (cinfo->num_components > 1) {
    mcu_w = 8 * (size_t)cinfo->max_h_samp_factor;
    mcu_h = 8 * (size_t)cinfo->max_v_samp_factor;
  }
  size_t W = cinfo->image_width, H = cinfo->image_height, k = cinfo->restart_interval;
  size_t per_row = (W + mcu_w - 1) / mcu_w, rows = (H + mcu_h - 1) / mcu_h;
  size_t row_group = 1; /* MCU rows an interval spans (intervals of whole rows) */
  if (per_row % k != 0) {
    if (k % per_row != 0) return NULL;
    row_group = k / per_row;
  }
  /* the rectangle in the image's own pixels, one MCU of margin, snapped to intervals */
  size_t x0 = (size_t)left * denom, x1 = ((size_t)left + width) * denom;
  size_t y0 = (size_t)top * denom, y1 = ((size_t)top + height) * denom;
  size_t c0 = x0 / mcu_w, c1 = (x1 + mcu_w - 1) / mcu_w + 1;
  size_t r0 = y0 / mcu_h, r1 = (y1 + mcu_h - 1) / mcu_h + 1;
  c0 = c0 > 0 ? c0 - 1 : 0;
  r0 = r0 > 0 ? r0 - 1 : 0;
  if (row_group > 1) {
    c0 = 0;
    c1 = per_row;
  } else {
    c0 = c0 / k * k;
    c1 = (c1 + k - 1) / k * k;
  }
  if (c1 > per_row) c1 = per_row;
  r0 = r0 / row_group * row_group;
  r1 = (r1 + row_group - 1) / row_group * row_group;
  if (r1 > rows) r1 = rows;
  if (r0 == 0 && c0 == 0 && c1 == per_row) return NULL; /* the partial decode does this */
  if (left + width > (W + denom - 1) / denom || top + height > (H + denom - 1) / denom)
    return NULL; /* outside the image: the usual path gives the message */

  size_t total = (per_row * rows + k - 1) / k; /* intervals in the scan */
  size_t *starts = malloc((total + 1) * sizeof *starts);
  if (starts == NULL) return NULL;
  size_t sof = sof_offset(data, scan);
  if (sof == 0 || !find_intervals(data, size, scan, total, starts)) {
    free(starts);
    return NULL; /* not what the header promises */
  }
  /* the sub-JPEG: header, the covered intervals (renumbered), EOI */
  size_t first_row = r0 / row_group, last_row = (r1 + row_group - 1) / row_group;
  size_t per_line = row_group > 1 ? 1 : per_row / k; /* intervals per line of intervals */
  size_t i0 = row_group > 1 ? 0 : c0 / k, i1 = row_group > 1 ? 1 : c1 / k;
  size_t bytes = scan + 2;
  for (size_t line = first_row; line < last_row; line++)
    for (size_t i = i0; i < i1; i++) {
      size_t at = line * per_line + i;
      bytes += starts[at + 1] - starts[at];
    }
  unsigned char *sub = malloc(bytes);
  if (sub == NULL) {
    free(starts);
    return NULL;
  }
  memcpy(sub, data, scan);
  size_t sub_w = (c1 * mcu_w < W ? c1 * mcu_w : W) - c0 * mcu_w;
  size_t sub_h = (r1 * mcu_h < H ? r1 * mcu_h : H) - r0 * mcu_h;
  sub[sof + 3] = (unsigned char)(sub_h >> 8);
  sub[sof + 4] = (unsigned char)sub_h;
  sub[sof + 5] = (unsigned char)(sub_w >> 8);
  sub[sof + 6] = (unsigned char)sub_w;
  unsigned char *w = sub + scan;
  size_t n = 0;
  for (size_t line = first_row; line < last_row; line++)
    for (size_t i = i0; i < i1; i++, n++) {
      size_t at = line * per_line + i;
      size_t len = starts[at + 1] - starts[at] - 2; /* without its marker */
      memcpy(w, data + starts[at], len);
      w += len;
      w[0] = 0xFF;
      w[1] = (unsigned char)(0xD0 + n % 8);
      w += 2;
    }
  w[-1] = 0xD9; /* the last interval ends the image */
  free(starts);
  *sub_size = (size_t)(w - sub);
  *dx = (JDIMENSION)(c0 * mcu_w / denom);
  *dy = (JDIMENSION)(r0 * mcu_h / denom);
  return sub;
}

static int decode_roi(const unsigned char *data, size_t size, size_t scan,
                      j_decompress_ptr cinfo, JDIMENSION left, JDIMENSION top, JDIMENSION width,
                      JDIMENSION height, unsigned int denom, unsigned char *out, struct guard *g) {
  size_t sub_size;
  JDIMENSION dx, dy;
  unsigned char *sub = sub_image(data, size, scan, cinfo, left, top, width, height, denom,
                                 &sub_size, &dx, &dy);
  if (sub == NULL) return NOT_USED;
  int status = decode(sub, sub_size, left - dx, top - dy, width, height, denom, out, g, 0);
  free(sub);
  return status;
}

/* sub_jpeg(data, left, top, width, height, scale_denom=1) -> (bytes, dx, dy) | None */
static PyObject *sub_jpeg(PyObject *self, PyObject *args) {
  Py_buffer data;
  unsigned int left, top, width, height, denom = 1;
  struct guard g;
  struct jpeg_decompress_struct cinfo;
  unsigned char *volatile sub = NULL;
  size_t sub_size = 0;
  JDIMENSION dx = 0, dy = 0;
  (void)self;
  if (!PyArg_ParseTuple(args, "y*IIII|I", &data, &left, &top, &width, &height, &denom))
    return NULL;
  guard_setup(&g, (j_common_ptr)&cinfo);
  if (setjmp(g.jump)) {
    jpeg_destroy_decompress(&cinfo);
    PyBuffer_Release(&data);
    PyErr_SetString(PyExc_ValueError, g.message);
    return NULL;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data.buf, (unsigned long)data.len);
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.restart_interval && width && height && (denom == 1 || denom == 2 || denom == 4 ||
                                                    denom == 8))
    sub = sub_image(data.buf, (size_t)data.len, (size_t)data.len - cinfo.src->bytes_in_buffer,
                    &cinfo, left, top, width, height, denom, &sub_size, &dx, &dy);
  jpeg_destroy_decompress(&cinfo);
  PyBuffer_Release(&data);
  if (sub == NULL) Py_RETURN_NONE;
  PyObject *result = Py_BuildValue("(y#II)", sub, (Py_ssize_t)sub_size, dx, dy);
  free(sub);
  return result;
}

static PyObject *decode_crop(PyObject *self, PyObject *args) {
  Py_buffer data, out;
  unsigned int left, top, width, height, denom = 1;
  int roi = 1;
  struct guard g;
  int status;
  (void)self;
  if (!PyArg_ParseTuple(args, "y*IIIIw*|Ip", &data, &left, &top, &width, &height, &out, &denom,
                        &roi))
    return NULL;
  if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
    PyErr_Format(PyExc_ValueError, "scale_denom must be 1, 2, 4 or 8, got %u", denom);
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    return NULL;
  }
  if (width == 0 || height == 0 || (size_t)out.len != (size_t)width * height * 3) {
    PyErr_Format(PyExc_ValueError, "out holds %zd bytes, a %ux%u RGB crop needs %zu", out.len,
                 width, height, (size_t)width * height * 3);
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    return NULL;
  }
  Py_BEGIN_ALLOW_THREADS
  status = decode((const unsigned char *)data.buf, (size_t)data.len, left, top, width, height,
                  denom, (unsigned char *)out.buf, &g, roi);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&data);
  PyBuffer_Release(&out);
  if (status == FAILED) {
    PyErr_SetString(PyExc_ValueError, g.message[0] ? g.message : "cannot decode JPEG");
    return NULL;
  }
  return PyBool_FromLong(status == DONE);
}

static PyMethodDef methods[] = {
    {"decode_crop", decode_crop, METH_VARARGS,
     "decode_crop(data, left, top, width, height, out, scale_denom=1, restarts=True) -> bool: "
     "decode one rectangle of a JPEG (of the image scaled by 1/scale_denom) as RGB (HWC) into "
     "out, from only the restart intervals that cover it where the file allows (restarts=False: "
     "never); False: decode this image whole instead."},
    {"sub_jpeg", sub_jpeg, METH_VARARGS,
     "sub_jpeg(data, left, top, width, height, scale_denom=1) -> (bytes, dx, dy) | None: the "
     "JPEG of only the restart intervals that cover the rectangle (plus one MCU of margin), "
     "and where its top-left corner lies in the (scaled) image; None where decode_crop would "
     "not use one."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpegcrop", "Partial JPEG decode with libjpeg-turbo.", -1, methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jpegcrop(void) { return PyModule_Create(&module); }
