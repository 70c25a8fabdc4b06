/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * lister.c - parallel listing into an index.
 *
 * A range is (after, upto]: the keys k with after < k <= upto in byte
 * order; after NULL means from the start of the prefix, upto NULL to its
 * end.  Boundaries are probe strings, not keys, so every key falls in
 * exactly one range, and the ranges, fed to the writer in order, give the
 * keys in listing order.
 *
 * Lock order: job->lock only; it is never held across a request.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "lister.h"
#include "log.h"

#define MAX_WORKERS	 32
#define PROBES_PER_SPLIT 24
#define TICK_US		 (500 * 1000)

struct range {
	char *after;   /* exclusive start, NULL = the prefix's start */
	char *upto;    /* inclusive end, NULL = the prefix's end */
	FILE *spool;   /* records of the keys found (unlinked file) */
	gboolean done; /* protected by job->lock */
	GError *error; /* protected by job->lock */
};

struct job {
	struct s3 *s3;
	const char *prefix;
	char *spool_dir;
	guint page_size;
	GPtrArray *ranges; /* of struct range *, fixed once workers run */

	GMutex lock;
	GCond cond;
	guint next;	 /* protected by lock: next range to list */
	gboolean failed; /* protected by lock */
	gsize keys;	 /* atomic */
	gint pages;	 /* atomic */
};

static void range_free(void *p)
{
	struct range *r = p;

	if (r->spool)
		fclose(r->spool);
	g_clear_error(&r->error);
	g_free(r->after);
	g_free(r->upto);
	g_free(r);
}

static struct range *range_new(const char *after, const char *upto)
{
	struct range *r = g_new0(struct range, 1);

	r->after = g_strdup(after);
	r->upto = g_strdup(upto);
	return r;
}

/* An unlinked temporary file beside the index (not /tmp: often RAM). */
static FILE *spool_open(const char *dir, GError **error)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	FILE *f;

	if (fd < 0) {
		int e = errno;

		g_set_error(error, BFS_ERROR, e, "temporary file in %s: %s",
			    dir, g_strerror(e));
		return NULL;
	}
	f = fdopen(fd, "w+");
	if (!f) {
		int e = errno;

		close(fd);
		g_set_error(error, BFS_ERROR, e, "fdopen: %s", g_strerror(e));
	}
	return f;
}

/* -- spool records: u32 keylen, key, u64 size, i64 mtime, u32 etaglen, etag */

static gboolean spool_put(FILE *f, const struct s3_object *o)
{
	guint32 kl = strlen(o->key), el = o->etag ? strlen(o->etag) : 0;
	guint64 size = o->size;
	gint64 mtime = o->mtime;

	return fwrite(&kl, 4, 1, f) == 1 && fwrite(o->key, 1, kl, f) == kl &&
	       fwrite(&size, 8, 1, f) == 1 && fwrite(&mtime, 8, 1, f) == 1 &&
	       fwrite(&el, 4, 1, f) == 1 &&
	       (el == 0 || fwrite(o->etag, 1, el, f) == el);
}

/* Reads one record; FALSE at the end.  Strings are reused buffers. */
static gboolean spool_get(FILE *f, GString *key, guint64 *size, gint64 *mtime,
			  GString *etag)
{
	guint32 kl, el;

	if (fread(&kl, 4, 1, f) != 1)
		return FALSE;
	g_string_set_size(key, kl);
	g_string_set_size(etag, 0);
	if (fread(key->str, 1, kl, f) != kl || fread(size, 8, 1, f) != 1 ||
	    fread(mtime, 8, 1, f) != 1 || fread(&el, 4, 1, f) != 1)
		return FALSE;
	g_string_set_size(etag, el);
	return el == 0 || fread(etag->str, 1, el, f) == el;
}

/* -- splitting ---------------------------------------------------------- */

/*
 * A string strictly between @lo and @hi in byte order (@hi NULL: the end of
 * the key space), or NULL when there is no room in the 8 bytes after their
 * common prefix: that prefix, then the mean of those 8 bytes of each read
 * as big-endian numbers (lo padded with 0x00, an open hi with 0xff).
 */
