/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * S3 calls: built, then signed per attempt (the endpoint and the clock
 * change between attempts), completed on a done thread, and waited for by
 * blocking callers.
 */
#include <inttypes.h>
#include <string.h>

#include "cred_refresh.h"
#include "credentials.h"
#include "error.h"
#include "http_date.h"
#include "log.h"
#include "s3_internal.h"
#include "sigv4.h"

static void call_free(void *p)
{
	struct call *call = p;

	g_free(call->key);
	g_free(call->query);
	g_free(call->if_match);
	g_free(call->payload_sha256);
	g_clear_pointer(&call->sign_headers, g_ptr_array_unref);
	g_clear_pointer(&call->page, s3_list_page_free);
	g_free(call->result);
	g_clear_pointer(&call->uploads, s3_uploads_page_free);
	s3_object_meta_clear(&call->meta);
	g_free(call);
}

struct call *call_new(struct s3 *s3, enum call_kind kind, const char *key)
{
	struct call *call = g_new0(struct call, 1);

	call->s3 = s3;
	call->kind = kind;
	call->key = g_strdup(key);
	call->sign_headers = g_ptr_array_new_with_free_func(g_free);
	return call;
}

/* -- building requests -------------------------------------------------- */

static const char *method_of(enum call_kind kind)
{
	switch (kind) {
	case CALL_HEAD:
		return "HEAD";
	case CALL_PUT:
	case CALL_MPU_PART:
		return "PUT";
	case CALL_DELETE:
	case CALL_MPU_ABORT:
		return "DELETE";
	case CALL_MPU_CREATE:
	case CALL_MPU_COMPLETE:
		return "POST";
	default:
		return "GET";
	}
}

void append_query(GString *q, const char *name, const char *value)
{
	g_autofree char *enc = NULL;

	if (!value)
		return;
	enc = sigv4_uri_encode(value, -1, FALSE);
	g_string_append_printf(q, "%s%s=%s", q->len ? "&" : "", name, enc);
}

/*
 * URL and signature for one attempt on @ep.  Path-style puts the bucket in
 * the path, virtual-hosted in the host name; either way the key is encoded
 * exactly once and sent as is (CURLOPT_PATH_AS_IS).
 */
static gboolean call_prepare(const struct http_endpoint *ep, gint64 now,
			     GString *url, GPtrArray *headers, gpointer *tag,
			     void *data, GError **error)
{
	const struct credentials *creds;
	struct call *call = data;
	struct s3 *s3 = call->s3;
	g_autoptr(GString) path = g_string_new("/");
	g_autofree char *host = NULL;
	g_auto(GStrv) auth = NULL;
	guint i;

	(void)error;
	if (s3->virtual_hosted) {
		host = g_strdup_printf("%s.%s", s3->bucket, ep->hostport);
		g_string_printf(url, "%s://%s", ep->scheme, host);
	} else {
		g_autofree char *b = sigv4_uri_encode(s3->bucket, -1, FALSE);

		host = g_strdup(ep->hostport);
		g_string_append(path, b);
		if (call->key)
			g_string_append_c(path, '/');
	}
	if (call->key) {
		g_autofree char *k = sigv4_uri_encode(call->key, -1, TRUE);

		g_string_append(path, k);
	}
	g_string_append(url, path->str);
	if (call->query)
		g_string_append_printf(url, "?%s", call->query);
	for (i = 0; i < call->sign_headers->len; i++)
		g_ptr_array_add(headers, g_strdup(g_ptr_array_index(
						 call->sign_headers, i)));
	creds = cred_refresh_peek(s3->creds);
	/* Judged per attempt: a hedge may sign with renewed credentials
	 * while its twin still runs with the expired ones. */
	*tag = (gpointer)creds;
	if (creds->anonymous)
		return TRUE;
	g_ptr_array_add(call->sign_headers, NULL);
	{
		struct sigv4_credentials c = {
			.access_key_id = creds->access_key_id,
			.secret_access_key = creds->secret_access_key,
			.session_token = creds->session_token,
		};
		struct sigv4_request r = {
			.method = method_of(call->kind),
			.host = host,
			.path = path->str,
			.query = call->query,
			.payload_sha256 = call->payload_sha256,
			.headers =
				(const char *const *)call->sign_headers->pdata,
			.region = s3->region,
			.service = "s3",
			.unix_time = now,
		};

		auth = sigv4_sign(&c, &r);
	}
	g_ptr_array_remove_index(call->sign_headers,
				 call->sign_headers->len - 1);
	for (i = 0; auth[i]; i++)
		g_ptr_array_add(headers, g_steal_pointer(&auth[i]));
	return TRUE;
}

/* -- completion --------------------------------------------------------- */

void meta_move(struct s3_object_meta *to, struct s3_object_meta *from)
{
	s3_object_meta_clear(to);
	*to = *from;
	memset(from, 0, sizeof(*from));
}

static void call_done(struct http_request *req, struct http_response *resp,
		      const GError *error, void *data)
{
	struct call *call = data;
	g_autoptr(GBytes) bytes = NULL;

	(void)req;
	if (!error && call->kind == CALL_GET)
		bytes = bufpool_buf_free_to_bytes(g_steal_pointer(&resp->body));
	if (call->get_done) {
		call->get_done(bytes, &call->meta, error, call->user);
		return;
	}
	if (call->part_done) {
		call->part_done(error ? NULL : call->meta.etag, error,
				call->user);
		return;
	}
	g_mutex_lock(&call->sync->lock);
	call->sync->data = g_steal_pointer(&bytes);
	call->sync->page = g_steal_pointer(&call->page);
	call->sync->result = g_steal_pointer(&call->result);
	call->sync->uploads = g_steal_pointer(&call->uploads);
	meta_move(&call->sync->meta, &call->meta);
	call->sync->error = error ? g_error_copy(error) : NULL;
	call->sync->finished = TRUE;
	g_cond_signal(&call->sync->cond);
	g_mutex_unlock(&call->sync->lock);
}

char *call_describe(struct s3 *s3, const char *verb, const char *key)
{
	g_autofree char *k = log_escape(key ? key : "", -1);

	return g_strdup_printf("%s s3://%s/%s", verb, s3->bucket, k);
}

struct http_request *request_for(struct call *call, const char *what,
				 int endpoint)
{
	struct http_request *req;

	req = http_request_new(method_of(call->kind), what, call_prepare,
			       call_judge, call_done, call, call_free);
	if (endpoint >= 0)
		http_request_pin_endpoint(req, endpoint);
	return req;
}

/* Submits and waits; the results land in @sync. */
gboolean run_sync(struct s3 *s3, struct call *call, struct http_request *req,
		  struct sync *sync, GError **error)
{
	g_mutex_init(&sync->lock);
	g_cond_init(&sync->cond);
	call->sync = sync;
	http_submit(s3->http, req);
	g_mutex_lock(&sync->lock);
	while (!sync->finished)
		g_cond_wait(&sync->cond, &sync->lock);
	g_mutex_unlock(&sync->lock);
	g_mutex_clear(&sync->lock);
	g_cond_clear(&sync->cond);
	if (sync->error) {
		g_propagate_error(error, sync->error);
		sync->error = NULL;
		return FALSE;
	}
	return TRUE;
}
