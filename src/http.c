/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http.c - libcurl multi event thread, endpoints and retries.
 *
 * Threads: http_submit() runs anywhere and only touches http->incoming
 * under http->lock.  Everything else, including every curl handle, the
 * waiting list and the endpoints' in-flight counts, belongs to the event
 * thread.
 */
#include <errno.h>
#include <string.h>

#include <curl/curl.h>
#include <openssl/x509.h>

#include "error.h"
#include "http.h"
#include "log.h"
#include "version.h"

#define DEFAULT_BODY_LIMIT (64u << 20)
#define MAX_POLL_MS	   1000
#define ERROR_BODY_LIMIT   (64u << 10)

struct endpoint {
	struct http_endpoint pub;
	char *url;
	char *scheme;
	char *host;
	char *hostport;
	guint inflight; /* event thread */
};

struct http {
	CURLM *multi;
	GThread *thread;
	GPtrArray *endpoints; /* of struct endpoint *, immutable */
	char *ca_file;
	char *user_agent;
	double connect_timeout;
	double stall_timeout;
	double request_timeout;
	double backoff_base;
	double backoff_max;
	guint max_attempts;
	guint max_connections;

	GMutex lock;
	GQueue incoming;   /* protected by lock */
	gboolean stopping; /* protected by lock */

	/* Event thread only. */
	GQueue waiting;	     /* requests in backoff, sorted by due_us */
	GHashTable *running; /* struct http_request * set */
	GRand *rand;
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
	gsize body_limit;
	gsize body_reserve;
	GBytes *upload;
	int pinned;	    /* endpoint index or -1 */
	guint max_attempts; /* 0 = the engine's */

	/* Event thread only, once submitted. */
	guint attempt;
	gint64 start_us;
	gint64 due_us;
	struct endpoint *ep;
	struct endpoint *last_failed;
	CURL *easy;
	struct curl_slist *req_headers;
	GByteArray *body;
	GHashTable *headers;
	gboolean overflow;
	char errbuf[CURL_ERROR_SIZE];
};

/* -- endpoints ---------------------------------------------------------- */

static void endpoint_free(void *p)
{
	struct endpoint *ep = p;

	g_free(ep->url);
	g_free(ep->scheme);
	g_free(ep->host);
	g_free(ep->hostport);
	g_free(ep);
}

static struct endpoint *endpoint_parse(const char *url, guint index,
				       GError **error)
{
	const char *sep = strstr(url, "://");
	const char *hp, *end, *host_end;
	struct endpoint *ep;

	if (!sep ||
	    (strncmp(url, "http", sep - url) != 0 &&
	     strncmp(url, "https", sep - url) != 0) ||
	    (sep - url != 4 && sep - url != 5)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "endpoint '%s': expected http://HOST[:PORT] or "
			    "https://HOST[:PORT]",
			    url);
		return NULL;
	}
	hp = sep + 3;
	end = hp + strcspn(hp, "/?#");
	if (end == hp || (*end && strcmp(end, "/") != 0)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "endpoint '%s': expected http://HOST[:PORT] or "
			    "https://HOST[:PORT] without a path",
			    url);
		return NULL;
	}
	if (*hp == '[') {
		host_end = memchr(hp, ']', end - hp);
		if (!host_end) {
			g_set_error(error, BFS_ERROR, EINVAL,
				    "endpoint '%s': unterminated IPv6 address",
				    url);
			return NULL;
		}
		host_end++;
	} else {
		host_end = memchr(hp, ':', end - hp);
		if (!host_end)
			host_end = end;
	}
	ep = g_new0(struct endpoint, 1);
	ep->scheme = g_strndup(url, sep - url);
	ep->hostport = g_strndup(hp, end - hp);
	ep->host = g_strndup(hp, host_end - hp);
	ep->url = g_strdup_printf("%s://%s", ep->scheme, ep->hostport);
	ep->pub.url = ep->url;
	ep->pub.scheme = ep->scheme;
	ep->pub.host = ep->host;
	ep->pub.hostport = ep->hostport;
	ep->pub.index = index;
	return ep;
}

/*
 * Fewest requests in flight wins; the endpoint that just failed this
 * request is avoided while another one exists, so a retry goes elsewhere.
 */
static struct endpoint *pick_endpoint(struct http *http,
				      struct http_request *req)
{
	guint n = http->endpoints->len;
	guint start, i;
	struct endpoint *best;