static char *midpoint(const char *lo, const char *hi)
{
	gsize n = 0, llen = strlen(lo), hlen = hi ? strlen(hi) : 0, i;
	guint64 a = 0, b = 0, m;
	GString *s;

	while (hi && n < llen && n < hlen && lo[n] == hi[n])
		n++;
	for (i = n; i < n + 8; i++) {
		a = (a << 8) | (i < llen ? (guchar)lo[i] : 0);
		b = (b << 8) | (!hi ? 0xff : i < hlen ? (guchar)hi[i] : 0);
	}
	if (b <= a + 1)
		return NULL;
	m = a + (b - a) / 2;
	s = g_string_new_len(lo, n);
	/* Trailing zero bytes are dropped; a zero byte inside becomes 1
	 * (keys hold no NUL), which only moves the midpoint up a little. */
	for (i = 0; i < 8 && (m << (8 * i)) != 0; i++) {
		guchar c = (m >> (56 - 8 * i)) & 0xff;

		g_string_append_c(s, c ? (char)c : 1);
	}
	if (strcmp(s->str, lo) <= 0 || (hi && strcmp(s->str, hi) >= 0)) {
		g_string_free(s, TRUE);
		return NULL;
	}
	return g_string_free(s, FALSE);
}

/* The first key after @after under the prefix, or NULL (none, or error). */
static char *probe(struct job *job, const char *after, GError **error)
{
	struct s3_list_args a = {
		.prefix = job->prefix,
		.start_after = after,
		.max_keys = 1,
		.endpoint = -1,
	};
	g_autoptr(s3_list_page) page = NULL;
	struct s3_object *o;

	page = s3_list(job->s3, &a, NULL, error);
	if (!page || !page->objects->len)
		return NULL;
	o = g_ptr_array_index(page->objects, 0);
	return g_strdup(o->key);
}

/*
 * Cuts (r->after, r->upto] in two non-empty halves at a probe string.
 * Returns the cut, or NULL when the range is too small or too dense to cut
 * (or a probe failed, @error set).
 */
static char *find_cut(struct job *job, const struct range *r, GError **error)
{
	g_autofree char *first = probe(job, r->after, error);
	g_autofree char *hi = g_strdup(r->upto);
	guint i;

	if (!first || (r->upto && strcmp(first, r->upto) > 0))
		return NULL;
	for (i = 0; i < PROBES_PER_SPLIT; i++) {
		g_autofree char *mid = midpoint(first, hi);
		g_autofree char *k = NULL;

		if (!mid)
			return NULL;
		k = probe(job, mid, error);
		if (!k && error && *error)
			return NULL;
		if (k && (!r->upto || strcmp(k, r->upto) <= 0))
			return g_steal_pointer(&mid);
		/* Nothing between mid and the end: look lower. */
		g_free(hi);
		hi = g_steal_pointer(&mid);
	}
	return NULL;
}

/*
 * Splits the ranges after the first (plan() has listed that one already)
 * until there are @want or none can be cut.
 */
static gboolean split_ranges(struct job *job, guint want, GError **error)
{
	guint i = job->ranges->len - 1;

	g_assert(i >= 1);

	while (job->ranges->len < want && i < job->ranges->len) {
		struct range *r = g_ptr_array_index(job->ranges, i);
		g_autofree char *cut = find_cut(job, r, error);

		if (!cut) {
			if (error && *error)
				return FALSE;
			i++; /* this one stays whole; try the next */
			continue;
		}
		g_ptr_array_insert(job->ranges, i + 1, range_new(cut, r->upto));
		g_free(r->upto);
		r->upto = g_steal_pointer(&cut);
		/* Halve the two halves in turn: breadth first. */
		if (i + 2 >= job->ranges->len)
			i = 1;
		else
			i += 2;
	}
	return TRUE;
}

/* -- listing a range ---------------------------------------------------- */

