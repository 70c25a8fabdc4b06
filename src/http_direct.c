/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_direct.c - the engine's own receive path for GETs, over plain
 * HTTP and over TLS (http_tls.c).
 *
 * Runs on the event thread of the attempt's loop, like the rest of the
 * engine (http.c); http_engine.h is what they share.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "bufpool.h"
#include "error.h"
#include "h1.h"
#include "http_engine.h"
#include "log.h"

#define DIRECT_SCRATCH (64u << 10)

/*
 * A GET to an endpoint whose address curl has found (and connected to,
 * within DIRECT_ADDR_TTL_US) runs on a connection of the loop's own
 * instead of curl's: the request is written by hand, the head parsed by
 * h1.h, and a body framed by Content-Length is received by recv(), or
 * for https:// decrypted by OpenSSL, straight into the body's buffer,
 * where curl would have taken every byte through its own buffer first
 * (docs/PERFORMANCE.md).  A TLS connection is checked as strictly as
 * curl checks its own (http_tls.c); one whose handshake fails goes to
 * curl, which says why in its own words.
 * Everything else stays curl's: proxies, other methods, and any
 * attempt whose connection cannot be opened (refused, unreachable, no
 * room in the budget): it falls back to curl at once, which reports the
 * failure its own way.  The connections count in the lanes' sockets and
 * the loop's slice of the budget; an idle one is closed when curl, or
 * the direct path, needs its room.  A failure once the request is on its
 * way ends the attempt like curl's would (the same CURLcode, so that
 * judging, retries and health do not tell the paths apart), with its own
 * text (transport_error()).
 */

enum dstate { D_CONNECTING, D_HANDSHAKE, D_SENDING, D_HEAD, D_BODY };

struct direct {
	struct dconn *conn;
	char *url;
	char *tls_host; /* https://: the name (or address) its TLS checks */
	GString *req;	/* the request's bytes */
	gsize req_off;	/* of them sent */
	enum dstate state;
	gboolean reused;   /* the connection carried a request before */
	gboolean retried;  /* on a new connection after a reused one died */
	gboolean any_byte; /* of the response came */
	char *head;
	gsize head_len, head_cap;
	struct h1_head h;
	guint64 left; /* H1_LENGTH: body bytes to come */
	struct h1_chunked ch;
	struct direct_addr addr; /* where its connections go */
	gint64 connect_by;
	/* The slow-transfer backstop's window (low_speed_time()): since
	 * when, and a->received then. */
	gint64 slow_at;
	guint64 slow_from;
	GList link; /* in loop->direct */
};

/* They call each other: a retry sends again from the receive side. */
static void direct_send(struct loop *l, struct attempt *a);
static void direct_recv(struct loop *l, struct attempt *a);

/* The authority of an http:// or https:// @url ("host[:port]"), and its
 * length. */
static const char *url_authority(const char *url, gsize *len)
{
	const char *a = strstr(url, "://") + 3;

	*len = strcspn(a, "/?#");
	return a;
}

/* Which of the direct path's schemes @url has: 1 http, 2 https, else 0. */
static int url_scheme(const struct http *http, const char *url)
{
	if (http->direct && !g_ascii_strncasecmp(url, "http://", 7))
		return 1;
	if (http->direct_tls && !g_ascii_strncasecmp(url, "https://", 8))
		return 2;
	return 0;
}

/* The host of the authority @a ("[v6]:port", "name:port", "name"). */
static char *authority_host(const char *a, gsize len)
{
	const char *end;

	if (*a == '[') {
		end = memchr(a, ']', len);
		return end ? g_strndup(a + 1, end - a - 1) : g_strndup(a, len);
	}
	end = memchr(a, ':', len);
	return g_ascii_strdown(a, end ? end - a : (gssize)len);
}

/* Where @req may run on the direct path to @ep at @url: @out's length
 * is 0 when it may not. */
void direct_usable(struct http *http, const struct http_request *req,
		   struct endpoint *ep, const char *url,
		   struct direct_addr *out)
{
	gint64 now = g_get_monotonic_time();
	const char *host;
	gsize len;

