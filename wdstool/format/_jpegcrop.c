/* Decode one rectangle of a JPEG, with libjpeg-turbo's partial-decode API.
 *
 * A RandomResizedCrop keeps on average about half of an image; decoding the whole image to
 * throw the rest away is most of a data-loading worker's time. libjpeg-turbo can skip rows
 * (jpeg_skip_scanlines: no IDCT, no colour conversion) and decode only a band of columns
 * (jpeg_crop_scanline), and can stop after the last row wanted. No Python binding exposes
 * that (torchvision, PIL, simplejpeg and PyTurboJPEG decode whole images: pytorch/vision#7774),
 * so this module calls it, as DALI's CPU decoder does.
 *
 * decode_crop(data, left, top, width, height, out, scale_denom=1) -> bool
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

struct guard {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  int warned;
  char message[JMSG_LENGTH_MAX];
};

static void on_error(j_common_ptr cinfo) {
  struct guard *g = (struct guard *)cinfo->err;
  (*cinfo->err->format_message)(cinfo, g->message);
  longjmp(g->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level) {
  /* level -1: a warning about corrupt data (libjpeg carries on with made-up pixels) */
  if (level < 0) ((struct guard *)cinfo->err)->warned = 1;
}

enum { DONE = 0, FAILED = 1, UNSUPPORTED = 2 };

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

static int decode(const unsigned char *data, size_t size, JDIMENSION left, JDIMENSION top,
                  JDIMENSION width, JDIMENSION height, unsigned int denom, unsigned char *out,
                  struct guard *g) {
  struct jpeg_decompress_struct cinfo;
  /* volatile: read after a longjmp */
  unsigned char *volatile row = NULL;
  volatile int created = 0;

  cinfo.err = jpeg_std_error(&g->pub);
  g->pub.error_exit = on_error;
  g->pub.emit_message = on_message;
  g->warned = 0;
  g->message[0] = 0;
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

static PyObject *decode_crop(PyObject *self, PyObject *args) {
  Py_buffer data, out;
  unsigned int left, top, width, height, denom = 1;
  struct guard g;
  int status;
  (void)self;
  if (!PyArg_ParseTuple(args, "y*IIIIw*|I", &data, &left, &top, &width, &height, &out, &denom))
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
                  denom, (unsigned char *)out.buf, &g);
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
     "decode_crop(data, left, top, width, height, out, scale_denom=1) -> bool: decode one "
     "rectangle of a JPEG (of the image scaled by 1/scale_denom) as RGB (HWC) into out; False: "
     "decode this image whole instead."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpegcrop", "Partial JPEG decode with libjpeg-turbo.", -1, methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jpegcrop(void) { return PyModule_Create(&module); }
