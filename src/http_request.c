/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_request.c - the request as its caller builds it (http_request_new()
 * and its setters), and the cancel flag the caller shares with its loop.
 * Any thread, until the request is submitted.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "http_engine.h"

#define DEFAULT_BODY_LIMIT (64u << 20)

struct http_request *http_request_new(const char *method, const char *what,
				      http_prepare_fn prepare,
				      http_judge_fn judge, http_done_fn done,
				      void *data, GDestroyNotify data_free)
{
	struct http_request *req;

	g_return_val_if_fail(method && what && prepare && done, NULL);
	req = g_new0(struct http_request, 1);
	req->method = g_strdup(method);
	req->what = g_strdup(what);
	req->prepare = prepare;
	req->judge = judge;
	req->done = done;
	req->data = data;
	req->data_free = data_free;
	req->idempotent = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	req->body_limit = DEFAULT_BODY_LIMIT;
	req->pinned = -1;
	return req;
}

void http_request_set_idempotent(struct http_request *req, gboolean idempotent)
{
	req->idempotent = idempotent;
}

void http_request_set_body_limit(struct http_request *req, gsize limit,
				 gsize reserve)
{
	req->body_limit = limit;
	req->body_reserve = MIN(reserve, limit);
}

void http_request_set_upload(struct http_request *req, GBytes *body)
{
	g_clear_pointer(&req->upload, g_bytes_unref);
	req->upload = body ? g_bytes_ref(body) : NULL;
}

void http_request_set_hedge(struct http_request *req, gboolean hedge)
{
	req->hedge = hedge;
}

void http_request_set_quick_done(struct http_request *req, gboolean quick)
{
	req->quick_done = quick;
}

void http_request_set_shareable(struct http_request *req, gboolean shareable)
{
	req->shareable = shareable;
}

void http_request_set_max_attempts(struct http_request *req, guint n)
{
	g_return_if_fail(n >= 1);
	req->max_attempts = n;
}

void http_request_pin_endpoint(struct http_request *req, guint index)
{
	req->pinned = (int)index;
}

/* A flag that its requests' loops read: no lock, no wake-up. */
struct http_cancel {
	gatomicrefcount refs;
	gint set; /* atomic */
};

struct http_cancel *http_cancel_new(void)
{
	struct http_cancel *c = g_new0(struct http_cancel, 1);

	g_atomic_ref_count_init(&c->refs);
	return c;
}

struct http_cancel *http_cancel_ref(struct http_cancel *c)
{
	g_atomic_ref_count_inc(&c->refs);
	return c;
}

void http_cancel_unref(struct http_cancel *c)
{
	if (c && g_atomic_ref_count_dec(&c->refs))
		g_free(c);
}

void http_cancel_set(struct http_cancel *c)
{
	g_atomic_int_set(&c->set, 1);
}

gboolean http_cancel_is_set(const struct http_cancel *c)
{
	return c && g_atomic_int_get(&c->set);
}

void http_request_set_cancel(struct http_request *req, struct http_cancel *c)
{
	g_clear_pointer(&req->cancel, http_cancel_unref);
	req->cancel = c ? http_cancel_ref(c) : NULL;
}

GError *caller_cancelled_error(void)
{
	return g_error_new(BFS_ERROR, ECANCELED, "cancelled by its caller");
}

gboolean request_running(const struct http_request *req)
{
	return req->running[0] || req->running[1];
}

const char *http_response_header(const struct http_response *resp,
				 const char *name)
{
	return resp->headers ? g_hash_table_lookup(resp->headers, name) : NULL;
}