	if (req->pinned >= 0)
		return g_ptr_array_index(http->endpoints, req->pinned);
	/* Rotate the starting point so ties spread over endpoints. */
	start = g_rand_int_range(http->rand, 0, n);
	best = g_ptr_array_index(http->endpoints, start);
	if (best == req->last_failed && n > 1)
		best = g_ptr_array_index(http->endpoints, (start + 1) % n);
	for (i = 0; i < n; i++) {
		struct endpoint *ep =
			g_ptr_array_index(http->endpoints, (start + i) % n);

		if (ep == req->last_failed && n > 1)
			continue;
		if (ep->inflight < best->inflight)
			best = ep;
	}
	return best;
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

void http_request_set_max_attempts(struct http_request *req, guint n)
{
	g_return_if_fail(n >= 1);
	req->max_attempts = n;
}

void http_request_pin_endpoint(struct http_request *req, guint index)
{
	req->pinned = (int)index;
}

const char *http_request_what(const struct http_request *req)
{
	return req->what;
}

static void attempt_clear(struct http_request *req)
{
	g_clear_pointer(&req->easy, curl_easy_cleanup);
	g_clear_pointer(&req->req_headers, curl_slist_free_all);
	g_clear_pointer(&req->body, g_byte_array_unref);
	g_clear_pointer(&req->headers, g_hash_table_unref);
	req->overflow = FALSE;
	req->errbuf[0] = '\0';
}

static void request_free(struct http_request *req)
{
	attempt_clear(req);
	if (req->data_free)
		req->data_free(req->data);
	g_clear_pointer(&req->upload, g_bytes_unref);
	g_free(req->method);
	g_free(req->what);
	g_free(req);
}

const char *http_response_header(const struct http_response *resp,
				 const char *name)
{
	return resp->headers ? g_hash_table_lookup(resp->headers, name) : NULL;
}

/* -- curl callbacks (event thread) -------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct http_request *req = userdata;
	size_t n = size * nmemb;
	long status = 0;

	curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &status);
	if (status < 200 || status >= 300) {
		/* An error document only needs its head; never abort the
		 * transfer for it, or the real status would be lost. */
		if (req->body->len < ERROR_BODY_LIMIT)
			g_byte_array_append(
				req->body, (const guint8 *)ptr,
				MIN(n, ERROR_BODY_LIMIT - req->body->len));
		return n;
	}
	if (req->body->len + n > req->body_limit) {
		req->overflow = TRUE;
		return 0;
	}
	g_byte_array_append(req->body, (const guint8 *)ptr, n);
	return n;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *userdata)
{
	struct http_request *req = userdata;
	size_t n = size * nitems;
	const char *colon = memchr(buf, ':', n);
	const char *v, *end = buf + n;

	/* A new status line (after 100 Continue, say) starts over. */
	if (n >= 5 && !memcmp(buf, "HTTP/", 5)) {
		g_hash_table_remove_all(req->headers);
		return n;
	}
	if (!colon)
		return n;
	for (v = colon + 1; v < end && (*v == ' ' || *v == '\t'); v++)
		;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' ||
			   end[-1] == ' ' || end[-1] == '\t'))
		end--;
	g_hash_table_replace(req->headers, g_ascii_strdown(buf, colon - buf),
			     g_strndup(v, end - v));
	return n;
}

/* -- attempts ----------------------------------------------------------- */

static void finish(struct http *http, struct http_request *req,
		   struct http_response *resp, GError *error)
{
	g_hash_table_remove(http->running, req);
	req->done(req, resp, error, req->data);
	/* done() may have stolen the body. */
	if (resp && !resp->body)
		req->body = NULL;
	request_free(req);
}

static void fail_prefixed(struct http *http, struct http_request *req,
			  struct http_response *resp, GError *error)
{
	double elapsed = (g_get_monotonic_time() - req->start_us) / 1e6;

	if (req->ep)
		g_prefix_error(&error,
			       "%s via %s (attempt %u/%u, %.1f s): ", req->what,
			       req->ep->url, req->attempt, req->max_attempts,
			       elapsed);
	else
		g_prefix_error(&error, "%s: ", req->what);
	finish(http, req, resp, error);
	g_error_free(error);
}

