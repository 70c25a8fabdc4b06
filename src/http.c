/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http.c - libcurl multi event threads: endpoints, budget, retries, hedges.
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
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/x509.h>

#include "bufpool.h"
#include "endpoint_url.h"
#include "error.h"
#include "h1.h"
#include "http.h"
#include "http_internal.h"
#include "log.h"
#include "version.h"

#define DEFAULT_BODY_LIMIT (64u << 20)
/* Response bodies kept mapped for reuse (http_options.body_idle_max). */
#define DEFAULT_BODY_IDLE_MAX ((gsize)64 << 20)
#define MAX_POLL_MS	      1000
#define UNWATCHED_POLL_MS     10 /* a socket epoll refused: see on_socket() */
#define EPOLL_BATCH	      64 /* socket events taken per epoll_wait() */
#define ERROR_BODY_LIMIT      (64u << 10)
#define TICK_US		      10000	     /* the ramp-up's tick */
#define EWMA_WEIGHT	      0.2	     /* of the newest latency */
#define EWMA_HALF_LIFE_US     G_USEC_PER_SEC /* of a latency not renewed */
#define DONE_THREADS	      2 /* at least, run done(): see struct completion */
#define RECORD_LEN	      32 /* outcomes kept for the success rate */
#define MAX_EVENT_THREADS     64
#define SPARE_EASY_MAX	      256 /* idle easy handles kept per loop */
#define UNREACH_WAIT_MAX      1.0 /* seconds: a store's return is seen soon */
/* Seconds: the first retry's cap after a 503/429/5xx, about one GET's time
 * to a store in the same region (see retry_wait_us()). */
#define BACKOFF_BASE 0.01
/* The retry budget (see "Retries" in http.h): tokens, one per retry. */
#define BUDGET_MAX	   100.0
#define BUDGET_PER_REQUEST 0.5	/* earned by each request's first attempt */
#define BUDGET_REFILL	   10.0 /* earned per second regardless */

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

/* -- endpoints ---------------------------------------------------------- */

static void endpoint_free(void *p)
{
	struct endpoint *ep = p;

	g_free(ep->url);
	g_free(ep->scheme);
	g_free(ep->host);
	g_free(ep->hostport);
	g_free(ep->addr_host);
	g_free(ep);
}

/* An endpoint of @url, parsed by endpoint_url.h (config's parser too). */
static struct endpoint *endpoint_parse(const char *url, guint index,
				       GError **error)
{
	struct endpoint_url u = { 0 };
	struct endpoint *ep;

	if (!endpoint_url_parse(url, &u, error)) {
		g_prefix_error(error, "endpoint: ");
		return NULL;
	}
	if (*u.path && strcmp(u.path, "/") != 0) {
		g_autofree char *shown = endpoint_url_shown(url);
		g_autofree char *e = log_escape(shown, -1);

		endpoint_url_clear(&u);
		g_set_error(error, BFS_ERROR, EINVAL,
			    "endpoint '%s': expected http://HOST[:PORT] or "
			    "https://HOST[:PORT] without a path",
			    e);
		return NULL;
	}
	ep = g_new0(struct endpoint, 1);
	ep->scheme = g_strdup(u.scheme);
	ep->host = strchr(u.host, ':') ? g_strdup_printf("[%s]", u.host)
				       : g_strdup(u.host);
	ep->hostport = u.port_given ? g_strdup_printf("%s:%u", ep->host, u.port)
				    : g_strdup(ep->host);
	ep->url = g_strdup_printf("%s://%s", ep->scheme, ep->hostport);
	ep->pub.url = ep->url;
	ep->pub.scheme = ep->scheme;
	ep->pub.host = ep->host;
	ep->pub.hostport = ep->hostport;
	ep->pub.index = index;
	endpoint_url_clear(&u);
	return ep;
}

static struct endpoint *endpoint_at(struct http *http, guint i)
{
	return g_ptr_array_index(http->endpoints, i);
}

struct lane *lane_of(struct loop *l, const struct endpoint *ep)
{
	return &l->lanes[ep->pub.index];
}

static int u32_cmp(const void *a, const void *b)
{
	guint32 x = *(const guint32 *)a, y = *(const guint32 *)b;

	return x < y ? -1 : x > y;
}

/* The nearest-rank @pct percentile of @v (sorted in place), or 0. */
static guint32 percentile(guint32 *v, guint n, guint pct)
{
	guint rank;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), u32_cmp);
	rank = (n * pct + 99) / 100;
	return v[MAX(rank, 1) - 1];
}

/* -- latency and picking an endpoint (all under http->lock) ------------- */

/* The smallest latency known of any endpoint, 0 when none is known. */
static double fastest_ewma(struct http *http)
{
	double best = 0;
	guint i;

	for (i = 0; i < http->endpoints->len; i++) {
		double e = endpoint_at(http, i)->ewma_us;

		if (e > 0 && (best <= 0 || e < best))
			best = e;
	}
	return best;
}

/* 0.5^(age / half-life) without libm: exact at whole half-lives. */
static double fade(gint64 age_us)
{
	gint64 n = age_us / EWMA_HALF_LIFE_US;
	double frac = (double)(age_us % EWMA_HALF_LIFE_US) / EWMA_HALF_LIFE_US;

	if (age_us <= 0)
		return 1;
	if (n >= 62)
		return 0;
	return (1 - frac / 2) / (double)((guint64)1 << n);
}

/*
 * The latency of @ep as the picker sees it.  Unknown counts as the
 * fastest known; a latency that has not been renewed fades toward it, so
 * an endpoint that one bad sample made look slow is tried again rather
 * than starved for good.
 */
static double latency_now(const struct endpoint *ep, double fastest, gint64 now)
{
	if (ep->ewma_us <= 0)
		return fastest;
	return fastest + (ep->ewma_us - fastest) * fade(now - ep->ewma_at);
}

/*
 * A new sample moves the estimate by EWMA_WEIGHT; the first one of an
 * endpoint starts from the fastest known, so that one slow first
 * transfer (a connect, a cold server) does not brand it slow.
 */
static void ewma_add(struct http *http, struct endpoint *ep, gint64 us,
		     gint64 now)
{
	double fastest = fastest_ewma(http);
	double base = fastest > 0 ? latency_now(ep, fastest, now) : (double)us;

	ep->ewma_us = base + EWMA_WEIGHT * ((double)us - base);
	ep->ewma_at = now;
}

/*
 * The healthy endpoint other than @avoid where one more attempt expects
 * to wait least: (inflight + 1) x recent latency.  Ties go round.
 */
static struct endpoint *pick_healthy(struct http *http,
				     const struct endpoint *avoid, gint64 now)
{
	guint n = http->endpoints->len;
	guint start = http->rotate++ % n, i;
	double fastest = fastest_ewma(http), best_score = 0;
	struct endpoint *best = NULL;

	if (fastest <= 0)
		fastest = 1;
	for (i = 0; i < n; i++) {
		struct endpoint *ep = endpoint_at(http, (start + i) % n);
		double score;

		if (ep->ejected || ep == avoid)
			continue;
		score = (ep->inflight + 1.0) * latency_now(ep, fastest, now);
		if (!best || score < best_score) {
			best = ep;
			best_score = score;
		}
	}
	return best;
}

