/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http.h - the HTTP engine: event_threads libcurl multi event threads per
 * engine, and done threads (two, or one per event thread when there are
 * more) that run the requests' done callbacks.
 *
 * The engine owns the endpoints, the connection pool and the retry policy.
 * Callers build a struct http_request, hand it to http_submit() from any
 * thread and return; an event thread runs it, retries it, and finally
 * hands it to a done thread, which calls the request's done callback (so a
 * caller's work on a body overlaps the transfers still running), or, for
 * a request that asked for a quick done() and succeeded, calls it itself
 * (http_request_set_quick_done()).  A
 * request stays on the event thread that took it for its whole life,
 * retries and hedge included, and only that thread touches its curl
 * handles.  The event threads share one budget, one table of endpoint
 * health and latency, the hedging state and the counters, so what follows
 * holds for the engine as a whole, whatever event_threads is.
 *
 * What happens to a request:
 *
 *   it waits in the engine's FIFO queue for a transfer slot (see "Budget");
 *   for attempt = 1 .. max_attempts:
 *       pick an endpoint (see "Endpoints"), call prepare() to get the URL
 *       and headers (so the caller can sign for that endpoint and that
 *       moment), run the transfer;
 *       a transport failure (connect, timeout, reset, truncated body) is
 *       judged here; a complete response is judged by judge();
 *       HTTP_VERDICT_DONE ends the request, HTTP_VERDICT_FAIL ends it with
 *       judge's error, HTTP_VERDICT_RETRY schedules another attempt after
 *       a wait by the kind of fault (see "Retries").
 *   done(request, response, error) is called exactly once.
 *
 * Endpoints.  Each endpoint keeps an EWMA of the latency of its recent
 * successful attempts; an attempt goes to the healthy endpoint with the
 * smallest (attempts in flight + 1) x EWMA (an endpoint without a latency
 * yet counts as the fastest known one; ties rotate).  A latency that is not
 * renewed fades toward the fastest known one (half-life 1 s), so an
 * endpoint that looked slow for a moment gets tried again.  A retry avoids
 * the endpoint that just failed it while another healthy one exists.  A
 * request pinned to an endpoint (http_request_pin_endpoint()) always goes
 * there, and is never hedged.
 *
 * Retries.  The wait before a retry is full jitter, uniform in [0, cap],
 * the cap doubling with each failed attempt of the request, up to
 * backoff_max:
 *   - 503 (SlowDown) and 429, which ask for less, and other 5xx: cap
 *     backoff_base first;
 *   - a transfer broken on the way (reset, truncated or short body, no
 *     answer, a stall, a Content-Range that does not match): the first
 *     retry at once on a new connection, then a cap of backoff_base / 10
 *     (a new connection is the remedy, not time);
 *   - no connection at all (refused, connect timeout, no DNS answer): at
 *     once on another healthy endpoint, else a cap of at most 1 s.
 * While a request is younger than retry_deadline, the attempts that
 * reached no endpoint and those that stalled (the server took the
 * request, then sent nothing for stall_timeout) are not counted in
 * max_attempts, so a store down or silent for less than that is waited
 * for.  The age is the request's, from its submission: once a request
 * older than retry_deadline has had one such round uncounted, the next
 * one ends it with "no endpoint reachable for retry_deadline (N s)" or
 * "no endpoint answered for retry_deadline (N s)", even when the store
 * answered in between (a known limit: the deadline is not measured from
 * the start of the silence).  A round while the request has had none
 * such is counted as usual.
 * Every retry but those that reached no endpoint takes a token of the
 * retry budget, a token bucket as in the AWS SDKs: 100 tokens, half a
 * token earned by each request's first attempt and 10 a second.  A retry
 * with no token left is not dropped (a read would fail for it) but waits
 * for the tokens it lacks (at most 10 s), so a storm of faults sends the
 * store about half a retry per request plus 10 a second, not max_attempts
 * times its load.  The policy and what each fault costs are in
 * docs/RELIABILITY.md ("Retry policy").
 *
 * Health.  eject_after consecutive failures of an endpoint (connect
 * refused or timed out, reset, timeout, or HTTP 5xx) eject it, when fewer
 * than half of its last 32 judged attempts succeeded (a quarter, when no
 * other endpoint is healthy: an endpoint that answers 70% is the one to
 * keep, not to eject after a streak of bad luck): no new
 * attempt goes there while another endpoint is healthy, and one warning
 * names the endpoint and the cause chain of the failure that ejected it.
 * After eject_cooloff seconds the first request to come along is sent
 * there as the one probe; its success re-admits the endpoint (a notice),
 * its failure starts the cool-off again.  With every endpoint ejected,
 * requests still go out, so they fail (or succeed) in bounded time rather
 * than stall: each attempt to the endpoint with the best success rate
 * over its last 32 judged attempts (ties: not the one that just failed
 * this request, then fewer in flight, then in turn), so the attempts of a
 * read go to the endpoint that answers, not to one that refuses
 * connections (which, failing fast, always "failed least recently").
 *
 * Hedging.  A request with http_request_set_hedge() whose attempt has run
 * longer than max(hedge_min_delay, p95 of recent hedged requests) gets a
 * duplicate attempt on another healthy endpoint, at most one per attempt
 * round, when a transfer slot of its event thread's slice is free (the
 * duplicate runs on the same thread) and no request is queued.  The first
 * attempt judged DONE wins; the other is cancelled (its transfer
 * aborted).  A failed attempt whose twin still runs neither retries nor
 * ends the request: the retry rules apply once no attempt of the round is
 * left; a FAIL verdict then outweighs a RETRY one.
 *
 * Budget.  At most max_connections transfers run at once; the others wait
 * in the engine's FIFO queue (http_queued()), first come first served
 * across all event threads, and never fail for want of a slot.
 * Transfers speak HTTP/1.1, one per connection.  curl's connection cache
 * belongs to one multi handle, so the budget is cut into one slice per
 * event thread (max_connections / event_threads, the remainder spread);
 * each thread runs and holds at most its slice of transfers and
 * connections (idle ones stay cached and warm with TCP keepalive), so the
 * engine holds at most max_connections sockets, plus per event thread
 * curl's wakeup pair, an epoll set and an eventfd and, while a host name
 * is being resolved, the resolver's pair.  Sized within the process's
 * descriptor limit, the engine therefore never makes the process see
 * EMFILE.  A submission goes to the
 * thread with the most free slots; when none has one it waits in the
 * FIFO, whose head the first thread to free a slot takes.  New
 * connections are rate-limited, for the engine as a whole: at most
 * ramp_per_tick (+-50% jitter) are opened per 10 ms tick, so a cold pool
 * warms up instead of sending a burst of connects; a transfer that can
 * reuse an idle connection is not limited.
 *
 * The final error is the cause chain "WHAT via ENDPOINT (attempt k/N, T s):
 * CAUSE", where WHAT is the request's description (e.g. "GET
 * s3://bucket/key") and CAUSE what the transport or judge() reported.
 * Retries and hedges are logged at debug level.
 *
 * Locks: http.c says which lock protects what and their order; callbacks
 * are never called with an engine lock held.
 */
