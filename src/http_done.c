/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_done.c - how a request ends: its attempts let go, and done() called
 * once, on a done thread (see struct completion), with the response and
 * the cause chain.
 */
#include <pthread.h>

#include "bufpool.h"
#include "http_engine.h"

/*
 * A finished request on its way to done().  done() runs on one of the
 * done threads, not on an event thread: what callers do with a body
 * (copy it into a FUSE reply, hash it, parse it) then overlaps the
 * transfers still running instead of delaying every one of them.  The
 * loop is done with the request before it is queued; the queue's lock
 * hands it over.  A quick done() that succeeded (finish()) is the
 * exception: its completion lives on the event thread's stack, and the
 * thread's other transfers wait while it runs.
 */
struct completion {
	struct http_request *req;
	struct attempt *a; /* the attempt that answered, or NULL */
	struct http_response resp;
	gboolean has_resp;
	GError *error;
	gint64 finished_us; /* when the loop handed it over */
};

/* Lets go of @a's transfer, on its loop's thread. */
static void attempt_drop_transfer(struct attempt *a)
{
	if (!a)
		return;
	direct_drop(a->loop, a);
	if (a->easy)
		easy_put(a->loop, g_steal_pointer(&a->easy));
	g_clear_pointer(&a->req_headers, curl_slist_free_all);
}

/* Off its loop's thread, @a's transfer must be dropped already. */
void attempt_free(struct attempt *a)
{
	if (!a)
		return;
	attempt_drop_transfer(a);
	bufpool_buf_free(a->body);
	if (a->headers)
		g_hash_table_unref(a->headers);
	g_free(a);
}

void request_free(struct http_request *req)
{
	g_assert(!req->running[0] && !req->running[1]);
	attempt_free(req->failed);
	g_clear_error(&req->failed_error);
	if (req->data_free)
		req->data_free(req->data);
	g_clear_pointer(&req->upload, g_bytes_unref);
	http_cancel_unref(req->cancel);
	g_free(req->method);
	g_free(req->what);
	g_free(req);
}

/* "WHAT via ENDPOINT (attempt k/N, T s): " or "WHAT: " without endpoint. */
char *chain_prefix(const struct http_request *req, const struct endpoint *ep)
{
	double t = (g_get_monotonic_time() - req->start_us) / 1e6;

	if (!ep)
		return g_strdup_printf("%s: ", req->what);
	if (req->unreachable && !req->silent)
		return g_strdup_printf(
			"%s via %s (attempt %u/%u, %.1f s, after %u attempts "
			"that reached no endpoint): ",
			req->what, ep->url, req->attempt - req->unreachable,
			req->max_attempts, t, req->unreachable);
	if (req->unreachable && req->unreachable == req->silent)
		return g_strdup_printf(
			"%s via %s (attempt %u/%u, %.1f s, after %u attempts "
			"that stalled): ",
			req->what, ep->url, req->attempt - req->unreachable,
			req->max_attempts, t, req->silent);
	if (req->unreachable)
		return g_strdup_printf(
			"%s via %s (attempt %u/%u, %.1f s, after %u attempts "
			"that reached no endpoint and %u that stalled): ",
			req->what, ep->url, req->attempt - req->unreachable,
			req->max_attempts, t, req->unreachable - req->silent,
			req->silent);
	return g_strdup_printf("%s via %s (attempt %u/%u, %.1f s): ", req->what,
			       ep->url, req->attempt, req->max_attempts, t);
}

/* Adds a successful request's stage times to the rings. */
static void stage_sample(struct completion *c)
{
	struct attempt *a = c->a;
	struct http *http = a->http;
	gint64 now = g_get_monotonic_time();
	gint64 t[HTTP_STAGES] = {
		[HTTP_STAGE_WAIT] = a->start_us - c->req->submit_us,
		[HTTP_STAGE_FIRST_BYTE] = a->head_us - a->start_us,
		[HTTP_STAGE_BODY] = c->finished_us - a->head_us,
		[HTTP_STAGE_HANDOFF] = now - c->finished_us,
	};
	guint i;

	pthread_mutex_lock(&http->lock);
	for (i = 0; i < HTTP_STAGES; i++)
		http->stage_us[i][http->stage_pos] =
			(guint32)CLAMP(t[i], 0, G_MAXUINT32);
	http->stage_pos = (http->stage_pos + 1) % STAGE_RING;
	http->stage_len = MIN(http->stage_len + 1, STAGE_RING);
	pthread_mutex_unlock(&http->lock);
}

