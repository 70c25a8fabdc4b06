/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * lookups.c - whether a file looked up will be opened (see lookups.h).
 *
 * The tracked lookups are a queue in lookup order (so the oldest expire
 * from its head) and a table from the file to its link in the queue (so
 * an open finds its lookup at once).
 */
#include "lookups.h"

#define DEF_CREDIT_MAX	64
#define DEF_WINDOW_US	(2 * G_USEC_PER_SEC)
#define DEF_TRACKED_MAX 4096

struct lookup {
	guint64 ino;
	gint64 at;
	gboolean fetched;
};

struct lookups {
	struct lookups_options o;
	GMutex lock;
	GQueue order;	    /* of struct lookup *, oldest first */
	GHashTable *by_ino; /* &lookup->ino -> its GList link in order */
	guint credit;
	guint pending; /* fetched, in order */
	struct lookups_stats st;
};

struct lookups *lookups_new(const struct lookups_options *opts)
{
	struct lookups *lk = g_new0(struct lookups, 1);

	if (opts)
		lk->o = *opts;
	if (!lk->o.credit_max)
		lk->o.credit_max = DEF_CREDIT_MAX;
	if (!lk->o.window_us)
		lk->o.window_us = DEF_WINDOW_US;
	if (!lk->o.tracked_max)
		lk->o.tracked_max = DEF_TRACKED_MAX;
	lk->credit = MIN(lk->o.credit, lk->o.credit_max);
	g_mutex_init(&lk->lock);
	g_queue_init(&lk->order);
	lk->by_ino = g_hash_table_new(g_int64_hash, g_int64_equal);
	return lk;
}

void lookups_free(struct lookups *lk)
{
	if (!lk)
		return;
	g_hash_table_unref(lk->by_ino);
	g_queue_clear_full(&lk->order, g_free);
	g_mutex_clear(&lk->lock);
	g_free(lk);
}

/* Forgets @link's lookup; a fetched one no open followed costs a unit.
 * Under lock. */
static void forget(struct lookups *lk, GList *link, gboolean opened)
{
	struct lookup *l = link->data;

	if (l->fetched) {
		lk->pending--;
		if (opened) {
			lk->st.hits++;
		} else {
			lk->st.wasted++;
			if (lk->credit)
				lk->credit--;
		}
	}
	g_hash_table_remove(lk->by_ino, &l->ino);
	g_queue_delete_link(&lk->order, link);
	g_free(l);
}

/* Forgets the lookups older than the window, and the oldest beyond
 * tracked_max.  Under lock. */
static void expire(struct lookups *lk, gint64 now_us)
{
	for (;;) {
		GList *head = g_queue_peek_head_link(&lk->order);
		const struct lookup *l = head ? head->data : NULL;

		if (!l || (now_us - l->at <= lk->o.window_us &&
			   lk->order.length <= lk->o.tracked_max))
			return;
		forget(lk, head, FALSE);
	}
}

gboolean lookups_seen(struct lookups *lk, guint64 ino, gint64 now_us)
{
	struct lookup *l;
	gboolean fetch;

	g_mutex_lock(&lk->lock);
	lk->st.lookups++;
	expire(lk, now_us);
	if (g_hash_table_contains(lk->by_ino, &ino)) {
		g_mutex_unlock(&lk->lock);
		return FALSE;
	}
	fetch = lk->pending < lk->credit;
	l = g_new0(struct lookup, 1);
	l->ino = ino;
	l->at = now_us;
	l->fetched = fetch;
	g_queue_push_tail(&lk->order, l);
	g_hash_table_insert(lk->by_ino, &l->ino,
			    g_queue_peek_tail_link(&lk->order));
	lk->pending += fetch;
	lk->st.fetched += fetch;
	expire(lk, now_us); /* past tracked_max: the oldest goes */
	g_mutex_unlock(&lk->lock);
	return fetch;
}

void lookups_opened(struct lookups *lk, guint64 ino, gint64 now_us)
{
	GList *link;

	g_mutex_lock(&lk->lock);
	expire(lk, now_us);
	link = g_hash_table_lookup(lk->by_ino, &ino);
	if (link) {
		lk->st.followed++;
		lk->credit = MIN(lk->credit + 1, lk->o.credit_max);
		forget(lk, link, TRUE);
	}
	g_mutex_unlock(&lk->lock);
}

void lookups_get_stats(struct lookups *lk, struct lookups_stats *out)
{
	g_mutex_lock(&lk->lock);
	*out = lk->st;
	out->credit = lk->credit;
	out->pending = lk->pending;
	g_mutex_unlock(&lk->lock);
}
