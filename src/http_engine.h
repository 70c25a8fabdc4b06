/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_engine.h - what the files of the HTTP engine (src/http*.c) share:
 * its structs, and the functions each calls of another, one section a
 * file.  Private to the engine; nothing outside src/http*.c includes it.
 * It includes http.h, whose types its structs hold, so the engine's files
 * include this header alone.
 * Every function here runs on the event thread of the loop it is given
 * (or of @a's loop), unless its comment says otherwise; the locking rules
 * are those at the top of http.c.
 */
#ifndef BUCKETFS_HTTP_ENGINE_H
#define BUCKETFS_HTTP_ENGINE_H

#include <pthread.h>
#include <sys/socket.h>

#include <curl/curl.h>
#include <glib.h>
#include <openssl/ssl.h>

#include "http.h"

#define LATENCY_RING 1024 /* successful attempts kept per endpoint */
#define HEDGE_RING   256  /* hedged requests kept for their p95 */
#define STAGE_RING   1024 /* requests kept for their stage times */
/* The slow-transfer backstop, curl's CURLOPT_LOW_SPEED_LIMIT and
 * LOW_SPEED_TIME: fewer than LOW_SPEED_LIMIT bytes a second over
 * low_speed_time() seconds ends a transfer, on either path. */
#define LOW_SPEED_LIMIT	  1L
#define TICK_US		  10000 /* the ramp-up's tick */
#define UNWATCHED_POLL_MS 10	/* a socket epoll refused: see on_socket() */
/* The retry budget (see "Retries" in http.h): tokens, one per retry. */
#define BUDGET_MAX	   100.0
#define BUDGET_PER_REQUEST 0.5	/* earned by each request's first attempt */
#define BUDGET_REFILL	   10.0 /* earned per second regardless */
/* The direct receive path (http_direct.c). */
/* A direct connection's epoll data: DIRECT_TAG, its generation above it
 * (struct dconn's gen), its fd below. */
#define DIRECT_TAG	   (G_GUINT64_CONSTANT(1) << 32)
#define DIRECT_GEN_SHIFT   33
#define DIRECT_GEN_MASK	   0x7fffffffu
#define DIRECT_ADDR_TTL_US (60 * G_USEC_PER_SEC) /* curl's DNS cache's */

struct bufpool;
struct bufpool_buf;
struct dconn;
struct direct;

struct endpoint {
	struct http_endpoint pub;
	char *url;
	char *scheme;
	char *host;
	char *hostport;

	/* All protected by http->lock. */
	double ewma_us;	   /* recent attempt latency, 0 = unknown */
	gint64 ewma_at;	   /* when it was last renewed */
	guint streak;	   /* consecutive failures */
	gboolean probing;  /* the probe attempt is running */
	gint64 ejected_at; /* monotonic */
	gint64 probe_at;   /* when the cool-off ends */
	guint32 record;	   /* the last outcomes, newest in bit 0: 1 = ok */
	guint record_len;  /* <= RECORD_LEN */
	guint inflight;	   /* attempts running there, on any loop */
	gboolean ejected;
	guint64 requests;
	guint64 bytes;
	guint64 errors;
	guint64 hedges;
	guint64 ejections;
	guint64 direct;	     /* answers of the direct receive path */
	guint64 connects;    /* connections the direct path opened */
	guint64 tls_resumed; /* of their TLS handshakes, those resumed */
	struct tls_resume *tls_resume; /* https://: its own lock; set once */
	/* The address curl last connected to for a request, for the direct
	 * path: good for DIRECT_ADDR_TTL_US, and for @addr_host only. */
	struct sockaddr_storage addr;
	socklen_t addr_len;
	gint64 addr_at; /* 0 = none */
	char *addr_host;
	guint32 latency_us[LATENCY_RING]; /* a ring */
	guint latency_len;
	guint latency_pos;
};

/*
 * One endpoint as one loop's connection cache sees it.  Loop thread only
 * (and the thread of http_free() once the loops are gone, when curl
 * closes the idle connections).
 */
struct lane {
	struct loop *loop;
	guint sockets;	/* open: curl's (its socket callbacks) and direct */
	guint inflight; /* this loop's attempts running there */
	GQueue idle;	/* direct connections idle, of struct dconn */
};

/*
 * An event thread and its multi handle.  The loop waits in epoll_wait()
 * on the sockets curl asks for (on_socket()) and on its wake-up eventfd,
 * and hands curl only the socket that is ready (curl_multi_socket_action),
 * so a wake-up costs the same with 2 or 200 transfers in flight:
 * curl_multi_poll() built and polled the whole set, and
 * curl_multi_perform() visited every transfer, at each one.
 */
struct loop {
	struct http *http;
	guint index;
	CURLM *multi;
	GThread *thread;
	int epfd;	 /* the loop's sockets and wake_fd; -1 until set up */
	int wake_fd;	 /* eventfd: submissions and the shutdown */
	gint wake_armed; /* atomic: a wake-up is on its way, skip another */
	guint slots;	 /* its slice of max_connections; immutable */
	struct lane *lanes; /* one per endpoint */

	/* Protected by http->lock. */
	GQueue inbox;  /* admitted here, not yet taken */
	guint running; /* transfers running, <= slots; written by the loop */
	guint queued;  /* inbox + ready: requests waiting for a slot here */

	/* The loop's own. */
	GQueue ready;	       /* requests waiting for a slot, FIFO */
	GQueue waiting;	       /* requests in backoff, sorted by due_us */
	GQueue hedge_wait;     /* attempts that may be hedged, by start_us */
	GHashTable *live;      /* every request taken and not yet done */
	GPtrArray *spare_easy; /* easy handles for later attempts */
	gboolean ramp_blocked;
	gboolean hedge_blocked;
	GRand *rand;		/* backoff jitter */
	GHashTable *unwatched;	/* sockets epoll refused: polled by hand */
	GPtrArray *add_failed;	/* attempts curl_multi_add_handle() refused */
	GHashTable *dconns;	/* direct connections: fd -> struct dconn */
	guint direct_sockets;	/* of them */
	guint32 direct_gen;	/* the next direct connection's generation */
	long curl_cap;		/* CURLMOPT_MAX_TOTAL_CONNECTIONS: the slots
				 * the direct connections leave */
	gboolean curl_squeezed; /* curl keeps one idle connection per
				 * endpoint (direct_squeeze_curl()) */
	GQueue direct;		/* attempts running on the direct path */
	GPtrArray *ddone;	/* direct attempts ended, for reap() */
};

/*
 * GLib's futex-based GMutex is invisible to ThreadSanitizer, and these
 * locks are taken by every submitting thread, so they are pthread mutexes.
 */
struct http {
	GPtrArray *endpoints; /* of struct endpoint *, immutable */
	struct loop *loops;   /* nloops of them, immutable */
	guint nloops;
	char *ca_file;
	char *user_agent;
	double connect_timeout;
	double stall_timeout;
	double request_timeout;
	gboolean direct; /* http_options.direct_receive, and no proxy */
	/* https:// on the direct path too: its TLS context, else NULL. */
	SSL_CTX *direct_tls;
	double backoff_base;
	double backoff_max;
	guint max_attempts;
	gint64 retry_deadline_us; /* 0 = none */
	guint max_connections;
	guint eject_after;
	gint64 cooloff_us;
	gint64 hedge_min_us;
	guint ramp_per_tick;

	pthread_mutex_t lock; /* see the top of this file */
	double budget;	      /* protected by lock: retry tokens, may be < 0 */
	gint64 budget_at;     /* protected by lock: its last refill */
	GQueue pending;	      /* protected by lock: FIFO, no loop had room */
	gboolean stopping;    /* protected by lock */
	gboolean closed;      /* protected by lock: submissions are cancelled */
	guint rotate; /* protected by lock: the next tie-break's start */
	gint64 tick;  /* protected by lock: the ramp-up's current tick */
	guint tokens; /* protected by lock: connections left this tick */
	GRand *rand;  /* protected by lock: the ramp's jitter */
	guint32 hedge_us[HEDGE_RING]; /* protected by lock: a ring of
				       * hedged requests' latency */
	guint hedge_len;	      /* protected by lock */
	guint hedge_pos;	      /* protected by lock */
	gint64 hedge_delay_us;	      /* protected by lock: cached */
	gint64 hedge_due_us; /* protected by lock: when to compute it again,
			      * 0 = not needed */
	/* Protected by lock: rings of successful requests' stage times
	 * (http_get_stage_stats()). */
	guint32 stage_us[HTTP_STAGES][STAGE_RING];
	guint stage_len, stage_pos;

	/* Finished requests wait here for a done thread. */
	pthread_mutex_t done_lock;
	pthread_cond_t done_cond;
	GQueue done_queue;  /* of struct completion *; under done_lock */
	gboolean done_stop; /* under done_lock: exit once the queue is empty */
	pthread_t *done_threads; /* ndone of them, immutable */
	guint ndone;
	guint done_started;
	struct bufpool *bodies;	       /* response bodies, any thread */
	struct bufpool *shared_bodies; /* those of shareable requests */
};

struct attempt {
	struct http *http;
	struct loop *loop;
	struct http_request *req;
	struct endpoint *ep;
	CURL *easy;	  /* NULL on the direct path */
	struct direct *d; /* the direct path's, while it runs there */
	gboolean direct;  /* it ran on the direct path */
	int os_errno;	  /* the direct path's */
	struct curl_slist *req_headers;
	struct bufpool_buf *body;
	GHashTable *headers;
	gint64 start_us;
	gint64 head_us;	  /* when its (last) status line arrived */
	guint64 received; /* body bytes, kept or not */
	long status;
	gboolean overflow;
	gboolean hedge;	     /* the duplicate of its round */
	gboolean probe;	     /* the probe of an ejected endpoint */
	gboolean on_ejected; /* started while its endpoint was ejected */
	gpointer tag;	     /* from prepare() */
	/* The stall clock (on_progress()): when a byte last moved, what had. */
	gint64 moved_us;
	curl_off_t moved_dl, moved_ul;
	gboolean sent;	    /* the request is on its way */
	gboolean stalled;   /* aborted by it */
	gboolean cancelled; /* aborted by on_progress(): http_cancel_set() */
	CURLcode rc;	    /* how its transfer ended */
	gboolean ranged;    /* it asks for a Range */
	long body_status;   /* the status its body came with */
	GList hedge_link;   /* in loop->hedge_wait when data is set */
	char errbuf[CURL_ERROR_SIZE];
};

struct http_request {
	char *method;
	char *what;
	http_prepare_fn prepare;
	http_judge_fn judge;
	http_done_fn done;
	void *data;
	GDestroyNotify data_free;
	gboolean idempotent;
	gboolean hedge;
	gboolean quick_done; /* on success, done() on the event thread */
	gboolean shareable;  /* body from shared_bodies */
	gsize body_limit;
	gsize body_reserve;
	GBytes *upload;
	int pinned;		    /* endpoint index or -1 */
	guint max_attempts;	    /* 0 = the engine's */
	struct http_cancel *cancel; /* NULL: none */
	gint64 submit_us;	    /* http_submit() */

	/* Its loop's only, once taken (before: under http->lock). */
	struct loop *loop; /* the one it lives on, NULL until taken */
	guint attempt;	   /* the round */
	guint unreachable; /* rounds that reached no endpoint or stalled, not
			    * counted in max_attempts (retry_deadline) */
	guint silent;	   /* of those, the stalled ones */
	guint range_200;   /* 200s to its Range too big for its body */
	gint64 start_us;
	gint64 round_us;
	gint64 due_us;
	struct endpoint *last_ep;
	struct endpoint *last_failed;
	struct attempt *running[2]; /* the round's primary and duplicate */
	struct attempt *failed;	    /* finished badly while its twin runs */
	enum http_verdict failed_verdict;
	GError *failed_error;
};

/* Where an attempt's direct connections go. */
struct direct_addr {
	struct sockaddr_storage ss;
	socklen_t len; /* 0: none, the attempt is curl's */
};

/* Milliseconds from @now to @due (monotonic us), rounded up, >= 0. */
static inline gint64 until(gint64 due, gint64 now)
{
	return MAX(0, (due - now + 999) / 1000);
}

/* What a finished attempt says about its endpoint's health. */
enum outcome {
	OUTCOME_OK,	 /* a complete response below 500: it is alive */
	OUTCOME_FAILED,	 /* a transport failure or a 5xx */
	OUTCOME_NEUTRAL, /* says nothing about the endpoint */
};

/*
 * The files call one another downward only: each section's functions are
 * called only from the sections after it, and http.c, the lifecycle
 * behind http.h, calls into them all and is called by none of them:
 *
 *   http_tls.c, http_request.c      TLS; the request as its caller builds it
 *   http_endpoint.c, http_dconn.c   endpoints; the direct path's connections
 *   http_curl.c                     curl's side of an attempt
 *   http_direct.c                   the direct receive path
 *   http_done.c                     how a request ends
 *   http_sched.c                    admission and scheduling
 *   http_retry.c                    the end of an attempt
 *   http_loop.c                     the event threads
 *
 * so that a file reads with only those before it in mind.  What a file
 * would need of one after it belongs in its own section or one before.
 */

/* -- http_tls.c: TLS for the direct path -------------------------------- */

/* A client context that trusts what curl trusts with @ca_file (NULL:
 * curl's default CA file and directory) and checks as strictly; the
 * caller owns it.  NULL with @error (ENOMEM; EINVAL: the CA certificates
 * do not load).  http_new()'s thread; read-only once made, so the loops
 * share it. */
SSL_CTX *tls_context_new(const char *ca_file, GError **error);

/* Frees a context of tls_context_new() (NULL: nothing), once no
 * connection uses it.  http_free()'s thread. */
void tls_context_free(SSL_CTX *ctx);

/*
 * The TLS session that new connections to one endpoint may resume, as
 * curl resumes its own: the newest one a verified handshake there gave
 * (over TLS 1.3, a ticket that arrives with the first reads), and only
 * for the name it was verified for.  Its own lock, so any loop may use
 * it.  _new never fails; _free (NULL: nothing) once no connection made
 * with it is left.
 */
struct tls_resume;
struct tls_resume *tls_resume_new(void);
void tls_resume_free(struct tls_resume *r);

/* Drops @r's session (NULL: nothing), so that the next connection
 * verifies the server's certificate again: after a failed handshake. */
void tls_resume_forget(struct tls_resume *r);

/* A connection's TLS on the connected socket @fd, to @host (a name, or
 * an IP address without brackets), resuming @resume's session when it is
 * one for @host and keeping any new one there (@resume NULL: neither);
 * NULL with @why.  The caller owns it (tls_free()); @fd stays the
 * caller's, open after tls_free(); @resume must outlive it. */
SSL *tls_new(SSL_CTX *ctx, int fd, const char *host, struct tls_resume *resume,
	     char *why, gsize len);

/* The handshake of @ssl, done, resumed a session. */
gboolean tls_resumed(SSL *ssl);

/* Frees @ssl (NULL: nothing); @clean: it sends its close_notify first. */
void tls_free(SSL *ssl, gboolean clean);

/* A step of the handshake: 1 = done, 0 = wait for *@events, -1 = failed
 * (errno, and @why with the verify result if the certificate was not
 * trusted). */
int tls_handshake(SSL *ssl, guint32 *events, char *why, gsize len);

/* As recv() on a non-blocking socket: > 0 bytes; 0 the end (without a
 * close_notify, @why says so); -1 with errno (EAGAIN: wait for *@events;
 * else @why). */
ssize_t tls_recv(SSL *ssl, void *buf, gsize n, guint32 *events, char *why,
		 gsize len);

/* As send() on a non-blocking socket: > 0 bytes; -1 with errno (EAGAIN:
 * wait for *@events; EPIPE: the peer ended the connection; else @why). */
ssize_t tls_send(SSL *ssl, const void *buf, gsize n, guint32 *events, char *why,
		 gsize len);

/* Decrypted bytes, or bytes of a record, wait in @ssl's buffers. */
gboolean tls_pending(SSL *ssl);

/* -- http_request.c: the request as its caller builds it ---------------- */

/* ECANCELED, "cancelled by its caller" (http_cancel_set()); the caller
 * owns it.  Any thread. */
GError *caller_cancelled_error(void);

/* Whether an attempt of @req's round is running. */
gboolean request_running(const struct http_request *req);

/* -- http_endpoint.c: endpoints and their health ------------------------ */

/* Frees an endpoint of endpoint_parse() (@p), http->endpoints' free
 * function.  http_free()'s thread. */
void endpoint_free(void *p);

/* An endpoint of @url, parsed by endpoint_url.h (config's parser too);
 * the caller owns it.  NULL with @error (EINVAL).  http_new()'s thread. */
struct endpoint *endpoint_parse(const char *url, guint index, GError **error);

/* The endpoint of index @i, borrowed until http_free() (immutable: any
 * thread, no lock). */
struct endpoint *endpoint_at(struct http *http, guint i);

/* @ep as @l's connection cache sees it, borrowed until loop_clear(). */
struct lane *lane_of(struct loop *l, const struct endpoint *ep);

/* The nearest-rank @pct percentile of @v (sorted in place), or 0.  Any
 * thread. */
guint32 percentile(guint32 *v, guint n, guint pct);

/* The rest of this section: under http->lock. */

/* The smallest latency known of any endpoint, 0 when none is known. */
double fastest_ewma(struct http *http);

/* The latency of @ep as the picker sees it; @fastest: fastest_ewma(). */
double latency_now(const struct endpoint *ep, double fastest, gint64 now);

/* Adds a latency sample of @us to @ep's estimate. */
void ewma_add(struct http *http, struct endpoint *ep, gint64 us, gint64 now);

/* The healthy endpoint other than @avoid where one more attempt expects
 * to wait least, or NULL; with @l (its thread) and its slice full, one
 * where @l has an idle direct connection, unless much worse. */
struct endpoint *pick_healthy(struct http *http, const struct endpoint *avoid,
			      struct loop *l, gint64 now);

/* Where the next round of @req goes, from loop @l (or NULL); *@probe: it
 * is the probe of an ejected endpoint. */
struct endpoint *pick_endpoint(struct http *http, struct http_request *req,
			       struct loop *l, gint64 now, gboolean *probe);

/* Whether a healthy endpoint other than @ep exists. */
gboolean another_healthy(struct http *http, const struct endpoint *ep);

/* Counts one finished attempt toward its endpoint's health (ejection,
 * re-admission).  @chain is the attempt's whole cause chain, borrowed. */
void health_note(struct http *http, struct attempt *a, enum outcome o,
		 const char *chain, gint64 now);

/* -- http_dconn.c: the direct path's connections ------------------------ */

/* A connection of the direct path, its loop's: in l->dconns from its
 * opening to direct_close(). */
struct dconn {
	int fd;
	SSL *ssl; /* https://, once its handshake starts */
	struct lane *lane;
	struct attempt *a; /* NULL while idle (in lane->idle) */
	GList link;
	guint32 events; /* as registered with epoll, 0 = not */
	guint32 gen;	/* its loop's direct_gen when it opened (epoll data) */
	gint64 idle_at; /* when it last went idle */
};

/* The loop's direct connections change by @delta: curl's cap follows. */
void direct_cap_curl(struct loop *l, int delta);

/* Registers @c with @events in the loop's epoll set (a change only). */
void direct_watch(struct loop *l, struct dconn *c, guint32 events);

/* Closes and frees @c: its socket, its TLS, its place in the lane and the
 * budget. */
void direct_close(struct loop *l, struct dconn *c);

/* Whether @l's sockets fill its slice, so that a new one would first
 * close an idle one. */
gboolean direct_slice_full(const struct loop *l);

/* Before a socket opens: at the loop's slice, an idle direct one goes.
 * FALSE: the slice is full of sockets in use, or curl's. */
gboolean direct_make_room(struct loop *l);

/* An idle connection @lane can reuse, taken off its idle list, or NULL;
 * those that cannot be reused are closed on the way. */
struct dconn *direct_take_idle(struct loop *l, struct lane *lane);

/* The slice is full: curl keeps fewer idle connections from now on. */
void direct_squeeze_curl(struct loop *l);

/* send() on @c, or through its TLS: as send(); on EAGAIN, *@events is
 * what to wait for; @why says what failed. */
ssize_t dconn_send(struct dconn *c, const char *p, gsize n, guint32 *events,
		   char *why, gsize len);

/* recv() on @c, or through its TLS: as recv(); on EAGAIN, *@events is
 * what to wait for; @why says what failed, and at the end of a TLS
 * connection without its close_notify, that. */
ssize_t dconn_recv(struct dconn *c, char *p, gsize n, guint32 *events,
		   char *why, gsize len);

/* The direct connection an epoll event with @data is for, borrowed, or
 * NULL when it is gone (a reused fd number with another generation is
 * another's). */
struct dconn *direct_conn_of(struct loop *l, guint64 data);

/* Closes @l's idle direct connections that have been idle too long (118 s,
 * curl's own limit for its idle connections).  Cheap: call it each turn. */
void direct_expire_idle(struct loop *l, gint64 now);

/* Closes every connection left in l->dconns (the idle ones, once the
 * attempts are gone): at the loop's teardown, on http_free()'s thread. */
void direct_close_all(struct loop *l);

/* -- http_curl.c: curl's side of an attempt ----------------------------- */

/* Takes @easy back from an attempt: kept for a later one, or cleaned
 * up. */
void easy_put(struct loop *l, CURL *easy);

/* Whether a body of @status is an error document, kept only in part.  Any
 * thread. */
gboolean error_document(long status);

/* @n bytes of @a's body, which came with @status, copied into a->body (an
 * error document's head only): FALSE when they overflow the body's limit
 * (the transfer must end). */
gboolean body_take(struct attempt *a, long status, const char *p, gsize n);

/* curl's CURLOPT_HEADERFUNCTION: one header line of @userdata's attempt. */
size_t on_header(char *buf, size_t size, size_t nitems, void *userdata);

/* curl's CURLMOPT_SOCKETFUNCTION: @userp's loop's epoll set. */
int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp,
	      void *socketp);

