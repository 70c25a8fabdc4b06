/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_retry.c - the end of an attempt: judged, accounted to its endpoint,
 * and its round won, retried after a backoff within the retry budget, or
 * failed.
 */
#include <errno.h>
#include <pthread.h>

#include <curl/curl.h>

#include "error.h"
#include "http_engine.h"
#include "log.h"

#define UNREACH_WAIT_MAX 1.0 /* seconds: a store's return is seen soon */

/* Counters, latency and health after @a finished with @verdict. */
static void account(struct http *http, struct attempt *a, CURLcode rc,
		    enum http_verdict verdict, const GError *error, gint64 now)
{
	struct endpoint *ep = a->ep;
	gint64 took = now - a->start_us;
	enum outcome o = outcome_of(a, rc);
	g_autofree char *chain = NULL;

	if (o == OUTCOME_FAILED) {
		g_autofree char *prefix = chain_prefix(a->req, ep);

		if (error)
			chain = g_strconcat(prefix, error->message, NULL);
		else
			chain = g_strdup_printf("%sHTTP %ld", prefix,
						a->status);
	}
	pthread_mutex_lock(&http->lock);
	if (verdict == HTTP_VERDICT_DONE) {
		ep->latency_us[ep->latency_pos] =
			(guint32)MIN(took, G_MAXUINT32);
		ep->latency_pos = (ep->latency_pos + 1) % LATENCY_RING;
		ep->latency_len = MIN(ep->latency_len + 1, LATENCY_RING);
		ewma_add(http, ep, took, now);
	} else if (!a->cancelled) {
		/* A cancelled one, like a hedge's loser, is no error. */
		ep->errors++;
	}
	if (a->direct && rc == CURLE_OK)
		ep->direct++;
	health_note(http, a, o, chain, now);
	pthread_mutex_unlock(&http->lock);
}

/* @a was judged DONE: its twin, if any, loses. */
static void round_won(struct loop *l, struct attempt *a,
		      struct http_response *resp, gint64 now)
{
	struct http_request *req = a->req;
	guint i;

	for (i = 0; i < G_N_ELEMENTS(req->running); i++) {
		struct attempt *twin = req->running[i];

		if (!twin)
			continue;
		if (log_enabled(LOG_LEVEL_DEBUG))
			log_msg(LOG_LEVEL_DEBUG,
				"%s: %s answered first; cancelling the "
				"attempt on %s",
				req->what, a->ep->url, twin->ep->url);
		attempt_cancel(l, twin, now);
	}
	if (req->hedge) {
		pthread_mutex_lock(&l->http->lock);
		hedge_sample(l->http, now - req->round_us);
		pthread_mutex_unlock(&l->http->lock);
	}
	finish(l->http, req, a, resp, NULL);
}

/*
 * What a failed attempt says, for its retry's wait (the policy is in
 * http.h, "Retries", and docs/RELIABILITY.md).
 */
enum fault {
	FAULT_SLOWDOWN,	   /* 503 or 429: the server asks for less */
	FAULT_SERVER,	   /* another 5xx */
	FAULT_NETWORK,	   /* reset, truncated, stalled, a bad answer */
	FAULT_UNREACHABLE, /* no connection: refused, timed out, no DNS */
};

static enum fault fault_of(const struct attempt *a)
{
	switch (a->rc) {
	case CURLE_OK:
		break;
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
		return FAULT_UNREACHABLE;
	case CURLE_OPERATION_TIMEDOUT:
		return a->sent ? FAULT_NETWORK : FAULT_UNREACHABLE;
	default:
		return FAULT_NETWORK;
	}
	if (a->status == 503 || a->status == 429)
		return FAULT_SLOWDOWN;
	return a->status >= 500 ? FAULT_SERVER : FAULT_NETWORK;
}

