/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <string.h>

#include "cred_refresh.h"
#include "error.h"
#include "log.h"

/* Refresh this long before the expiry... */
#define AHEAD_SECONDS 300
/* ...or at half the lifetime of credentials shorter than twice that. */
#define RETRY_MIN_US	 (1 * G_USEC_PER_SEC)
#define RETRY_MAX_US	 (60 * G_USEC_PER_SEC)
#define RETRY_EXPIRED_US (5 * G_USEC_PER_SEC)

struct cred_refresh {
	char *profile;
	char *region;
	char *ca_file;
	struct cred_chain_options o; /* points at the copies above */

	GMutex fetch_lock; /* one fetch at a time; before lock */
	GMutex lock;
	GCond cond;
	struct credentials *current; /* protected by lock */
	GPtrArray *retired;	     /* protected by lock */
	gint64 refresh_at; /* monotonic us, 0: never; protected by lock */
	gboolean stop;	   /* protected by lock */
	gboolean failing;  /* the failure was logged; protected by lock */
	guint failures;	   /* since the last success; protected by lock */
	guint refreshes;   /* protected by lock */
	GThread *thread;
};

static gint64 now_unix(void)
{
	return g_get_real_time() / G_USEC_PER_SEC;
}

/* When to fetch again, in monotonic microseconds (0: never). */
static gint64 schedule(const struct credentials *creds)
{
	gint64 left = creds->expiration - now_unix();
	gint64 ahead;

	if (!creds->expiration)
		return 0;
	ahead = left >= 2 * AHEAD_SECONDS ? AHEAD_SECONDS : left / 2;
	return g_get_monotonic_time() +
	       MAX((left - ahead) * G_USEC_PER_SEC, RETRY_MIN_US);
}

static gint64 retry_delay(const struct credentials *creds)
{
	gint64 left = creds->expiration - now_unix();

	if (left <= 0)
		return RETRY_EXPIRED_US;
	return CLAMP(left * G_USEC_PER_SEC / 4, RETRY_MIN_US, RETRY_MAX_US);
}

static char *describe(const struct credentials *c)
{
	g_autoptr(GString) s = g_string_new(NULL);

	g_string_printf(s, "%s (%s", c->provider ? c->provider : "?",
			c->source ? c->source : "?");
	if (c->role)
		g_string_append_printf(s, ", role %s", c->role);
	g_string_append(s, ")");
	if (c->expiration)
		g_string_append_printf(
			s, "; they expire in %" G_GINT64_FORMAT " s",
			c->expiration - now_unix());
	return g_string_free(g_steal_pointer(&s), FALSE);
}

/* Makes @fresh current.  Called with r->lock held. */
static void install(struct cred_refresh *r, struct credentials *fresh)
{
	g_ptr_array_add(r->retired, r->current);
	r->current = fresh;
	r->refresh_at = schedule(fresh);
	r->refreshes++;
	r->failures = 0;
	r->failing = FALSE;
	g_cond_broadcast(&r->cond);
}

/* A background fetch failed: keep what we have, say why once. */
static void fetch_failed(struct cred_refresh *r, const GError *err)
{
	const struct credentials *c = r->current;
	gint64 left = c->expiration - now_unix();

	r->failures++;
	r->refresh_at = g_get_monotonic_time() + retry_delay(c);
	if (r->failing) {
		log_msg(LOG_LEVEL_DEBUG,
			"credentials: refresh attempt %u failed: %s",
			r->failures, err->message);
		return;
	}
	r->failing = TRUE;
	if (left > 0)
		log_msg(LOG_LEVEL_WARNING,
			"credentials: refresh failed, keeping the current "
			"ones (valid %" G_GINT64_FORMAT
			" s more), retrying: %s",
			left, err->message);
	else
		log_msg(LOG_LEVEL_WARNING,
			"credentials: refresh failed and the current ones "
			"expired, retrying: %s",
			err->message);
}