/* The backstop's window, in seconds: just past stall_timeout, so that a
 * full stall is on_progress()'s (or the direct path's) to report.  Any
 * thread. */
long low_speed_time(const struct http *http);

/* Gives @a an easy handle set up for @url, @a's until easy_put(); FALSE:
 * curl_easy_init() failed. */
gboolean curl_setup(struct loop *l, struct attempt *a, const char *url);

/* Adds @a's easy handle to @l's multi; a refusal ends @a in reap(). */
void curl_register(struct loop *l, struct attempt *a);

/* The response of a finished attempt, borrowing from it until it is
 * freed. */
void response_init(struct http_response *resp, struct attempt *a);

/* The verdict on @a, which ended with @rc: its caller's judge() on a
 * response, or the transport's failure in *@error (the caller's). */
enum http_verdict judge_attempt(struct attempt *a, CURLcode rc,
				struct http_response *resp, GError **error);

/* What @a, which ended with @rc, says about its endpoint. */
enum outcome outcome_of(const struct attempt *a, CURLcode rc);

/* -- http_direct.c: the direct receive path ----------------------------- */

/* Where @req may run on the direct path to @ep at @url: @out's length
 * is 0 when it may not.  Takes http->lock. */
void direct_usable(struct http *http, const struct http_request *req,
		   struct endpoint *ep, const char *url,
		   struct direct_addr *out);

