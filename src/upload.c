/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * upload.c - multipart uploads, parts in flight bounded per uploader.
 * Lock: up->lock guards the budget and every upload's parts; it is never
 * held across a call into s3.
 *
 * A part's SHA-256 (signed as its payload hash) is computed on a thread
 * of up->hashers, not the writer's: the writer goes on filling the next
 * part meanwhile, and the parts in flight are hashed in parallel.  The
 * part is the writer's buffer itself, referenced, never copied.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "http.h"
#include "log.h"
#include "pages.h"
#include "sigv4.h"
#include "upload.h"

struct uploader {
	struct s3 *s3;
	guint64 part_size;
	guint parts_max;
	GMutex lock;
	GCond cond;	       /* a part ended */
	guint inflight;	       /* protected by lock */
	struct pool *hashers;  /* hash_and_send(), parts_max threads */
	struct pool *aborters; /* abort_later(): uploads whose closer left */
	guint aborts;	       /* ... pushed and not done; under lock */
	guint uploads;	       /* started and not freed; under lock */
	GPtrArray *spare_bufs; /* part buffers given back; under lock */
};

struct upload {
	struct uploader *up;
	char *key;
	char *id;
	GPtrArray *etags; /* part i+1's ETag, NULL while in flight */
	guint inflight;	  /* protected by up->lock */
	GError *error;	  /* the first failed part; protected by up->lock */
	GError *why;	  /* abort_later(): why it is aborted */
	/* Set once it is to be aborted: its parts not yet sent are dropped
	 * (by hash_and_send(), or by the engine when their turn comes) and
	 * those on their way cut short, so that they neither reach the
	 * server nor hold slots while the abort waits for them. */
	struct http_cancel *cancel;
};

static void abort_later(gpointer data, gpointer pool_data);

/* One part in flight: what its hasher and its done callback need. */
struct part {
	struct upload *u;
	guint number;
	GBytes *body;	   /* the writer's part, until the request lets go */
	gboolean answered; /* part_done() ran; protected by up->lock */
};

static void part_done(const char *etag, const GError *error, void *user);

/*
 * The request let go of the part's bytes: only now is its slot free, so
 * no more than write_parts parts wait or travel at once (a writer cuts
 * its next part only once it has booked a slot: upload_part_cut()).  Any
 * thread.
 */
static void part_released(gpointer data)
{
	struct part *p = data;
	struct upload *u = p->u;
	struct uploader *up = u->up;

	g_clear_pointer(&p->body, g_bytes_unref);
	g_mutex_lock(&up->lock);
	if (!p->answered && !u->error)
		u->error = g_error_new(BFS_ERROR, EIO,
				       "part %u ended without an answer",
				       p->number);
	u->inflight--;
	up->inflight--;
	g_cond_broadcast(&up->cond);
	g_mutex_unlock(&up->lock);
	g_free(p);
}

/* On a hasher thread: the part's SHA-256, then its UploadPart. */
static void hash_and_send(gpointer data, gpointer pool_data)
{
	struct part *p = data;
	struct upload *u = p->u;
	g_autoptr(GBytes) part = NULL;
	g_autofree char *sha = NULL;
	const void *body;
	gsize len;

	(void)pool_data;
	if (http_cancel_is_set(u->cancel)) {
		g_mutex_lock(&u->up->lock);
		if (!u->error)
			u->error = g_error_new(BFS_ERROR, ECANCELED,
					       "part %u not sent: the upload "
					       "is aborted",
					       p->number);
		p->answered = TRUE;
		g_mutex_unlock(&u->up->lock);
		part_released(p);
		return;
	}
	body = g_bytes_get_data(p->body, &len);
	sha = sigv4_payload_sha256(body, len);
	/* The same bytes, not copied; freeing it frees the slot. */
	part = g_bytes_new_with_free_func(body, len, part_released, p);
	s3_mpu_part_async(u->up->s3, u->key, u->id, p->number, part, sha,
			  u->cancel, part_done, p);
}