#ifndef BUCKETFS_HTTP_H
#define BUCKETFS_HTTP_H

#include <glib.h>

#include "bufpool.h"

struct http;
struct http_request;
struct http_cancel;

struct http_options {
	const char *const
		*endpoints;	/* NULL-terminated "scheme://host[:port]" */
	const char *ca_file;	/* NULL = system store */
	double connect_timeout; /* seconds */
	double stall_timeout;	/* seconds without a byte moving */
	double request_timeout; /* seconds per attempt, 0 = none */
	guint max_attempts;	/* >= 1 */
	/* Seconds after its start that a request keeps retrying attempts
	 * that reached no endpoint (connection refused, connect timeout, no
	 * DNS answer), at most a second apart, without counting them in
	 * max_attempts: a store down for a while is waited for.  0 = none:
	 * every attempt counts. */
	double retry_deadline;
	guint max_connections;	/* >= 1: transfers and sockets at once */
	double backoff_base;	/* seconds, first retry's cap (0 = 0.01) */
	double backoff_max;	/* seconds, cap of any one wait (0 = 20) */
	const char *user_agent; /* NULL = "bucketfs/VERSION" */

	/* Endpoint health: a streak of this many transport failures or 5xx
	 * ejects an endpoint (0 = 5); after eject_cooloff seconds (0 = 5) one
	 * probe request may re-admit it. */
	guint eject_after;
	double eject_cooloff;
	/* Hedging: a hedged request still running after the recent p95
	 * latency of hedged requests, and at least hedge_min_delay seconds
	 * (0 = 0.05), is duplicated on another endpoint; the first complete
	 * answer wins and the other is cancelled. */
	double hedge_min_delay;
	/* Ramp-up: new connections opened per 10 ms tick (0 = 16), with
	 * +-50% jitter, so a cold start never opens max_connections sockets
	 * at once. */
	guint ramp_per_tick;
	/* Event threads, each with its own curl multi handle and its slice
	 * of max_connections: 0 = http_default_event_threads(); at most 64,
	 * and at most max_connections. */
	guint event_threads;
	/* Response bodies come from a pool of mmap'd buffers (bufpool.h),
	 * not malloc; freed ones stay mapped for the next body, at most this
	 * many bytes of them (0 = 64 MiB), and the rest are unmapped. */
	gsize body_idle_max;
	/* GETs run on the engine's own connections, plain or TLS, their
	 * bodies received straight into the body's buffer, once curl has
	 * connected to the endpoint (http_direct.c, http_tls.c); off for a
	 * scheme while its proxy is set (http_proxy, https_proxy,
	 * all_proxy). */
	gboolean direct_receive;
};

