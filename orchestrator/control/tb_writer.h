/* TensorBoard event files: scalars that TensorBoard (and tf.summary readers) can show.
 *
 * One file per writer, RUN_DIR/tb/events.out.tfevents.<unix-seconds>.<hostname> (with
 * ".<pid>" appended when that name is taken), TFRecord-framed: per record a little-endian
 * uint64 length, the masked CRC32C of those 8 bytes, the serialized tensorboard.Event
 * (schema/tensorboard.proto) and its masked CRC32C. The first record carries
 * file_version "brain.Event:2". Each record is written whole or not at all, as it comes
 * (rec_append.h: one that cannot be written, a full disk, is held back in memory and
 * written with the next), so a reader sees whole records while the run goes on. */
#ifndef BATON_TB_WRITER_H
#define BATON_TB_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rec_append.h"
#include "util/err.h"

typedef struct tb_writer {
    rec_append a; /* fd -1: closed */
    char path[4096];
} tb_writer;

/* Creates dir if missing and a new event file in it; writes the file_version record. */
int tb_writer_open(tb_writer *w, const char *dir, bt_diag *diag);

/* One Event at step with n scalar values (tags[i] = values[i]). */
int tb_writer_scalars(tb_writer *w, int64_t step, double wall_time, const char *const *tags,
                      const float *values, size_t n, bt_diag *diag);

/* The restart marker: an Event with session_log START at step. TensorBoard then drops the
 * events of step >= step that it read before (from this file or an earlier one of the
 * directory): an attempt that resumes from a checkpoint at step S writes it at S + 1,
 * so each step shows once, with the values of the attempt that wrote it last. */
int tb_writer_session_start(tb_writer *w, int64_t step, double wall_time, bt_diag *diag);

void tb_writer_close(tb_writer *w);

/* The masked CRC32C TFRecord stores: ((c >> 15) | (c << 17)) + 0xa282ead8. */
uint32_t tb_masked_crc(const void *data, size_t n);

#endif
