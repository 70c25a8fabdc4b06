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
#define PROBE_PAGES	 8

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
	char *base; /* the index file's name */
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

/*
 * An unlinked temporary file beside the index (not /tmp: often RAM).  On a
 * filesystem without O_TMPFILE, a named one unlinked at once; a crash in
 * between leaves ".NAME.spool-XXXXXX", which index_writer_new() removes.
 */
static FILE *spool_open(struct job *job, GError **error)
{
	int fd = open(job->spool_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	FILE *f;

	if (fd < 0 &&
	    (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		g_autofree char *tmpl = g_strdup_printf(
			"%s/.%s.spool-XXXXXX", job->spool_dir, job->base);

		fd = g_mkstemp_full(tmpl, O_RDWR | O_CLOEXEC, 0600);
		if (fd >= 0 && unlink(tmpl) < 0 && errno != ENOENT) {
			int e = errno;

			close(fd);
			errno = e;
			fd = -1;
		}
	}
	if (fd < 0) {
		int e = errno;

		g_set_error(error, BFS_ERROR, e, "temporary file in %s: %s",
			    job->spool_dir, g_strerror(e));
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

/*
 * The first key after @after under the prefix, or NULL (none, or error).
 * An empty page that is still truncated is legal S3: follow its token, a
 * few pages at most (a probe only guides the cut, it never decides what
 * is listed, so giving up early costs balance, not keys).
 */
static char *probe(struct job *job, const char *after, GError **error)
{
	struct s3_list_args a = {
		.prefix = job->prefix,
		.start_after = after,
		.max_keys = 1,
		.endpoint = -1,
	};
	g_autofree char *token = NULL;
	guint i;

	for (i = 0; i < PROBE_PAGES; i++) {
		g_autoptr(s3_list_page) page = NULL;
		struct s3_object *o;

		a.continuation_token = token;
		page = s3_list(job->s3, &a, NULL, error);
		if (!page)
			return NULL;
		if (page->objects->len) {
			o = g_ptr_array_index(page->objects, 0);
			return g_strdup(o->key);
		}
		if (!page->is_truncated || !page->next_continuation_token ||
		    g_strcmp0(token, page->next_continuation_token) == 0)
			return NULL;
		g_free(token);
		token = g_strdup(page->next_continuation_token);
	}
	return NULL;
}

/* The smallest string above every string that starts with @p[0..@n). */
static char *prefix_successor(const char *p, gsize n)
{
	while (n > 0 && (guchar)p[n - 1] == 0xff)
		n--;
	if (!n)
		return NULL;
	{
		char *s = g_strndup(p, n);

		s[n - 1] = (char)((guchar)s[n - 1] + 1);
		return s;
	}
}

/*
 * An upper bound for an open-ended range (after, end] whose first key is
 * @first: the successor of the longest prefix of @first that every key of
 * the range shares (found by bisecting on its length, a probe per step),
 * or NULL when they share nothing.  Without it the midpoints start at the
 * top of the key space and 24 probes never get down to where keys like
 * "train/img_0001" and "train/img_9999" differ.
 */
static char *open_bound(struct job *job, const char *first, GError **error)
{
	gsize lo = 0, hi = strlen(first) + 1;

	while (hi - lo > 1) {
		gsize mid = lo + (hi - lo) / 2;
		g_autofree char *succ = prefix_successor(first, mid);
		g_autofree char *k = NULL;

		if (succ)
			k = probe(job, succ, error);
		if (error && *error)
			return NULL;
		if (succ && !k)
			lo = mid; /* nothing beyond: all share first[0..mid) */
		else
			hi = mid;
	}
	return lo ? prefix_successor(first, lo) : NULL;
}

/*
 * Cuts (r->after, r->upto] in two non-empty halves at a probe string.
 * Returns the cut, or NULL when the range is too small or too dense to cut
 * (or a probe failed, @error set).
 */
static char *find_cut(struct job *job, const struct range *r, GError **error)
{
	g_autofree char *first = probe(job, r->after, error);
	g_autofree char *hi = NULL;
	guint i;

	if (!first || (r->upto && strcmp(first, r->upto) > 0))
		return NULL;
	hi = r->upto ? g_strdup(r->upto) : open_bound(job, first, error);
	if (error && *error)
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

static gboolean spool_error(GError **error)
{
	int e = errno ? errno : EIO;

	g_set_error(error, BFS_ERROR, e, "writing the listing spool: %s",
		    g_strerror(e));
	return FALSE;
}

/*
 * Whether the truncated @page's token may be followed: it must exist and
 * be new in this listing (@seen holds the earlier ones), or the server is
 * looping and would never end.
 */
static gboolean next_token_ok(GHashTable *seen, const s3_list_page *page,
			      GError **error)
{
	g_autofree char *t = NULL;

	if (!page->next_continuation_token) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "truncated page without NextContinuationToken");
		return FALSE;
	}
	if (g_hash_table_add(seen, g_strdup(page->next_continuation_token)))
		return TRUE;
	t = log_escape(page->next_continuation_token, -1);
	g_set_error(error, BFS_ERROR, EPROTO,
		    "continuation token '%s' repeats after %u pages: the "
		    "server is looping, stopping",
		    t, g_hash_table_size(seen));
	return FALSE;
}

static gboolean list_range(struct job *job, struct range *r, GError **error)
{
	struct s3_list_args a = {
		.prefix = job->prefix,
		.start_after = r->after,
		.max_keys = job->page_size,
		.endpoint = -1,
	};
	g_autoptr(GHashTable) seen =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	g_autofree char *token = NULL;

	r->spool = spool_open(job, error);
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
			if (!spool_put(r->spool, o))
				return spool_error(error);
		}
		g_atomic_pointer_add(&job->keys, page->objects->len);
		if (!page->is_truncated)
			return TRUE;
		if (!next_token_ok(seen, page, error))
			return FALSE;
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
 * with no probing.  A larger one is split after the last key of its first
 * non-empty page (empty pages that are still truncated are legal S3, and
 * are followed).
 */
static gboolean plan(struct job *job, guint workers, GError **error)
{
	struct range *first = range_new(NULL, NULL);
	struct s3_list_args a = {
		.prefix = job->prefix,
		.max_keys = job->page_size,
		.endpoint = -1,
	};
	g_autoptr(GHashTable) seen =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	g_autoptr(s3_list_page) page = NULL;
	struct s3_object *last;
	guint i;

	g_ptr_array_add(job->ranges, first);
	first->spool = spool_open(job, error);
	if (!first->spool)
		return FALSE;
	for (;;) {
		a.continuation_token =
			page ? page->next_continuation_token : NULL;
		{
			s3_list_page *next = s3_list(job->s3, &a, NULL, error);

			g_clear_pointer(&page, s3_list_page_free);
			page = next;
		}
		if (!page)
			return FALSE;
		g_atomic_int_add(&job->pages, 1);
		if (page->objects->len || !page->is_truncated)
			break;
		if (!next_token_ok(seen, page, error))
			return FALSE;
	}
	for (i = 0; i < page->objects->len; i++) {
		if (!spool_put(first->spool,
			       g_ptr_array_index(page->objects, i))) {
			spool_error(error);
			return FALSE;
		}
	}
	g_atomic_pointer_add(&job->keys, page->objects->len);
	first->done = TRUE;
	if (!page->is_truncated)
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
	job.base = g_path_get_basename(path);
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
	g_free(job.base);
	return ok;
}
