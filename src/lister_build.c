/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * lister_build(): the job and its workers, and the ranges fed to the
 * index writer in key order as they finish.  A range that got a key out
 * of order is sorted (src/spool), all ranges are then merged, and
 * duplicate keys dropped.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "lister_internal.h"
#include "spool.h"

#define MAX_WORKERS 32
#define TICK_US	    (500 * 1000)
#define SORT_MEMORY (64u << 20)

/* -- feeding the writer ------------------------------------------------- */

static void report(struct job *job, const struct lister_options *o, gint64 t0,
		   gboolean done)
{
	struct lister_progress p = {
		.keys = (guint64)g_atomic_pointer_get(&job->keys),
		.elapsed = (g_get_monotonic_time() - t0) / 1e6,
		.done = done,
	};

	g_mutex_lock(&job->lock);
	p.pages = job->pages;
	p.ranges = job->ranges->len;
	g_mutex_unlock(&job->lock);
	if (o && o->progress)
		o->progress(&p, o->user);
}

/*
 * Waits for range @i to be listed, reporting progress meanwhile; NULL
 * when there is no range @i (every range is then done).  Returns it not
 * done when the listing failed before it started.
 */
static struct range *wait_range(struct job *job, guint i,
				const struct lister_options *o, gint64 t0)
{
	struct range *r = NULL;

	g_mutex_lock(&job->lock);
	for (;;) {
		gint64 until = g_get_monotonic_time() + TICK_US;

		if (i >= job->ranges->len) {
			gboolean all_done;

			if (!unstarted(job, &all_done) && all_done)
				break;
		} else {
			r = g_ptr_array_index(job->ranges, i);
			if (r->done || r->error || (job->failed && !r->started))
				break;
			r = NULL;
		}
		if (!g_cond_wait_until(&job->cond, &job->lock, until)) {
			g_mutex_unlock(&job->lock);
			report(job, o, t0, FALSE);
			g_mutex_lock(&job->lock);
		}
	}
	g_mutex_unlock(&job->lock);
	return r;
}

struct feed {
	struct index_writer *w;
	GString *last;	/* the last key added */
	guint64 dups;	/* keys listed twice, dropped */
	gboolean clash; /* a key below the last: needs the merge */
};

static gboolean feed_one(const struct spool_rec *rec, void *user,
			 GError **error)
{
	struct feed *f = user;

	if (f->last->len) {
		int c = strcmp(rec->key->str, f->last->str);

		if (c == 0) {
			f->dups++;
			return TRUE;
		}
		if (c < 0) {
			f->clash = TRUE;
			return FALSE;
		}
	}
	g_string_assign(f->last, rec->key->str);
	return index_writer_add(f->w, rec->key->str, rec->size, rec->mtime,
				rec->etag->len ? rec->etag->str : NULL, error);
}

/* Feeds range @r's keys in spool order; FALSE with f->clash or @error. */
static gboolean feed_range(struct feed *f, struct range *r, GError **error)
{
	struct spool_rec rec;
	gboolean ok = TRUE;

	if (!r->sorted) {
		f->clash = TRUE;
		return FALSE;
	}
	spool_rec_init(&rec);
	if (!spool_rewind(r->spool, error))
		ok = FALSE;
	while (ok && spool_next(r->spool, &rec, error))
		ok = feed_one(&rec, f, error);
	if (ok && error && *error)
		ok = FALSE;
	spool_rec_clear(&rec);
	return ok;
}

/*
 * Feeds every range through an external merge sort: ranges out of order
 * are sorted into runs, in-order ones are runs already.
 */