static struct pool *pool_new(GFunc fn, gpointer data, guint threads,
			     const char *name);
static void pool_push(struct pool *pool, gpointer job);
static void pool_free(struct pool *pool);

struct uploader *uploader_new(struct s3 *s3, guint64 part_size, guint parts_max)
{
	struct uploader *up = g_new0(struct uploader, 1);

	up->s3 = s3;
	up->part_size = part_size ? part_size : UPLOAD_DEFAULT_PART;
	up->parts_max = parts_max ? parts_max : UPLOAD_DEFAULT_INFLIGHT;
	g_mutex_init(&up->lock);
	g_cond_init(&up->cond);
	up->spare_bufs = g_ptr_array_new();
	up->hashers = pool_new(hash_and_send, up, up->parts_max, "bfs-hash");
	up->aborters = pool_new(abort_later, up, 2, "bfs-abort");
	return up;
}

/*
 * A few threads started with the mount and kept, running @fn on each job
 * pushed, in order.  Not GLib's GThreadPool: a non-exclusive one queues a
 * job even when its thread cannot start (and nothing would ever run it),
 * and its hand-off is invisible to ThreadSanitizer.
 */
struct pool {
	GFunc fn;
	gpointer data;
	GMutex lock;
	GCond cond;	  /* a job came, or closing */
	GQueue jobs;	  /* protected by lock */
	gboolean closing; /* protected by lock */
	GPtrArray *threads;
};

static gpointer pool_main(gpointer data)
{
	struct pool *pool = data;
	gpointer job;

	g_mutex_lock(&pool->lock);
	for (;;) {
		while (!(job = g_queue_pop_head(&pool->jobs)) && !pool->closing)
			g_cond_wait(&pool->cond, &pool->lock);
		if (!job)
			break;
		g_mutex_unlock(&pool->lock);
		pool->fn(job, pool->data);
		g_mutex_lock(&pool->lock);
	}
	g_mutex_unlock(&pool->lock);
	return NULL;
}

static struct pool *pool_new(GFunc fn, gpointer data, guint threads,
			     const char *name)
{
	struct pool *pool = g_new0(struct pool, 1);
	guint i;

	pool->fn = fn;
	pool->data = data;
	g_mutex_init(&pool->lock);
	g_cond_init(&pool->cond);
	g_queue_init(&pool->jobs);
	pool->threads = g_ptr_array_new();
	for (i = 0; i < threads; i++) {
		g_autoptr(GError) err = NULL;
		GThread *t = g_thread_try_new(name, pool_main, pool, &err);

		if (!t) {
			/* With none, each job runs on the thread that
			 * pushes it (pool_push()). */
			log_error(LOG_LEVEL_WARNING, err,
				  "multipart uploads: %u of %u %s threads "
				  "started",
				  i, threads, name);
			break;
		}
		g_ptr_array_add(pool->threads, t);
	}
	return pool;
}

static void pool_push(struct pool *pool, gpointer job)
{
	gboolean queued;

	g_mutex_lock(&pool->lock);
	queued = pool->threads->len > 0;
	if (queued) {
		g_queue_push_tail(&pool->jobs, job);
		g_cond_signal(&pool->cond);
	}
	g_mutex_unlock(&pool->lock);
	if (!queued)
		pool->fn(job, pool->data);
}

/* Runs the jobs still queued, then joins the threads. */
static void pool_free(struct pool *pool)
{
	guint i;

	g_mutex_lock(&pool->lock);
	pool->closing = TRUE;
	g_cond_broadcast(&pool->cond);
	g_mutex_unlock(&pool->lock);
	for (i = 0; i < pool->threads->len; i++)
		g_thread_join(g_ptr_array_index(pool->threads, i));
	g_ptr_array_unref(pool->threads);
	g_cond_clear(&pool->cond);
	g_mutex_clear(&pool->lock);
	g_free(pool);
}

