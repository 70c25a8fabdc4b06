/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http.c - libcurl multi event threads: the engine's lifecycle, its
 * options, submission and stats.
 *
 *
 * Threads.  The engine runs event_threads event threads ("loops"), each
 * with its own curl multi handle, and done threads (DONE_THREADS, or one
 * per loop when there are more loops).  A loop
 * touches only its own curl handles.  Everything the loops share is in
 * struct http and struct endpoint and is protected by http->lock: the
 * submission FIFO, the budget's books, each endpoint's health, latency,
 * success record and counters, the ramp-up's tokens and the hedging
 * state.  A loop's own queues and its requests need no lock: a request
 * belongs to the loop that took it until done() is queued.
 *
 * Lock order (the one place it is written): http->lock, then the log
 * sink's lock (ejections are logged under http->lock); http->done_lock is
 * a leaf, never taken with http->lock held.  No callback (prepare, judge,
 * done) is ever called with either held.
 *
 * The budget.  max_connections is split into slices, one per loop
 * (loop->slots), because curl's connection cache belongs to one multi
 * handle and cannot be shared between threads: each multi is capped at
 * its slice of sockets (CURLMOPT_MAX_TOTAL_CONNECTIONS), so the engine as
 * a whole never holds more than max_connections.  Admission is one FIFO:
 * a submission goes straight to the loop with the most free slots, or,
 * when none has one, waits in http->pending, which every loop drains from
 * its head as its slots free up.
 *
 * A request runs in rounds (the "attempt k/N" of the cause chain); a round
 * is one attempt, or two once it is hedged.  Each attempt has its own easy
 * handle, body and headers, so the twins of a round never share state.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "bufpool.h"
#include "error.h"
#include "http.h"
#include "http_engine.h"
#include "log.h"
#include "version.h"

/* Response bodies kept mapped for reuse (http_options.body_idle_max). */
#define DEFAULT_BODY_IDLE_MAX ((gsize)64 << 20)
#define DONE_THREADS	      2 /* at least, run done(): see struct completion */
#define MAX_EVENT_THREADS     64
/* Seconds: the first retry's cap after a 503/429/5xx, about one GET's time
 * to a store in the same region (see retry_wait_us()). */
#define BACKOFF_BASE 0.01

static gsize curl_once;

guint http_default_event_threads(void)
{
	guint cores = g_get_num_processors();

	return CLAMP(cores / 4, 2, 16);
}

/* Whether https:// endpoints there are. */
static gboolean any_https(const struct http *http)
{
	guint i;

	for (i = 0; i < http->endpoints->len; i++) {
		const struct endpoint *ep =
			g_ptr_array_index(http->endpoints, i);

		if (strcmp(ep->scheme, "https") == 0)
			return TRUE;
	}
	return FALSE;
}

/* The direct receive path, for each scheme a proxy does not take. */
static void http_set_direct(struct http *http, gboolean on)
{
	gboolean all = getenv("all_proxy") || getenv("ALL_PROXY");
	g_autoptr(GError) error = NULL;

	/* curl sends a scheme's requests through its proxy; so must every
	 * request of that scheme. */
	http->direct = on && !all && !getenv("http_proxy");
	if (on && !http->direct)
		log_msg(LOG_LEVEL_INFO,
			"direct receive off for http://: a proxy is set "
			"(http_proxy or all_proxy); those requests go through "
			"curl");
	if (!on || !any_https(http))
		return;
	if (all || getenv("https_proxy") || getenv("HTTPS_PROXY")) {
		log_msg(LOG_LEVEL_INFO,
			"direct receive off for https://: a proxy is set "
			"(https_proxy or all_proxy); those requests go "
			"through curl");
		return;
	}
	http->direct_tls = tls_context_new(http->ca_file, &error);
	if (!http->direct_tls)
		log_msg(LOG_LEVEL_WARNING,
			"direct receive off for https://: %s; those requests "
			"go through curl",
			error->message);
}

static void http_set_options(struct http *http, const struct http_options *o)
{
	http->ca_file = g_strdup(o->ca_file);
	http->user_agent = g_strdup(
		o->user_agent ? o->user_agent : "bucketfs/" BUCKETFS_VERSION);
	http->connect_timeout =
		o->connect_timeout > 0 ? o->connect_timeout : 10;
	http->stall_timeout = o->stall_timeout > 0 ? o->stall_timeout : 30;
	http->request_timeout = o->request_timeout;
	http_set_direct(http, o->direct_receive);
	http->backoff_base =
		o->backoff_base > 0 ? o->backoff_base : BACKOFF_BASE;
	http->backoff_max = o->backoff_max > 0 ? o->backoff_max : 20;
	http->max_attempts = MAX(1, o->max_attempts);
	http->retry_deadline_us =
		(gint64)(MAX(0, o->retry_deadline) * G_USEC_PER_SEC);
	http->budget = BUDGET_MAX;
	http->max_connections = MAX(1, o->max_connections);
	http->eject_after = o->eject_after ? o->eject_after : 5;
	http->cooloff_us =
		(gint64)((o->eject_cooloff > 0 ? o->eject_cooloff : 5) *
			 G_USEC_PER_SEC);
	http->hedge_min_us =
		(gint64)((o->hedge_min_delay > 0 ? o->hedge_min_delay : 0.05) *
			 G_USEC_PER_SEC);
	http->ramp_per_tick = o->ramp_per_tick ? o->ramp_per_tick : 16;
	http->nloops = o->event_threads ? o->event_threads
					: http_default_event_threads();
	/* Every loop needs a slot of the budget. */
	http->nloops = MIN(http->nloops, http->max_connections);
}