	out->len = 0;
	if (strcmp(req->method, "GET") != 0 || req->upload ||
	    !url_scheme(http, url))
		return;
	host = url_authority(url, &len);
	pthread_mutex_lock(&http->lock);
	if (ep->addr_at && now - ep->addr_at < DIRECT_ADDR_TTL_US &&
	    ep->addr_host && strlen(ep->addr_host) == len &&
	    !g_ascii_strncasecmp(ep->addr_host, host, len)) {
		out->ss = ep->addr;
		out->len = ep->addr_len;
	}
	pthread_mutex_unlock(&http->lock);
}

/* After curl's successful @a: the address it connected to. */
void direct_learn(struct http *http, struct attempt *a)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len = 0;
	char *ip = NULL, *url = NULL;
	long port = 0;
	const char *host;
	gsize hlen;

	if (!(http->direct || http->direct_tls) ||
	    curl_easy_getinfo(a->easy, CURLINFO_PRIMARY_IP, &ip) != CURLE_OK ||
	    curl_easy_getinfo(a->easy, CURLINFO_PRIMARY_PORT, &port) !=
		    CURLE_OK ||
	    curl_easy_getinfo(a->easy, CURLINFO_EFFECTIVE_URL, &url) !=
		    CURLE_OK ||
	    !ip || !*ip || !url || port <= 0 || port > 65535 ||
	    !url_scheme(http, url))
		return;
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		if (inet_pton(AF_INET6, ip, &s6->sin6_addr) != 1)
			return;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((guint16)port);
		len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		if (inet_pton(AF_INET, ip, &s4->sin_addr) != 1)
			return;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((guint16)port);
		len = sizeof(*s4);
	}
	host = url_authority(url, &hlen);
	pthread_mutex_lock(&http->lock);
	a->ep->addr = ss;
	a->ep->addr_len = len;
	a->ep->addr_at = g_get_monotonic_time();
	if (!a->ep->addr_host || strlen(a->ep->addr_host) != hlen ||
	    strncmp(a->ep->addr_host, host, hlen) != 0) {
		g_free(a->ep->addr_host);
		a->ep->addr_host = g_strndup(host, hlen);
	}
	pthread_mutex_unlock(&http->lock);
}

/* The endpoint's address is not to be used until curl connects again. */
static void direct_forget(struct http *http, struct endpoint *ep)
{
	pthread_mutex_lock(&http->lock);
	ep->addr_at = 0;
	pthread_mutex_unlock(&http->lock);
}

struct direct *direct_new(struct http *http, const char *url,
			  GPtrArray *headers, const struct direct_addr *addr)
{
	struct direct *d = g_new0(struct direct, 1);
	const char *authority, *target;
	gsize alen;
	guint i;

	d->addr = *addr;
	d->url = g_strdup(url);
	authority = url_authority(url, &alen);
	target = authority + alen;
	if (url_scheme(http, url) == 2)
		d->tls_host = authority_host(authority, alen);
	d->req = g_string_sized_new(512);
	g_string_append_printf(d->req, "GET %s%s HTTP/1.1\r\nHost: %.*s\r\n",
			       *target == '/' ? "" : "/", target, (int)alen,
			       authority);
	g_string_append_printf(d->req, "User-Agent: %s\r\nAccept: */*\r\n",
			       http->user_agent);
	for (i = 0; i < headers->len; i++) {
		const char *h = g_ptr_array_index(headers, i);
		const char *colon = strchr(h, ':');

		/* curl's "Name:" takes a header out; none is ours to add. */
		if (!colon || !colon[1 + strspn(colon + 1, " \t")])
			continue;
		g_string_append_printf(d->req, "%s\r\n", h);
	}
	g_string_append(d->req, "\r\n");
	return d;
}

/* A new connection of @a's, connecting; NULL with errno. */
static struct dconn *direct_open(struct loop *l, struct attempt *a)
{
	const struct direct_addr *addr = &a->d->addr;
	struct lane *lane = lane_of(l, a->ep);
	struct dconn *c;
	int fd, one = 1, e;