/* After curl's successful @a: the address it connected to.  Takes
 * http->lock. */
void direct_learn(struct http *http, struct attempt *a);

/* A direct transfer of a GET of @url with @headers (copied), to @addr;
 * the caller owns it until it hands it to an attempt (attempt->d). */
struct direct *direct_new(struct http *http, const char *url,
			  GPtrArray *headers, const struct direct_addr *addr);

/* Starts @a (registered, with a->d set) on the direct path, or on curl
 * when its connection cannot be opened. */
void direct_begin(struct loop *l, struct attempt *a);

/* Lets go of and frees @a's direct transfer (none: nothing): its
 * connection, unless it went back idle, is closed mid-response. */
void direct_drop(struct loop *l, struct attempt *a);

/* A socket event on the direct connection @c (from l->dconns). */
void direct_event(struct loop *l, struct dconn *c, guint32 events);

/* Deadlines and cancels of the direct path's attempts. */
void direct_sweep(struct loop *l, gint64 now);

/* Until the direct path's next deadline, in ms, at most @ms. */
gint64 direct_timeout_ms(struct loop *l, gint64 ms, gint64 now);

/* -- http_done.c: how a request ends ------------------------------------ */

/* Frees @a (NULL: nothing) with its body and headers; off its loop's
 * thread (a done thread), its transfer must be dropped already. */
