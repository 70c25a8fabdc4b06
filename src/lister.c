/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * lister.c - the ranges of a parallel listing, and cutting them.
 *
 * The listing starts as one range, listed in sequence.  Only once it has
 * run to SPLIT_AFTER_PAGES pages is it worth cutting: then an idle worker
 * cuts the widest range still being listed at a probe key (a ListObjectsV2
 * with max-keys=1), and lists the upper part itself.  Probes
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
 * The other pieces: lister_worker.c (the workers, listing ranges page by
 * page) and lister_build.c (lister_build(), feeding the index writer).
 * What they share is lister_internal.h.
 */
#include <string.h>

#include "keyspace.h"
#include "lister_internal.h"
#include "log.h"
#include "spool.h"

#define PROBE_SHARE 20 /* pages listed per probe allowed (5%) */
#define CUT_PROBES  8  /* probes spent looking for one cut */
#define PROBE_PAGES 8  /* empty truncated pages a probe follows */

/* -- ranges ------------------------------------------------------------- */

void range_free(void *p)
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

struct range *range_new(const char *after, const char *upto,
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
gboolean probe_allowed(const struct job *job)
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
void try_split(struct job *job)
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
