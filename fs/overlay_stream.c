/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * overlay_stream.c - a new file streamed to S3 as it is written: its
 * buffer holds at most a part beyond what went up (upload.h), writes
 * must come in order, and close or fsync completes the upload; its size
 * changes only while none of it is sent (ftruncate).
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "ov_buf.h"
#include "overlay_stream.h"
#include "overlay_tables.h"
#include "upload.h"

/* Copies @size bytes at file offset @off into the buffer, which starts
 * at n->base; a hole is zeros.  Under ov->lock. */
void ov_buffer_write(struct onode *n, guint64 off, const char *buf, gsize size)
{
	guint64 rel = off - n->base;

	if (n->data->len < rel + size) {
		gsize old = n->data->len;

		ov_buf_set_size(n->data, rel + size);
		/* A write past the end leaves a hole: zeros, as in a file. */
		if (rel > old)
			memset(n->data->data + old, 0, rel - old);
	}
	memcpy(n->data->data + rel, buf, size);
	n->size = n->base + n->data->len;
	n->mtime = g_get_real_time() / G_USEC_PER_SEC;
	n->version++;
}

/* The first @ps bytes of the buffer, copied into a part of the
 * uploader's (upload.h); the rest moves to the front.  Under ov->lock. */
static GBytes *cut_part(struct overlay *ov, struct onode *n, guint64 ps,
			GError **error)
{
	GBytes *part;

	g_assert(ps == uploader_part_size(ov->up));
	part = uploader_part_copy(ov->up, n->data->data, error);
	if (!part)
		return NULL;
	ov_buf_drop_front(n->data, ps);
	n->base += ps;
	return part;
}

/* Why a write of a streamed file cannot be taken, or NULL.  Under
 * ov->lock. */
static GError *stream_refuses(struct onode *n, guint64 off, guint64 ps)
{
	if (n->broken)
		return g_error_new(BFS_ERROR, bfs_error_errno(n->broken),
				   "an earlier write failed: %s",
				   n->broken->message);
	if (n->sealed)
		return g_error_new(BFS_ERROR, EBADF,
				   "its upload was completed (fsync or "
				   "close): reopen it with O_TRUNC to write "
				   "it again");
	if (off < n->base)
		return g_error_new(BFS_ERROR, EINVAL,
				   "out-of-order write at %" G_GUINT64_FORMAT
				   ": the first %" G_GUINT64_FORMAT
				   " bytes are uploaded already (only "
				   "sequential writes stream)",
				   off, n->base);
	if (off - n->base > n->data->len + ps)
		return g_error_new(
			BFS_ERROR, EINVAL,
			"write at %" G_GUINT64_FORMAT
			" leaves a hole of more than a part (%" G_GUINT64_FORMAT
			" bytes)",
			off, ps);
	return NULL;
}

struct cut_call {
	struct overlay *ov;
	struct onode *n;
	guint64 ps;
};

/* upload_part_cut()'s: the next part, once it has its slot. */
static GBytes *cut_booked(void *data, GError **error)
{
	struct cut_call *c = data;
	GBytes *part;

	g_mutex_lock(&c->ov->lock);
	/* The writer holds n->wlock: nothing else shrank the buffer. */
	g_assert(c->n->data->len >= c->ps);
	part = cut_part(c->ov, c->n, c->ps, error);
	g_mutex_unlock(&c->ov->lock);
	return part;
}

/*
 * Sends the buffer's first part, starting the upload first if need be:
 * it is cut only once it has a slot, so a writer waiting for one holds
 * no part beside its buffer.  On failure the upload is aborted (after an
 * interrupt, on an abort thread: the write returns at once, without
 * waiting for the parts in flight).  Under n->wlock, not ov->lock.
 */
static gboolean send_part(struct overlay *ov, struct onode *n, guint64 ps,
			  const gint *stop, GError **error)
{
	g_autoptr(GError) err = NULL;
	struct cut_call c = { ov, n, ps };

	if (!n->up)
		n->up = upload_start(ov->up, n->key, &err);
	if (n->up && upload_part_cut(n->up, cut_booked, &c, stop, &err))
		return TRUE;
	g_prefix_error(&err, "multipart upload: ");
	if (bfs_error_errno(err) == EINTR) {
		/* The write says EINTR; later ones must not, or a writer
		 * that retries on EINTR would retry for ever. */
		g_autoptr(GError) lost = g_error_new(
			BFS_ERROR, EIO, "a write was interrupted: %s",
			err->message);

		ov_mark_broken(ov, n, lost);
		/* Nothing more of it can go up: its queued parts are
		 * cancelled now, not when it is closed. */
		if (n->up)
			upload_abort_async(g_steal_pointer(&n->up), lost);
	} else {
		if (n->up)
			upload_abort(g_steal_pointer(&n->up), NULL);
		ov_mark_broken(ov, n, err);
	}
	g_propagate_error(error, g_steal_pointer(&err));
	return FALSE;
}