void attempt_free(struct attempt *a);

/* Frees @req, whose attempts are all over, and its data (data_free()).
 * Any thread, once no loop holds it. */
void request_free(struct http_request *req);

/* "WHAT via ENDPOINT (attempt k/N, T s): " or "WHAT: " without endpoint;
 * the caller frees it.  The thread that holds @req. */
char *chain_prefix(const struct http_request *req, const struct endpoint *ep);

/* A done thread's body (pthread_create() by http_new()): @data is the
 * engine.  Returns once http->done_stop is set and its queue is empty. */
void *done_thread(void *data);

/* Takes @req and @a (whose response @resp is) off their loop and hands
 * them to a done thread with a copy of @error: done() will be called
 * once, and both freed.  On the loop's thread, or on http_shutdown()'s
 * for a request no loop took (cancel_untaken()). */
void finish(struct http *http, struct http_request *req, struct attempt *a,
	    struct http_response *resp, const GError *error);

/* Ends @req with @error (taken), prefixed with where it happened, as
 * finish() does (and on the same threads). */
void fail_request(struct http *http, struct http_request *req,
		  const struct endpoint *ep, struct attempt *a,
		  struct http_response *resp, GError *error);

/* Hands the refusal of @req (taken, with @error, copied) to a done
 * thread; FALSE when the done threads are stopping and this is not one of
 * them (@req is then still the caller's).  Any thread. */