static void setopt_common(struct http *http, struct http_request *req,
			  CURL *easy)
{
	curl_easy_setopt(easy, CURLOPT_PRIVATE, req);
	curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, req->errbuf);
	curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(easy, CURLOPT_USERAGENT, http->user_agent);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)(http->connect_timeout * 1000));
	/* A transfer that moves no byte for stall_timeout seconds is dead. */
	curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME,
			 (long)MAX(1, http->stall_timeout));
	if (http->request_timeout > 0)
		curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
				 (long)(http->request_timeout * 1000));
	if (http->ca_file)
		curl_easy_setopt(easy, CURLOPT_CAINFO, http->ca_file);
	curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(easy, CURLOPT_WRITEDATA, req);
	curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(easy, CURLOPT_HEADERDATA, req);
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

static void attempt_start(struct http *http, struct http_request *req)
{
	g_autoptr(GString) url = NULL;
	g_autoptr(GPtrArray) headers = g_ptr_array_new_with_free_func(g_free);
	GError *error = NULL;
	guint i;

	req->ep = pick_endpoint(http, req);
	req->attempt++;
	url = g_string_new(req->ep->url);
	if (!req->prepare(&req->ep->pub, g_get_real_time() / G_USEC_PER_SEC,
			  url, headers, req->data, &error)) {
		fail_prefixed(http, req, NULL, error);
		return;
	}
	req->body = g_byte_array_sized_new(req->body_reserve);
	req->headers =
		g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	for (i = 0; i < headers->len; i++)
		req->req_headers = curl_slist_append(
			req->req_headers, g_ptr_array_index(headers, i));
	/* No "Expect: 100-continue" round trip for small PUTs. */
	req->req_headers = curl_slist_append(req->req_headers, "Expect:");
	req->easy = curl_easy_init();
	if (!req->easy) {
		g_set_error(&error, BFS_ERROR, ENOMEM, "curl_easy_init failed");
		fail_prefixed(http, req, NULL, error);
		return;
	}
	setopt_common(http, req, req->easy);
	setopt_method(req, req->easy);
	curl_easy_setopt(req->easy, CURLOPT_URL, url->str);
	curl_easy_setopt(req->easy, CURLOPT_HTTPHEADER, req->req_headers);
	req->ep->inflight++;
	curl_multi_add_handle(http->multi, req->easy);
}

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
static GError *transport_error(struct http_request *req, CURLcode rc)
{
	g_autoptr(GString) msg = g_string_new(NULL);
	long os_errno = 0, verify = 0;
	int code;

	if (req->overflow)
		return g_error_new(BFS_ERROR, EPROTO,
				   "response body exceeds the %" G_GSIZE_FORMAT
				   " bytes expected",
				   req->body_limit);
	g_string_printf(msg, "curl %d (%s)", rc, curl_easy_strerror(rc));
	if (req->errbuf[0])
		g_string_append_printf(msg, ": %s", req->errbuf);
	curl_easy_getinfo(req->easy, CURLINFO_OS_ERRNO, &os_errno);
	if (os_errno)
		g_string_append_printf(msg, " [os errno %ld: %s]", os_errno,
				       g_strerror((int)os_errno));
	if ((rc == CURLE_PEER_FAILED_VERIFICATION ||
	     rc == CURLE_SSL_CONNECT_ERROR) &&
	    curl_easy_getinfo(req->easy, CURLINFO_SSL_VERIFYRESULT, &verify) ==
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

/* Full jitter: a uniform wait in [0, min(max, base * 2^(attempt-1))]. */
static gint64 backoff_us(struct http *http, guint attempt)
{
	double cap = http->backoff_base * (double)(1u << MIN(attempt - 1, 20));

	cap = MIN(cap, http->backoff_max);
	return (gint64)(g_rand_double(http->rand) * cap * G_USEC_PER_SEC);
}

static gint waiting_cmp(gconstpointer a, gconstpointer b, gpointer data)
{
	const struct http_request *x = a, *y = b;

	(void)data;
	return x->due_us < y->due_us ? -1 : x->due_us > y->due_us;
}

static void schedule_retry(struct http *http, struct http_request *req,
			   const GError *error)
{
	gint64 wait = backoff_us(http, req->attempt);

	if (log_enabled(LOG_LEVEL_DEBUG))
		log_msg(LOG_LEVEL_DEBUG,
			"%s via %s (attempt %u/%u, %.1f s): %s; retrying in "
			"%.2f s",
			req->what, req->ep->url, req->attempt,
			req->max_attempts,
			(g_get_monotonic_time() - req->start_us) / 1e6,
			error->message, wait / 1e6);
	req->last_failed = req->ep;
	req->due_us = g_get_monotonic_time() + wait;
	attempt_clear(req);
	g_queue_insert_sorted(&http->waiting, req, waiting_cmp, NULL);
}

static void attempt_done(struct http *http, struct http_request *req,
			 CURLcode rc)
{
	struct http_response resp = { 0 };
	enum http_verdict verdict;
	GError *error = NULL;

	curl_multi_remove_handle(http->multi, req->easy);
	req->ep->inflight--;
	resp.body = req->body;
	resp.headers = req->headers;
	resp.endpoint = &req->ep->pub;
	resp.attempt = req->attempt;
	resp.max_attempts = req->max_attempts;
	resp.elapsed = (g_get_monotonic_time() - req->start_us) / 1e6;
	if (rc != CURLE_OK) {
		error = transport_error(req, rc);
		verdict = curl_code_is_transient(rc) && !req->overflow
				  ? HTTP_VERDICT_RETRY
				  : HTTP_VERDICT_FAIL;
	} else {
		curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE,
				  &resp.status);
		verdict = req->judge ? req->judge(&resp, req->data, &error)
				     : default_judge(&resp, &error);
	}
	if (verdict == HTTP_VERDICT_DONE) {
		g_clear_error(&error);
		finish(http, req, &resp, NULL);
		return;
	}
	if (!error)
		error = g_error_new(BFS_ERROR, EIO,
				    "HTTP %ld rejected without a reason",
				    resp.status);
	if (verdict == HTTP_VERDICT_RETRY && req->idempotent &&
	    req->attempt < req->max_attempts) {
		schedule_retry(http, req, error);
		g_error_free(error);
		return;
	}
	fail_prefixed(http, req, &resp, error);
}

/* -- the event thread --------------------------------------------------- */

static void take_incoming(struct http *http)
{
	GQueue batch = G_QUEUE_INIT;
	struct http_request *req;

	g_mutex_lock(&http->lock);
	batch = http->incoming;
	g_queue_init(&http->incoming);
	g_mutex_unlock(&http->lock);
	while ((req = g_queue_pop_head(&batch))) {
		req->start_us = g_get_monotonic_time();
		g_hash_table_add(http->running, req);
		attempt_start(http, req);
	}
}

static void start_due(struct http *http, gint64 now)
{
	struct http_request *req;

	while ((req = g_queue_peek_head(&http->waiting)) && req->due_us <= now)
		attempt_start(http, g_queue_pop_head(&http->waiting));
}

static void reap(struct http *http)
{
	CURLMsg *msg;
	int left;

	while ((msg = curl_multi_info_read(http->multi, &left))) {
		struct http_request *req = NULL;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE,
				  (char **)&req);
		attempt_done(http, req, msg->data.result);
	}
}