static void unmap_spares(struct uploader *up, GPtrArray *spares)
{
	for (guint i = 0; i < spares->len; i++)
		pages_unmap(g_ptr_array_index(spares, i), up->part_size);
	g_ptr_array_unref(spares);
}

/*
 * A part's pages are mapped, not malloc'ed, so they go back to the
 * system once uploaded (freed on a done thread, a heap chunk would stay
 * in the writer's malloc arena), and populated at once: one call, not a
 * page fault per 4 KiB.  While an upload is under way they are kept for
 * the next part instead of unmapped: the first write of fresh pages
 * from user space costs far more than a copy into pages written before
 * (on the 2-core VM the benchmarks run on, 2.2 s per GB against 0.08 s,
 * even populated: docs/PERFORMANCE.md), and that was most of the
 * writer's CPU.  A buffer is mapped only when
 * none is spare, and a part holds its buffer until its slot is freed,
 * so the mapped ones never exceed parts_max; the last upload's end
 * unmaps them.
 */
static void *part_buf_take(struct uploader *up, GError **error)
{
	void *p = NULL;

	g_mutex_lock(&up->lock);
	if (up->spare_bufs->len)
		p = g_ptr_array_steal_index_fast(up->spare_bufs,
						 up->spare_bufs->len - 1);
	g_mutex_unlock(&up->lock);
	if (p)
		return p;
	p = pages_map(up->part_size, PAGES_POPULATE, error);
	if (!p)
		g_prefix_error(error, "a part of the upload: ");
	return p;
}

static void part_buf_give(struct uploader *up, void *buf)
{
	g_mutex_lock(&up->lock);
	if (up->uploads && up->spare_bufs->len < up->parts_max) {
		g_ptr_array_add(up->spare_bufs, buf);
		buf = NULL;
	}
	g_mutex_unlock(&up->lock);
	pages_unmap(buf, up->part_size);
}

/* A part's buffer, given back when its GBytes is freed. */
struct part_buf {
	struct uploader *up;
	void *p;
};

static void part_buf_free(void *data)
{
	struct part_buf *pb = data;

	part_buf_give(pb->up, pb->p);
	g_free(pb);
}

GBytes *uploader_part_copy(struct uploader *up, const void *src, GError **error)
{
	struct part_buf *pb = g_new0(struct part_buf, 1);

	pb->up = up;
	pb->p = part_buf_take(up, error);
	if (!pb->p) {
		g_free(pb);
		return NULL;
	}
	memcpy(pb->p, src, up->part_size);
	return g_bytes_new_with_free_func(pb->p, up->part_size, part_buf_free,
					  pb);
}

void uploader_free(struct uploader *up)
{
	if (!up)
		return;
	/* The aborters first: their uploads' parts may still be hashed. */
	pool_free(up->aborters);
	pool_free(up->hashers);
	unmap_spares(up, g_steal_pointer(&up->spare_bufs));
	g_cond_clear(&up->cond);
	g_mutex_clear(&up->lock);
	g_free(up);
}

guint64 uploader_part_size(const struct uploader *up)
{
	return up->part_size;
}

struct upload *upload_start(struct uploader *up, const char *key,
			    GError **error)
{
	char *id = s3_mpu_create(up->s3, key, error);
	struct upload *u;

	if (!id)
		return NULL;
	u = g_new0(struct upload, 1);
	u->up = up;
	g_mutex_lock(&up->lock);
	up->uploads++;
	g_mutex_unlock(&up->lock);
	u->key = g_strdup(key);
	u->id = id;
	u->etags = g_ptr_array_new_with_free_func(g_free);
	u->cancel = http_cancel_new();
	return u;
}

static void part_done(const char *etag, const GError *error, void *user)
{
	struct part *p = user;
	struct upload *u = p->u;
	struct uploader *up = u->up;

	g_mutex_lock(&up->lock);
	if (error && !u->error)
		u->error = g_error_copy(error);
	else if (!error)
		g_ptr_array_index(u->etags, p->number - 1) = g_strdup(etag);
	p->answered = TRUE;
	/* The slot is freed by part_released(), which follows. */
	g_mutex_unlock(&up->lock);
}

