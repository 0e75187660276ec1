/* libjpeg's error handling for the project's C decoders (_jpegcrop.c, _jpegtran.c): an error
 * longjmps back to the caller with libjpeg's message; a warning about corrupt data (libjpeg
 * carries on with made-up values) is remembered, so the caller can decline the image. */
#ifndef WDSTOOL_JPEGGUARD_H
#define WDSTOOL_JPEGGUARD_H

#include <setjmp.h>
#include <stdio.h>

#include <jpeglib.h>

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
  /* level -1: a warning about corrupt data */
  if (level < 0) ((struct guard *)cinfo->err)->warned = 1;
}

/* cinfo reports to g (error_exit: on_error, warnings: on_message); nothing warned yet */
static void guard_setup(struct guard *g, j_common_ptr cinfo) {
  cinfo->err = jpeg_std_error(&g->pub);
  g->pub.error_exit = on_error;
  g->pub.emit_message = on_message;
  g->warned = 0;
  g->message[0] = 0;
}

#endif