static gboolean start_threads(struct http *http, GError **error)
{
	guint i;

	bfs_error_init(); /* before threads that make errors at once */

	/* The copies they make grow with the loops' transfers. */
	http->ndone = MAX(DONE_THREADS, http->nloops);
	http->done_threads = g_new0(pthread_t, http->ndone);
	for (i = 0; i < http->ndone; i++) {
		int rc = pthread_create(&http->done_threads[i], NULL,
					done_thread, http);

		if (rc) {
			g_set_error(error, BFS_ERROR, rc,
				    "cannot start an HTTP completion thread: "
				    "%s",
				    g_strerror(rc));
			return FALSE;
		}
		pthread_setname_np(http->done_threads[i], "bfs-done");
		http->done_started++;
	}
	for (i = 0; i < http->nloops; i++)
		http->loops[i].thread =
			g_thread_new("bfs-http", event_thread, &http->loops[i]);
	return TRUE;
}

struct http *http_new(const struct http_options *opts, GError **error)
{
	struct http *http;
	guint i;

	g_return_val_if_fail(opts && opts->endpoints && opts->endpoints[0],
			     NULL);
	if (opts->event_threads > MAX_EVENT_THREADS) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "event_threads=%u: at most %u", opts->event_threads,
			    MAX_EVENT_THREADS);
		return NULL;
	}
	if (g_once_init_enter(&curl_once)) {
		CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);

		if (rc != CURLE_OK) {
			g_set_error(error, BFS_ERROR, EIO,
				    "curl_global_init: %s",
				    curl_easy_strerror(rc));
			return NULL;
		}
		g_once_init_leave(&curl_once, 1);
	}
	http = g_new0(struct http, 1);
	http->bodies = bufpool_new(opts->body_idle_max ? opts->body_idle_max
						       : DEFAULT_BODY_IDLE_MAX);
	http->shared_bodies =
		bufpool_new_shared(opts->body_idle_max ? opts->body_idle_max
						       : DEFAULT_BODY_IDLE_MAX);
	pthread_mutex_init(&http->lock, NULL);
	pthread_mutex_init(&http->done_lock, NULL);
	pthread_cond_init(&http->done_cond, NULL);
	g_queue_init(&http->done_queue);
	g_queue_init(&http->pending);
	http->endpoints = g_ptr_array_new_with_free_func(endpoint_free);
	for (i = 0; opts->endpoints[i]; i++) {
		struct endpoint *ep =
			endpoint_parse(opts->endpoints[i], i, error);

		if (!ep)
			goto fail;
		g_ptr_array_add(http->endpoints, ep);
	}
	http_set_options(http, opts);
	http->rand = g_rand_new();
	http->tick = -1;
	http->hedge_delay_us = http->hedge_min_us;
	http->loops = g_new0(struct loop, http->nloops);
	for (i = 0; i < http->nloops; i++)
		if (!loop_init(http, i, error))
			goto fail;
	if (!start_threads(http, error))
		goto fail;
	return http;
fail:
	http_free(http);
	return NULL;
}

/* Lets the done threads empty their queue, and joins them. */
static void stop_done_threads(struct http *http)
{
	guint i;

	pthread_mutex_lock(&http->done_lock);
	http->done_stop = TRUE;
	pthread_cond_broadcast(&http->done_cond);
	pthread_mutex_unlock(&http->done_lock);
	for (i = 0; i < http->done_started; i++)
		pthread_join(http->done_threads[i], NULL);
	http->done_started = 0;
}

void http_shutdown(struct http *http)
{
	guint i;

	if (!http)
		return;
	pthread_mutex_lock(&http->lock);
	http->stopping = TRUE;
	pthread_mutex_unlock(&http->lock);
	for (i = 0; i < http->nloops && http->loops; i++)
		if (http->loops[i].thread)
			loop_wake(&http->loops[i]);
	for (i = 0; i < http->nloops && http->loops; i++)
		g_clear_pointer(&http->loops[i].thread, g_thread_join);
	cancel_untaken(http);
	/* After the loops: their cancellations are queued too. */
	stop_done_threads(http);
}