/* An ejected endpoint whose cool-off is over, with no probe running. */
static struct endpoint *probe_candidate(struct http *http, gint64 now)
{
	guint i;

	for (i = 0; i < http->endpoints->len; i++) {
		struct endpoint *ep = endpoint_at(http, i);

		if (ep->ejected && !ep->probing && now >= ep->probe_at)
			return ep;
	}
	return NULL;
}

/* Successes among the last record_len judged attempts. */
static guint successes(const struct endpoint *ep)
{
	guint32 mask = ep->record_len >= RECORD_LEN
			       ? G_MAXUINT32
			       : (1u << ep->record_len) - 1;

	return (guint)__builtin_popcount(ep->record & mask);
}

/* Successes among the last RECORD_LEN judged attempts, per 1024. */
static guint success_rate(const struct endpoint *ep)
{
	if (!ep->record_len)
		return 512; /* nothing known: a coin */
	return successes(ep) * 1024 / ep->record_len;
}

static void record_outcome(struct endpoint *ep, gboolean ok)
{
	ep->record = (ep->record << 1) | (ok ? 1 : 0);
	ep->record_len = MIN(ep->record_len + 1, RECORD_LEN);
}

/*
 * With every endpoint ejected, requests still go out, each to the one
 * with the best recent success rate: the one that answers, rather than
 * one that merely failed longest ago (an endpoint that refuses every
 * connection fails fast, so it is always the one that failed longest
 * ago).  @avoid, the endpoint that just failed this request, only
 * breaks ties; then fewer attempts in flight; then the rotation.
 */
static struct endpoint *best_of_ejected(struct http *http,
					const struct endpoint *avoid)
{
	guint n = http->endpoints->len;
	guint start = http->rotate++ % n, i;
	struct endpoint *best = NULL;
	guint best_rate = 0;

	for (i = 0; i < n; i++) {
		struct endpoint *ep = endpoint_at(http, (start + i) % n);
		guint rate = success_rate(ep);

		if (best && rate < best_rate)
			continue;
		if (best && rate == best_rate &&
		    (ep == avoid ||
		     (best != avoid && ep->inflight >= best->inflight)))
			continue;
		best = ep;
		best_rate = rate;
	}
	return best ? best : endpoint_at(http, 0);
}

/*
 * Where the next round of @req goes.  A fresh request may be the probe of
 * an ejected endpoint; *@probe says so.
 */
static struct endpoint *pick_endpoint(struct http *http,
				      struct http_request *req, gint64 now,
				      gboolean *probe)
{
	struct endpoint *ep;

	*probe = FALSE;
	if (req->pinned >= 0)
		return endpoint_at(http, req->pinned);
	if (req->attempt == 0) {
		ep = probe_candidate(http, now);
		if (ep) {
			*probe = TRUE;
			return ep;
		}
	}
	ep = pick_healthy(http, req->last_failed, now);
	if (!ep)
		ep = pick_healthy(http, NULL, now);
	if (!ep)
		ep = best_of_ejected(http, req->last_failed);
	return ep;
}

/* -- health (under http->lock) ------------------------------------------ */

enum outcome {
	OUTCOME_OK,	 /* a complete response below 500: it is alive */
	OUTCOME_FAILED,	 /* a transport failure or a 5xx */
	OUTCOME_NEUTRAL, /* says nothing about the endpoint */
};

static gboolean another_healthy(struct http *http, const struct endpoint *ep);

/*
 * Counts one finished attempt toward its endpoint's health.  @chain is the
 * attempt's whole cause chain, for the one warning of an ejection.
 */
static void health_note(struct http *http, struct attempt *a, enum outcome o,
			const char *chain, gint64 now)
{
	struct endpoint *ep = a->ep;

	if (o != OUTCOME_NEUTRAL)
		record_outcome(ep, o == OUTCOME_OK);
	if (!ep->ejected) {
		if (o == OUTCOME_OK)
			ep->streak = 0;
		if (o != OUTCOME_FAILED || ++ep->streak < http->eject_after)
			return;
		/* A streak is bad luck on an endpoint that answers most of
		 * its attempts, or a quarter of them when no other endpoint
		 * is healthy: ejecting the one that answers costs more than
		 * it saves. */
		if (success_rate(ep) >= 512 ||
		    (success_rate(ep) >= 256 && !another_healthy(http, ep)))
			return;
		ep->ejected_at = now;
		ep->probe_at = now + http->cooloff_us;
		ep->ejected = TRUE;
		ep->ejections++;
		log_msg(LOG_LEVEL_WARNING,
			"endpoint %s ejected after %u consecutive failures "
			"(%u of its last %u attempts answered): %s",
			ep->url, ep->streak, successes(ep), ep->record_len,
			chain);
		return;
	}
	/* Attempts started before the ejection do not decide it. */
	if (!a->on_ejected)
		return;
	if (o == OUTCOME_OK) {
		log_msg(LOG_LEVEL_NOTICE,
			"endpoint %s re-admitted: %s answered HTTP %ld after "
			"%.1f s ejected",
			ep->url, a->req->what, a->status,
			(now - ep->ejected_at) / 1e6);
		ep->streak = 0;
		ep->ewma_us = 0;
		ep->ejected = FALSE;
	} else if (o == OUTCOME_FAILED) {
		ep->probe_at = now + http->cooloff_us;
		if (a->probe && log_enabled(LOG_LEVEL_DEBUG))
			log_msg(LOG_LEVEL_DEBUG,
				"endpoint %s stays ejected, probe failed: %s",
				ep->url, chain);
	}
}

/* -- requests ----------------------------------------------------------- */

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

static GError *caller_cancelled_error(void)
{
	return g_error_new(BFS_ERROR, ECANCELED, "cancelled by its caller");
}

/*
 * Easy handles are kept on their loop for later attempts: a new one costs
 * a few KiB of zeroed state, a 128 KiB buffer and the setting of all the
 * options.  Loop thread only.
 */
static CURL *easy_get(struct loop *l)
{
	if (l->spare_easy->len)
		return g_ptr_array_steal_index_fast(l->spare_easy,
						    l->spare_easy->len - 1);
	return curl_easy_init();
}

/* Reset, so that it keeps no pointer to its attempt; curl keeps its
 * buffer.  At most one a slot is kept, and SPARE_EASY_MAX in all.  A
 * handle that holds an OS errno is not kept: curl_easy_reset() keeps it,
 * and a later transfer that fails without one of its own (a truncated
 * body) would report it as its cause. */
static void easy_put(struct loop *l, CURL *easy)
{
	long os_errno = 0;

	curl_easy_getinfo(easy, CURLINFO_OS_ERRNO, &os_errno);
	if (os_errno || l->spare_easy->len >= MIN(l->slots, SPARE_EASY_MAX)) {
		curl_easy_cleanup(easy);
		return;
	}
	curl_easy_reset(easy);
	g_ptr_array_add(l->spare_easy, easy);
}

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
static void attempt_free(struct attempt *a)
{
	if (!a)
		return;
	attempt_drop_transfer(a);
	bufpool_buf_free(a->body);
	if (a->headers)
		g_hash_table_unref(a->headers);
	g_free(a);
}

static void request_free(struct http_request *req)
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