static int poll_timeout_ms(struct http *http, gint64 now)
{
	long curl_ms = -1;
	long ms = MAX_POLL_MS;
	struct http_request *next = g_queue_peek_head(&http->waiting);

	curl_multi_timeout(http->multi, &curl_ms);
	if (curl_ms >= 0 && curl_ms < ms)
		ms = curl_ms;
	if (next)
		ms = MIN(ms, MAX(0, (next->due_us - now + 999) / 1000));
	return (int)ms;
}

static void cancel_all(struct http *http)
{
	g_autoptr(GPtrArray) all = g_ptr_array_new();
	GHashTableIter it;
	gpointer key;
	struct http_request *req;
	guint i;

	g_mutex_lock(&http->lock);
	while ((req = g_queue_pop_head(&http->incoming)))
		g_hash_table_add(http->running, req);
	g_mutex_unlock(&http->lock);
	g_queue_clear(&http->waiting);
	g_hash_table_iter_init(&it, http->running);
	while (g_hash_table_iter_next(&it, &key, NULL))
		g_ptr_array_add(all, key);
	for (i = 0; i < all->len; i++) {
		req = g_ptr_array_index(all, i);
		if (req->easy)
			curl_multi_remove_handle(http->multi, req->easy);
		fail_prefixed(http, req, NULL,
			      g_error_new(BFS_ERROR, ECANCELED,
					  "cancelled: the HTTP engine is "
					  "shutting down"));
	}
}