void http_free(struct http *http)
{
	guint i;

	if (!http)
		return;
	http_shutdown(http);
	for (i = 0; i < http->nloops && http->loops; i++)
		loop_clear(&http->loops[i]);
	g_free(http->loops);
	g_free(http->done_threads);
	g_clear_pointer(&http->rand, g_rand_free);
	g_ptr_array_unref(http->endpoints);
	pthread_mutex_destroy(&http->lock);
	pthread_mutex_destroy(&http->done_lock);
	pthread_cond_destroy(&http->done_cond);
	g_free(http->ca_file);
	g_free(http->user_agent);
	g_clear_pointer(&http->direct_tls, tls_context_free);
	/* Bodies still held (GBytes from a GET) keep the pool alive. */
	bufpool_unref(http->bodies);
	bufpool_unref(http->shared_bodies);
	g_free(http);
}

void http_get_stats(struct http *http, struct http_endpoint_stats *out)
{
	g_autofree guint32 *lat = g_new(guint32, LATENCY_RING);
	guint i;

	g_return_if_fail(http && out);
	for (i = 0; i < http->endpoints->len; i++) {
		struct endpoint *ep = endpoint_at(http, i);
		struct http_endpoint_stats *o = &out[i];
		guint n;

		memset(o, 0, sizeof(*o));
		g_strlcpy(o->url, ep->url, sizeof(o->url));
		pthread_mutex_lock(&http->lock);
		o->requests = ep->requests;
		o->bytes = ep->bytes;
		o->errors = ep->errors;
		o->hedges = ep->hedges;
		o->ejections = ep->ejections;
		o->direct = ep->direct;
		o->connects = ep->connects;
		o->tls_resumed = ep->tls_resumed;
		o->inflight = ep->inflight;
		o->ejected = ep->ejected;
		n = ep->latency_len;
		memcpy(lat, ep->latency_us, n * sizeof(lat[0]));
		pthread_mutex_unlock(&http->lock);
		o->p50_ms = percentile(lat, n, 50) / 1000.0;
		o->p99_ms = percentile(lat, n, 99) / 1000.0;
	}
}

const char *http_stage_name(enum http_stage stage)
{
	static const char *const names[HTTP_STAGES] = {
		[HTTP_STAGE_WAIT] = "wait",
		[HTTP_STAGE_FIRST_BYTE] = "first_byte",
		[HTTP_STAGE_BODY] = "body",
		[HTTP_STAGE_HANDOFF] = "handoff",
	};

	return stage < HTTP_STAGES ? names[stage] : "?";
}

void http_get_stage_stats(struct http *http, struct http_stage_stats *out)
{
	/* One copy of all the rings, so the stages are of the same requests. */
	g_autofree guint32 *v = g_new(guint32, HTTP_STAGES * STAGE_RING);
	guint i, n;

	g_return_if_fail(http && out);
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&http->lock);
	n = http->stage_len;
	for (i = 0; i < HTTP_STAGES; i++)
		memcpy(v + i * STAGE_RING, http->stage_us[i], n * sizeof(v[0]));
	pthread_mutex_unlock(&http->lock);
	out->samples = n;
	for (i = 0; i < HTTP_STAGES; i++) {
		out->p50_ms[i] = percentile(v + i * STAGE_RING, n, 50) / 1000.0;
		out->p99_ms[i] = percentile(v + i * STAGE_RING, n, 99) / 1000.0;
	}
}

guint http_queued(struct http *http)
{
	guint n, i;

	pthread_mutex_lock(&http->lock);
	n = http->pending.length;
	for (i = 0; i < http->nloops; i++)
		n += http->loops[i].queued;
	pthread_mutex_unlock(&http->lock);
	return n;
}

guint http_endpoint_count(const struct http *http)
{
	return http->endpoints->len;
}

guint http_event_threads(const struct http *http)
{
	return http->nloops;
}

void http_submit(struct http *http, struct http_request *req)
{
	struct loop *wake = NULL;
	gboolean closed;

	g_return_if_fail(http && req);
	g_return_if_fail(req->pinned < (int)http->endpoints->len);
	if (!req->max_attempts || req->max_attempts > http->max_attempts)
		req->max_attempts = http->max_attempts;
	req->submit_us = g_get_monotonic_time();
	pthread_mutex_lock(&http->lock);
	closed = http->closed;
	if (!closed)
		wake = admit(http, req);
	pthread_mutex_unlock(&http->lock);
	if (wake)
		loop_wake(wake);
	if (!closed)
		return;
	{
		g_autoptr(GError) error = cancelled_error();

		g_prefix_error(&error, "%s: ", req->what);
		if (defer_refusal(http, req, error))
			return;
		req->done(req, NULL, error, req->data);
		request_free(req);
	}
}
