/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_sched.c - admission and a loop's scheduling: requests taken from
 * the queues, attempts booked and started within the loop's slots, the
 * ramp-up of new connections, and hedging.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <curl/curl.h>

#include "bufpool.h"
#include "error.h"
#include "http_engine.h"
#include "log.h"

static gboolean hedgeable(struct http *http, const struct http_request *req)
{
	return req->hedge && req->idempotent && req->pinned < 0 &&
	       http->endpoints->len > 1;
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
void attempt_unlink(struct loop *l, struct attempt *a)
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
void attempt_cancel(struct loop *l, struct attempt *a, gint64 now)
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

/* Under http->lock. */
void hedge_sample(struct http *http, gint64 us)
{
	http->hedge_us[http->hedge_pos] = (guint32)MIN(us, G_MAXUINT32);
	http->hedge_pos = (http->hedge_pos + 1) % HEDGE_RING;
	http->hedge_len = MIN(http->hedge_len + 1, HEDGE_RING);
	if (!http->hedge_due_us)
		http->hedge_due_us = g_get_monotonic_time() + TICK_US;
}

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
		b.ep = pick_endpoint(http, req, l, now, &b.probe);
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
gint64 hedge_delay(struct http *http, gint64 now)
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
		b->ep = pick_healthy(http, a->ep, l, now);
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

void schedule(struct loop *l)
{
	gint64 now = g_get_monotonic_time();

	l->ramp_blocked = FALSE;
	l->hedge_blocked = FALSE;
	take_work(l, now);
	start_ready(l, now);
	start_hedges(l, now);
}

/*
 * Under http->lock: @req goes to the loop with the most free slots, or
 * waits in http->pending when none has one (or older submissions already
 * wait there: first come, first served).  Returns the loop to wake.
 */
struct loop *admit(struct http *http, struct http_request *req)
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
