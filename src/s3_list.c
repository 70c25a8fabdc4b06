/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * ListObjectsV2: one page, and every page.
 */
#include <string.h>

#include "error.h"
#include "log.h"
#include "s3_internal.h"

/* -- ListObjectsV2 ------------------------------------------------------ */

static char *list_query(const struct s3_list_args *args)
{
	GString *q = g_string_new("list-type=2");

	append_query(q, "continuation-token", args->continuation_token);
	append_query(q, "delimiter", args->delimiter);
	if (!args->no_url_encoding)
		append_query(q, "encoding-type", "url");
	if (args->max_keys)
		g_string_append_printf(q, "&max-keys=%u", args->max_keys);
	append_query(q, "prefix", args->prefix);
	append_query(q, "start-after", args->start_after);
	return g_string_free(q, FALSE);
}

struct s3_list_page *s3_list(struct s3 *s3, const struct s3_list_args *args,
			     struct s3_object_meta *meta, GError **error)
{
	struct sync sync = { 0 };
	struct call *call = call_new(s3, CALL_LIST, NULL);
	g_autofree char *what = NULL;
	struct http_request *req;
	gboolean ok;

	call->query = list_query(args);
	call->probe = args->probe;
	what = call_describe(s3, "LIST", args->prefix);
	req = request_for(call, what, args->endpoint);
	ok = run_sync(s3, call, req, &sync, error);
	if (meta)
		meta_move(meta, &sync.meta);
	s3_object_meta_clear(&sync.meta);
	return ok ? sync.page : NULL;
}

gboolean s3_list_all(struct s3 *s3, const struct s3_list_args *args,
		     s3_list_fn fn, void *user, GError **error)
{
	struct s3_list_args a = *args;
	g_autoptr(GHashTable) seen =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	g_autofree char *token = g_strdup(args->continuation_token);
	g_autofree char *p = log_escape(args->prefix ? args->prefix : "", -1);
	guint pages = 0;

	for (;;) {
		g_autoptr(s3_list_page) page = NULL;

		a.continuation_token = token;
		page = s3_list(s3, &a, NULL, error);
		if (!page) {
			g_prefix_error(error, "listing s3://%s/%s, page %u: ",
				       s3->bucket, p, pages + 1);
			return FALSE;
		}
		pages++;
		if (!fn(page, user, error))
			return FALSE;
		if (!page->is_truncated)
			return TRUE;
		if (!page->next_continuation_token) {
			g_set_error(error, BFS_ERROR, EPROTO,
				    "listing s3://%s/%s, page %u: truncated "
				    "page without NextContinuationToken",
				    s3->bucket, p, pages);
			return FALSE;
		}
		if (!g_hash_table_add(
			    seen, g_strdup(page->next_continuation_token))) {
			g_autofree char *t =
				log_escape(page->next_continuation_token, -1);

			g_set_error(error, BFS_ERROR, EPROTO,
				    "listing s3://%s/%s, page %u: continuation "
				    "token '%s' repeats: the server is "
				    "looping, stopping",
				    s3->bucket, p, pages, t);
			return FALSE;
		}
		g_free(token);
		token = g_strdup(page->next_continuation_token);
	}
}
