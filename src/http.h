/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http.h - the HTTP engine: one libcurl multi event thread per engine.
 *
 * The engine owns the endpoints, the connection pool and the retry policy.
 * Callers build a struct http_request, hand it to http_submit() from any
 * thread and return; the event thread runs it, retries it, and finally calls
 * the request's done callback on the event thread.  Only the event thread
 * ever touches curl handles.
 *
 * What happens to a request:
 *
 *   for attempt = 1 .. max_attempts:
 *       pick an endpoint (fewest requests in flight, not the one that just
 *       failed), call prepare() to get the URL and headers (so the caller can
 *       sign for that endpoint and that moment), run the transfer;
 *       a transport failure (connect, timeout, reset, truncated body) is
 *       judged here; a complete response is judged by judge();
 *       HTTP_VERDICT_DONE ends the request, HTTP_VERDICT_FAIL ends it with
 *       judge's error, HTTP_VERDICT_RETRY schedules another attempt after
 *       an exponential backoff with full jitter.
 *   done(request, response, error) is called exactly once.
 *
 * The final error is the cause chain "WHAT via ENDPOINT (attempt k/N, T s):
 * CAUSE", where WHAT is the request's description (e.g. "GET
 * s3://bucket/key") and CAUSE what the transport or judge() reported.
 * Retries are logged at debug level.
 *
 * Lock order: http->lock is a leaf lock; callbacks are never called with it
 * held.
 */
#ifndef BUCKETFS_HTTP_H
#define BUCKETFS_HTTP_H

#include <glib.h>

struct http;
struct http_request;

struct http_options {
	const char *const
		*endpoints;	/* NULL-terminated "scheme://host[:port]" */
	const char *ca_file;	/* NULL = system store */
	double connect_timeout; /* seconds */
	double stall_timeout;	/* seconds without a byte moving */
	double request_timeout; /* seconds per attempt, 0 = none */
	guint max_attempts;	/* >= 1 */
	guint max_connections;	/* >= 1: sockets the engine may hold */
	double backoff_base;	/* seconds, first retry's cap (0 = 0.1) */
	double backoff_max;	/* seconds, cap of any one wait (0 = 20) */
	const char *user_agent; /* NULL = "bucketfs/VERSION" */
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
 * duration of the call.  done() may steal @body (g_steal_pointer).
 */
struct http_response {
	long status;	  /* 0 when no response arrived */
	GByteArray *body; /* never NULL while a callback runs */
	const struct http_endpoint *endpoint;
	guint attempt; /* 1-based */
	guint max_attempts;
	double elapsed;	     /* seconds since the first attempt */
	GHashTable *headers; /* lowercase name -> last value */
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
 * Called on the event thread before every attempt.  Returning FALSE with
 * @error set fails the request without a retry.
 */
typedef gboolean (*http_prepare_fn)(const struct http_endpoint *ep,
				    gint64 unix_time, GString *url,
				    GPtrArray *headers, void *data,
				    GError **error);

/*
 * Judges a complete response.  For RETRY and FAIL it must set @error to the
 * cause (e.g. "HTTP 503 SlowDown: Please reduce your request rate
 * (RequestId: X)") with a BFS_ERROR errno code.  Event thread.
 */
typedef enum http_verdict (*http_judge_fn)(const struct http_response *resp,
					   void *data, GError **error);

/*
 * Called exactly once per request, on the event thread (or on the thread
 * calling http_free() for requests cancelled by shutdown).  On success
 * @error is NULL and @resp the judged response; on failure @error holds
 * the whole cause chain (owned by the engine, copy it to keep it) and
 * @resp is the last response or NULL.  It must not block.
 */
typedef void (*http_done_fn)(struct http_request *req,
			     struct http_response *resp, const GError *error,
			     void *data);

/*
 * Starts an engine and its event thread.  Errors: EINVAL for bad options
 * or endpoint URLs, EIO when curl cannot be set up.  Any thread.
 */
struct http *http_new(const struct http_options *opts, GError **error);

/*
 * Stops the event thread, cancels every queued or running request (done()
 * is called with ECANCELED) and frees the engine.  Not from a callback.
 */
void http_free(struct http *http);

/* Number of endpoints.  Any thread. */
guint http_endpoint_count(const struct http *http);

/* The max_attempts the engine was created with.  Any thread. */
guint http_max_attempts(const struct http *http);

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

/* Caps this request's attempts below the engine's max_attempts (>= 1). */
void http_request_set_max_attempts(struct http_request *req, guint n);

/* Restricts every attempt to endpoint @index (doctor's per-endpoint checks). */
void http_request_pin_endpoint(struct http_request *req, guint index);

/* The description given to http_request_new().  Borrowed. */
const char *http_request_what(const struct http_request *req);

/*
 * Queues @req (ownership passes to the engine; it is freed after done()).
 * Any thread, including callbacks.
 */
void http_submit(struct http *http, struct http_request *req);

#endif
