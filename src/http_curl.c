/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_curl.c - curl's side of an attempt: its easy handle, set up and
 * kept for reuse; curl's callbacks (headers, body, progress and the stall
 * clock, sockets); and what a finished transfer says, in the words of the
 * cause chain (transport_error()).  The attempt's loop's thread only.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/x509.h>

#include "bufpool.h"
#include "error.h"
#include "http_engine.h"
#include "log.h"

#define ERROR_BODY_LIMIT (64u << 10)
#define SPARE_EASY_MAX	 256 /* idle easy handles kept per loop */

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
void easy_put(struct loop *l, CURL *easy)
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
int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp,
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
void response_init(struct http_response *resp, struct attempt *a)
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

enum http_verdict judge_attempt(struct attempt *a, CURLcode rc,
				struct http_response *resp, GError **error)
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

enum outcome outcome_of(const struct attempt *a, CURLcode rc)
{
	if (rc != CURLE_OK)
		return (curl_code_is_transient(rc) || a->stalled) &&
				       !a->overflow
			       ? OUTCOME_FAILED
			       : OUTCOME_NEUTRAL;
	return a->status >= 500 ? OUTCOME_FAILED : OUTCOME_OK;
}