static gboolean feed_merged(struct job *job, struct feed *f, GError **error)
{
	g_autoptr(GPtrArray) runs = g_ptr_array_new();
	g_autoptr(GPtrArray) made =
		g_ptr_array_new_with_free_func((GDestroyNotify)spool_free);
	gboolean ok = FALSE;
	guint i;

	for (i = 0; i < job->ranges->len; i++) {
		struct range *r = g_ptr_array_index(job->ranges, i);
		guint from = made->len;

		if (r->sorted) {
			if (!spool_rewind(r->spool, error))
				return FALSE;
			g_ptr_array_add(runs, r->spool);
			continue;
		}
		if (!spool_sort(r->spool, job->spool_dir, job->base,
				SORT_MEMORY, made, error))
			return FALSE;
		for (; from < made->len; from++)
			g_ptr_array_add(runs, g_ptr_array_index(made, from));
	}
	ok = spool_merge(runs, feed_one, f, &f->dups, error);
	g_assert(ok || !f->clash);
	return ok;
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

/* The endpoints, for naming the server in a notice. */
static char *server_name(struct job *job)
{
	const char *const *e = s3_endpoints(job->s3);
	g_autofree char *list = g_strjoinv(", ", (char **)e);

	return e[0] && e[1] ? g_strdup_printf("one of %s", list)
			    : g_steal_pointer(&list);
}

static void log_order_notice(struct job *job, const struct feed *f)
{
	g_autofree char *p = log_escape(job->prefix, -1);
	g_autofree char *server = server_name(job);

	if (job->disorder)
		log_msg(LOG_LEVEL_WARNING,
			"listing s3://%s/%s: the server (%s) lists keys out of "
			"byte order (first: %s); they are sorted here",
			s3_bucket(job->s3), p, server, job->disorder);
	if (f->dups)
		log_msg(LOG_LEVEL_WARNING,
			"listing s3://%s/%s: %" G_GUINT64_FORMAT
			" keys listed twice were dropped",
			s3_bucket(job->s3), p, f->dups);
}

/* The first range that failed, into @error.  Under no lock: all done. */
static void first_failure(struct job *job, GError **error)
{
	guint i;

	for (i = 0; i < job->ranges->len; i++) {
		struct range *r = g_ptr_array_index(job->ranges, i);

		if (r->error) {
			g_propagate_error(error, g_steal_pointer(&r->error));
			range_prefix_error(job, i, error);
			return;
		}
	}
	g_set_error(error, BFS_ERROR, EIO, "listing stopped");
}

/*
 * Feeds ranges in order as they finish.  A range out of order, or one
 * that overlaps the last, sets f->clash: the caller then starts over
 * with feed_merged() once the workers are done.
 */
static gboolean feed_in_order(struct job *job, struct feed *f,
			      const struct lister_options *opts, gint64 t0,
			      GError **error)
{
	guint i;

	for (i = 0;; i++) {
		struct range *r = wait_range(job, i, opts, t0);

		if (!r)
			return TRUE;
		if (!r->done || r->error)
			return FALSE; /* the caller finds the cause */
		if (!f->clash && !feed_range(f, r, error) && !f->clash) {
			range_prefix_error(job, i, error);
			return FALSE;
		}
	}
}

/* Starts over with a new writer, merging every range. */
static gboolean feed_again(struct job *job, struct feed *f, const char *path,
			   GError **error)
{
	index_writer_free(f->w);
	f->w = index_writer_new(path, s3_bucket(job->s3), job->prefix, error);
	if (!f->w)
		return FALSE;
	g_string_truncate(f->last, 0);
	f->dups = 0;
	f->clash = FALSE;
	return feed_merged(job, f, error);
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

static guint default_workers(struct s3 *s3, const struct lister_options *opts)
{
	guint n = 0;

	if (opts && opts->workers)
		return CLAMP(opts->workers, 1, MAX_WORKERS);
	while (s3_endpoints(s3)[n])
		n++;
	return CLAMP(4 * n, 1, MAX_WORKERS);
}

gboolean lister_build(struct s3 *s3, const char *prefix, const char *path,
		      const struct lister_options *opts,
		      struct index_stats *stats, GError **error)
{
	struct job job = { 0 };
	struct feed f = { 0 };
	g_autoptr(GPtrArray) threads = g_ptr_array_new();
	gint64 t0 = g_get_monotonic_time();
	gboolean ok = FALSE;
	guint i;

	job.s3 = s3;
	job.prefix = prefix ? prefix : "";
	job.page_size = opts && opts->page_size ? opts->page_size : 1000;
	job.workers = default_workers(s3, opts);
	job.spool_dir = g_path_get_dirname(path);
	job.base = g_path_get_basename(path);
	job.ranges = g_ptr_array_new_with_free_func(range_free);
	job.retry_at = SPLIT_AFTER_PAGES;
	g_ptr_array_add(job.ranges, range_new(NULL, NULL, FALSE));
	g_mutex_init(&job.lock);
	g_cond_init(&job.cond);
	f.last = g_string_new(NULL);

	f.w = index_writer_new(path, s3_bucket(s3), job.prefix, error);
	if (!f.w)
		goto out;
	bfs_error_init(); /* before the workers, which may fail at once */
	for (i = 0; i < job.workers; i++)
		g_ptr_array_add(threads,
				g_thread_new("bfs-list", worker, &job));
	ok = feed_in_order(&job, &f, opts, t0, error);
	g_mutex_lock(&job.lock);
	if (!ok)
		job.failed = TRUE;
	g_cond_broadcast(&job.cond);
	g_mutex_unlock(&job.lock);
	for (i = 0; i < threads->len; i++)
		g_thread_join(g_ptr_array_index(threads, i));
	if (!ok && !(error && *error))
		first_failure(&job, error);
	if (ok && f.clash)
		ok = feed_again(&job, &f, path, error);
	if (ok) {
		log_order_notice(&job, &f);
		ok = index_writer_commit(f.w, stats, error);
	}
	report(&job, opts, t0, TRUE);
out:
	index_writer_free(f.w);
	g_string_free(f.last, TRUE);
	g_ptr_array_unref(job.ranges);
	g_mutex_clear(&job.lock);
	g_cond_clear(&job.cond);
	g_free(job.spool_dir);
	g_free(job.base);
	g_free(job.first_key);
	g_free(job.disorder);
	return ok;
}
