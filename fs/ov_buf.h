/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ov_buf.h - an overlay file's bytes while open: mapped pages of its own,
 * not the heap, so that they go back to the system when it is freed, on
 * whatever thread.  (A heap buffer freed after its writer closed stays
 * cached in the FUSE worker's malloc arena: glibc does not trim a thread
 * arena's top, and the daemon's RSS would stay a part above the stated
 * bound.)
 *
 * A buffer has no lock: its owner serializes the calls (the overlay's
 * are under ov->lock, overlay_tables.h).  A mapping that fails aborts the
 * daemon, as glib's allocations do, so no call returns an error.
 */
#ifndef BUCKETFS_FS_OV_BUF_H
#define BUCKETFS_FS_OV_BUF_H

#include <glib.h>

/* @data and @len are read directly; the rest is the functions'. */
struct ov_buf {
	guint8 *data;
	gsize len;
	gsize cap; /* bytes mapped at @data (0: none) */
};

/* An empty buffer, the caller's: ov_buf_free() or ov_buf_free_to_bytes()
 * unmaps it. */
struct ov_buf *ov_buf_new(void);

/* Unmaps and frees @b.  NULL is ignored. */
void ov_buf_free(struct ov_buf *b);

/* Sets the length; bytes it adds are not cleared (the caller writes or
 * zeros them).  Growing may move @data. */
void ov_buf_set_size(struct ov_buf *b, gsize len);

/* Drops the first @len bytes (at most @b->len); the rest moves to the
 * front. */
void ov_buf_drop_front(struct ov_buf *b, gsize len);

/* Frees @b (taken) and returns its bytes, unmapped when the GBytes goes,
 * on whatever thread drops its last reference. */
GBytes *ov_buf_free_to_bytes(struct ov_buf *b);

#endif
