/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * overlay_write.c - the writes and size changes of overlay files
 * (overlay.h: overlay_write, overlay_ftruncate, overlay_truncate): each
 * goes to a file buffered whole, up to write_max, or to one streamed as
 * a multipart upload (overlay_stream.c).  Above overlay.c,
 * overlay_stream.c and the tables (overlay_tables.h), which call nothing
 * here.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "ov_buf.h"
#include "overlay_stream.h"
#include "overlay_tables.h"
#include "upload.h"

gboolean overlay_truncate(struct overlay *ov, guint64 node, guint64 size,
			  GError **error)
{
	struct onode *n;
	struct ov_file *f;
	gboolean ok;

	if (size > ov->write_max) {
		g_set_error(error, BFS_ERROR, EFBIG,
			    "size past write_max (%" G_GUINT64_FORMAT " bytes)",
			    ov->write_max);
		return FALSE;
	}
	/* Through a handle of our own, so the bytes are there and the
	 * result is uploaded like any write. */
	f = overlay_open(ov, node, TRUE, size == 0, error);
	if (!f)
		return FALSE;
	n = f->n;
	g_mutex_lock(&ov->lock);
	if (n->data->len != size) {
		guint64 old = n->data->len;

		ov_buf_set_size(n->data, size);
		if (size > old)
			memset(n->data->data + old, 0, size - old);
		n->size = size;
		n->version++;
	}
	g_mutex_unlock(&ov->lock);
	ok = overlay_flush(f, NULL, error);
	overlay_release(f);
	return ok;
}

/* Why @n's size cannot become @size, or NULL.  Under ov->lock. */
static GError *resize_refused(struct overlay *ov, struct onode *n, guint64 size)
{
	guint64 ps = uploader_part_size(ov->up);

	if (size == n->size)
		return NULL;
	if (!n->streamable && size > ov->write_max)
		return g_error_new(BFS_ERROR, EFBIG,
				   "size past write_max (%" G_GUINT64_FORMAT
				   " bytes)",
				   ov->write_max);
	if (!n->streamable)
		return NULL;
	if (n->sealed)
		return g_error_new(BFS_ERROR, EBADF,
				   "its upload was completed (fsync): its "
				   "size stays %" G_GUINT64_FORMAT,
				   n->size);
	if (n->base || size > ps)
		return g_error_new(
			BFS_ERROR, EINVAL,
			"size %" G_GUINT64_FORMAT " of a file streamed as a "
			"multipart upload: only under a part "
			"(%" G_GUINT64_FORMAT " bytes) before any part is sent",
			size, ps);
	return NULL;
}

gboolean overlay_ftruncate(struct ov_file *f, guint64 size, GError **error)
{
	struct overlay *ov = f->ov;
	struct onode *n = f->n;
	GError *why;

	if (!f->writable)
		return overlay_truncate(ov, n->node, size, error);
	g_mutex_lock(&n->wlock);
	g_mutex_lock(&ov->lock);
	why = ov_stale(f) ? ov_stale_error(f) : resize_refused(ov, n, size);
	/* A writable handle has the bytes (a completed one, none: its size
	 * stays). */
	if (!why && size != n->size && n->data) {
		guint64 old = n->data->len;

		ov_buf_set_size(n->data, size - n->base);
		if (size - n->base > old)
			memset(n->data->data + old, 0, size - n->base - old);
		n->size = size;
		n->mtime = g_get_real_time() / G_USEC_PER_SEC;
		n->version++;
	}
	g_mutex_unlock(&ov->lock);
	g_mutex_unlock(&n->wlock);
	if (why)
		g_propagate_error(error, why);
	return !why;
}

static gboolean write_buffered(struct ov_file *f, guint64 off, const char *buf,
			       gsize size, const gint *stop, GError **error)
{
	struct onode *n = f->n;

	g_mutex_lock(&f->ov->lock);
	if (n->streamable) {
		g_mutex_unlock(&f->ov->lock);
		return ov_stream_write(f, off, buf, size, stop, error);
	}
	g_mutex_unlock(&f->ov->lock);
	if (off + size > f->ov->write_max || off + size < off) {
		g_set_error(
			error, BFS_ERROR, EFBIG,
			"write past write_max (%" G_GUINT64_FORMAT
			" bytes): a file rewritten in place is buffered whole",
			f->ov->write_max);
		ov_mark_broken(f->ov, n, *error);
		return FALSE;
	}
	g_mutex_lock(&f->ov->lock);
	ov_buffer_write(n, off, buf, size);
	g_mutex_unlock(&f->ov->lock);
	return TRUE;
}

gboolean overlay_write(struct ov_file *f, guint64 off, const char *buf,
		       gsize size, const gint *stop, GError **error)
{
	gboolean closed, ok;

	if (!f->writable) {
		g_set_error(error, BFS_ERROR, EBADF, "not open for writing");
		return FALSE;
	}
	g_mutex_lock(&f->ov->lock);
	if (ov_stale(f)) {
		g_propagate_error(error, ov_stale_error(f));
		g_mutex_unlock(&f->ov->lock);
		return FALSE;
	}
	/* Written through a copy of the descriptor its opener closed: in
	 * use again while the write runs, and after it if it was taken. */
	closed = f->closed;
	ov_set_closed(f, FALSE);
	g_mutex_unlock(&f->ov->lock);
	ok = write_buffered(f, off, buf, size, stop, error);
	if (!ok && closed) {
		g_mutex_lock(&f->ov->lock);
		ov_set_closed(f, TRUE);
		g_mutex_unlock(&f->ov->lock);
	}
	return ok;
}