	if (!direct_make_room(l)) {
		direct_squeeze_curl(l);
		errno = EMFILE; /* the budget's slice is full */
		return NULL;
	}
	fd = socket(addr->ss.ss_family,
		    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
	if (fd < 0)
		return NULL;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	if (connect(fd, (const struct sockaddr *)&addr->ss, addr->len) != 0 &&
	    errno != EINPROGRESS) {
		e = errno;
		close(fd);
		errno = e;
		return NULL;
	}
	pthread_mutex_lock(&l->http->lock);
	a->ep->connects++;
	pthread_mutex_unlock(&l->http->lock);
	c = g_new0(struct dconn, 1);
	c->fd = fd;
	c->gen = l->direct_gen++ & DIRECT_GEN_MASK;
	c->lane = lane;
	lane->sockets++;
	direct_cap_curl(l, 1);
	g_hash_table_insert(l->dconns, GINT_TO_POINTER(fd), c);
	return c;
}

static void direct_free(struct direct *d)
{
	if (!d)
		return;
	g_free(d->url);
	g_free(d->tls_host);
	g_string_free(d->req, TRUE);
	g_free(d->head);
	g_free(d);
}

/* Lets go of @a's direct transfer: its connection, unless it went back
 * idle, is closed mid-response. */
void direct_drop(struct loop *l, struct attempt *a)
{
	struct direct *d = g_steal_pointer(&a->d);

	if (!d)
		return;
	if (d->conn) {
		d->conn->a = NULL;
		direct_close(l, d->conn);
	}
	if (d->link.data)
		g_queue_unlink(&l->direct, &d->link);
	direct_free(d);
}

/* @a ends with @rc (reap() judges it); its connection goes back idle when
 * it is clean and the server keeps it, else it is closed. */
static void direct_end(struct loop *l, struct attempt *a, CURLcode rc,
		       gboolean reusable)
{
	struct direct *d = a->d;
	struct dconn *c = d->conn;

	if (rc == CURLE_OK && reusable && c) {
		c->a = NULL;
		d->conn = NULL;
		c->link.data = c;
		c->idle_at = g_get_monotonic_time();
		g_queue_push_tail_link(&c->lane->idle, &c->link);
		direct_watch(l, c, EPOLLIN | EPOLLRDHUP);
	}
	direct_drop(l, a);
	a->rc = rc;
	g_ptr_array_add(l->ddone, a);
}

static void G_GNUC_PRINTF(5, 6)
	direct_fail(struct loop *l, struct attempt *a, CURLcode rc, int err,
		    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	g_vsnprintf(a->errbuf, CURL_ERROR_SIZE, fmt, ap);
	va_end(ap);
	a->os_errno = err;
	direct_end(l, a, rc, FALSE);
}

/* Starts @a's request on a connection: an idle one, or a new one. */
static gboolean direct_connect(struct loop *l, struct attempt *a,
			       gboolean reuse)
{
	struct direct *d = a->d;
	struct dconn *c = reuse ? direct_take_idle(l, lane_of(l, a->ep)) : NULL;

	d->reused = c != NULL;
	d->req_off = 0;
	d->head_len = 0;
	d->any_byte = FALSE;
	if (!c) {
		c = direct_open(l, a);
		if (!c)
			return FALSE;
		d->state = D_CONNECTING;
		d->connect_by =
			g_get_monotonic_time() +
			(gint64)(l->http->connect_timeout * G_USEC_PER_SEC);
	} else {
		d->state = D_SENDING;
	}
	c->a = a;
	d->conn = c;
	if (d->state == D_CONNECTING)
		direct_watch(l, c, EPOLLOUT | EPOLLIN);
	else
		direct_send(l, a);
	return TRUE;
}

/* @a goes to curl after all, as a new transfer of the same round. */
static void direct_fallback(struct loop *l, struct attempt *a)
{
	g_autofree char *url = g_steal_pointer(&a->d->url);

	direct_drop(l, a);
	a->direct = FALSE;
	a->sent = FALSE; /* curl's stall clock starts with its request */
	if (!curl_setup(l, a, url)) {
		g_strlcpy(a->errbuf, "curl_easy_init failed", CURL_ERROR_SIZE);
		g_ptr_array_add(l->add_failed, a);
		return;
	}
	curl_register(l, a);
}

void direct_begin(struct loop *l, struct attempt *a)
{
	a->d->link.data = a;
	g_queue_push_tail_link(&l->direct, &a->d->link);
	if (!direct_connect(l, a, TRUE))
		direct_fallback(l, a);
}

/* The connection died before any byte of the response: a reused one
 * (the server closed it while idle) is replaced once, as curl does. */
static gboolean direct_retry(struct loop *l, struct attempt *a)
{
	struct direct *d = a->d;

	if (!d->reused || d->retried || d->any_byte)
		return FALSE;
	d->retried = TRUE;
	d->conn->a = NULL;
	direct_close(l, g_steal_pointer(&d->conn));
	if (!direct_connect(l, a, FALSE))
		direct_fallback(l, a);
	return TRUE;
}

/* A step of @a's TLS handshake: FALSE while it goes on, and once @a has
 * gone to curl. */
static gboolean direct_handshake(struct loop *l, struct attempt *a)
{
	struct direct *d = a->d;
	struct dconn *c = d->conn;
	char why[CURL_ERROR_SIZE];
	guint32 events = EPOLLIN;
	int r;

	if (!c->ssl)
		c->ssl = tls_new(l->http->direct_tls, c->fd, d->tls_host,
				 a->ep->tls_resume, why, sizeof(why));
	r = c->ssl ? tls_handshake(c->ssl, &events, why, sizeof(why)) : -1;
	if (r == 0) {
		direct_watch(l, c, events);
		return FALSE;
	}
	if (r < 0) {
		/* curl connects again, and says why it cannot. */
		log_msg(LOG_LEVEL_INFO,
			"TLS handshake with %s on the direct path: %s; curl "
			"connects instead",
			d->tls_host, why);
		tls_resume_forget(a->ep->tls_resume);
		direct_forget(l->http, a->ep);
		direct_fallback(l, a);
		return FALSE;
	}
	if (tls_resumed(c->ssl)) {
		pthread_mutex_lock(&l->http->lock);
		a->ep->tls_resumed++;
		pthread_mutex_unlock(&l->http->lock);
	}
	d->state = D_SENDING;
	return TRUE;
}

static void direct_send(struct loop *l, struct attempt *a)
{
	struct direct *d = a->d;
	char why[CURL_ERROR_SIZE];

	while (d->req_off < d->req->len) {
		guint32 events;
		ssize_t n = dconn_send(d->conn, d->req->str + d->req_off,
				       d->req->len - d->req_off, &events, why,
				       sizeof(why));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			direct_watch(l, d->conn, events);
			return;
		}
		if (n < 0) {
			int e = errno;

			if (!direct_retry(l, a))
				direct_fail(l, a, CURLE_SEND_ERROR, e,
					    "%ssend of the request: %s",
					    d->conn->ssl ? "TLS " : "", why);
			return;
		}
		d->req_off += n;
	}
	a->sent = TRUE;
	a->moved_us = g_get_monotonic_time();
	d->slow_at = a->moved_us;
	d->slow_from = a->received;
	d->state = D_HEAD;
	direct_watch(l, d->conn, EPOLLIN);
	/* The answer may be there already. */
	direct_recv(l, a);
}