/*
 * The event threads an engine runs when http_options.event_threads is 0:
 * a quarter of the processors this process may use, 2 to 16.  Even on
 * two busy cores a second thread pays: a lone loop, woken late and
 * serving every socket, delayed each GET of 32 readers at 20 ms by ~4 ms
 * (1.16x the files/s with two; docs/PERFORMANCE.md).  A 32-core host
 * gets 8.  Any thread.
 */
guint http_default_event_threads(void);

/*
 * Counters of one endpoint since the engine started: a snapshot, plain
 * data.  Latencies are of recent successful (DONE) attempts, a window of
 * the last 1024, from the start of the attempt to its completion; 0 when
 * there is none yet.  A hedge's loser, cancelled, counts as neither
 * success nor error.
 */
struct http_endpoint_stats {
	char url[256];
	guint64 requests;    /* attempts started */
	guint64 bytes;	     /* response body bytes received */
	guint64 errors;	     /* attempts that failed (transport or judged) */
	guint64 hedges;	     /* duplicates started here (also in requests) */
	guint64 ejections;   /* times ejected */
	guint64 direct;	     /* responses on the direct receive path */
	guint64 connects;    /* connections the direct receive path opened */
	guint64 tls_resumed; /* of those over TLS, sessions resumed */
	guint inflight;	     /* attempts running now */
	gboolean ejected;    /* now */
	double p50_ms;
	double p99_ms;
};

/* An endpoint as prepare() sees it. Borrowed for the duration of the call. */
struct http_endpoint {
	const char *url;      /* "http://127.0.0.1:9000" */
	const char *scheme;   /* "http" or "https" */
	const char *host;     /* "127.0.0.1", "[::1]", "s3.example.com" */
	const char *hostport; /* the Host header: host, plus ":port" if any */
	guint index;	      /* position in http_options.endpoints */
};

/*
 * A finished attempt's response, borrowed by judge() and done() for the
 * duration of the call.  done() may steal @body (g_steal_pointer) and
 * then owns it: bufpool_buf_free() or bufpool_buf_free_to_bytes().
 */
struct http_response {
	long status;		  /* 0 when no response arrived */
	struct bufpool_buf *body; /* never NULL while a callback runs */
	const struct http_endpoint *endpoint;
	guint attempt; /* 1-based */
	guint max_attempts;
	double elapsed;	     /* seconds since the first attempt */
	GHashTable *headers; /* lowercase name -> last value */
	gpointer tag;	     /* what prepare() left for this attempt */
};

/* The value of response header @name (lowercase), or NULL.  Borrowed. */
const char *http_response_header(const struct http_response *resp,
				 const char *name);

enum http_verdict {
	HTTP_VERDICT_DONE,  /* the response is what the caller wanted */
	HTTP_VERDICT_RETRY, /* transient: try again if attempts remain */
	HTTP_VERDICT_FAIL,  /* final: report the error set by judge() */
};