gboolean defer_refusal(struct http *http, struct http_request *req,
		       const GError *error);

/* -- http_sched.c: admission and scheduling ----------------------------- */

/* Takes a finished or cancelled attempt off the books of the engine (the
 * caller still owns it). */
void attempt_unlink(struct loop *l, struct attempt *a);

/* Aborts a running attempt and frees it. */
void attempt_cancel(struct loop *l, struct attempt *a, gint64 now);

/* Adds a hedged request's latency to the ring.  Under http->lock. */
void hedge_sample(struct http *http, gint64 us);

/* How long an attempt runs before it is hedged.  Under http->lock. */
gint64 hedge_delay(struct http *http, gint64 now);

/* Takes @l's work and starts what its slots, the ramp-up and the hedges
 * allow. */
void schedule(struct loop *l);

/* Under http->lock: queues @req (taken) on a loop, or in http->pending;
 * returns the loop to wake, or NULL.  Any thread. */
struct loop *admit(struct http *http, struct http_request *req);

/* -- http_retry.c: the end of an attempt -------------------------------- */

/* @a's transfer ended with @rc: judges it, and wins, retries or fails its
 * round.  Takes @a. */
void attempt_done(struct loop *l, struct attempt *a, CURLcode rc);

/* -- http_loop.c: the event threads ------------------------------------- */

/* ECANCELED, "the HTTP engine is shutting down"; the caller owns it.  Any
 * thread. */
GError *cancelled_error(void);

/* Once the loops are gone: cancels what no loop took.  http_shutdown()'s
 * thread. */
void cancel_untaken(struct http *http);

/* Wakes @l's thread.  Any thread. */
void loop_wake(struct loop *l);

/* A loop's thread (g_thread_new() by http_new()): @data is the loop.
 * Returns once http->stopping is set, its requests cancelled. */
gpointer event_thread(gpointer data);

/* Sets up loop @i, without its thread; FALSE with @error (errno of
 * epoll_create1(), eventfd() or epoll_ctl(); EIO: curl_multi_init()),
 * and loop_clear() still frees what was set up.  http_new()'s thread. */
gboolean loop_init(struct http *http, guint i, GError **error);

/* Frees what loop_init() set up, once its thread is gone.  http_free()'s
 * thread. */
void loop_clear(struct loop *l);

#endif /* BUCKETFS_HTTP_ENGINE_H */