static void direct_line(const char *line, gsize len, void *data)
{
	on_header((char *)line, 1, len, data);
}

struct chunk_sink {
	struct attempt *a;
	gboolean overflow;
};

static void direct_chunk(const char *p, gsize n, void *data)
{
	struct chunk_sink *s = data;

	if (!s->overflow && !body_take(s->a, s->a->status, p, n))
		s->overflow = TRUE;
}

static void direct_overflow(struct loop *l, struct attempt *a)
{
	direct_fail(l, a, CURLE_WRITE_ERROR, 0,
		    "the body exceeds the %" G_GSIZE_FORMAT
		    " bytes expected; the transfer was cut",
		    a->req->body_limit);
}

/*
 * Body bytes at @p that came with the head, or through the scratch
 * buffer: FALSE once @a has ended.  *@done: the body is whole.
 */
static gboolean direct_body(struct loop *l, struct attempt *a, const char *p,
			    gsize n, gboolean *done)
{
	struct direct *d = a->d;

	*done = FALSE;
	if (d->h.framing == H1_CHUNKED) {
		struct chunk_sink s = { .a = a };
		g_autoptr(GError) error = NULL;
		gssize took =
			h1_chunked_feed(&d->ch, p, n, direct_chunk, &s, &error);

		if (took < 0) {
			direct_fail(l, a, CURLE_WEIRD_SERVER_REPLY, 0,
				    "malformed response: %s", error->message);
			return FALSE;
		}
		if (s.overflow) {
			direct_overflow(l, a);
			return FALSE;
		}
		if ((gsize)took < n)
			d->h.keep_alive = FALSE; /* bytes nobody asked for */
		*done = d->ch.done;
		return TRUE;
	}
	if (d->h.framing == H1_LENGTH) {
		if (n > d->left) {
			d->h.keep_alive = FALSE;
			n = d->left;
		}
		d->left -= n;
	}
	if (!body_take(a, a->status, p, n)) {
		direct_overflow(l, a);
		return FALSE;
	}
	*done = d->h.framing == H1_LENGTH && !d->left;
	return TRUE;
}