static void refresh_now(struct cred_refresh *r)
{
	g_autoptr(GError) err = NULL;
	struct credentials *fresh;
	guint failures;

	g_mutex_lock(&r->fetch_lock);
	fresh = cred_chain_resolve(&r->o, NULL, &err);
	if (fresh && fresh->expiration && fresh->expiration <= now_unix()) {
		g_autofree char *d = describe(fresh);

		g_set_error(&err, BFS_ERROR, EACCES,
			    "%s handed out credentials that have already "
			    "expired (is the clock right?)",
			    d);
		g_clear_pointer(&fresh, credentials_free);
	}
	g_mutex_lock(&r->lock);
	failures = r->failures;
	if (fresh && credentials_equal(fresh, r->current)) {
		g_autofree char *d = describe(fresh);

		/* IMDS hands out the same keys until shortly before they
		 * expire: keep the ones in use (pointers to them are out),
		 * and ask again later, not in a tightening loop. */
		credentials_free(fresh);
		r->refresh_at =
			g_get_monotonic_time() + retry_delay(r->current);
		log_msg(LOG_LEVEL_DEBUG, "credentials: the same again from %s",
			d);
	} else if (fresh) {
		g_autofree char *d = describe(fresh);

		install(r, fresh);
		if (failures)
			log_msg(LOG_LEVEL_NOTICE,
				"credentials: refreshed from %s, after %u "
				"failed attempts",
				d, failures);
		else
			log_msg(LOG_LEVEL_NOTICE,
				"credentials: refreshed from %s", d);
	} else {
		fetch_failed(r, err);
	}
	g_mutex_unlock(&r->lock);
	g_mutex_unlock(&r->fetch_lock);
}

static gpointer refresher(gpointer data)
{
	struct cred_refresh *r = data;

	g_mutex_lock(&r->lock);
	while (!r->stop) {
		gint64 at = r->refresh_at;

		if (!at) {
			g_cond_wait(&r->cond, &r->lock);
			continue;
		}
		if (g_get_monotonic_time() < at) {
			g_cond_wait_until(&r->cond, &r->lock, at);
			continue;
		}
		g_mutex_unlock(&r->lock);
		refresh_now(r);
		g_mutex_lock(&r->lock);
	}
	g_mutex_unlock(&r->lock);
	return NULL;
}

struct cred_refresh *cred_refresh_new(const struct cred_chain_options *o,
				      GError **error)
{
	struct cred_refresh *r = g_new0(struct cred_refresh, 1);
	g_autofree char *d = NULL;

	r->profile = g_strdup(o->profile);
	r->region = g_strdup(o->region);
	r->ca_file = g_strdup(o->ca_file);
	r->o = (struct cred_chain_options){
		.profile = r->profile,
		.anonymous = o->anonymous,
		.region = r->region,
		.ca_file = r->ca_file,
	};
	g_mutex_init(&r->fetch_lock);
	g_mutex_init(&r->lock);
	g_cond_init(&r->cond);
	r->retired = g_ptr_array_new_with_free_func(
		(GDestroyNotify)credentials_free);
	r->current = cred_chain_resolve(&r->o, NULL, error);
	if (!r->current) {
		cred_refresh_free(r);
		return NULL;
	}
	d = describe(r->current);
	log_msg(LOG_LEVEL_NOTICE, "credentials: from %s", d);
	r->refresh_at = schedule(r->current);
	/* Static keys never need the thread; ExpiredToken reloads them. */
	if (r->refresh_at)
		r->thread = g_thread_new("bfs-creds", refresher, r);
	return r;
}

const struct credentials *cred_refresh_peek(struct cred_refresh *r)
{
	const struct credentials *c;

	g_mutex_lock(&r->lock);
	c = r->current;
	g_mutex_unlock(&r->lock);
	return c;
}

guint cred_refresh_count(struct cred_refresh *r)
{
	guint n;

	g_mutex_lock(&r->lock);
	n = r->refreshes;
	g_mutex_unlock(&r->lock);
	return n;
}