/*
 * Whether @n was unlinked while written: then nothing of it goes up, its
 * upload (if any) is aborted, the log says so.  Writing to an unlinked
 * file is fine; it just never becomes visible.  Under n->wlock and
 * ov->lock, which it may drop and take again.
 */
static gboolean stream_unlinked(struct overlay *ov, struct onode *n)
{
	struct upload *up;
	g_autoptr(GError) why = NULL;

	if (!n->removed)
		return FALSE;
	up = g_steal_pointer(&n->up);
	if (n->data)
		ov_buf_set_size(n->data, 0);
	if (up) {
		g_mutex_unlock(&ov->lock);
		why = g_error_new(BFS_ERROR, ENOENT,
				  "'%s' was unlinked while written: not "
				  "uploaded",
				  n->key);
		upload_abort(up, why);
		g_mutex_lock(&ov->lock);
	}
	return TRUE;
}

/* A write of a file made here: buffered, and sent part by part. */
gboolean ov_stream_write(struct ov_file *f, guint64 off, const char *buf,
			 gsize size, const gint *stop, GError **error)
{
	struct overlay *ov = f->ov;
	struct onode *n = f->n;
	guint64 ps = uploader_part_size(ov->up);
	gboolean ok = TRUE;
	GError *why;

	g_mutex_lock(&n->wlock);
	g_mutex_lock(&ov->lock);
	if (stream_unlinked(ov, n)) {
		g_mutex_unlock(&ov->lock);
		g_mutex_unlock(&n->wlock);
		return TRUE;
	}
	why = stream_refuses(n, off, ps);
	if (why) {
		if (!n->broken && !n->sealed)
			n->broken = g_error_copy(why);
		g_mutex_unlock(&ov->lock);
		g_mutex_unlock(&n->wlock);
		g_propagate_error(error, why);
		return FALSE;
	}
	ov_buffer_write(n, off, buf, size);
	while (ok && n->data->len >= ps) {
		/* A part that cannot be cut (mapped) fails this write, its
		 * bytes buffered: the file is broken, its upload aborted. */
		g_mutex_unlock(&ov->lock);
		ok = send_part(ov, n, ps, stop, error);
		g_mutex_lock(&ov->lock);
	}
	g_mutex_unlock(&ov->lock);
	g_mutex_unlock(&n->wlock);
	return ok;
}

/* Completes the streamed upload of @f's file with what is buffered.
 * Under n->wlock. */
gboolean ov_stream_complete(struct ov_file *f, const gint *stop, GError **error)
{
	struct overlay *ov = f->ov;
	struct onode *n = f->n;
	struct upload *up;
	g_autoptr(GBytes) last = NULL;
	g_autoptr(GError) err = NULL;
	g_autofree char *etag = NULL;
	guint64 version, size;
	gboolean ok;

	g_mutex_lock(&ov->lock);
	if (stream_unlinked(ov, n)) {
		g_mutex_unlock(&ov->lock);
		return TRUE;
	}
	if (ov_stale(f)) {
		g_propagate_error(error, ov_stale_error(f));
		g_mutex_unlock(&ov->lock);
		return FALSE;
	}
	up = g_steal_pointer(&n->up);
	if (n->broken) {
		err = g_error_new(BFS_ERROR, bfs_error_errno(n->broken),
				  "'%s' not uploaded: an earlier write "
				  "failed: %s",
				  n->key, n->broken->message);
		g_mutex_unlock(&ov->lock);
		if (up)
			upload_abort(up, NULL);
		f->failed = TRUE;
		g_propagate_error(error, g_steal_pointer(&err));
		return FALSE;
	}
	last = ov_buf_free_to_bytes(g_steal_pointer(&n->data));
	version = n->version;
	size = n->size;
	n->uploading = TRUE;
	g_mutex_unlock(&ov->lock);

	ok = upload_finish(up, last, size, stop, &etag, &err);
	g_clear_pointer(&last, g_bytes_unref);
	g_mutex_lock(&ov->lock);
	n->uploading = FALSE;
	g_cond_broadcast(&ov->idle);
	if (ok) {
		n->uploaded = MAX(n->uploaded, version);
		n->sealed = TRUE;
		n->base = 0;
		g_free(n->s3_etag);
		n->s3_etag = g_steal_pointer(&etag);
		g_free(n->etag);
		n->etag = NULL;
	} else {
		g_prefix_error(&err, "upload of '%s' at close: ", n->key);
		/* Interrupted: this close says EINTR, a later one EIO (no
		 * retry on EINTR for ever). */
		if (!n->broken && bfs_error_errno(err) == EINTR)
			n->broken =
				g_error_new(BFS_ERROR, EIO, "%s", err->message);
		else if (!n->broken)
			n->broken = g_error_copy(err);
		f->failed = TRUE;
		g_propagate_error(error, g_steal_pointer(&err));
	}
	g_mutex_unlock(&ov->lock);
	return ok;
}