static gboolean list_range(struct job *job, struct range *r, GError **error)
{
	struct s3_list_args a = {
		.prefix = job->prefix,
		.start_after = r->after,
		.max_keys = job->page_size,
		.endpoint = -1,
	};
	g_autofree char *token = NULL;

	r->spool = spool_open(job->spool_dir, error);
	if (!r->spool)
		return FALSE;
	for (;;) {
		g_autoptr(s3_list_page) page = NULL;
		guint i;

		a.continuation_token = token;
		page = s3_list(job->s3, &a, NULL, error);
		if (!page)
			return FALSE;
		g_atomic_int_add(&job->pages, 1);
		for (i = 0; i < page->objects->len; i++) {
			struct s3_object *o =
				g_ptr_array_index(page->objects, i);

			if (r->upto && strcmp(o->key, r->upto) > 0)
				return TRUE;
			if (!spool_put(r->spool, o)) {
				g_set_error(error, BFS_ERROR, errno,
					    "writing the listing spool: %s",
					    g_strerror(errno));
				return FALSE;
			}
		}
		g_atomic_pointer_add(&job->keys, page->objects->len);
		if (!page->is_truncated)
			return TRUE;
		if (!page->next_continuation_token ||
		    g_strcmp0(token, page->next_continuation_token) == 0) {
			g_set_error(error, BFS_ERROR, EPROTO,
				    "truncated page with %s continuation token",
				    token ? "a repeated" : "no");
			return FALSE;
		}
		g_free(token);
		token = g_strdup(page->next_continuation_token);
	}
}

static gpointer worker(gpointer data)
{
	struct job *job = data;

	for (;;) {
		struct range *r;
		GError *error = NULL;
		gboolean ok;

		g_mutex_lock(&job->lock);
		if (job->failed || job->next >= job->ranges->len) {
			g_mutex_unlock(&job->lock);
			return NULL;
		}
		r = g_ptr_array_index(job->ranges, job->next++);
		g_mutex_unlock(&job->lock);

		ok = list_range(job, r, &error);
		g_mutex_lock(&job->lock);
		r->done = TRUE;
		r->error = error;
		if (!ok)
			job->failed = TRUE;
		g_cond_broadcast(&job->cond);
		g_mutex_unlock(&job->lock);
	}
}

/* -- feeding the writer ------------------------------------------------- */

static void report(struct job *job, const struct lister_options *o, gint64 t0,
		   gboolean done)
{
	struct lister_progress p = {
		.keys = (guint64)g_atomic_pointer_get(&job->keys),
		.pages = (guint64)g_atomic_int_get(&job->pages),
		.ranges = job->ranges->len,
		.elapsed = (g_get_monotonic_time() - t0) / 1e6,
		.done = done,
	};

	if (o && o->progress)
		o->progress(&p, o->user);
}

/* Waits for range @i, reporting progress meanwhile. */
static struct range *wait_range(struct job *job, guint i,
				const struct lister_options *o, gint64 t0)
{
	struct range *r = g_ptr_array_index(job->ranges, i);

	g_mutex_lock(&job->lock);
	while (!r->done) {
		gint64 until = g_get_monotonic_time() + TICK_US;

		if (!g_cond_wait_until(&job->cond, &job->lock, until)) {
			g_mutex_unlock(&job->lock);
			report(job, o, t0, FALSE);
			g_mutex_lock(&job->lock);
		}
	}
	g_mutex_unlock(&job->lock);
	return r;
}

static gboolean feed_range(struct index_writer *w, struct range *r,
			   GError **error)
{
	g_autoptr(GString) key = g_string_new(NULL);
	g_autoptr(GString) etag = g_string_new(NULL);
	guint64 size;
	gint64 mtime;

	if (fflush(r->spool) != 0 || fseek(r->spool, 0, SEEK_SET) != 0) {
		g_set_error(error, BFS_ERROR, errno, "listing spool: %s",
			    g_strerror(errno));
		return FALSE;
	}
	while (spool_get(r->spool, key, &size, &mtime, etag))
		if (!index_writer_add(w, key->str, size, mtime,
				      etag->len ? etag->str : NULL, error))
			return FALSE;
	if (ferror(r->spool)) {
		g_set_error(error, BFS_ERROR, EIO, "reading the listing spool");
		return FALSE;
	}
	g_clear_pointer(&r->spool, fclose);
	return TRUE;
}

static void range_prefix_error(struct job *job, guint i, GError **error)
{
	struct range *r = g_ptr_array_index(job->ranges, i);
	g_autofree char *p = log_escape(job->prefix, -1);
	g_autofree char *a = r->after ? log_escape(r->after, -1) : NULL;

	g_prefix_error(error, "listing s3://%s/%s, range %u of %u%s%s%s: ",
		       s3_bucket(job->s3), p, i + 1, job->ranges->len,
		       a ? " (after '" : "", a ? a : "", a ? "')" : "");
}

