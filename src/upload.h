/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * upload.h - a new object streamed to S3 as a multipart upload, part by
 * part as it is written, with a budget of parts in flight shared by every
 * upload of one uploader (a mount).
 *
 * Memory: the parts in flight, at most parts_max of part_size bytes for
 * the whole uploader; a writer whose part finds the budget full waits
 * for a slot (upload_part() blocks), it is never refused.  With
 * upload_part_cut() the part is made only once it has its slot.  The parts go
 * out through the S3 client's engine, so they spread over the endpoints
 * and are retried like every request (s3.h, http.h).
 *
 * Nothing is visible on S3 before upload_finish() completes the upload.
 * A failed or abandoned upload is aborted (AbortMultipartUpload) and the
 * cause logged; one the process did not live to abort is left on the
 * server, listed and aborted by `bucketfs-index uploads` (bucketfs-index(1)).
 *
 * An abort (a failure, an interrupted close, an unlink, the daemon's
 * stop) first cancels the upload's parts (http_cancel_set()): those not
 * yet hashed or still waiting for a connection are never sent, those on
 * their way are cut short, one waiting out a retry's backoff ends within
 * the engine's poll tick (http.h), and only then, once none holds its
 * slot, is AbortMultipartUpload sent.  An interrupted write() aborts at
 * once too, not at close: the file is broken already.
 *
 * Threads: one writer per upload at a time (the caller serializes); any
 * thread except the HTTP engine's own.  The uploader outlives its uploads.
 * Its own threads, started with it and kept: parts_max hashers, each
 * computing a part's SHA-256 and submitting it; 2 aborters, for the
 * uploads whose upload_finish() was interrupted.  (With none started,
 * their jobs run on the calling thread.)
 */
#ifndef BUCKETFS_UPLOAD_H
#define BUCKETFS_UPLOAD_H

#include <glib.h>

#include "s3.h"

struct uploader;
struct upload;

/* Part size bounds (part_size=) and the defaults. */
#define UPLOAD_PART_MIN		((guint64)8 << 20)
#define UPLOAD_PART_MAX		((guint64)64 << 20)
#define UPLOAD_DEFAULT_PART	((guint64)16 << 20)
#define UPLOAD_DEFAULT_INFLIGHT 4
/* S3's limit on the number of parts of one upload. */
#define UPLOAD_MAX_PARTS 10000

/* An uploader over @s3 (borrowed); 0s take the defaults. */
struct uploader *uploader_new(struct s3 *s3, guint64 part_size,
			      guint parts_max);
/* Frees, once the aborts upload_finish() left behind are done; every
 * other upload must be finished or aborted. */
void uploader_free(struct uploader *up);

/* Waits up to @timeout_us for the aborts upload_finish() left behind
 * (an interrupted close); TRUE if none is left.  Before s3_shutdown(),
 * or they fail cancelled and leave their uploads on S3. */
gboolean uploader_wait_aborts(struct uploader *up, gint64 timeout_us);

guint64 uploader_part_size(const struct uploader *up);

/*
 * The next part: part_size bytes of @src copied into a buffer of the
 * parts that went up before it while some upload is under way, else a
 * newly mapped one, which goes back when the GBytes is freed.  Call it
 * only with a slot booked (in upload_part_cut()'s @cut): then no more
 * than parts_max are mapped.  Any thread; NULL with ENOMEM if it cannot
 * be mapped.
 */
GBytes *uploader_part_copy(struct uploader *up, const void *src,
			   GError **error);

/* CreateMultipartUpload of @key (copied).  NULL with the cause chain. */
struct upload *upload_start(struct uploader *up, const char *key,
			    GError **error);

/*
 * Sends @part (referenced; part_size bytes) as the next part, once a slot
 * is free.  Fails with the first error of an earlier part, EFBIG past
 * UPLOAD_MAX_PARTS, or EINTR when *@stop (atomic; may be NULL) is set
 * while it waits for a slot (set it, then uploader_wake()); the upload
 * must then be aborted.
 */
gboolean upload_part(struct upload *u, GBytes *part, const gint *stop,
		     GError **error);

/* Makes the next part (part_size bytes, owned by the caller of
 * upload_part_cut()), or NULL with the cause. */
typedef GBytes *(*upload_cut_fn)(void *data, GError **error);

/*
 * upload_part(), but the part is made only once its slot is booked:
 * @cut(@data) runs on the calling thread, without the uploader's lock,
 * after the wait.  So a writer holds no part of its own while it waits,
 * and the parts in memory are the write_parts in flight at most (plus
 * what each writer buffers).  A failed @cut gives its slot back and
 * fails with its error.
 */
gboolean upload_part_cut(struct upload *u, upload_cut_fn cut, void *data,
			 const gint *stop, GError **error);

/* Wakes the waits of upload_part() and upload_finish(), to see their
 * *stop.  Any thread. */
void uploader_wake(struct uploader *up);

/*
 * Sends @last (may be NULL or empty: nothing more), waits for every part
 * and completes the upload: the object @key appears, @size bytes, its
 * ETag in *@etag (g_free) if @etag is not NULL.  On failure the upload
 * is aborted (logged) and the error returned, for the caller to log.
 * Once *@stop (atomic; may be NULL) is set (then uploader_wake()), the
 * wait for a slot or for the parts in flight ends with EINTR: its parts
 * are cancelled at once (none queued is sent) and the upload aborted on
 * a thread of the uploader once they have ended; the log says why.
 * (CompleteMultipartUpload itself, once sent, is waited for.)  Frees @u.
 */
gboolean upload_finish(struct upload *u, GBytes *last, guint64 size,
		       const gint *stop, char **etag, GError **error);

/*
 * Cancels the parts in flight (those not sent yet never are), waits for
 * them to end and aborts, logging that it did, with @why (NULL: the
 * caller reports the cause).  Frees @u.
 */
void upload_abort(struct upload *u, const GError *why);

/*
 * Cancels the parts in flight at once, like upload_abort(), but returns
 * at once too: an aborter thread waits for them and aborts, logging @why
 * (copied; not NULL).  uploader_wait_aborts() waits for it.  Frees @u.
 */
void upload_abort_async(struct upload *u, const GError *why);

#endif
