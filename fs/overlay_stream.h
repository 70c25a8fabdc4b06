/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * overlay_stream.h - a new file streamed to S3 as it is written
 * (overlay_stream.c), and the copy into a node's buffer that whole and
 * streamed files share.  For overlay.c and overlay_write.c, which stand
 * above it: it calls neither.  Locks and their order: overlay_tables.h.
 */
#ifndef BUCKETFS_FS_OVERLAY_STREAM_H
#define BUCKETFS_FS_OVERLAY_STREAM_H

#include <glib.h>

struct onode;
struct ov_file;

/* Copies @size bytes at file offset @off into @n's buffer, which starts
 * at n->base; a hole is zeros.  Under ov->lock. */
void ov_buffer_write(struct onode *n, guint64 off, const char *buf, gsize size);

/* A write of a file made here (n->streamable): buffered, and sent part
 * by part.  Takes n->wlock, then ov->lock.  Errors: EINVAL out of order
 * or past a hole of a part, EBADF once completed, an earlier write's
 * errno, EINTR once *@stop is set while it waits, the upload's. */
gboolean ov_stream_write(struct ov_file *f, guint64 off, const char *buf,
			 gsize size, const gint *stop, GError **error);

/* Completes the streamed upload of @f's file (n->up set) with what is
 * buffered; aborts it after a failed write, or once *@stop (may be NULL)
 * is set while it waits (EINTR).  Under n->wlock.  Errors: EBADF for a
 * stale handle, an earlier write's errno, the upload's. */
gboolean ov_stream_complete(struct ov_file *f, const gint *stop,
			    GError **error);

#endif