static gpointer event_thread(gpointer data)
{
	struct http *http = data;
	int still;

	for (;;) {
		gboolean stop;
		gint64 now;

		g_mutex_lock(&http->lock);
		stop = http->stopping;
		g_mutex_unlock(&http->lock);
		if (stop)
			break;
		take_incoming(http);
		start_due(http, g_get_monotonic_time());
		curl_multi_perform(http->multi, &still);
		reap(http);
		now = g_get_monotonic_time();
		curl_multi_poll(http->multi, NULL, 0,
				poll_timeout_ms(http, now), NULL);
	}
	cancel_all(http);
	return NULL;
}

/* -- public ------------------------------------------------------------- */

static gsize curl_once;

struct http *http_new(const struct http_options *opts, GError **error)
{
	struct http *http;
	guint i;

	g_return_val_if_fail(opts && opts->endpoints && opts->endpoints[0],
			     NULL);
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
	http->endpoints = g_ptr_array_new_with_free_func(endpoint_free);
	for (i = 0; opts->endpoints[i]; i++) {
		struct endpoint *ep =
			endpoint_parse(opts->endpoints[i], i, error);

		if (!ep)
			goto fail;
		g_ptr_array_add(http->endpoints, ep);
	}
	http->ca_file = g_strdup(opts->ca_file);
	http->user_agent =
		g_strdup(opts->user_agent ? opts->user_agent
					  : "bucketfs/" BUCKETFS_VERSION);
	http->connect_timeout =
		opts->connect_timeout > 0 ? opts->connect_timeout : 10;
	http->stall_timeout =
		opts->stall_timeout > 0 ? opts->stall_timeout : 30;
	http->request_timeout = opts->request_timeout;
	http->backoff_base = opts->backoff_base > 0 ? opts->backoff_base : 0.1;
	http->backoff_max = opts->backoff_max > 0 ? opts->backoff_max : 20;
	http->max_attempts = MAX(1, opts->max_attempts);
	http->max_connections = MAX(1, opts->max_connections);
	http->rand = g_rand_new();
	http->running = g_hash_table_new(NULL, NULL);
	g_mutex_init(&http->lock);
	g_queue_init(&http->incoming);
	g_queue_init(&http->waiting);
	http->multi = curl_multi_init();
	if (!http->multi) {
		g_set_error(error, BFS_ERROR, EIO, "curl_multi_init failed");
		goto fail;
	}
	/* Beyond the budget, curl queues transfers instead of connecting. */
	curl_multi_setopt(http->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
			  (long)http->max_connections);
	curl_multi_setopt(http->multi, CURLMOPT_MAXCONNECTS,
			  (long)http->max_connections);
	http->thread = g_thread_new("bfs-http", event_thread, http);
	return http;
fail:
	http_free(http);
	return NULL;
}

void http_free(struct http *http)
{
	if (!http)
		return;
	if (http->thread) {
		g_mutex_lock(&http->lock);
		http->stopping = TRUE;
		g_mutex_unlock(&http->lock);
		curl_multi_wakeup(http->multi);
		g_thread_join(http->thread);
	}
	g_clear_pointer(&http->multi, curl_multi_cleanup);
	g_clear_pointer(&http->running, g_hash_table_unref);
	g_clear_pointer(&http->rand, g_rand_free);
	g_ptr_array_unref(http->endpoints);
	g_mutex_clear(&http->lock);
	g_free(http->ca_file);
	g_free(http->user_agent);
	g_free(http);
}

guint http_endpoint_count(const struct http *http)
{
	return http->endpoints->len;
}

guint http_max_attempts(const struct http *http)
{
	return http->max_attempts;
}

void http_submit(struct http *http, struct http_request *req)
{
	g_return_if_fail(http && req);
	g_return_if_fail(req->pinned < (int)http->endpoints->len);
	if (!req->max_attempts || req->max_attempts > http->max_attempts)
		req->max_attempts = http->max_attempts;
	g_mutex_lock(&http->lock);
	g_queue_push_tail(&http->incoming, req);
	g_mutex_unlock(&http->lock);
	curl_multi_wakeup(http->multi);
}
