/* TensorBoard event files, written by tgc itself (no TensorFlow): what
 * `--tensorboard-dir DIR` writes (docs/runtime.md, "TensorBoard").
 *
 * A file is a sequence of TFRecords, each
 *   uint64 length (little-endian), uint32 masked CRC32C of those 8 bytes,
 *   the data, uint32 masked CRC32C of the data,
 * where mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. The data is an
 * Event protobuf, encoded here by hand: wall_time (double, field 1), step
 * (int64, field 2), and either file_version (string, field 3:
 * "brain.Event:2", the first record) or summary (field 5), a Summary with
 * one Value {tag (string, field 1), simple_value (float, field 2)}.
 *
 * The writer appends records to a buffer allocated when it is opened and
 * writes it with one write(2) on an O_APPEND descriptor at every flush (the
 * training loop flushes after each step that logged), so a run that
 * crashes leaves whole records of every step before; the file is synced
 * when it is closed. Nothing is allocated after the open. */
#ifndef TGC_RUNTIME_TFEVENTS_H
#define TGC_RUNTIME_TFEVENTS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "support/diag.h"

/* CRC32C (Castagnoli, reflected 0x82f63b78) of n bytes, extending crc (0
 * to start): tgc_crc32c(0, "123456789", 9) == 0xe3069283. */
uint32_t tgc_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked form of a CRC. */
uint32_t tgc_crc32c_mask(uint32_t crc);

/* The TFRecord of data[0..n) into out; returns n + 16, or 0 when cap is
 * smaller. */
size_t tgc_tfrecord_frame(const void *data, size_t n, uint8_t *out, size_t cap);

/* The Event protobuf of a scalar (tag, at step, wall_time seconds since
 * the epoch) and of the file's first event (file_version
 * "brain.Event:2"); return the length, or 0 when cap is smaller. */
size_t tgc_tfevents_encode_scalar(double wall_time, int64_t step, const char *tag, float value, uint8_t *out,
                                  size_t cap);
size_t tgc_tfevents_encode_version(double wall_time, uint8_t *out, size_t cap);

/* The longest tag a scalar may have (tgc's are constants, far shorter). */
#define TGC_TFEVENTS_TAG_MAX 96

typedef struct tgc_tfevents tgc_tfevents;

/* Makes dir (with its parents, 0755 before the umask, as PyTorch's
 * SummaryWriter does) unless it exists, and creates in it, exclusively
 * (O_EXCL | O_NOFOLLOW), events.out.tfevents.SECONDS.HOST.PID.N (N the
 * first that is free), with the file_version record written. A dir that
 * exists and is not a directory (or a symbolic link to one) is refused,
 * named as `opt dir`. NULL after reporting. */
tgc_tfevents *tgc_tfevents_open(const char *dir, const char *opt, diag *d);
/* The file's path. */
const char *tgc_tfevents_path(const tgc_tfevents *w);
/* Queues a scalar event (the value rounded to float, as TensorBoard keeps
 * it); a full buffer is written first. false if that write failed (errno
 * set): the event is dropped then. */
bool tgc_tfevents_scalar(tgc_tfevents *w, const char *tag, int64_t step, double value);
/* Writes the queued events; false if the write failed (errno set). */
bool tgc_tfevents_flush(tgc_tfevents *w);
/* Flushes, syncs and closes; false after reporting a failure. NULL: true. */
bool tgc_tfevents_close(tgc_tfevents *w, diag *d);

#endif
