/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * lister.c - parallel listing into an index.
 *
 * A range is (after, upto]: what ListObjectsV2 gives with start-after =
 * after, up to and including upto (NULL: from the start of the prefix, to
 * its end).  The listing starts as one range, listed in sequence.  Only
 * once it has run to SPLIT_AFTER_PAGES pages is it worth cutting: then an
 * idle worker cuts the widest range still being listed at a probe key (a
 * ListObjectsV2 with max-keys=1), and lists the upper part itself.  Probes
 * are paid for by the pages: at most one per PROBE_SHARE pages listed, so
 * they add at most 1/PROBE_SHARE to the requests of a sequential listing,
 * and a bucket of a few thousand keys is listed in sequence, with none.
 *
 * Every string sent as start-after is valid UTF-8 without control
 * characters: some servers copy it into the response unescaped (Ceph RGW
 * does, even under encoding-type=url), and a byte that is not XML there
 * makes every answer unparseable.  Cuts are listed keys where those are
 * clean, or such strings between two keys.  A probe that fails, or whose
 * answer does not parse, is not retried: the ranges stay as they are, one
 * notice says why, and the listing goes on.
 *
 * Servers that do not list in byte order (s3rver compares UTF-16 code
 * units) are met by the spools: a range that got a key out of order is
 * sorted (src/spool), all ranges are merged, and duplicate keys dropped.
 * A range that ends at a listed key stops when it sees that key, whatever
 * the order; one whose end went by out of order reads on to the end, and
 * the merge drops what two ranges both listed.
 *
 * Lock order: job->lock only; it is never held across a request.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "lister.h"
#include "log.h"
#include "keyspace.h"
#include "spool.h"

#define MAX_WORKERS	  32
#define SPLIT_AFTER_PAGES 20 /* a listing this long is worth cutting */
#define PROBE_SHARE	  20 /* pages listed per probe allowed (5%) */
#define CUT_PROBES	  8  /* probes spent looking for one cut */
#define PROBE_PAGES	  8  /* empty truncated pages a probe follows */
#define TICK_US		  (500 * 1000)
#define SORT_MEMORY	  (64u << 20)

struct range {
	char *after; /* exclusive start, NULL = the prefix's start; fixed */
	char *upto;  /* protected by job->lock: inclusive end, NULL = end */
	gboolean upto_listed; /* protected by job->lock: upto is a key the
			       * server listed, so stop on seeing it */
	char *pos;   /* protected by job->lock: the last key of the latest
		      * page, NULL before the first */
	char *bound; /* protected by job->lock: no key lies between it and
		      * upto (above it, when open), as probes showed; NULL
		      * unknown.  Where cuts are aimed below. */
	gboolean started, done; /* protected by job->lock */
	GError *error;		/* protected by job->lock */
	/* The range's own worker's until done, then the feeder's: */
	struct spool *spool;
	gboolean sorted; /* keys came in strictly increasing byte order */
};

struct job {
	struct s3 *s3;
	const char *prefix;
	char *spool_dir;
	char *base; /* the index file's name */
	guint page_size;
	guint workers;

	GMutex lock;
	GCond cond;
	GPtrArray *ranges;  /* protected by lock: of struct range *, in key
			     * order; grows by cuts after unfinished ranges */
	gboolean failed;    /* protected by lock */
	gboolean splitting; /* protected by lock: one cut at a time */
	gboolean no_split;  /* protected by lock: a probe failed */
	guint retry_at;	    /* protected by lock: pages before the next try */
	guint pages;	    /* protected by lock */
	guint probes;	    /* protected by lock */
	char *first_key;    /* protected by lock: of the whole listing */
	char *disorder;	    /* protected by lock: the first pair out of
			     * order, for the notice */
	gsize keys;	    /* atomic */
};

static void range_free(void *p)
{
	struct range *r = p;

	spool_free(r->spool);
	g_clear_error(&r->error);
	g_free(r->after);
	g_free(r->upto);
	g_free(r->pos);
	g_free(r->bound);
	g_free(r);
}

static struct range *range_new(const char *after, const char *upto,
			       gboolean upto_listed)
{
	struct range *r = g_new0(struct range, 1);

	r->after = g_strdup(after);
	r->upto = g_strdup(upto);
	r->upto_listed = upto_listed;
	r->sorted = TRUE;
	return r;
}

/* -- probing ------------------------------------------------------------ */

/*
 * The first key after @after under the prefix, into *@key (NULL when there
 * is none).  An empty page that is still truncated is legal S3: follow its
 * token, a few pages at most.  An answer that does not parse is not
 * retried: a probe only guides a cut.  Takes one probe of the budget per
 * request.
 */
