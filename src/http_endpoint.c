/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * http_endpoint.c - the endpoints and their health: latency (an EWMA),
 * success records, ejection and probing, and the choice of an endpoint
 * for each attempt.  Under http->lock, unless a comment says otherwise.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint_url.h"
#include "error.h"
#include "http_engine.h"
#include "log.h"

#define EWMA_WEIGHT	  0.2		 /* of the newest latency */
#define EWMA_HALF_LIFE_US G_USEC_PER_SEC /* of a latency not renewed */
#define RECORD_LEN	  32 /* outcomes kept for the success rate */

void endpoint_free(void *p)
{
	struct endpoint *ep = p;

	g_free(ep->url);
	g_free(ep->scheme);
	g_free(ep->host);
	g_free(ep->hostport);
	g_free(ep->addr_host);
	tls_resume_free(ep->tls_resume);
	g_free(ep);
}

/* An endpoint of @url, parsed by endpoint_url.h (config's parser too). */
struct endpoint *endpoint_parse(const char *url, guint index, GError **error)
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
	if (!g_ascii_strcasecmp(ep->scheme, "https"))
		ep->tls_resume = tls_resume_new();
	endpoint_url_clear(&u);
	return ep;
}

struct endpoint *endpoint_at(struct http *http, guint i)
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
guint32 percentile(guint32 *v, guint n, guint pct)
{
	guint rank;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), u32_cmp);
	rank = (n * pct + 99) / 100;
	return v[MAX(rank, 1) - 1];
}

/* The smallest latency known of any endpoint, 0 when none is known. */
double fastest_ewma(struct http *http)
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
double latency_now(const struct endpoint *ep, double fastest, gint64 now)
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
void ewma_add(struct http *http, struct endpoint *ep, gint64 us, gint64 now)
{
	double fastest = fastest_ewma(http);
	double base = fastest > 0 ? latency_now(ep, fastest, now) : (double)us;

	ep->ewma_us = base + EWMA_WEIGHT * ((double)us - base);
	ep->ewma_at = now;
}

/*
 * How much longer than the best expected wait a loop accepts in order to
 * keep using an idle connection it has (see pick_healthy()).
 */
#define WARM_SLACK 2.0

/*
 * The healthy endpoint other than @avoid where one more attempt expects
 * to wait least: (inflight + 1) x recent latency.  Ties go round.
 *
 * With @l's slice of the budget full, going elsewhere than where @l has
 * an idle direct connection means closing that connection and opening
 * another: a connect, over TLS a handshake, both ends' CPU, to save a
 * wait that the latencies' noise alone makes up on a busy host.  Then
 * the warm endpoint with the least expected wait is taken while that
 * wait is within WARM_SLACK times the best one's: the loop's connections
 * stay where they are, a pool that balances itself (a connection to a
 * faster endpoint comes back idle sooner and is taken again sooner),
 * and an endpoint much slower than the rest is still left.  (Under the
 * loop's own thread, which alone touches its lanes.)
 */
struct endpoint *pick_healthy(struct http *http, const struct endpoint *avoid,
			      struct loop *l, gint64 now)
{
	guint n = http->endpoints->len;
	guint start = http->rotate++ % n, i;
	double fastest = fastest_ewma(http), best_score = 0, warm_score = 0;
	struct endpoint *best = NULL, *warm = NULL;
	gboolean full = l && direct_slice_full(l);

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
		if (full && lane_of(l, ep)->idle.length &&
		    (!warm || score < warm_score)) {
			warm = ep;
			warm_score = score;
		}
	}
	if (warm && warm_score <= WARM_SLACK * best_score)
		return warm;
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
struct endpoint *pick_endpoint(struct http *http, struct http_request *req,
			       struct loop *l, gint64 now, gboolean *probe)
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
	ep = pick_healthy(http, req->last_failed, l, now);
	if (!ep)
		ep = pick_healthy(http, NULL, l, now);
	if (!ep)
		ep = best_of_ejected(http, req->last_failed);
	return ep;
}

/* Whether a healthy endpoint other than @ep exists.  Under http->lock. */
gboolean another_healthy(struct http *http, const struct endpoint *ep)
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
 * Counts one finished attempt toward its endpoint's health.  @chain is the
 * attempt's whole cause chain, for the one warning of an ejection.
 */
void health_note(struct http *http, struct attempt *a, enum outcome o,
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