/* Why the same credentials came back, and what would renew them. */
static void same_again(const struct credentials *c, GError **error)
{
	if (c->anonymous)
		g_set_error(error, BFS_ERROR, EACCES,
			    "anonymous access was refused as expired; there "
			    "are no credentials to renew");
	else if (!g_strcmp0(c->provider, "environment"))
		g_set_error(error, BFS_ERROR, EACCES,
			    "the credentials from the %s expired, and a "
			    "running bucketfs cannot see a changed "
			    "environment: use a provider that renews them "
			    "(a profile with role_arn or credential_process, "
			    "web identity, container or instance "
			    "credentials), or remount with new ones",
			    c->source);
	else if (!g_strcmp0(c->provider, "profile"))
		g_set_error(error, BFS_ERROR, EACCES,
			    "the credentials from %s expired and it still "
			    "holds the same ones: renew them there (new "
			    "aws_access_key_id, aws_secret_access_key and "
			    "aws_session_token); bucketfs reads it again at "
			    "the next ExpiredToken",
			    c->source);
	else
		g_set_error(error, BFS_ERROR, EACCES,
			    "the credentials from %s were refused as expired, "
			    "and it gave the same ones again",
			    c->source);
}

gboolean cred_refresh_renew(struct cred_refresh *r,
			    const struct credentials *used, GError **error)
{
	g_autoptr(GError) err = NULL;
	struct credentials *fresh;
	gboolean ok = FALSE;

	/* Renewed meanwhile (another request, the refresher): retry. */
	g_mutex_lock(&r->lock);
	if (used != r->current) {
		g_mutex_unlock(&r->lock);
		return TRUE;
	}
	if (used->anonymous) {
		g_mutex_unlock(&r->lock);
		same_again(used, error);
		return FALSE;
	}
	if (r->thread) {
		/*
		 * Temporary credentials: the refresher fetches them (an STS
		 * or IMDS round trip, a process), never this event thread;
		 * the retry, after its backoff, signs with what is current
		 * then.
		 */
		r->refresh_at = g_get_monotonic_time();
		g_cond_broadcast(&r->cond);
		g_mutex_unlock(&r->lock);
		log_msg(LOG_LEVEL_INFO,
			"credentials expired (ExpiredToken): the refresher "
			"asks %s again now",
			used->source ? used->source : "the provider");
		return TRUE;
	}
	g_mutex_unlock(&r->lock);
	g_mutex_lock(&r->fetch_lock);
	fresh = cred_chain_resolve(&r->o, NULL, &err);
	g_mutex_lock(&r->lock);
	if (!fresh) {
		g_propagate_prefixed_error(error, g_steal_pointer(&err),
					   "reading the credentials again: ");
	} else if (credentials_equal(fresh, used)) {
		same_again(fresh, error);
		credentials_free(fresh);
	} else {
		g_autofree char *d = describe(fresh);

		install(r, fresh);
		if (!r->thread && r->refresh_at)
			r->thread = g_thread_new("bfs-creds", refresher, r);
		log_msg(LOG_LEVEL_NOTICE,
			"credentials expired (ExpiredToken): read them again "
			"from %s",
			d);
		ok = TRUE;
	}
	g_mutex_unlock(&r->lock);
	g_mutex_unlock(&r->fetch_lock);
	return ok;
}

void cred_refresh_free(struct cred_refresh *r)
{
	if (!r)
		return;
	if (r->thread) {
		g_mutex_lock(&r->lock);
		r->stop = TRUE;
		g_cond_broadcast(&r->cond);
		g_mutex_unlock(&r->lock);
		g_thread_join(r->thread);
	}
	credentials_free(r->current);
	g_ptr_array_unref(r->retired);
	g_cond_clear(&r->cond);
	g_mutex_clear(&r->lock);
	g_mutex_clear(&r->fetch_lock);
	g_free(r->profile);
	g_free(r->region);
	g_free(r->ca_file);
	g_free(r);
}