static gboolean probe(struct job *job, const char *after, char **key,
		      GError **error)
{
	struct s3_list_args a = {
		.prefix = job->prefix,
		.start_after = after,
		.max_keys = 1,
		.endpoint = -1,
		.probe = TRUE,
	};
	g_autofree char *token = NULL;
	guint i;

	*key = NULL;
	for (i = 0; i < PROBE_PAGES; i++) {
		g_autoptr(s3_list_page) page = NULL;

		a.continuation_token = token;
		g_mutex_lock(&job->lock);
		job->probes++;
		g_mutex_unlock(&job->lock);
		page = s3_list(job->s3, &a, NULL, error);
		if (!page)
			return FALSE;
		if (page->objects->len) {
			struct s3_object *o =
				g_ptr_array_index(page->objects, 0);

			*key = g_strdup(o->key);
			return TRUE;
		}
		if (!page->is_truncated || !page->next_continuation_token ||
		    g_strcmp0(token, page->next_continuation_token) == 0)
			return TRUE;
		g_free(token);
		token = g_strdup(page->next_continuation_token);
	}
	return TRUE;
}

/* Whether the budget allows another probe.  Under job->lock. */
static gboolean probe_allowed(const struct job *job)
{
	return job->pages >= SPLIT_AFTER_PAGES &&
	       job->probes < job->pages / PROBE_SHARE;
}

static gboolean may_probe(struct job *job)
{
	gboolean ok;

	g_mutex_lock(&job->lock);
	ok = probe_allowed(job);
	g_mutex_unlock(&job->lock);
	return ok;
}

/*
 * Looks for a cut of the range from @lo (a key it has listed, or its
 * start) to @hi (its end or bound; NULL: open and unbounded).  An open
 * range gallops first: the keys after the successor of what @lo shares
 * with the listing's first key @first are far ahead, and the first of
 * them is a cut; when there are none, that successor bounds the range.
 * Between bounds, midpoints are probed until one finds a key below @hi.
 * Returns the cut (*@listed: it is a key), or NULL (none found, budget
 * spent, or a probe failed with @error set).  *@bound gets a bound found.
 */
static char *find_cut(struct job *job, const char *lo, const char *hi,
		      gboolean open, const char *first, gboolean *listed,
		      char **bound, GError **error)
{
	g_autofree char *top = g_strdup(hi);
	guint i;

	*listed = FALSE;
	if (open && !top) {
		g_autofree char *k = NULL;
		g_autofree char *succ = keyspace_successor(
			lo, MAX(keyspace_common_prefix(first, lo), 1));

		if (!succ || !may_probe(job) || !probe(job, succ, &k, error))
			return NULL;
		if (k) {
			*listed = keyspace_clean(k);
			return *listed ? g_steal_pointer(&k)
				       : g_steal_pointer(&succ);
		}
		*bound = g_strdup(succ);
		top = g_steal_pointer(&succ);
	}
	for (i = 0; top && i < CUT_PROBES && may_probe(job); i++) {
		g_autofree char *mid = keyspace_between(lo, top);
		g_autofree char *k = NULL;

		if (!mid || !probe(job, mid, &k, error))
			return NULL;
		if (k && (open || strcmp(k, top) < 0)) {
			if (keyspace_clean(k)) {
				*listed = TRUE;
				return g_steal_pointer(&k);
			}
			return g_steal_pointer(&mid);
		}
		/* Nothing between mid and the end: look lower, and remember
		 * it for the next try. */
		g_free(top);
		top = g_steal_pointer(&mid);
		g_free(*bound);
		*bound = g_strdup(top);
	}
	return NULL;
}

/*
 * How wide the rest of @r is, for choosing what to cut: the fewer code
 * points its two ends share, the wider.  Under job->lock.
 */
static glong range_width(const struct range *r)
{
	const char *lo = r->pos ? r->pos : r->after;
	const char *hi = r->bound ? r->bound : r->upto;

	if (!lo)
		return -1; /* nothing listed yet: nothing to aim at */
	if (!hi)
		return G_MAXLONG;
	return G_MAXLONG / 2 - keyspace_common_prefix(lo, hi);
}

/* The unfinished range most worth cutting, or -1.  Under job->lock. */
static gint widest(struct job *job)
{
	glong best = 0;
	gint at = -1;
	guint i;

	for (i = 0; i < job->ranges->len; i++) {
		struct range *r = g_ptr_array_index(job->ranges, i);
		glong w;

		if (!r->started || r->done)
			continue;
		w = range_width(r);
		if (w > best) {
			best = w;
			at = i;
		}
	}
	return at;
}