static gboolean request_running(const struct http_request *req)
{
	return req->running[0] || req->running[1];
}

const char *http_response_header(const struct http_response *resp,
				 const char *name)
{
	return resp->headers ? g_hash_table_lookup(resp->headers, name) : NULL;
}

/* -- curl callbacks (the attempt's loop) -------------------------------- */

/* Whether a body of @status is an error document, kept only in part. */
gboolean error_document(long status)
{
	return status < 200 || status >= 300;
}

/* @n bytes of @a's body, which came with @status: FALSE when they overflow
 * the body's limit (the transfer must end). */
gboolean body_take(struct attempt *a, long status, const char *p, gsize n)
{
	a->received += n;
	if (error_document(status)) {
		/* An error document only needs its head; never abort the
		 * transfer for it, or the real status would be lost. */
		if (a->body->len < ERROR_BODY_LIMIT)
			bufpool_buf_append(
				a->body, p,
				MIN(n, ERROR_BODY_LIMIT - a->body->len));
		return TRUE;
	}
	if (a->body->len + n > a->req->body_limit) {
		a->overflow = TRUE;
		a->body_status = status;
		return FALSE;
	}
	bufpool_buf_append(a->body, p, n);
	return TRUE;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct attempt *a = userdata;
	size_t n = size * nmemb;
	long status = 0;

	curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &status);
	return body_take(a, status, ptr, n) ? n : 0;
}

size_t on_header(char *buf, size_t size, size_t nitems, void *userdata)
{
	struct attempt *a = userdata;
	size_t n = size * nitems;
	const char *colon = memchr(buf, ':', n);
	const char *v, *end = buf + n;

	a->moved_us = g_get_monotonic_time();
	/* A new status line (after 100 Continue, say) starts over. */
	if (n >= 5 && !memcmp(buf, "HTTP/", 5)) {
		a->head_us = a->moved_us;
		g_hash_table_remove_all(a->headers);
		return n;
	}
	if (!colon)
		return n;
	for (v = colon + 1; v < end && (*v == ' ' || *v == '\t'); v++)
		;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' ||
			   end[-1] == ' ' || end[-1] == '\t'))
		end--;
	g_hash_table_replace(a->headers, g_ascii_strdown(buf, colon - buf),
			     g_strndup(v, end - v));
	return n;
}

/*
 * The stall clock: a transfer that moves no byte (header, body, upload)
 * for stall_timeout seconds once its request is on its way is aborted.
 * curl's own low-speed check averages over ~5 s, so a body that stopped
 * after a burst lived that much longer with it alone.
 */
static int on_progress(void *clientp, curl_off_t dltotal, curl_off_t dlnow,
		       curl_off_t ultotal, curl_off_t ulnow)
{
	struct attempt *a = clientp;
	struct http *http = a->http;
	gint64 now = g_get_monotonic_time();

	(void)dltotal;
	(void)ultotal;
	if (http_cancel_is_set(a->req->cancel)) {
		a->cancelled = TRUE;
		return 1;
	}
	/* Connecting is connect_timeout's business. */
	if (!a->sent) {
		curl_off_t t = 0;

		curl_easy_getinfo(a->easy, CURLINFO_PRETRANSFER_TIME_T, &t);
		a->sent = t > 0;
	}
	if (!a->sent || dlnow != a->moved_dl || ulnow != a->moved_ul) {
		a->moved_dl = dlnow;
		a->moved_ul = ulnow;
		a->moved_us = MAX(a->moved_us, now);
		return 0;
	}
	if (now - a->moved_us < (gint64)(http->stall_timeout * G_USEC_PER_SEC))
		return 0;
	a->stalled = TRUE;
	return 1;
}

/*
 * Sockets are counted per loop and endpoint (a lane) to tell whether a
 * transfer can reuse an idle connection or must open one (which the
 * ramp-up limits).  curl keeps the close callback and its data with the
 * connection, so the lane, not the attempt, is their data.  The close may
 * come from http_free()'s thread, once the loops are gone.
 */
static curl_socket_t on_open_socket(void *clientp, curlsocktype purpose,
				    struct curl_sockaddr *addr)
{
	struct lane *lane = clientp;
	curl_socket_t fd;

	(void)purpose;
	fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC,
		    addr->protocol);
	if (fd != CURL_SOCKET_BAD)
		lane->sockets++;
	return fd;
}

static int on_close_socket(void *clientp, curl_socket_t fd)
{
	struct lane *lane = clientp;

	if (lane->sockets > 0)
		lane->sockets--;
	return close(fd);
}

/*
 * curl says which of its sockets to wait on, and for what.  socketp is
 * non-NULL once the socket is in the loop's epoll set.  curl removes a
 * socket before it closes it; a number reused without that (a socket
 * closed behind curl's back leaves the set by itself) is caught by
 * EEXIST/ENOENT.
 */
static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp,
		     void *socketp)
{
	struct loop *l = userp;
	struct epoll_event ev = { .data.u64 = (guint32)fd };
	int op = socketp ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;

	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		if (socketp)
			epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
		g_hash_table_remove(l->unwatched, GINT_TO_POINTER(fd));
		return 0;
	}
	ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) |
		    ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
	if (epoll_ctl(l->epfd, op, fd, &ev) != 0) {
		op = errno == EEXIST ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
		if ((errno == EEXIST || errno == ENOENT) &&
		    epoll_ctl(l->epfd, op, fd, &ev) == 0)
			goto added;
		/*
		 * Not -1: that would kill the whole multi handle.  The socket
		 * is handed to curl at every turn of the loop instead, which
		 * turns at least every UNWATCHED_POLL_MS while it lasts.
		 */
		log_msg(LOG_LEVEL_WARNING,
			"epoll_ctl of socket %d: %s (polled every %d ms "
			"instead)",
			fd, g_strerror(errno), UNWATCHED_POLL_MS);
		g_hash_table_add(l->unwatched, GINT_TO_POINTER(fd));
		return 0;
	}
added:
	g_hash_table_remove(l->unwatched, GINT_TO_POINTER(fd));
	if (!socketp)
		curl_multi_assign(l->multi, fd, l);
	return 0;
}

/* -- starting attempts -------------------------------------------------- */

static void setopt_common(struct http *http, struct attempt *a, CURL *easy)
{
	curl_easy_setopt(easy, CURLOPT_PRIVATE, a);
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, a->errbuf);
	curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	/* One transfer per connection: the budget counts both as one. */
	curl_easy_setopt(easy, CURLOPT_HTTP_VERSION,
			 (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
	/* Whole objects arrive in 128 KiB reads and callbacks, not 16 KiB
	 * ones (1.17x the files/s of the DLIO load). */
	curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, 128L << 10);
	curl_easy_setopt(easy, CURLOPT_USERAGENT, http->user_agent);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)(http->connect_timeout * 1000));
	/* A transfer that moves no byte for stall_timeout seconds is dead:
	 * on_progress() says so; curl's own check, later, is the backstop
	 * (and its timer the tick that calls on_progress() while idle). */
	curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, LOW_SPEED_LIMIT);
	curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, low_speed_time(http));
	curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(easy, CURLOPT_XFERINFODATA, a);
	if (http->request_timeout > 0)
		curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
				 (long)(http->request_timeout * 1000));
	if (http->ca_file)
		curl_easy_setopt(easy, CURLOPT_CAINFO, http->ca_file);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, a);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, a);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
	curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, lane_of(a->loop, a->ep));
	curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
	curl_easy_setopt(easy, CURLOPT_CLOSESOCKETDATA,
			 lane_of(a->loop, a->ep));
}

