/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The workers: each lists a range nobody lists yet, page by page, into
 * the range's own spool, and when every range is taken cuts one
 * (lister.c).
 *
 * Servers that do not list in byte order (s3rver compares UTF-16 code
 * units): a range that gets a key out of order is marked unsorted, for
 * lister_build.c to sort.  A range that ends at a listed key stops when it
 * sees that key, whatever the order; one whose end went by out of order
 * reads on to the end, and the merge drops what two ranges both listed.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "lister_internal.h"
#include "spool.h"

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
struct range *unstarted(struct job *job, gboolean *all_done)
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

gpointer worker(gpointer data)
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