/*
 * Fills @url (after the endpoint, e.g. "/bucket/key?x=y" appended to
 * ep->url, or a whole URL) and appends "Name: value" strings to @headers.
 * What it leaves in *@tag (NULL before) comes back in the response of
 * this attempt (resp->tag): which credentials signed it, say, when
 * attempts of one request may sign differently.  Called on the
 * request's event thread before every attempt.  Returning FALSE with
 * @error set fails the request without a retry.
 */
typedef gboolean (*http_prepare_fn)(const struct http_endpoint *ep,
				    gint64 unix_time, GString *url,
				    GPtrArray *headers, gpointer *tag,
				    void *data, GError **error);

/*
 * Judges a complete response.  For RETRY and FAIL it must set @error to the
 * cause (e.g. "HTTP 503 SlowDown: Please reduce your request rate
 * (RequestId: X)") with a BFS_ERROR errno code.  The request's
 * event thread.
 */
typedef enum http_verdict (*http_judge_fn)(const struct http_response *resp,
					   void *data, GError **error);

/*
 * Called exactly once per request, on one of the engine's done threads
 * (callbacks of different requests may run at the same time), on the
 * request's event thread for a quick done() that succeeded
 * (http_request_set_quick_done()), or on the submitting thread for a
 * request refused after shutdown.  On
 * success
 * @error is NULL and @resp the judged response; on failure @error holds
 * the whole cause chain (owned by the engine, copy it to keep it) and
 * @resp is the last response or NULL.  It must not block, nor wait for
 * another request.
 */
typedef void (*http_done_fn)(struct http_request *req,
			     struct http_response *resp, const GError *error,
			     void *data);

/*
 * Starts an engine and its event threads.  Errors: EINVAL for bad options
 * or endpoint URLs, EIO when curl cannot be set up.  Any thread.
 */
struct http *http_new(const struct http_options *opts, GError **error);

/*
 * Stops the event threads and cancels every request, queued, in backoff,
 * running or hedged (done() is called once each, with ECANCELED), and
 * returns once every done() has returned; every
 * later http_submit() fails at once the same way, on the submitting
 * thread.  The engine stays valid (counters included) until http_free().
 * Idempotent.  Not from a callback.
 */
void http_shutdown(struct http *http);

/* http_shutdown(), then frees the engine.  Not from a callback. */
void http_free(struct http *http);

/*
 * Copies the counters of every endpoint into @out, which holds
 * http_endpoint_count() elements, in the order of http_options.endpoints.
 * Any thread, including callbacks; takes http->lock.
 */
void http_get_stats(struct http *http, struct http_endpoint_stats *out);

/*
 * Where a successful request's time went, over the last 1024 of them: the
 * wait before the attempt that answered started (the FIFO, an event
 * thread's pickup, earlier attempts and their backoff), that attempt's
 * first byte (connect if any, the request, the server's answer: its
 * status line), the body, and the hand-off to a done thread before done()
 * ran (about 0 for a quick done(), which runs on the event thread).
 * Milliseconds; 0 with no sample yet.  Plain data.
 */
enum http_stage {
	HTTP_STAGE_WAIT,
	HTTP_STAGE_FIRST_BYTE,
	HTTP_STAGE_BODY,
	HTTP_STAGE_HANDOFF,
	HTTP_STAGES
};
struct http_stage_stats {
	guint samples;
	double p50_ms[HTTP_STAGES];
	double p99_ms[HTTP_STAGES];
};

/* "wait", "first_byte", "body", "handoff". */
const char *http_stage_name(enum http_stage stage);

/* A snapshot of the stage times.  Any thread. */
void http_get_stage_stats(struct http *http, struct http_stage_stats *out);

/*
 * Requests submitted but not yet started, waiting for a transfer slot
 * (beyond the connection budget) or for the ramp-up, on every event
 * thread and in the engine's FIFO.  Requests waiting out
 * a retry's backoff are not counted.  Any thread; takes http->lock.
 */
guint http_queued(struct http *http);

/* Number of endpoints.  Any thread. */
guint http_endpoint_count(const struct http *http);

/* Number of event threads running (see http_options.event_threads). */
guint http_event_threads(const struct http *http);

/*
 * A new request.  @what describes it for errors and logs ("GET
 * s3://b/k"), copied.  @judge may be NULL (any 2xx is DONE, anything else
 * FAIL).  @data_free, if not NULL, is called on @data when the request is
 * freed.  The caller owns the request until http_submit().
 */
