/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_loop.c - the event threads: a loop's set-up and teardown, its epoll
 * set and the dispatch of its events to curl and to the direct path, its
 * wake-ups, and the cancellation of what is left when the engine stops.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <curl/curl.h>

#include "error.h"
#include "http_engine.h"
#include "log.h"

#define MAX_POLL_MS 1000
#define EPOLL_BATCH 64 /* socket events taken per epoll_wait() */

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

GError *cancelled_error(void)
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
void cancel_untaken(struct http *http)
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

/*
 * Wakes @l's thread, once however many submitters call it before the
 * thread takes its work: the flag is cleared (loop_woken()) before
 * take_work() looks.
 */
void loop_wake(struct loop *l)
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

gpointer event_thread(gpointer data)
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

/* Sets up loop @i, without its thread. */
gboolean loop_init(struct http *http, guint i, GError **error)
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

void loop_clear(struct loop *l)
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