void uploader_wake(struct uploader *up)
{
	g_mutex_lock(&up->lock);
	g_cond_broadcast(&up->cond);
	g_mutex_unlock(&up->lock);
}

static gboolean stopped(const gint *stop)
{
	return stop && g_atomic_int_get(stop);
}

/* Waits for a slot and books it for part number *@number of @u.  Under
 * nothing; takes up->lock. */
static gboolean book_slot(struct upload *u, const gint *stop, guint *number,
			  GError **error)
{
	struct uploader *up = u->up;

	g_mutex_lock(&up->lock);
	while (up->inflight >= up->parts_max && !u->error && !stopped(stop))
		g_cond_wait(&up->cond, &up->lock);
	if (!u->error && up->inflight >= up->parts_max) {
		g_mutex_unlock(&up->lock);
		g_set_error(error, BFS_ERROR, EINTR,
			    "interrupted while waiting for a part slot "
			    "(write_parts=%u in flight)",
			    up->parts_max);
		return FALSE;
	}
	if (u->error) {
		g_propagate_prefixed_error(error, g_error_copy(u->error),
					   "an earlier part failed: ");
		g_mutex_unlock(&up->lock);
		return FALSE;
	}
	if (u->etags->len >= UPLOAD_MAX_PARTS) {
		g_mutex_unlock(&up->lock);
		g_set_error(error, BFS_ERROR, EFBIG,
			    "more than %u parts of %" G_GUINT64_FORMAT
			    " bytes (part_size=)",
			    UPLOAD_MAX_PARTS, up->part_size);
		return FALSE;
	}
	g_ptr_array_add(u->etags, NULL);
	u->inflight++;
	up->inflight++;
	*number = u->etags->len;
	g_mutex_unlock(&up->lock);
	return TRUE;
}

gboolean upload_part_cut(struct upload *u, upload_cut_fn cut, void *data,
			 const gint *stop, GError **error)
{
	struct uploader *up = u->up;
	struct part *p;
	GBytes *part;
	guint number;

	if (!book_slot(u, stop, &number, error))
		return FALSE;
	part = cut(data, error);
	if (!part) {
		/* The last part booked is this one: the writer is alone. */
		g_mutex_lock(&up->lock);
		g_ptr_array_set_size(u->etags, number - 1);
		u->inflight--;
		up->inflight--;
		g_cond_broadcast(&up->cond);
		g_mutex_unlock(&up->lock);
		return FALSE;
	}
	p = g_new0(struct part, 1);
	p->u = u;
	p->number = number;
	p->body = part;
	/* @p is the hasher's now, @u may be gone once the part ended. */
	pool_push(up->hashers, p);
	return TRUE;
}

static GBytes *cut_given(void *data, GError **error)
{
	(void)error;
	return g_bytes_ref(data);
}

gboolean upload_part(struct upload *u, GBytes *part, const gint *stop,
		     GError **error)
{
	return upload_part_cut(u, cut_given, part, stop, error);
}

/* Waits until no part of @u is in flight, or *@stop (may be NULL) is set
 * (EINTR); the first part error, copied. */
static GError *drain(struct upload *u, const gint *stop)
{
	struct uploader *up = u->up;
	GError *e;

	g_mutex_lock(&up->lock);
	while (u->inflight && !stopped(stop))
		g_cond_wait(&up->cond, &up->lock);
	if (u->inflight)
		e = g_error_new(BFS_ERROR, EINTR,
				"interrupted while %u parts were in flight",
				u->inflight);
	else
		e = u->error ? g_error_copy(u->error) : NULL;
	g_mutex_unlock(&up->lock);
	return e;
}

