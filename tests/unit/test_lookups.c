/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "lookups.h"

#define MS (G_GINT64_CONSTANT(1000))

static struct lookups_stats stats(struct lookups *lk)
{
	struct lookups_stats st;

	lookups_get_stats(lk, &st);
	return st;
}

/* A loader in random order: every lookup is opened a moment later, so
 * every one but the first (no credit yet) is fetched, and the credit
 * grows to its bound. */
static void test_opens_follow_lookups(void)
{
	struct lookups *lk = lookups_new(NULL);
	gint64 t = 1000 * MS;
	guint64 i;

	for (i = 1; i <= 1000; i++, t += MS) {
		g_assert_true(lookups_seen(lk, i, t) == (i > 1));
		lookups_opened(lk, i, t + MS / 2);
	}
	g_assert_cmpuint(stats(lk).fetched, ==, 999);
	g_assert_cmpuint(stats(lk).hits, ==, 999);
	g_assert_cmpuint(stats(lk).followed, ==, 1000);
	g_assert_cmpuint(stats(lk).wasted, ==, 0);
	g_assert_cmpuint(stats(lk).credit, ==, 64);
	g_assert_cmpuint(stats(lk).pending, ==, 0);
	lookups_free(lk);
}

/* 32 readers, each with a lookup ahead of its open: none fetched in the
 * first round (no credit), all once those opens have earned it. */
static void test_many_readers_at_once(void)
{
	struct lookups *lk = lookups_new(NULL);
	gint64 t = 1000 * MS;
	guint64 round, r, fetched = 0;

	for (round = 0; round < 10; round++, t += 20 * MS) {
		for (r = 0; r < 32; r++)
			fetched += lookups_seen(lk, round * 32 + r + 1, t);
		for (r = 0; r < 32; r++)
			lookups_opened(lk, round * 32 + r + 1, t + 10 * MS);
	}
	g_assert_cmpuint(fetched, ==, 9 * 32);
	g_assert_cmpuint(stats(lk).followed, ==, 320);
	g_assert_cmpuint(stats(lk).wasted, ==, 0);
	lookups_free(lk);
}

/* du or find -size: lookups and no opens.  On a fresh mount nothing is
 * fetched at all. */
static void test_stat_sweep_fetches_nothing(void)
{
	struct lookups *lk = lookups_new(NULL);
	gint64 t = 1000 * MS;
	guint64 i, fetched = 0;

	for (i = 1; i <= 100000; i++, t += MS / 10)
		fetched += lookups_seen(lk, i, t);
	g_assert_cmpuint(fetched, ==, 0);
	g_assert_cmpuint(stats(lk).credit, ==, 0);
	g_assert_cmpuint(stats(lk).lookups, ==, 100000);
	lookups_free(lk);
}

/* The same sweep after a loader left a credit of 16: at most that many
 * are fetched at once; each fetch left unopened costs a unit, so the
 * sweep soon fetches nothing at all. */
static void test_stat_sweep_stops_fetching(void)
{
	struct lookups_options o = { .credit = 16 };
	struct lookups *lk = lookups_new(&o);
	gint64 t = 1000 * MS;
	guint64 i, fetched = 0;

	for (i = 1; i <= 100000; i++, t += MS / 10)
		fetched += lookups_seen(lk, i, t);
	/* 16 at first; as each expires (2 s), the credit is one less. */
	g_assert_cmpuint(fetched, ==, 16);
	g_assert_cmpuint(stats(lk).credit, ==, 0);
	g_assert_cmpuint(stats(lk).wasted, ==, 16);
	g_assert_cmpuint(stats(lk).pending, ==, 0);
	lookups_free(lk);
}

/* With no credit, opens that follow lookups still earn it back (their
 * lookups were not fetched): the loader that comes after the sweep gets
 * its fetches again. */
static void test_credit_comes_back(void)
{
	struct lookups_options o = { .credit = 16 };
	struct lookups *lk = lookups_new(&o);
	gint64 t = 1000 * MS;
	guint64 i;

	for (i = 1; i <= 16; i++)
		g_assert_true(lookups_seen(lk, i, t));
	t += 3000 * MS;
	g_assert_false(lookups_seen(lk, 100, t)); /* the 16 expired */
	g_assert_cmpuint(stats(lk).credit, ==, 0);
	lookups_opened(lk, 100, t + MS);
	g_assert_cmpuint(stats(lk).credit, ==, 1);
	g_assert_cmpuint(stats(lk).followed, ==, 1);
	g_assert_cmpuint(stats(lk).hits, ==, 0);
	g_assert_true(lookups_seen(lk, 101, t + 2 * MS));
	lookups_opened(lk, 101, t + 3 * MS);
	g_assert_cmpuint(stats(lk).hits, ==, 1);
	g_assert_cmpuint(stats(lk).credit, ==, 2);
	lookups_free(lk);
}

/* An open long after its lookup, or of a file never looked up (the
 * kernel's entry cached), follows nothing; a second lookup of a tracked
 * file is no second bet. */
static void test_what_follows(void)
{
	struct lookups_options o = { .credit = 16 };
	struct lookups *lk = lookups_new(&o);
	gint64 t = 1000 * MS;

	g_assert_true(lookups_seen(lk, 7, t));
	g_assert_false(lookups_seen(lk, 7, t + MS));
	g_assert_cmpuint(stats(lk).lookups, ==, 2);
	g_assert_cmpuint(stats(lk).fetched, ==, 1);
	lookups_opened(lk, 8, t + MS);
	g_assert_cmpuint(stats(lk).followed, ==, 0);
	lookups_opened(lk, 7, t + 2500 * MS);
	g_assert_cmpuint(stats(lk).followed, ==, 0);
	g_assert_cmpuint(stats(lk).wasted, ==, 1);
	/* Opened twice: the second open follows nothing. */
	lookups_seen(lk, 9, t + 3000 * MS);
	lookups_opened(lk, 9, t + 3001 * MS);
	lookups_opened(lk, 9, t + 3002 * MS);
	g_assert_cmpuint(stats(lk).followed, ==, 1);
	lookups_free(lk);
}

/* The table is bounded: past tracked_max, the oldest lookups are
 * forgotten (a fetched one as unopened). */
static void test_bounded(void)
{
	struct lookups_options o = { .tracked_max = 100, .credit = 64 };
	struct lookups *lk = lookups_new(&o);
	gint64 t = 1000 * MS;
	guint64 i;

	for (i = 1; i <= 1000; i++)
		lookups_seen(lk, i, t);
	g_assert_cmpuint(stats(lk).lookups, ==, 1000);
	lookups_opened(lk, 1, t);
	g_assert_cmpuint(stats(lk).followed, ==, 0); /* forgotten */
	lookups_opened(lk, 1000, t);
	g_assert_cmpuint(stats(lk).followed, ==, 1);
	g_assert_cmpuint(stats(lk).pending + stats(lk).wasted + stats(lk).hits,
			 ==, stats(lk).fetched);
	lookups_free(lk);
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/lookups/opens_follow_lookups",
			test_opens_follow_lookups);
	g_test_add_func("/lookups/many_readers_at_once",
			test_many_readers_at_once);
	g_test_add_func("/lookups/stat_sweep_fetches_nothing",
			test_stat_sweep_fetches_nothing);
	g_test_add_func("/lookups/stat_sweep_stops_fetching",
			test_stat_sweep_stops_fetching);
	g_test_add_func("/lookups/credit_comes_back", test_credit_comes_back);
	g_test_add_func("/lookups/what_follows", test_what_follows);
	g_test_add_func("/lookups/bounded", test_bounded);
	return g_test_run();
}