/* Calls done() once, then frees what the completion holds but itself. */
static void complete_fields(struct completion *c)
{
	struct http_request *req = c->req;

	if (c->a && c->has_resp && !c->error && c->a->head_us && req->submit_us)
		stage_sample(c);

	req->done(req, c->has_resp ? &c->resp : NULL, c->error, req->data);
	/* done() may have stolen the body. */
	if (c->a && c->has_resp && !c->resp.body)
		c->a->body = NULL;
	attempt_free(c->a);
	request_free(req);
	g_clear_error(&c->error);
}

/* Calls done() once, then frees the completion and what it holds. */
static void complete(struct completion *c)
{
	complete_fields(c);
	g_free(c);
}

/* The engine whose done thread this is, if it is one. */
static __thread struct http *done_thread_of;

void *done_thread(void *data)
{
	struct http *http = data;

	done_thread_of = http;
	for (;;) {
		struct completion *c;

		pthread_mutex_lock(&http->done_lock);
		while (!(c = g_queue_pop_head(&http->done_queue)) &&
		       !http->done_stop)
			pthread_cond_wait(&http->done_cond, &http->done_lock);
		pthread_mutex_unlock(&http->done_lock);
		if (!c)
			return NULL;
		complete(c);
	}
}

/*
 * Hands @req to a done thread, with @a (whose response @resp is) and a
 * copy of @error: done() will be called once, and both freed.  A request
 * that succeeded and asked for a quick done() has it called here, on its
 * event thread: no hand-off, no wake-up of a done thread.
 */
void finish(struct http *http, struct http_request *req, struct attempt *a,
	    struct http_response *resp, const GError *error)
{
	struct completion *c;

	if (req->loop)
		g_hash_table_remove(req->loop->live, req);
	attempt_drop_transfer(a);
	attempt_drop_transfer(req->failed);
	if (req->quick_done && !error) {
		struct completion here = { .req = req, .a = a };

		if (resp) {
			here.resp = *resp;
			here.has_resp = TRUE;
		}
		here.finished_us = g_get_monotonic_time();
		complete_fields(&here);
		return;
	}
	c = g_new0(struct completion, 1);
	c->req = req;
	c->a = a;
	if (resp) {
		c->resp = *resp;
		c->has_resp = TRUE;
	}
	c->error = error ? g_error_copy(error) : NULL;
	c->finished_us = g_get_monotonic_time();
	pthread_mutex_lock(&http->done_lock);
	g_queue_push_tail(&http->done_queue, c);
	pthread_cond_signal(&http->done_cond);
	pthread_mutex_unlock(&http->done_lock);
}

/* Ends @req with @error (taken), prefixed with where it happened. */
void fail_request(struct http *http, struct http_request *req,
		  const struct endpoint *ep, struct attempt *a,
		  struct http_response *resp, GError *error)
{
	g_autofree char *prefix = chain_prefix(req, ep);

	g_prefix_error(&error, "%s", prefix);
	finish(http, req, a, resp, error);
	g_error_free(error);
}

/*
 * Hands the refusal of @req (with @error, copied) to a done thread, as
 * every other done() is, when one will still run it: callers may submit
 * under their own locks, which done() takes (the readahead engine does).
 * FALSE when the done threads are stopping and this is not one of them.
 */
gboolean defer_refusal(struct http *http, struct http_request *req,
		       const GError *error)
{
	struct completion *c;

	pthread_mutex_lock(&http->done_lock);
	if (http->done_stop && done_thread_of != http) {
		pthread_mutex_unlock(&http->done_lock);
		return FALSE;
	}
	c = g_new0(struct completion, 1);
	c->req = req;
	c->error = g_error_copy(error);
	g_queue_push_tail(&http->done_queue, c);
	pthread_cond_signal(&http->done_cond);
	pthread_mutex_unlock(&http->done_lock);
	return TRUE;
}