/* Its parts have all let go of their buffers (drain()). */
static void upload_free(struct upload *u)
{
	struct uploader *up = u->up;
	GPtrArray *spares = NULL;

	g_mutex_lock(&up->lock);
	if (!--up->uploads && up->spare_bufs->len) {
		spares = g_steal_pointer(&up->spare_bufs);
		up->spare_bufs = g_ptr_array_new();
	}
	g_mutex_unlock(&up->lock);
	if (spares)
		unmap_spares(up, spares);
	g_clear_error(&u->why);
	g_free(u->key);
	g_free(u->id);
	g_ptr_array_unref(u->etags);
	g_clear_error(&u->error);
	http_cancel_unref(u->cancel);
	g_free(u);
}

void upload_abort(struct upload *u, const GError *why)
{
	g_autoptr(GError) err = NULL;
	g_autofree char *k = log_escape(u->key, -1);
	GError *e;

	/* Nothing more of it goes out; what is on its way is cut short. */
	http_cancel_set(u->cancel);
	e = drain(u, NULL);
	g_clear_error(&e);
	if (!s3_mpu_abort(u->up->s3, u->key, u->id, &err) &&
	    bfs_error_errno(err) != ENOENT)
		log_error(LOG_LEVEL_ERR, err,
			  "multipart upload of '%s' (upload id %s) not aborted "
			  "(bucketfs-index uploads lists it)",
			  k, u->id);
	if (why)
		log_error(LOG_LEVEL_WARNING, why,
			  "multipart upload of '%s' aborted after %u parts", k,
			  u->etags->len);
	else
		log_msg(LOG_LEVEL_WARNING,
			"multipart upload of '%s' aborted after %u parts", k,
			u->etags->len);
	upload_free(u);
}

/* On an aborter thread: the upload's closer did not wait for it. */
static void abort_later(gpointer data, gpointer pool_data)
{
	struct upload *u = data;
	g_autoptr(GError) why = g_steal_pointer(&u->why);
	struct uploader *up = u->up;

	(void)pool_data;
	upload_abort(u, why);
	g_mutex_lock(&up->lock);
	up->aborts--;
	g_cond_broadcast(&up->cond);
	g_mutex_unlock(&up->lock);
}

gboolean uploader_wait_aborts(struct uploader *up, gint64 timeout_us)
{
	gint64 end = g_get_monotonic_time() + timeout_us;
	gboolean done = TRUE;

	if (!up)
		return TRUE;
	g_mutex_lock(&up->lock);
	while (up->aborts && done)
		done = g_cond_wait_until(&up->cond, &up->lock, end);
	done = !up->aborts;
	g_mutex_unlock(&up->lock);
	return done;
}

void upload_abort_async(struct upload *u, const GError *why)
{
	u->why = g_error_copy(why);
	/* At once, not when an aborter gets to it. */
	http_cancel_set(u->cancel);
	g_mutex_lock(&u->up->lock);
	u->up->aborts++;
	g_mutex_unlock(&u->up->lock);
	pool_push(u->up->aborters, u);
}

/* @etag without its quotes, if it has them (g_free). */
static char *etag_bare(const char *etag)
{
	gsize len = strlen(etag);

	if (len >= 2 && etag[0] == '"' && etag[len - 1] == '"')
		return g_strndup(etag + 1, len - 2);
	return g_strdup(etag);
}

/*
 * The ETag S3 gives the object @u completes: the MD5 of its parts' MD5s
 * (binary), in hex, then "-" and the number of parts.  NULL when a part's
 * ETag is not an MD5 (32 hex digits), as with some servers.
 */