static void setopt_method(struct http_request *req, CURL *easy)
{
	if (!strcmp(req->method, "HEAD")) {
		curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
	} else if (req->upload) {
		gsize len;
		const void *p = g_bytes_get_data(req->upload, &len);

		curl_easy_setopt(easy, CURLOPT_POSTFIELDS, p ? p : "");
		curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE,
				 (curl_off_t)len);
		curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, req->method);
	} else if (strcmp(req->method, "GET") != 0) {
		curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, req->method);
	}
}

/* "WHAT via ENDPOINT (attempt k/N, T s): " or "WHAT: " without endpoint. */
static char *chain_prefix(const struct http_request *req,
			  const struct endpoint *ep)
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

static void *done_thread(void *data)
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
static void finish(struct http *http, struct http_request *req,
		   struct attempt *a, struct http_response *resp,
		   const GError *error)
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
static void fail_request(struct http *http, struct http_request *req,
			 const struct endpoint *ep, struct attempt *a,
			 struct http_response *resp, GError *error)
{
	g_autofree char *prefix = chain_prefix(req, ep);

	g_prefix_error(&error, "%s", prefix);
	finish(http, req, a, resp, error);
	g_error_free(error);
}

static gboolean hedgeable(struct http *http, const struct http_request *req)
{
	return req->hedge && req->idempotent && req->pinned < 0 &&
	       http->endpoints->len > 1;
}

long low_speed_time(const struct http *http)
{
	return (long)MAX(1, http->stall_timeout) + 2;
}

/* Gives @a an easy handle set up for @url; FALSE: curl_easy_init() failed. */
gboolean curl_setup(struct loop *l, struct attempt *a, const char *url)
{
	a->easy = easy_get(l);
	if (!a->easy)
		return FALSE;
	setopt_common(l->http, a, a->easy);
	setopt_method(a->req, a->easy);
	curl_easy_setopt(a->easy, CURLOPT_URL, url);
	curl_easy_setopt(a->easy, CURLOPT_HTTPHEADER, a->req_headers);
	return TRUE;
}

/* A new attempt at @url, on the direct path to @addr when it has one
 * (direct_usable()), else on curl; NULL when curl has no handle. */
static struct attempt *attempt_new(struct loop *l, struct http_request *req,
				   struct endpoint *ep, const char *url,
				   GPtrArray *headers,
				   const struct direct_addr *addr)
{
	struct attempt *a = g_new0(struct attempt, 1);
	guint i;

	a->http = l->http;
	a->loop = l;
	a->req = req;
	a->ep = ep;
	a->moved_us = g_get_monotonic_time();
	a->body = bufpool_buf_new(req->shareable ? l->http->shared_bodies
						 : l->http->bodies,
				  req->body_reserve);
	a->headers =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	for (i = 0; i < headers->len; i++) {
		const char *h = g_ptr_array_index(headers, i);

		a->ranged |= !g_ascii_strncasecmp(h, "Range:", 6);
		a->req_headers = curl_slist_append(a->req_headers, h);
	}
	/* No "Expect: 100-continue" round trip for small PUTs. */
	a->req_headers = curl_slist_append(a->req_headers, "Expect:");
	if (addr->len) {
		a->d = direct_new(l->http, url, headers, addr);
		a->direct = TRUE;
		return a;
	}
	if (!curl_setup(l, a, url)) {
		attempt_free(a);
		return NULL;
	}
	return a;
}

/*
 * An attempt booked before prepare() runs (without the lock), so that
 * nothing else takes its slot, its probe or its ramp token meanwhile.
 */
struct booking {
	struct endpoint *ep;
	gboolean hedge;
	gboolean probe;
	gboolean on_ejected;
};

/* Under http->lock. */
static void book(struct loop *l, struct booking *b)
{
	struct endpoint *ep = b->ep;

	b->on_ejected = ep->ejected;
	l->running++;
	lane_of(l, ep)->inflight++;
	ep->inflight++;
	ep->requests++;
	if (b->hedge)
		ep->hedges++;
	if (b->probe)
		ep->probing = TRUE;
}

/* Gives back what book() took but the counters.  Under http->lock. */
static void unbook(struct loop *l, struct endpoint *ep, gboolean probe)
{
	l->running--;
	lane_of(l, ep)->inflight--;
	ep->inflight--;
	if (probe)
		ep->probing = FALSE;
}

void curl_register(struct loop *l, struct attempt *a)
{
	CURLMcode mc;

	/* An idle direct connection gives curl its slot, rather than leave
	 * the transfer waiting for one of curl's (curl_cap). */
	direct_make_room(l);
	mc = curl_multi_add_handle(l->multi, a->easy);
	if (mc != CURLM_OK) {
		/* Ends in reap(), with the reason, like any failed transfer. */
		g_snprintf(a->errbuf, CURL_ERROR_SIZE,
			   "curl_multi_add_handle: %s",
			   curl_multi_strerror(mc));
		g_ptr_array_add(l->add_failed, a);
	}
}

static void attempt_register(struct loop *l, struct attempt *a)
{
	struct http_request *req = a->req;

	req->running[a->hedge] = a;
	if (!a->hedge && hedgeable(l->http, req)) {
		a->hedge_link.data = a;
		g_queue_push_tail_link(&l->hedge_wait, &a->hedge_link);
	}
	if (a->d)
		direct_begin(l, a);
	else
		curl_register(l, a);
}

/*
 * Starts a round of @req as booked in @b, or its duplicate.  A failure to
 * prepare the primary ends the request; a duplicate is just dropped.
 */
static void attempt_start(struct loop *l, struct http_request *req,
			  const struct booking *b, gint64 now)
{
	struct http *http = l->http;
	struct endpoint *ep = b->ep;
	g_autoptr(GString) url = g_string_new(ep->url);
	g_autoptr(GPtrArray) headers = g_ptr_array_new_with_free_func(g_free);
	GError *error = NULL;
	gpointer tag = NULL;
	struct direct_addr addr;
	struct attempt *a;

	if (!b->hedge) {
		req->attempt++;
		req->round_us = now;
		req->last_ep = ep;
	}
	/* Its turn came after its caller gave up on it: nothing is sent. */
	if (http_cancel_is_set(req->cancel)) {
		error = caller_cancelled_error();
		goto fail;
	}
	if (!req->prepare(&ep->pub, g_get_real_time() / G_USEC_PER_SEC, url,
			  headers, &tag, req->data, &error))
		goto fail;
	direct_usable(http, req, ep, url->str, &addr);
	a = attempt_new(l, req, ep, url->str, headers, &addr);
	if (!a) {
		g_set_error(&error, BFS_ERROR, ENOMEM, "curl_easy_init failed");
		goto fail;
	}
	a->tag = tag;
	a->hedge = b->hedge;
	a->probe = b->probe;
	a->on_ejected = b->on_ejected;
	a->start_us = now;
	attempt_register(l, a);
	if (b->hedge && log_enabled(LOG_LEVEL_DEBUG))
		log_msg(LOG_LEVEL_DEBUG,
			"%s: hedged on %s after %.3f s on %s (attempt %u/%u)",
			req->what, ep->url, (now - req->round_us) / 1e6,
			req->running[0] ? req->running[0]->ep->url : "?",
			req->attempt, req->max_attempts);
	return;
fail:
	/* Not started after all: off the books. */
	pthread_mutex_lock(&http->lock);
	unbook(l, ep, b->probe);
	ep->requests--;
	if (b->hedge)
		ep->hedges--;
	pthread_mutex_unlock(&http->lock);
	if (!b->hedge) {
		fail_request(http, req, ep, NULL, NULL, error);
		return;
	}
	if (log_enabled(LOG_LEVEL_DEBUG))
		log_msg(LOG_LEVEL_DEBUG, "%s: no hedge on %s: %s", req->what,
			ep->url, error->message);
	g_error_free(error);
}