static void split_failed(struct job *job, GError *error)
{
	g_autofree char *p = log_escape(job->prefix, -1);

	job->no_split = TRUE;
	log_error(LOG_LEVEL_WARNING, error,
		  "listing s3://%s/%s: no more parallel ranges (the %u ranges "
		  "so far are listed whole, in sequence)",
		  s3_bucket(job->s3), p, job->ranges->len);
}

/*
 * Cuts range @at at @cut (taken); FALSE when its worker got there first.
 * Under job->lock.
 */
static gboolean apply_cut(struct job *job, guint at, char *cut, gboolean listed)
{
	struct range *r = g_ptr_array_index(job->ranges, at);
	const char *lo = r->pos ? r->pos : r->after;
	struct range *upper;

	if (r->done || (lo && strcmp(cut, lo) <= 0) ||
	    (r->upto && strcmp(cut, r->upto) >= 0)) {
		g_free(cut);
		return FALSE;
	}
	upper = range_new(cut, r->upto, r->upto_listed);
	upper->bound = g_steal_pointer(&r->bound);
	g_ptr_array_insert(job->ranges, at + 1, upper);
	g_free(r->upto);
	r->upto = cut;
	r->upto_listed = listed;
	return TRUE;
}

/*
 * Tries one cut of the widest unfinished range.  Called and returns with
 * job->lock held; drops it while probing.
 */
static void try_split(struct job *job)
{
	gint at = widest(job);
	struct range *r;
	g_autofree char *lo = NULL;
	g_autofree char *hi = NULL;
	g_autofree char *first = NULL;
	char *bound = NULL;
	GError *error = NULL;
	gboolean open, listed;
	char *cut;

	/* Until a cut is made, the next try waits for more pages. */
	job->retry_at = job->pages + PROBE_SHARE;
	if (at < 0)
		return;
	r = g_ptr_array_index(job->ranges, at);
	lo = g_strdup(r->pos ? r->pos : r->after);
	hi = g_strdup(r->bound ? r->bound : r->upto);
	open = !r->upto;
	first = g_strdup(job->first_key ? job->first_key : lo);
	if (!keyspace_clean(lo) || (hi && !keyspace_clean(hi)))
		return;
	job->splitting = TRUE;
	g_mutex_unlock(&job->lock);
	cut = find_cut(job, lo, hi, open, first, &listed, &bound, &error);
	g_mutex_lock(&job->lock);
	job->splitting = FALSE;
	/* The array may have grown meanwhile, but only after unfinished
	 * ranges, and r is one: find it again. */
	at = -1;
	for (guint i = 0; i < job->ranges->len; i++)
		if (g_ptr_array_index(job->ranges, i) == r)
			at = i;
	if (bound && (!r->bound || strcmp(bound, r->bound) < 0)) {
		g_free(r->bound);
		r->bound = g_steal_pointer(&bound);
	}
	g_free(bound);
	if (error) {
		split_failed(job, error);
		g_error_free(error);
	}
	if (cut && at < 0)
		g_free(cut);
	else if (cut && apply_cut(job, at, cut, listed))
		job->retry_at = job->pages; /* cut: try again at once */
	g_cond_broadcast(&job->cond);
}

/* -- listing a range ---------------------------------------------------- */

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

/* Notes the first pair of keys out of order.  Under job->lock. */
static void note_disorder(struct job *job, const char *prev, const char *key)
{
	g_autofree char *a = NULL;
	g_autofree char *b = NULL;

	if (job->disorder)
		return;
	a = log_escape(prev, -1);
	b = log_escape(key, -1);
	job->disorder =
		g_strdup_printf("'%s' %s '%s'", a,
				strcmp(prev, key) ? "before" : "twice, as", b);
}

/* Whether a key of @page after index @i is at or below @upto. */
static gboolean comes_back(const s3_list_page *page, guint i, const char *upto)
{
	for (i++; i < page->objects->len; i++) {
		struct s3_object *o = g_ptr_array_index(page->objects, i);

		if (strcmp(o->key, upto) <= 0)
			return TRUE;
	}
	return FALSE;
}

/*
 * Spools the keys of @page that belong to @r, whose end was @upto
 * (@listed: a key) when the page came.  Returns FALSE with *@stop when the
 * range is complete, or on a spool error with @error set.
 */