static char *expected_etag(struct upload *u)
{
	g_autoptr(GChecksum) sum = g_checksum_new(G_CHECKSUM_MD5);
	guint i, j;

	for (i = 0; i < u->etags->len; i++) {
		g_autofree char *e = etag_bare(u->etags->pdata[i]);
		guint8 bin[16];

		if (strlen(e) != 32)
			return NULL;
		for (j = 0; j < 16; j++) {
			int hi = g_ascii_xdigit_value(e[2 * j]);
			int lo = g_ascii_xdigit_value(e[2 * j + 1]);

			if (hi < 0 || lo < 0)
				return NULL;
			bin[j] = (guint8)(hi << 4 | lo);
		}
		g_checksum_update(sum, bin, sizeof(bin));
	}
	return g_strdup_printf("%s-%u", g_checksum_get_string(sum),
			       u->etags->len);
}

/*
 * A Complete whose answer was lost is answered NoSuchUpload when retried:
 * the object then already has the size we sent and this upload's
 * multipart ETag.  FALSE with the reason appended to *@error otherwise.
 */
static gboolean completed_anyway(struct upload *u, guint64 size, char **etag,
				 GError **error)
{
	struct s3_object_meta meta = { 0 };
	g_autofree char *want = expected_etag(u);
	g_autofree char *got = NULL;
	g_autoptr(GError) err = NULL;
	gboolean ok = FALSE;

	if (!want) {
		g_prefix_error(error,
			       "the upload is gone, and its parts' ETags "
			       "are not MD5s: an object there cannot "
			       "be told ours: ");
		return FALSE;
	}
	if (!s3_head(u->up->s3, u->key, -1, &meta, &err)) {
		g_prefix_error(error,
			       "the upload is gone, and no object of it "
			       "(%s): ",
			       err->message);
		return FALSE;
	}
	got = meta.etag ? etag_bare(meta.etag) : g_strdup("");
	ok = meta.size == size && g_ascii_strcasecmp(got, want) == 0;
	if (ok && etag)
		*etag = g_strdup(meta.etag);
	else if (!ok)
		g_prefix_error(error,
			       "the upload is gone, and the object there is "
			       "not this upload's "
			       "(%" G_GUINT64_FORMAT " bytes, ETag %s; this "
			       "upload: %" G_GUINT64_FORMAT
			       " bytes, ETag %s): ",
			       meta.size, got, size, want);
	s3_object_meta_clear(&meta);
	return ok;
}

/* @u's wait was interrupted (@err, EINTR): aborted behind the caller's
 * back, so the caller returns now; the log gives the cause. */
static gboolean interrupted(struct upload *u, GError *err, GError **error)
{
	g_autoptr(GError) why = g_error_new(
		BFS_ERROR, EINTR,
		"its completion was interrupted by a signal: %s", err->message);

	upload_abort_async(u, why);
	g_propagate_error(error, err);
	return FALSE;
}

gboolean upload_finish(struct upload *u, GBytes *last, guint64 size,
		       const gint *stop, char **etag, GError **error)
{
	g_autoptr(GError) err = NULL;
	gboolean ok;

	if (last && g_bytes_get_size(last) > 0 &&
	    !upload_part(u, last, stop, &err)) {
		if (bfs_error_errno(err) == EINTR)
			return interrupted(u, g_steal_pointer(&err), error);
		upload_abort(u, NULL);
		g_propagate_error(error, g_steal_pointer(&err));
		return FALSE;
	}
	err = drain(u, stop);
	if (err && bfs_error_errno(err) == EINTR)
		return interrupted(u, g_steal_pointer(&err), error);
	if (err) {
		g_prefix_error(&err, "a part failed: ");
		upload_abort(u, NULL);
		g_propagate_error(error, g_steal_pointer(&err));
		return FALSE;
	}
	ok = s3_mpu_complete(u->up->s3, u->key, u->id,
			     (const char *const *)u->etags->pdata,
			     u->etags->len, etag, &err);
	if (!ok && bfs_error_errno(err) == ENOENT &&
	    completed_anyway(u, size, etag, &err))
		ok = TRUE;
	if (!ok) {
		upload_abort(u, NULL);
		g_propagate_error(error, g_steal_pointer(&err));
		return FALSE;
	}
	upload_free(u);
	return TRUE;
}