/* The head is whole: FALSE once @a has ended. */
static gboolean direct_head_done(struct loop *l, struct attempt *a, gsize took)
{
	struct direct *d = a->d;
	gsize rest = d->head_len - took;
	gboolean done = d->h.framing == H1_NONE;

	a->status = d->h.status;
	d->state = D_BODY;
	if (d->h.framing == H1_LENGTH) {
		d->left = d->h.length;
		done = !d->left;
		if (!error_document(a->status)) {
			if (a->body->len + d->left > a->req->body_limit) {
				a->overflow = TRUE;
				a->body_status = a->status;
				direct_overflow(l, a);
				return FALSE;
			}
			bufpool_buf_reserve(a->body, d->left);
		}
	}
	if (rest && !done && !direct_body(l, a, d->head + took, rest, &done))
		return FALSE;
	if (rest && d->h.framing == H1_NONE)
		d->h.keep_alive = FALSE;
	if (done) {
		direct_end(l, a, CURLE_OK, d->h.keep_alive);
		return FALSE;
	}
	return TRUE;
}

/* The connection ended (@e == 0) or failed (errno @e) mid-response;
 * @why: what failed, or how a TLS connection ended without its
 * close_notify ("" when it ended cleanly). */
static void direct_broken(struct loop *l, struct attempt *a, int e,
			  const char *why)
{
	struct direct *d = a->d;
	const char *tls = d->conn->ssl ? "TLS " : "";

	if (direct_retry(l, a))
		return;
	if (e)
		direct_fail(l, a, CURLE_RECV_ERROR, e, "%sreceive: %s", tls,
			    why);
	else if (!d->any_byte)
		direct_fail(l, a, CURLE_GOT_NOTHING, 0,
			    "the server closed the connection without a "
			    "response (empty reply)");
	else if (d->state == D_HEAD)
		direct_fail(l, a, CURLE_PARTIAL_FILE, 0,
			    "the server closed the connection within the "
			    "response's head");
	else if (d->h.framing == H1_CLOSE && *why)
		/* The end of such a body is only the close: over TLS, a cut
		 * connection must not pass for it. */
		direct_fail(l, a, CURLE_PARTIAL_FILE, 0,
			    "%s within a body that ends with the connection "
			    "(partial body)",
			    why);
	else if (d->h.framing == H1_CLOSE)
		direct_end(l, a, CURLE_OK, FALSE);
	else if (d->h.framing == H1_LENGTH)
		direct_fail(l, a, CURLE_PARTIAL_FILE, 0,
			    "the server closed the connection with "
			    "%" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT
			    " body bytes to come (partial body)",
			    d->left, d->h.length);
	else
		direct_fail(l, a, CURLE_PARTIAL_FILE, 0,
			    "the server closed the connection within a "
			    "chunked body (partial body)");
}