/*
 * The retry budget, a token bucket as in the AWS SDKs: a retry takes a
 * token; each request's first attempt earns BUDGET_PER_REQUEST and time
 * BUDGET_REFILL a second, up to BUDGET_MAX.  A retry past the budget is
 * not dropped (a read would fail for it) but waits for the tokens it
 * lacks, so a storm of faults costs the store at most about half a
 * retry per request plus BUDGET_REFILL a second, not max_attempts times
 * the load.  Returns that wait.  Under http->lock.
 */
static gint64 budget_take(struct http *http, gint64 now)
{
	if (http->budget_at)
		http->budget += (now - http->budget_at) / 1e6 * BUDGET_REFILL;
	http->budget_at = now;
	http->budget = MIN(http->budget, BUDGET_MAX) - 1;
	if (http->budget >= 0)
		return 0;
	/* A debt beyond one bucket is forgiven, so no wait exceeds
	 * BUDGET_MAX / BUDGET_REFILL seconds. */
	http->budget = MAX(http->budget, -BUDGET_MAX);
	return (gint64)(-http->budget / BUDGET_REFILL * G_USEC_PER_SEC);
}

/*
 * The wait before the next round of @req, whose round @a failed with
 * @f.  Full jitter: uniform in [0, cap], the cap doubling with each
 * failed round of the request.  SlowDown and other 5xx: backoff_base
 * first (the server is struggling or asks for less).  That first cap is
 * about the time of the request it replaces (the second twice that, and
 * so on): what bounds the mount's load on the store in a storm is the
 * retry budget, not the length of one request's wait.  A broken transfer:
 * at once the first time, then a tenth of that (a new connection is the
 * remedy, not time).  No connection: at once to another healthy
 * endpoint, else capped at UNREACH_WAIT_MAX so that a store's return is
 * seen soon.  All but that one also wait for the retry budget.
 */
static gint64 retry_wait_us(struct loop *l, struct http_request *req,
			    const struct attempt *a, enum fault f)
{
	struct http *http = l->http;
	guint k = MAX(req->attempt - req->unreachable, 1);
	gint64 now = g_get_monotonic_time(), extra = 0;
	gboolean elsewhere;
	double cap;

	pthread_mutex_lock(&http->lock);
	elsewhere = req->pinned < 0 && another_healthy(http, a->ep);
	if (f != FAULT_UNREACHABLE)
		extra = budget_take(http, now);
	pthread_mutex_unlock(&http->lock);
	switch (f) {
	case FAULT_UNREACHABLE:
		if (elsewhere)
			return 0;
		cap = MIN(http->backoff_base *
				  (double)(1u << MIN(req->attempt - 1, 20)),
			  UNREACH_WAIT_MAX);
		break;
	case FAULT_NETWORK:
		if (k == 1)
			return extra;
		cap = http->backoff_base / 10 * (double)(1u << MIN(k - 2, 20));
		break;
	default:
		cap = http->backoff_base * (double)(1u << MIN(k - 1, 20));
		break;
	}
	cap = MIN(cap, http->backoff_max);
	return (gint64)(g_rand_double(l->rand) * cap * G_USEC_PER_SEC) + extra;
}

static gint waiting_cmp(gconstpointer a, gconstpointer b, gpointer data)
{
	const struct http_request *x = a, *y = b;

	(void)data;
	return x->due_us < y->due_us ? -1 : x->due_us > y->due_us;
}

/* The retry stays on @a's loop, like every round of its request. */
static void schedule_retry(struct loop *l, struct attempt *a,
			   const GError *error, enum fault f)
{
	struct http_request *req = a->req;
	gint64 wait = retry_wait_us(l, req, a, f);

	if (log_enabled(LOG_LEVEL_DEBUG)) {
		g_autofree char *prefix = chain_prefix(req, a->ep);

		log_msg(LOG_LEVEL_DEBUG, "%s%s; retrying in %.2f s", prefix,
			error->message, wait / 1e6);
	}
	req->last_failed = a->ep;
	req->due_us = g_get_monotonic_time() + wait;
	attempt_free(a);
	g_queue_insert_sorted(&l->waiting, req, waiting_cmp, NULL);
}