static gboolean spool_page(struct job *job, struct range *r,
			   const s3_list_page *page, const char *upto,
			   gboolean listed, GString *prev, gboolean *stop,
			   GError **error)
{
	guint i;

	for (i = 0; i < page->objects->len; i++) {
		struct s3_object *o = g_ptr_array_index(page->objects, i);
		int c = upto ? strcmp(o->key, upto) : -1;

		/* Past the end, unless the server lists out of order and the
		 * end (a key) may still come. */
		if (c > 0 && (!listed || !comes_back(page, i, upto)) &&
		    r->sorted) {
			*stop = TRUE;
			return TRUE;
		}
		if (prev->len && strcmp(o->key, prev->str) <= 0) {
			r->sorted = FALSE;
			g_mutex_lock(&job->lock);
			note_disorder(job, prev->str, o->key);
			g_mutex_unlock(&job->lock);
		}
		g_string_assign(prev, o->key);
		if (!spool_put(r->spool, o->key, o->size, o->mtime, o->etag,
			       error))
			return FALSE;
		g_atomic_pointer_add(&job->keys, 1);
		if (c == 0) {
			*stop = TRUE;
			return TRUE;
		}
	}
	return TRUE;
}

/*
 * Takes what a new page tells: the range's position, the listing's first
 * key, the page count; returns the range's end as it is now (*@listed:
 * a key), and in *@failed whether the listing failed elsewhere.
 */
static char *page_arrived(struct job *job, struct range *r,
			  const s3_list_page *page, gboolean *listed,
			  gboolean *failed)
{
	char *upto;

	g_mutex_lock(&job->lock);
	job->pages++;
	if (page->objects->len) {
		struct s3_object *last = g_ptr_array_index(
			page->objects, page->objects->len - 1);
		struct s3_object *first = g_ptr_array_index(page->objects, 0);

		if (!r->pos || strcmp(last->key, r->pos) > 0) {
			g_free(r->pos);
			r->pos = g_strdup(last->key);
		}
		if (!r->after && !job->first_key)
			job->first_key = g_strdup(first->key);
	}
	upto = g_strdup(r->upto);
	*listed = r->upto_listed;
	*failed = job->failed;
	g_cond_broadcast(&job->cond);
	g_mutex_unlock(&job->lock);
	return upto;
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
	g_autoptr(GString) prev = g_string_new(NULL);
	g_autofree char *token = NULL;

	r->spool = spool_new(job->spool_dir, job->base, error);
	if (!r->spool)
		return FALSE;
	for (;;) {
		g_autoptr(s3_list_page) page = NULL;
		g_autofree char *upto = NULL;
		gboolean listed, failed, stop = FALSE;

		a.continuation_token = token;
		page = s3_list(job->s3, &a, NULL, error);
		if (!page)
			return FALSE;
		upto = page_arrived(job, r, page, &listed, &failed);
		/* Nothing will be committed: stop (a cut-short range is never
		 * fed, since the failure is fed first or ends the feeding). */
		if (failed)
			return TRUE;
		if (!spool_page(job, r, page, upto, listed, prev, &stop, error))
			return FALSE;
		if (stop || !page->is_truncated)
			return TRUE;
		if (!next_token_ok(seen, page, error))
			return FALSE;
		g_free(token);
		token = g_strdup(page->next_continuation_token);
	}
}

/* -- the workers -------------------------------------------------------- */

/* A range nobody lists yet, or NULL.  Under job->lock. */
static struct range *unstarted(struct job *job, gboolean *all_done)
{
	guint i;

	*all_done = TRUE;
	for (i = 0; i < job->ranges->len; i++) {
		struct range *r = g_ptr_array_index(job->ranges, i);

		if (!r->started)
			return r;
		if (!r->done)
			*all_done = FALSE;
	}
	return NULL;
}

static gpointer worker(gpointer data)
{
	struct job *job = data;

	g_mutex_lock(&job->lock);
	for (;;) {
		gboolean all_done;
		struct range *r;
		GError *error = NULL;
		gboolean ok;

		if (job->failed)
			break;
		r = unstarted(job, &all_done);
		if (r) {
			r->started = TRUE;
			g_mutex_unlock(&job->lock);
			ok = list_range(job, r, &error);
			g_mutex_lock(&job->lock);
			r->done = TRUE;
			r->error = error;
			if (!ok)
				job->failed = TRUE;
			g_cond_broadcast(&job->cond);
			continue;
		}
		if (all_done)
			break;
		if (!job->no_split && !job->splitting &&
		    job->pages >= job->retry_at && probe_allowed(job)) {
			try_split(job);
			continue;
		}
		g_cond_wait(&job->cond, &job->lock);
	}
	g_cond_broadcast(&job->cond);
	g_mutex_unlock(&job->lock);
	return NULL;
}

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