static void direct_recv(struct loop *l, struct attempt *a)
{
	struct direct *d = a->d;
	char scratch[DIRECT_SCRATCH];
	char why[CURL_ERROR_SIZE];

	for (;;) {
		gboolean straight = d->state == D_BODY &&
				    d->h.framing == H1_LENGTH &&
				    !error_document(a->status);
		char *into;
		gsize want;
		guint32 events;
		ssize_t n;

		if (d->state == D_HEAD) {
			if (d->head_len == d->head_cap) {
				d->head_cap = MAX(4096, d->head_cap * 2);
				d->head = g_realloc(d->head, d->head_cap);
			}
			into = d->head + d->head_len;
			want = d->head_cap - d->head_len;
		} else if (straight) {
			into = (char *)a->body->data + a->body->len;
			want = d->left;
		} else {
			into = scratch;
			want = d->h.framing == H1_LENGTH
				       ? MIN(d->left, sizeof(scratch))
				       : sizeof(scratch);
		}
		n = dconn_recv(d->conn, into, want, &events, why, sizeof(why));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			direct_watch(l, d->conn, events);
			return;
		}
		if (n <= 0) {
			direct_broken(l, a, n < 0 ? errno : 0, why);
			return;
		}
		d->any_byte = TRUE;
		a->moved_us = g_get_monotonic_time();
		if (d->state == D_HEAD) {
			g_autoptr(GError) error = NULL;
			gssize took;

			d->head_len += n;
again:
			took = h1_parse_head(d->head, d->head_len, FALSE, &d->h,
					     direct_line, a, &error);
			if (took < 0) {
				direct_fail(l, a, CURLE_WEIRD_SERVER_REPLY, 0,
					    "malformed response: %s",
					    error->message);
				return;
			}
			if (!took)
				continue;
			if (d->h.informational) {
				d->head_len -= took;
				memmove(d->head, d->head + took, d->head_len);
				goto again;
			}
			if (!direct_head_done(l, a, took))
				return;
			continue;
		}
		if (straight) {
			gboolean done;

			a->body->len += n;
			a->received += n;
			d->left -= n;
			done = !d->left;
			a->moved_dl = (curl_off_t)a->received;
			if (done) {
				direct_end(l, a, CURLE_OK, d->h.keep_alive);
				return;
			}
			continue;
		}
		{
			gboolean done;

			if (!direct_body(l, a, scratch, n, &done))
				return;
			a->moved_dl = (curl_off_t)a->received;
			if (done) {
				direct_end(l, a, CURLE_OK, d->h.keep_alive);
				return;
			}
		}
	}
}

/* A socket event on the direct connection @c. */
void direct_event(struct loop *l, struct dconn *c, guint32 events)
{
	struct attempt *a = c->a;
	struct direct *d;

	if (!a) {
		/* Idle: the server closed it, or sent what nobody asked. */
		direct_close(l, c);
		return;
	}
	d = a->d;
	if (d->state == D_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);

		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
			err = errno;
		if (err) {
			/* curl connects again, and says why it cannot. */
			direct_forget(l->http, a->ep);
			direct_fallback(l, a);
			return;
		}
		d->state = d->tls_host ? D_HANDSHAKE : D_SENDING;
	}
	if (d->state == D_HANDSHAKE && !direct_handshake(l, a))
		return;
	if (d->state == D_SENDING)
		direct_send(l, a);
	else
		direct_recv(l, a);
}

/* When @a's connect times out, it stalls (as on_progress() judges curl's),
 * and its request_timeout ends it; G_MAXINT64: never. */