/*
 * Keeps the failure of @a (@error taken) in its request, to report should
 * the round end without a winner.  Of two, a FAIL verdict is final and
 * outweighs a RETRY; otherwise the later one is kept.
 */
static void keep_failure(struct attempt *a, enum http_verdict verdict,
			 GError *error)
{
	struct http_request *req = a->req;

	if (req->failed && req->failed_verdict == HTTP_VERDICT_FAIL &&
	    verdict != HTTP_VERDICT_FAIL) {
		attempt_free(a);
		g_error_free(error);
		return;
	}
	attempt_free(req->failed);
	g_clear_error(&req->failed_error);
	req->failed = a;
	req->failed_verdict = verdict;
	req->failed_error = error;
}

/* The round of @a's request is over and no attempt won: retry or fail. */
static void round_lost(struct loop *l, struct attempt *a,
		       enum http_verdict verdict, GError *error)
{
	struct http_request *req = a->req;
	struct http_response resp;

	if (req->failed) {
		keep_failure(a, verdict, error);
		a = g_steal_pointer(&req->failed);
		verdict = req->failed_verdict;
		error = g_steal_pointer(&req->failed_error);
	}
	if (verdict == HTTP_VERDICT_RETRY && req->idempotent &&
	    !http_cancel_is_set(req->cancel)) {
		enum fault f = fault_of(a);
		struct http *http = l->http;
		gint64 age = g_get_monotonic_time() - req->start_us;

		/* No connection, or a server that took the request and
		 * then sent nothing for stall_timeout: both say the store
		 * is not answering now, not that this request is wrong. */
		gboolean waitable = f == FAULT_UNREACHABLE || a->stalled;
		gboolean waited =
			waitable && http->retry_deadline_us && req->unreachable;

		/* Within retry_deadline, such a round is not one of
		 * max_attempts: the store may answer soon.  Past it, such
		 * a round ends a request that waited. */
		if (waitable && http->retry_deadline_us &&
		    age < http->retry_deadline_us) {
			req->unreachable++;
			req->silent += a->stalled;
			waited = FALSE;
		}
		if (waited) {
			g_prefix_error(&error,
				       a->stalled ? "no endpoint answered for "
						    "retry_deadline (%.0f s): "
						  : "no endpoint reachable for "
						    "retry_deadline (%.0f s): ",
				       http->retry_deadline_us / 1e6);
		} else if (req->attempt - req->unreachable <
			   req->max_attempts) {
			schedule_retry(l, a, error, f);
			g_error_free(error);
			return;
		}
	}
	response_init(&resp, a);
	fail_request(l->http, req, a->ep, a, &resp, error);
}

void attempt_done(struct loop *l, struct attempt *a, CURLcode rc)
{
	struct http_request *req = a->req;
	struct http_response resp;
	enum http_verdict verdict;
	GError *error = NULL;
	gint64 now = g_get_monotonic_time();

	attempt_unlink(l, a);
	a->rc = rc;
	if (rc == CURLE_OK && a->easy) {
		curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &a->status);
		direct_learn(l->http, a);
	}
	response_init(&resp, a);
	verdict = judge_attempt(a, rc, &resp, &error);
	if (verdict != HTTP_VERDICT_DONE && !error)
		error = g_error_new(BFS_ERROR, EIO,
				    "HTTP %ld rejected without a reason",
				    a->status);
	account(l->http, a, rc, verdict, error, now);
	if (verdict == HTTP_VERDICT_DONE) {
		g_clear_error(&error);
		round_won(l, a, &resp, now);
	} else if (request_running(req)) {
		if (log_enabled(LOG_LEVEL_DEBUG)) {
			g_autofree char *prefix = chain_prefix(req, a->ep);

			log_msg(LOG_LEVEL_DEBUG,
				"%s%s; its twin is still running", prefix,
				error->message);
		}
		keep_failure(a, verdict, error);
	} else {
		round_lost(l, a, verdict, error);
	}
}