/* Takes a finished or cancelled attempt off the books of the engine. */
static void attempt_unlink(struct loop *l, struct attempt *a)
{
	struct http *http = l->http;

	if (a->easy)
		curl_multi_remove_handle(l->multi, a->easy);
	else /* ended, perhaps not reaped yet */
		g_ptr_array_remove_fast(l->ddone, a);
	a->req->running[a->hedge] = NULL;
	if (a->hedge_link.data) {
		g_queue_unlink(&l->hedge_wait, &a->hedge_link);
		a->hedge_link.data = NULL;
	}
	pthread_mutex_lock(&http->lock);
	unbook(l, a->ep, a->probe);
	a->ep->bytes += a->received;
	pthread_mutex_unlock(&http->lock);
}

/*
 * Aborts a running attempt: its transfer (and connection) is dropped.  It
 * ran at least this long, which is worth knowing when it was slow.
 */
static void attempt_cancel(struct loop *l, struct attempt *a, gint64 now)
{
	struct http *http = l->http;
	gint64 took = now - a->start_us;

	pthread_mutex_lock(&http->lock);
	if (took > latency_now(a->ep, fastest_ewma(http), now))
		ewma_add(http, a->ep, took, now);
	pthread_mutex_unlock(&http->lock);
	attempt_unlink(l, a);
	attempt_free(a);
}

/* -- judging attempts --------------------------------------------------- */

static gboolean curl_code_is_transient(CURLcode rc)
{
	switch (rc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_WEIRD_SERVER_REPLY:
		return TRUE;
	default:
		return FALSE;
	}
}

/*
 * Everything curl knows about a failed transfer, in one clause:
 * "curl 7 (Couldn't connect to server): Failed to connect to 127.0.0.1
 * port 1 after 0 ms: Connection refused [os errno 111: Connection
 * refused]".
 */
static GError *transport_error(struct attempt *a, CURLcode rc)
{
	g_autoptr(GString) msg = g_string_new(NULL);
	long os_errno = 0, verify = 0;
	int code;

	if (a->overflow)
		return g_error_new(BFS_ERROR, EIO,
				   "response body exceeds the %" G_GSIZE_FORMAT
				   " bytes expected",
				   a->req->body_limit);
	if (a->stalled)
		return g_error_new(BFS_ERROR, ETIMEDOUT,
				   "stalled: no byte moved for %.1f s "
				   "(stall_timeout), %" CURL_FORMAT_CURL_OFF_T
				   " body bytes in",
				   (g_get_monotonic_time() - a->moved_us) / 1e6,
				   a->moved_dl);
	if (a->direct) {
		g_string_printf(msg, "HTTP/1.1 (direct): %s", a->errbuf);
		if (a->os_errno)
			g_string_append_printf(msg, " [os errno %d: %s]",
					       a->os_errno,
					       g_strerror(a->os_errno));
		return g_error_new_literal(
			BFS_ERROR,
			rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO,
			msg->str);
	}
	g_string_printf(msg, "curl %d (%s)", rc, curl_easy_strerror(rc));
	if (a->errbuf[0])
		g_string_append_printf(msg, ": %s", a->errbuf);
	curl_easy_getinfo(a->easy, CURLINFO_OS_ERRNO, &os_errno);
	if (os_errno)
		g_string_append_printf(msg, " [os errno %ld: %s]", os_errno,
				       g_strerror((int)os_errno));
	if ((rc == CURLE_PEER_FAILED_VERIFICATION ||
	     rc == CURLE_SSL_CONNECT_ERROR) &&
	    curl_easy_getinfo(a->easy, CURLINFO_SSL_VERIFYRESULT, &verify) ==
		    CURLE_OK &&
	    verify != 0)
		g_string_append_printf(msg, " [TLS verify result %ld: %s]",
				       verify,
				       X509_verify_cert_error_string(verify));
	code = rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : EIO;
	return g_error_new_literal(BFS_ERROR, code, msg->str);
}

static enum http_verdict default_judge(const struct http_response *resp,
				       GError **error)
{
	if (resp->status >= 200 && resp->status < 300)
		return HTTP_VERDICT_DONE;
	g_set_error(error, BFS_ERROR, EIO, "HTTP %ld", resp->status);
	return resp->status >= 500 ? HTTP_VERDICT_RETRY : HTTP_VERDICT_FAIL;
}

/* The response of a finished attempt, borrowing from it. */
static void response_init(struct http_response *resp, struct attempt *a)
{
	memset(resp, 0, sizeof(*resp));
	resp->status = a->status;
	resp->body = a->body;
	resp->headers = a->headers;
	resp->endpoint = &a->ep->pub;
	resp->tag = a->tag;
	resp->attempt = a->req->attempt - a->req->unreachable;
	resp->max_attempts = a->req->max_attempts;
	resp->elapsed = (g_get_monotonic_time() - a->req->start_us) / 1e6;
}

static enum http_verdict judge_attempt(struct attempt *a, CURLcode rc,
				       struct http_response *resp,
				       GError **error)
{
	struct http_request *req = a->req;

	if (rc != CURLE_OK && a->overflow && a->ranged &&
	    a->body_status == 200) {
		/* The server ignored the Range and sends the whole object,
		 * more than the range: another endpoint may honour it; no
		 * retry here can change it. */
		*error = g_error_new(BFS_ERROR, EIO,
				     "HTTP 200 to a GET with Range: the server "
				     "ignored the Range and sends the whole "
				     "object, more than the %" G_GSIZE_FORMAT
				     " bytes asked for",
				     req->body_limit);
		return req->range_200++ ? HTTP_VERDICT_FAIL
					: HTTP_VERDICT_RETRY;
	}
	if (rc != CURLE_OK && a->cancelled) {
		*error = caller_cancelled_error();
		return HTTP_VERDICT_FAIL;
	}
	if (rc != CURLE_OK) {
		*error = transport_error(a, rc);
		/* More bytes than asked for contradicts the request, like a
		 * wrong Content-Range: retried (s3.h), never returned. */
		return curl_code_is_transient(rc) || a->overflow || a->stalled
			       ? HTTP_VERDICT_RETRY
			       : HTTP_VERDICT_FAIL;
	}
	return req->judge ? req->judge(resp, req->data, error)
			  : default_judge(resp, error);
}