static gint64 direct_connect_due(const struct attempt *a)
{
	return a->d->state <= D_HANDSHAKE ? a->d->connect_by : G_MAXINT64;
}

static gint64 direct_stall_due(const struct http *http, const struct attempt *a)
{
	return a->sent ? a->moved_us +
				 (gint64)(http->stall_timeout * G_USEC_PER_SEC)
		       : G_MAXINT64;
}

static gint64 direct_slow_due(const struct http *http, const struct attempt *a)
{
	return a->sent ? a->d->slow_at + low_speed_time(http) * G_USEC_PER_SEC
		       : G_MAXINT64;
}

/*
 * curl's low-speed check, in windows of low_speed_time() seconds: one
 * that took in fewer than LOW_SPEED_LIMIT bytes a second ends the
 * transfer as curl's check does; otherwise the next window starts.  A
 * byte now and then defeats the stall clock, not this.
 */
static gboolean direct_too_slow(struct http *http, struct attempt *a,
				gint64 now)
{
	struct direct *d = a->d;

	if (now < direct_slow_due(http, a))
		return FALSE;
	if (a->received - d->slow_from <
	    (guint64)(LOW_SPEED_LIMIT * low_speed_time(http)))
		return TRUE;
	d->slow_at = now;
	d->slow_from = a->received;
	return FALSE;
}

static gint64 direct_request_due(const struct http *http,
				 const struct attempt *a)
{
	return http->request_timeout > 0
		       ? a->start_us + (gint64)(http->request_timeout *
						G_USEC_PER_SEC)
		       : G_MAXINT64;
}

/* Deadlines and cancels of the direct path's attempts, as on_progress()
 * and curl's timeouts do for curl's. */
void direct_sweep(struct loop *l, gint64 now)
{
	struct http *http = l->http;
	GList *it = l->direct.head;

	while (it) {
		struct attempt *a = it->data;

		it = it->next;
		if (http_cancel_is_set(a->req->cancel)) {
			a->cancelled = TRUE;
			direct_fail(l, a, CURLE_ABORTED_BY_CALLBACK, 0,
				    "cancelled by its caller");
		} else if (now >= direct_connect_due(a)) {
			direct_forget(http, a->ep);
			direct_fail(l, a, CURLE_OPERATION_TIMEDOUT, ETIMEDOUT,
				    "%s: no answer within %.1f s "
				    "(connect_timeout)",
				    a->d->state == D_HANDSHAKE ? "TLS handshake"
							       : "connect",
				    http->connect_timeout);
		} else if (now >= direct_stall_due(http, a)) {
			a->stalled = TRUE;
			direct_fail(l, a, CURLE_ABORTED_BY_CALLBACK, 0,
				    "stalled");
		} else if (direct_too_slow(http, a, now)) {
			direct_fail(l, a, CURLE_OPERATION_TIMEDOUT, 0,
				    "too slow: fewer than %ld bytes a second "
				    "over the last %ld s (stall_timeout + 2), "
				    "%" G_GUINT64_FORMAT " body bytes in",
				    LOW_SPEED_LIMIT, low_speed_time(http),
				    a->received);
		} else if (now >= direct_request_due(http, a)) {
			direct_fail(l, a, CURLE_OPERATION_TIMEDOUT, 0,
				    "request_timeout (%.1f s) with "
				    "%" G_GUINT64_FORMAT " body bytes in",
				    http->request_timeout, a->received);
		}
	}
}

/* Until the direct path's next deadline, in ms, at most @ms. */
gint64 direct_timeout_ms(struct loop *l, gint64 ms, gint64 now)
{
	GList *it;

	for (it = l->direct.head; it; it = it->next) {
		struct attempt *a = it->data;
		gint64 due = MIN(
			MIN(direct_connect_due(a), direct_slow_due(l->http, a)),
			MIN(direct_stall_due(l->http, a),
			    direct_request_due(l->http, a)));

		if (due < G_MAXINT64)
			ms = MIN(ms, until(due, now));
	}
	return ms;
}