/*
 * The first range is listed alone: a small bucket is done in one page,
 * with no probing.  A larger one is split after that page's last key.
 */
static gboolean plan(struct job *job, guint workers, GError **error)
{
	struct range *first = range_new(NULL, NULL);
	struct s3_list_args a = {
		.prefix = job->prefix,
		.max_keys = job->page_size,
		.endpoint = -1,
	};
	g_autoptr(s3_list_page) page = NULL;
	struct s3_object *last;
	guint i;

	g_ptr_array_add(job->ranges, first);
	first->spool = spool_open(job->spool_dir, error);
	if (!first->spool)
		return FALSE;
	page = s3_list(job->s3, &a, NULL, error);
	if (!page)
		return FALSE;
	g_atomic_int_add(&job->pages, 1);
	for (i = 0; i < page->objects->len; i++)
		spool_put(first->spool, g_ptr_array_index(page->objects, i));
	g_atomic_pointer_add(&job->keys, page->objects->len);
	first->done = TRUE;
	if (!page->is_truncated || !page->objects->len)
		return TRUE;
	last = g_ptr_array_index(page->objects, page->objects->len - 1);
	first->upto = g_strdup(last->key);
	g_ptr_array_add(job->ranges, range_new(last->key, NULL));
	return split_ranges(job, 1 + workers * 2, error);
}

void lister_progress_print(const struct lister_progress *p, void *user)
{
	const char *what = user;
	double rate = p->elapsed > 0 ? p->keys / p->elapsed : 0;

	fprintf(stderr,
		"\r%s: %" G_GUINT64_FORMAT " objects listed, %.0f/s, "
		"%.1f s, %u range%s ",
		what, p->keys, rate, p->elapsed, p->ranges,
		p->ranges == 1 ? "" : "s");
	if (p->done)
		fputc('\n', stderr);
}

gboolean lister_build(struct s3 *s3, const char *prefix, const char *path,
		      const struct lister_options *opts,
		      struct index_stats *stats, GError **error)
{
	struct job job = { 0 };
	struct index_writer *w = NULL;
	g_autoptr(GPtrArray) threads = g_ptr_array_new();
	gint64 t0 = g_get_monotonic_time();
	guint workers = opts && opts->workers ? opts->workers : 0;
	gboolean ok = FALSE;
	guint i;

	if (!workers) {
		guint n = 0;

		while (s3_endpoints(s3)[n])
			n++;
		workers = 4 * n;
	}
	workers = CLAMP(workers, 1, MAX_WORKERS);
	job.s3 = s3;
	job.prefix = prefix ? prefix : "";
	job.page_size = opts && opts->page_size ? opts->page_size : 1000;
	job.spool_dir = g_path_get_dirname(path);
	job.ranges = g_ptr_array_new_with_free_func(range_free);
	g_mutex_init(&job.lock);
	g_cond_init(&job.cond);

	w = index_writer_new(path, s3_bucket(s3), job.prefix, error);
	if (!w)
		goto out;
	if (!plan(&job, workers, error)) {
		g_autofree char *p = log_escape(job.prefix, -1);

		g_prefix_error(error, "listing s3://%s/%s: ", s3_bucket(s3), p);
		goto out;
	}
	job.next = 1;
	for (i = 0; i < MIN(workers, job.ranges->len - 1); i++)
		g_ptr_array_add(threads,
				g_thread_new("bfs-list", worker, &job));
	for (i = 0; i < job.ranges->len; i++) {
		struct range *r = wait_range(&job, i, opts, t0);

		if (r->error) {
			g_propagate_error(error, g_steal_pointer(&r->error));
			range_prefix_error(&job, i, error);
			break;
		}
		if (!feed_range(w, r, error)) {
			range_prefix_error(&job, i, error);
			break;
		}
	}
	if (i < job.ranges->len) {
		g_mutex_lock(&job.lock);
		job.failed = TRUE;
		g_mutex_unlock(&job.lock);
	}
	for (i = 0; i < threads->len; i++)
		g_thread_join(g_ptr_array_index(threads, i));
	ok = !job.failed && index_writer_commit(w, stats, error);
	report(&job, opts, t0, TRUE);
out:
	index_writer_free(w);
	g_ptr_array_unref(job.ranges);
	g_mutex_clear(&job.lock);
	g_cond_clear(&job.cond);
	g_free(job.spool_dir);
	return ok;
}