static enum outcome outcome_of(const struct attempt *a, CURLcode rc)
{
	if (rc != CURLE_OK)
		return (curl_code_is_transient(rc) || a->stalled) &&
				       !a->overflow
			       ? OUTCOME_FAILED
			       : OUTCOME_NEUTRAL;
	return a->status >= 500 ? OUTCOME_FAILED : OUTCOME_OK;
}

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

/* -- ending rounds ------------------------------------------------------ */

/* Under http->lock. */
static void hedge_sample(struct http *http, gint64 us)
{
	http->hedge_us[http->hedge_pos] = (guint32)MIN(us, G_MAXUINT32);
	http->hedge_pos = (http->hedge_pos + 1) % HEDGE_RING;
	http->hedge_len = MIN(http->hedge_len + 1, HEDGE_RING);
	if (!http->hedge_due_us)
		http->hedge_due_us = g_get_monotonic_time() + TICK_US;
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

/* Whether a healthy endpoint other than @ep exists.  Under http->lock. */
static gboolean another_healthy(struct http *http, const struct endpoint *ep)
{
	guint i;

	for (i = 0; i < http->endpoints->len; i++) {
		const struct endpoint *e = endpoint_at(http, i);

		if (e != ep && !e->ejected)
			return TRUE;
	}
	return FALSE;
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

static void attempt_done(struct loop *l, struct attempt *a, CURLcode rc)
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

/* -- scheduling --------------------------------------------------------- */

/* Whether a transfer to @lane must open a connection (no idle one left). */
static gboolean needs_connection(const struct lane *lane)
{
	return lane->sockets <= lane->inflight;
}

/* Under http->lock. */
static void ramp_refill(struct http *http, gint64 now)
{
	gint64 tick = now / TICK_US;
	double n;

	if (tick == http->tick)
		return;
	http->tick = tick;
	n = http->ramp_per_tick * g_rand_double_range(http->rand, 0.5, 1.5);
	http->tokens = MAX(1, (guint)(n + 0.5));
}

/*
 * Whether a transfer of @l to @ep may start now; takes a token if it must
 * open a connection.  The tokens are the engine's, shared by the loops.
 * Under http->lock.
 */
static gboolean ramp_allows(struct loop *l, const struct endpoint *ep,
			    gint64 now)
{
	struct http *http = l->http;

	if (!needs_connection(lane_of(l, ep)))
		return TRUE;
	ramp_refill(http, now);
	if (!http->tokens) {
		l->ramp_blocked = TRUE;
		return FALSE;
	}
	http->tokens--;
	return TRUE;
}

/*
 * A retry its caller cancelled ends now, with ECANCELED, not when its
 * backoff is due (up to backoff_max, or retry_deadline for a store that
 * does not answer): drain() and the unmount's wait for aborts would run
 * out.  Found within a poll tick (MAX_POLL_MS) of the cancel; it holds no
 * slot or attempt, only its place in @l->waiting.
 */
static void drop_cancelled_retries(struct loop *l)
{
	GList *it = l->waiting.head;

	while (it) {
		GList *next = it->next;
		struct http_request *req = it->data;

		if (http_cancel_is_set(req->cancel)) {
			g_queue_delete_link(&l->waiting, it);
			fail_request(l->http, req, req->last_ep, NULL, NULL,
				     caller_cancelled_error());
		}
		it = next;
	}
}

/*
 * Moves to @l's ready queue what it has to do: its retries now due, what
 * submitters admitted to it, and, for each slot of its still unclaimed,
 * the oldest submission that found no room anywhere.
 */
static void take_work(struct loop *l, gint64 now)
{
	struct http *http = l->http;
	GQueue batch = G_QUEUE_INIT;
	struct http_request *req;
	guint due = 0;

	drop_cancelled_retries(l);
	while ((req = g_queue_peek_head(&l->waiting)) && req->due_us <= now) {
		g_queue_push_tail(&l->ready, g_queue_pop_head(&l->waiting));
		due++;
	}
	pthread_mutex_lock(&http->lock);
	l->queued += due;
	batch = l->inbox;
	g_queue_init(&l->inbox);
	while (http->pending.length && l->running + l->queued < l->slots) {
		g_queue_push_tail(&batch, g_queue_pop_head(&http->pending));
		l->queued++;
	}
	pthread_mutex_unlock(&http->lock);
	while ((req = g_queue_pop_head(&batch))) {
		req->loop = l;
		req->start_us = now;
		g_hash_table_add(l->live, req);
		g_queue_push_tail(&l->ready, req);
	}
}

/* Starts queued rounds, first come first served, within the budget. */
static void start_ready(struct loop *l, gint64 now)
{
	struct http *http = l->http;
	struct http_request *req;

	while ((req = g_queue_peek_head(&l->ready)) && l->running < l->slots) {
		struct booking b = { 0 };

		pthread_mutex_lock(&http->lock);
		b.ep = pick_endpoint(http, req, now, &b.probe);
		if (!ramp_allows(l, b.ep, now)) {
			pthread_mutex_unlock(&http->lock);
			break;
		}
		if (!req->attempt)
			http->budget = MIN(http->budget + BUDGET_PER_REQUEST,
					   BUDGET_MAX);
		book(l, &b);
		l->queued--;
		pthread_mutex_unlock(&http->lock);
		g_queue_pop_head(&l->ready);
		attempt_start(l, req, &b, now);
	}
}

/*
 * The p95 is sorted afresh at most once a tick, not per sample, once the
 * ring holds enough samples for that to cost anything.  Under http->lock.
 */
static gint64 hedge_delay(struct http *http, gint64 now)
{
	guint32 v[HEDGE_RING];

	if (http->hedge_due_us &&
	    (now >= http->hedge_due_us || http->hedge_len < 32)) {
		http->hedge_due_us = 0;
		memcpy(v, http->hedge_us, http->hedge_len * sizeof(v[0]));
		http->hedge_delay_us =
			MAX(http->hedge_min_us,
			    (gint64)percentile(v, http->hedge_len, 95));
	}
	return http->hedge_delay_us;
}

/*
 * Books the duplicate of @a on another healthy endpoint, in a slot of
 * @a's loop (the request stays there).  FALSE when it must wait; TRUE
 * with b->ep NULL when there is no other endpoint to hedge on.
 */
static gboolean book_hedge(struct loop *l, struct attempt *a, struct booking *b,
			   gint64 now)
{
	struct http *http = l->http;
	gboolean go = TRUE;

	pthread_mutex_lock(&http->lock);
	/* Queued requests have waited longer than any hedge. */
	if (http->pending.length) {
		l->hedge_blocked = TRUE;
		go = FALSE;
	} else {
		b->ep = pick_healthy(http, a->ep, now);
		b->hedge = TRUE;
		if (b->ep && !ramp_allows(l, b->ep, now))
			go = FALSE;
		else if (b->ep)
			book(l, b);
	}
	pthread_mutex_unlock(&http->lock);
	return go;
}

/* Duplicates the attempts that have run too long, if there is room. */
static void start_hedges(struct loop *l, gint64 now)
{
	struct http *http = l->http;
	gint64 delay;
	GList *lk;

	if (!l->hedge_wait.length)
		return;
	pthread_mutex_lock(&http->lock);
	delay = hedge_delay(http, now);
	pthread_mutex_unlock(&http->lock);
	while ((lk = l->hedge_wait.head)) {
		struct attempt *a = lk->data;
		struct booking b = { 0 };

		if (a->start_us + delay > now)
			break;
		if (l->running >= l->slots || l->ready.length) {
			l->hedge_blocked = TRUE;
			break;
		}
		if (!book_hedge(l, a, &b, now))
			break;
		g_queue_unlink(&l->hedge_wait, lk);
		lk->data = NULL;
		if (b.ep)
			attempt_start(l, a->req, &b, now);
	}
}

static void schedule(struct loop *l)
{
	gint64 now = g_get_monotonic_time();

	l->ramp_blocked = FALSE;
	l->hedge_blocked = FALSE;
	take_work(l, now);
	start_ready(l, now);
	start_hedges(l, now);
}

static void reap(struct loop *l)
{
	CURLMsg *msg;
	int left;

	while (l->add_failed->len > 0)
		attempt_done(l, g_ptr_array_steal_index(l->add_failed, 0),
			     CURLE_FAILED_INIT);
	while (l->ddone->len > 0) {
		struct attempt *a = g_ptr_array_steal_index(l->ddone, 0);

		attempt_done(l, a, a->rc);
	}
	while ((msg = curl_multi_info_read(l->multi, &left))) {
		struct attempt *a = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE,
				  (char **)&a);
		attempt_done(l, a, msg->data.result);
	}
}

gint64 until(gint64 due, gint64 now)
{
	return MAX(0, (due - now + 999) / 1000);
}

static int poll_timeout_ms(struct loop *l)
{
	struct http *http = l->http;
	gint64 now = g_get_monotonic_time();
	long curl_ms = -1;
	gint64 ms = MAX_POLL_MS;
	struct http_request *next = g_queue_peek_head(&l->waiting);
	struct attempt *hedge = g_queue_peek_head(&l->hedge_wait);

	curl_multi_timeout(l->multi, &curl_ms);
	if (curl_ms >= 0 && curl_ms < ms)
		ms = curl_ms;
	if (g_hash_table_size(l->unwatched) > 0)
		ms = MIN(ms, UNWATCHED_POLL_MS);
	if (l->add_failed->len > 0 || l->ddone->len > 0)
		ms = 0;
	ms = direct_timeout_ms(l, ms, now);
	if (next)
		ms = MIN(ms, until(next->due_us, now));
	if (!l->ramp_blocked && (!hedge || l->hedge_blocked))
		return (int)ms;
	pthread_mutex_lock(&http->lock);
	if (l->ramp_blocked)
		ms = MIN(ms, until((http->tick + 1) * TICK_US, now));
	/* A hedge held back by the budget waits for a transfer to end. */
	if (hedge && !l->hedge_blocked)
		ms = MIN(ms,
			 until(hedge->start_us + hedge_delay(http, now), now));
	pthread_mutex_unlock(&http->lock);
	return (int)ms;
}

/* -- shutdown ----------------------------------------------------------- */

static GError *cancelled_error(void)
{
	return g_error_new(BFS_ERROR, ECANCELED,
			   "cancelled: the HTTP engine is shutting down");
}

static void request_cancel(struct loop *l, struct http_request *req)
{
	gint64 now = g_get_monotonic_time();
	guint i;

	for (i = 0; i < G_N_ELEMENTS(req->running); i++)
		if (req->running[i])
			attempt_cancel(l, req->running[i], now);
	fail_request(l->http, req, req->last_ep, NULL, NULL, cancelled_error());
}

/* Cancels every request @l has taken, at the end of its thread. */
static void loop_cancel_all(struct loop *l)
{
	g_autoptr(GPtrArray) all = g_ptr_array_new();
	GHashTableIter it;
	gpointer key;
	guint i;

	g_queue_clear(&l->ready);
	g_queue_clear(&l->waiting);
	g_ptr_array_set_size(l->add_failed, 0); /* cancelled with their own */
	g_hash_table_iter_init(&it, l->live);
	while (g_hash_table_iter_next(&it, &key, NULL))
		g_ptr_array_add(all, key);
	for (i = 0; i < all->len; i++)
		request_cancel(l, g_ptr_array_index(all, i));
}

/*
 * Once the loops are gone: cancels what no loop took (http->pending and
 * the inboxes).  done() may submit more, which are cancelled in turn
 * until none is left; then later submissions are refused.
 */
static void cancel_untaken(struct http *http)
{
	for (;;) {
		GQueue batch = G_QUEUE_INIT;
		struct http_request *req;
		guint i;

		pthread_mutex_lock(&http->lock);
		batch = http->pending;
		g_queue_init(&http->pending);
		for (i = 0; i < http->nloops; i++) {
			struct loop *l = &http->loops[i];

			while ((req = g_queue_pop_head(&l->inbox)))
				g_queue_push_tail(&batch, req);
			l->queued = 0;
		}
		http->closed = !batch.length;
		pthread_mutex_unlock(&http->lock);
		if (!batch.length)
			return;
		while ((req = g_queue_pop_head(&batch)))
			fail_request(http, req, NULL, NULL, NULL,
				     cancelled_error());
	}
}

/* -- the event threads -------------------------------------------------- */

/*
 * Wakes @l's thread, once however many submitters call it before the
 * thread takes its work: the flag is cleared (loop_woken()) before
 * take_work() looks.
 */
static void loop_wake(struct loop *l)
{
	guint64 one = 1;

	if (!g_atomic_int_compare_and_exchange(&l->wake_armed, 0, 1))
		return;
	while (write(l->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

/*
 * Drains the eventfd, then clears the flag: a submitter whose wake-up was
 * skipped in between queued its work before the clear, and take_work()
 * runs after it.  The other order could leave the flag set with nothing
 * to read, and every later wake-up skipped.
 */
static void loop_woken(struct loop *l)
{
	guint64 n;

	while (read(l->wake_fd, &n, sizeof(n)) < 0 && errno == EINTR)
		;
	g_atomic_int_set(&l->wake_armed, 0);
}

static void socket_action(struct loop *l, curl_socket_t fd, int what)
{
	CURLMcode mc;
	int running;

	mc = curl_multi_socket_action(l->multi, fd, what, &running);
	if (mc != CURLM_OK && mc != CURLM_BAD_SOCKET)
		log_msg(LOG_LEVEL_WARNING, "curl_multi_socket_action: %s",
			curl_multi_strerror(mc));
}

/* Hands curl the sockets that are ready, then its timers that are due. */
static void dispatch(struct loop *l, const struct epoll_event *ev, int n)
{
	long ms = -1;
	gint64 now;
	guint j, nfd;
	int i;

	for (i = 0; i < n; i++) {
		int what = 0;

		if (ev[i].data.u64 & DIRECT_TAG) {
			struct dconn *c = direct_conn_of(l, ev[i].data.u64);

			/* NULL: closed by an event before it in the batch. */
			if (c)
				direct_event(l, c, ev[i].events);
			continue;
		}
		if (ev[i].data.fd == l->wake_fd) {
			loop_woken(l);
			continue;
		}
		if (ev[i].events & (EPOLLIN | EPOLLHUP))
			what |= CURL_CSELECT_IN;
		if (ev[i].events & EPOLLOUT)
			what |= CURL_CSELECT_OUT;
		/* An error makes curl do its I/O, whatever it waits for:
		 * given CURL_CSELECT_ERR alone (a reset seen by epoll_wait()
		 * before the socket is closed: no EPOLLIN or EPOLLHUP yet),
		 * curl fails with "select/poll returned error" and no errno,
		 * where its recv() or send() would have reported the
		 * socket's own error (ECONNRESET, say). */
		if (ev[i].events & EPOLLERR)
			what |= CURL_CSELECT_IN | CURL_CSELECT_OUT;
		socket_action(l, ev[i].data.fd, what);
	}
	if (g_hash_table_size(l->unwatched) > 0) {
		/* A copy: curl's callbacks change the set. */
		g_autofree gpointer *fds =
			g_hash_table_get_keys_as_array(l->unwatched, &nfd);

		for (j = 0; j < nfd; j++)
			socket_action(l, GPOINTER_TO_INT(fds[j]),
				      CURL_CSELECT_IN | CURL_CSELECT_OUT);
	}
	/* curl_multi_timeout() says 0 only once a timer has expired (it
	 * rounds up), and is asked afresh each time, so none is lost. */
	curl_multi_timeout(l->multi, &ms);
	if (ms == 0)
		socket_action(l, CURL_SOCKET_TIMEOUT, 0);
	now = g_get_monotonic_time();
	if (l->direct.length)
		direct_sweep(l, now);
	direct_expire_idle(l, now);
}

static gpointer event_thread(gpointer data)
{
	struct loop *l = data;
	struct http *http = l->http;
	struct epoll_event ev[EPOLL_BATCH];

	for (;;) {
		gboolean stop;
		int n;

		pthread_mutex_lock(&http->lock);
		stop = http->stopping;
		pthread_mutex_unlock(&http->lock);
		if (stop)
			break;
		/* Fills the slots reap() freed before sleeping. */
		schedule(l);
		n = epoll_wait(l->epfd, ev, EPOLL_BATCH, poll_timeout_ms(l));
		if (n < 0 && errno != EINTR)
			g_error("epoll_wait of HTTP event thread %u: %s",
				l->index, g_strerror(errno));
		dispatch(l, ev, MAX(n, 0));
		reap(l);
	}
	loop_cancel_all(l);
	return NULL;
}

/* -- public ------------------------------------------------------------- */

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
		const struct endpoint *ep = g_ptr_array_index(http->endpoints, i);

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

/* Sets up loop @i, without its thread. */
static gboolean loop_init(struct http *http, guint i, GError **error)
{
	struct loop *l = &http->loops[i];

	l->http = http;
	l->index = i;
	l->epfd = l->wake_fd = -1;
	l->slots = http->max_connections / http->nloops +
		   (i < http->max_connections % http->nloops);
	l->lanes = g_new0(struct lane, http->endpoints->len);
	for (guint j = 0; j < http->endpoints->len; j++)
		l->lanes[j].loop = l;
	l->dconns = g_hash_table_new(NULL, NULL);
	g_queue_init(&l->direct);
	l->ddone = g_ptr_array_new();
	g_queue_init(&l->inbox);
	g_queue_init(&l->ready);
	g_queue_init(&l->waiting);
	g_queue_init(&l->hedge_wait);
	l->live = g_hash_table_new(NULL, NULL);
	l->spare_easy = g_ptr_array_new_with_free_func(
		(GDestroyNotify)curl_easy_cleanup);
	l->rand = g_rand_new();
	l->unwatched = g_hash_table_new(NULL, NULL);
	l->add_failed = g_ptr_array_new();
	l->multi = curl_multi_init();
	if (!l->multi) {
		g_set_error(error, BFS_ERROR, EIO, "curl_multi_init failed");
		return FALSE;
	}
	/* The budget already holds transfers back; these keep curl from
	 * opening more sockets than the slice, and keep idle ones for
	 * reuse. */
	curl_multi_setopt(l->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
			  (long)l->slots);
	l->curl_cap = l->slots;
	curl_multi_setopt(l->multi, CURLMOPT_MAXCONNECTS, (long)l->slots);
	curl_multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l);
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	l->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (l->epfd < 0 || l->wake_fd < 0) {
		g_set_error(error, BFS_ERROR, errno,
			    "cannot set up HTTP event thread %u: %s: %s", i,
			    l->epfd < 0 ? "epoll_create1" : "eventfd",
			    g_strerror(errno));
		return FALSE;
	}
	{
		struct epoll_event ev = { .events = EPOLLIN,
					  .data.u64 = (guint32)l->wake_fd };

		if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wake_fd, &ev) != 0) {
			g_set_error(error, BFS_ERROR, errno,
				    "cannot set up HTTP event thread %u: "
				    "epoll_ctl: %s",
				    i, g_strerror(errno));
			return FALSE;
		}
	}
	return TRUE;
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

static void loop_clear(struct loop *l)
{
	/* The idle direct connections (the rest went with their attempts). */
	direct_close_all(l);
	g_clear_pointer(&l->dconns, g_hash_table_unref);
	g_clear_pointer(&l->ddone, g_ptr_array_unref);
	g_clear_pointer(&l->spare_easy, g_ptr_array_unref);
	/* Closes the idle connections, through on_close_socket(); the
	 * epoll set goes after it. */
	g_clear_pointer(&l->multi, curl_multi_cleanup);
	if (l->http && l->epfd >= 0)
		close(l->epfd);
	if (l->http && l->wake_fd >= 0)
		close(l->wake_fd);
	l->epfd = l->wake_fd = -1;
	g_clear_pointer(&l->live, g_hash_table_unref);
	g_clear_pointer(&l->rand, g_rand_free);
	g_clear_pointer(&l->unwatched, g_hash_table_unref);
	g_clear_pointer(&l->add_failed, g_ptr_array_unref);
	g_clear_pointer(&l->lanes, g_free);
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

/*
 * Under http->lock: @req goes to the loop with the most free slots, or
 * waits in http->pending when none has one (or older submissions already
 * wait there: first come, first served).  Returns the loop to wake.
 */
static struct loop *admit(struct http *http, struct http_request *req)
{
	struct loop *best = NULL;
	guint best_free = 0, i;

	if (!http->stopping && !http->pending.length) {
		for (i = 0; i < http->nloops; i++) {
			struct loop *l = &http->loops[i];
			guint used = l->running + l->queued;
			guint free = used < l->slots ? l->slots - used : 0;

			if (free > best_free) {
				best = l;
				best_free = free;
			}
		}
	}
	if (!best) {
		g_queue_push_tail(&http->pending, req);
		return NULL;
	}
	g_queue_push_tail(&best->inbox, req);
	best->queued++;
	return best;
}

/*
 * Hands the refusal of @req (with @error, copied) to a done thread, as
 * every other done() is, when one will still run it: callers may submit
 * under their own locks, which done() takes (the readahead engine does).
 * FALSE when the done threads are stopping and this is not one of them.
 */
static gboolean defer_refusal(struct http *http, struct http_request *req,
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