struct http_request *http_request_new(const char *method, const char *what,
				      http_prepare_fn prepare,
				      http_judge_fn judge, http_done_fn done,
				      void *data, GDestroyNotify data_free);

/* Whether failures may be retried; TRUE by default for GET and HEAD. */
void http_request_set_idempotent(struct http_request *req, gboolean idempotent);

/*
 * Bounds the response body: more than @limit bytes fails the attempt
 * (EPROTO, not retried).  @reserve preallocates.  Default: 64 MiB, 0.
 */
void http_request_set_body_limit(struct http_request *req, gsize limit,
				 gsize reserve);

/* A request body for PUT; @body is referenced.  */
void http_request_set_upload(struct http_request *req, GBytes *body);

/*
 * Allows hedging this request (see "Hedging" above and
 * http_options.hedge_min_delay).  Only for idempotent requests whose
 * response is small; ignored for pinned or non-idempotent ones.  prepare()
 * and judge() run for every attempt, the duplicate included (one at a
 * time, on the request's event thread), and the last judge() before a
 * successful done() is the winner's; done() still runs once.  Any thread,
 * before http_submit().
 */
void http_request_set_hedge(struct http_request *req, gboolean hedge);

/*
 * Says that @req's done() never blocks nor waits for anything but brief
 * locks, and is short (the readahead's: a copy of the body into the
 * kernel, tens of microseconds for a 322 KB file, about a millisecond for
 * an 8 MiB one): on success it then runs on the request's event thread
 * as soon as the response is judged, not on a done thread.  That saves a
 * hand-off and a thread's wake-up per request (on the small files, one
 * of the ~7 context switches a file costs the daemon); the price is that
 * the thread's other transfers wait while it runs, and that the "body"
 * stage of theirs (http_stages) then includes it.  A
 * failure still goes to a done thread.  Any thread, before http_submit().
 */
void http_request_set_quick_done(struct http_request *req, gboolean quick);

/* The body may be lent to the kernel as a file: it comes from the
 * engine's shared pool of bodies (bufpool_new_shared()), so that
 * bufpool_bytes_lend() works on the GET's bytes.  For whole objects that
 * FUSE passthrough may serve; not for large bodies, which the ordinary
 * pool maps with huge pages.  Any thread, before http_submit(). */
void http_request_set_shareable(struct http_request *req, gboolean shareable);

/* Caps this request's attempts below the engine's max_attempts (>= 1). */
void http_request_set_max_attempts(struct http_request *req, guint n);

/*
 * A cancellation that requests may carry (http_request_set_cancel()):
 * once http_cancel_set() is called, each of them ends with ECANCELED
 * ("cancelled by its caller") instead of going on.  One waiting for a
 * transfer slot or the ramp-up is ended when its turn comes, without
 * being sent; one running is aborted at its transfer's next progress
 * tick (at most a second or so: curl's low-speed timer); one waiting out
 * a retry's backoff, within a poll tick (a second at most), not when the
 * backoff is due.  No cancelled request is retried.
 * Reference-counted; any thread.
 */
struct http_cancel *http_cancel_new(void);
struct http_cancel *http_cancel_ref(struct http_cancel *c);
void http_cancel_unref(struct http_cancel *c);
/* Cancels every request carrying @c, now and later.  Idempotent. */
void http_cancel_set(struct http_cancel *c);
gboolean http_cancel_is_set(const struct http_cancel *c);

/* Makes @req carry @c (referenced until @req is freed).  Before
 * http_submit(). */
void http_request_set_cancel(struct http_request *req, struct http_cancel *c);

/* Restricts every attempt to endpoint @index (doctor's per-endpoint checks). */
void http_request_pin_endpoint(struct http_request *req, guint index);

/*
 * Queues @req (ownership passes to the engine; it is freed after done()).
 * Any thread, including callbacks, and under the caller's own locks:
 * done() is never called from inside http_submit() while the done threads
 * run.  Once http_shutdown() has begun, @req is cancelled at once: done()
 * runs with ECANCELED on a done thread, or, once those are stopping and
 * the caller is not one of them, on the calling thread.
 */
void http_submit(struct http *http, struct http_request *req);

#endif
