/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_dconn.c - the direct path's connections: each loop's pool of them
 * (open, idle in their lanes, closed for room or when too old), their
 * share of the loop's slice of the budget, which caps curl's, their epoll
 * registration, and their I/O, plain or through TLS.
 *
 * The loop's thread only, like the rest of the direct path.
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "http_engine.h"
#include "log.h"

/* An idle connection older than this is closed, never reused: curl's
 * CURLOPT_MAXAGE_CONN default, the age curl's own idle ones reach. */
#define DIRECT_IDLE_MAX_US (118 * G_USEC_PER_SEC)

static guint loop_sockets(const struct loop *l)
{
	guint i, n = 0;

	for (i = 0; i < l->http->endpoints->len; i++)
		n += l->lanes[i].sockets;
	return n;
}

/*
 * curl counts only its own sockets against CURLMOPT_MAX_TOTAL_CONNECTIONS:
 * capped at the slots the direct connections leave, it closes one of its
 * idle connections (to any endpoint) or waits for one of its transfers,
 * instead of opening past the loop's slice.  At least 1: a curl transfer
 * starts only with a slot free (start_ready()), and direct_make_room()
 * first closes an idle direct connection for it.
 */
void direct_cap_curl(struct loop *l, int delta)
{
	long cap;

	l->direct_sockets += delta;
	cap = MAX(1, (long)l->slots - (long)l->direct_sockets);
	if (cap != l->curl_cap && l->multi) {
		curl_multi_setopt(l->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
				  cap);
		l->curl_cap = cap;
	}
}

void direct_watch(struct loop *l, struct dconn *c, guint32 events)
{
	struct epoll_event ev = { .events = events,
				  .data.u64 = DIRECT_TAG |
					      (guint64)c->gen
						      << DIRECT_GEN_SHIFT |
					      (guint32)c->fd };

	if (c->events == events)
		return;
	if (epoll_ctl(l->epfd, c->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd,
		      &ev) == 0)
		c->events = events;
	else
		/* Swept instead: its deadlines still end it. */
		log_msg(LOG_LEVEL_WARNING, "epoll_ctl of socket %d: %s", c->fd,
			g_strerror(errno));
}

void direct_close(struct loop *l, struct dconn *c)
{
	/* Only a clean connection says goodbye over TLS: never one that
	 * failed, or that is cut mid-response. */
	gboolean idle = !c->a && c->link.data;

	if (c->events)
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	if (!c->a && c->link.data)
		g_queue_unlink(&c->lane->idle, &c->link);
	g_hash_table_remove(l->dconns, GINT_TO_POINTER(c->fd));
	tls_free(c->ssl, idle);
	close(c->fd);
	if (c->lane->sockets > 0)
		c->lane->sockets--;
	direct_cap_curl(l, -1);
	g_free(c);
}

/* Closes the oldest idle direct connection of @l: FALSE if none is. */
static gboolean direct_close_idle(struct loop *l)
{
	guint i;

	for (i = 0; i < l->http->endpoints->len; i++) {
		GList *oldest = l->lanes[i].idle.head;

		if (oldest) {
			direct_close(l, oldest->data);
			return TRUE;
		}
	}
	return FALSE;
}

gboolean direct_slice_full(const struct loop *l)
{
	return loop_sockets(l) >= l->slots;
}

/* Before a socket opens: at the loop's slice, an idle direct one goes.
 * FALSE: the slice is full of sockets in use, or curl's. */
gboolean direct_make_room(struct loop *l)
{
	return !direct_slice_full(l) || direct_close_idle(l);
}

/* An idle connection @a's lane can reuse, or NULL. */
struct dconn *direct_take_idle(struct loop *l, struct lane *lane)
{
	GList *link;

	while ((link = g_queue_pop_tail_link(&lane->idle))) {
		struct dconn *c = link->data;
		char b;
		ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

		link->data = NULL;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
		    !(c->ssl && tls_pending(c->ssl)) &&
		    g_get_monotonic_time() - c->idle_at < DIRECT_IDLE_MAX_US)
			return c;
		/* Closed by the server, it sent what nobody asked, or it
		 * is past DIRECT_IDLE_MAX_US. */
		direct_close(l, c);
	}
	return NULL;
}

/*
 * The direct path found the loop's slice full.  curl keeps its idle
 * connections (up to the slice) and would reuse them for every attempt
 * that falls back, so they would hold the slice for good: from now on it
 * keeps one idle connection per endpoint, and closes the oldest idle one
 * each time a transfer of its own ends, until the direct path has room.
 */
void direct_squeeze_curl(struct loop *l)
{
	if (l->curl_squeezed)
		return;
	l->curl_squeezed = TRUE;
	curl_multi_setopt(l->multi, CURLMOPT_MAXCONNECTS,
			  (long)l->http->endpoints->len);
}

/* send() on @c, or through its TLS: as send(); on EAGAIN, *@events is
 * what to wait for; @why says what failed. */
ssize_t dconn_send(struct dconn *c, const char *p, gsize n, guint32 *events,
		   char *why, gsize len)
{
	ssize_t r;

	if (c->ssl)
		return tls_send(c->ssl, p, n, events, why, len);
	*events = EPOLLOUT | EPOLLIN;
	r = send(c->fd, p, n, MSG_NOSIGNAL);
	if (r < 0)
		g_strlcpy(why, g_strerror(errno), len);
	return r;
}

/* recv() on @c, or through its TLS: as recv(); on EAGAIN, *@events is
 * what to wait for; @why says what failed, and at the end of a TLS
 * connection without its close_notify, that. */
ssize_t dconn_recv(struct dconn *c, char *p, gsize n, guint32 *events,
		   char *why, gsize len)
{
	ssize_t r;

	*why = 0;
	if (c->ssl)
		return tls_recv(c->ssl, p, n, events, why, len);
	*events = EPOLLIN;
	r = recv(c->fd, p, n, 0);
	if (r < 0)
		g_strlcpy(why, g_strerror(errno), len);
	return r;
}

void direct_close_all(struct loop *l)
{
	while (l->dconns && g_hash_table_size(l->dconns) > 0) {
		GHashTableIter it;
		gpointer c;

		g_hash_table_iter_init(&it, l->dconns);
		g_hash_table_iter_next(&it, NULL, &c);
		((struct dconn *)c)->a = NULL;
		direct_close(l, c);
	}
}

struct dconn *direct_conn_of(struct loop *l, guint64 data)
{
	struct dconn *c = g_hash_table_lookup(
		l->dconns, GINT_TO_POINTER((int)(guint32)data));

	/* A connection closed by an event before this one in the batch, and
	 * maybe its fd number already another's: that one's gen differs. */
	if (!c || c->gen != (guint32)(data >> DIRECT_GEN_SHIFT))
		return NULL;
	return c;
}

void direct_expire_idle(struct loop *l, gint64 now)
{
	guint i;

	for (i = 0; i < l->http->endpoints->len; i++) {
		GList *oldest;

		/* Oldest first: the queue is in the order they went idle. */
		while ((oldest = l->lanes[i].idle.head) &&
		       now - ((struct dconn *)oldest->data)->idle_at >=
			       DIRECT_IDLE_MAX_US)
			direct_close(l, oldest->data);
	}
}
