/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <string.h>

#include "streams.h"

/*
 * A run of opens through a detector, and what its announcements were
 * worth: an open of an announced position is a hit; a position announced
 * and never opened is waste; one announced twice, or after it was opened,
 * would be fetched twice.
 */
struct sim {
	struct streams *s;
	GHashTable *announced; /* pos -> 1 */
	GHashTable *opened;    /* pos -> 1 */
	guint64 opens, hits, twice, after_open;
};

static void sim_init(struct sim *m, const struct streams_options *o)
{
	m->s = streams_new(o);
	m->announced = g_hash_table_new(g_int64_hash, g_int64_equal);
	m->opened = g_hash_table_new(g_int64_hash, g_int64_equal);
	m->opens = m->hits = m->twice = m->after_open = 0;
}

static void sim_clear(struct sim *m)
{
	GHashTableIter it;
	gpointer k;

	g_hash_table_iter_init(&it, m->announced);
	while (g_hash_table_iter_next(&it, &k, NULL))
		g_free(k);
	g_hash_table_iter_init(&it, m->opened);
	while (g_hash_table_iter_next(&it, &k, NULL))
		g_free(k);
	g_hash_table_unref(m->announced);
	g_hash_table_unref(m->opened);
	streams_free(m->s);
}

static void set_add(GHashTable *set, guint64 pos)
{
	g_hash_table_add(set, g_memdup2(&pos, sizeof(pos)));
}

/* Opens @pos as @reader; returns how many positions were announced. */
static guint sim_open(struct sim *m, guint64 pos, guint64 reader)
{
	g_autoptr(GArray) out = g_array_new(FALSE, FALSE, sizeof(guint64));
	guint n, i;

	m->opens++;
	if (g_hash_table_contains(m->announced, &pos))
		m->hits++;
	if (!g_hash_table_contains(m->opened, &pos))
		set_add(m->opened, pos);
	n = streams_open(m->s, 1, pos, reader, out);
	g_assert_cmpuint(n, ==, out->len);
	for (i = 0; i < out->len; i++) {
		guint64 p = g_array_index(out, guint64, i);

		if (g_hash_table_contains(m->announced, &p))
			m->twice++;
		else
			set_add(m->announced, p);
		if (g_hash_table_contains(m->opened, &p))
			m->after_open++;
	}
	return n;
}

static guint64 sim_waste(struct sim *m)
{
	GHashTableIter it;
	gpointer k;
	guint64 n = 0;

	g_hash_table_iter_init(&it, m->announced);
	while (g_hash_table_iter_next(&it, &k, NULL))
		n += !g_hash_table_contains(m->opened, k);
	return n;
}

static const struct streams_options defaults = { 0 };

/* One stream: confirmed at the third open, then the lookahead doubles. */
static void test_ramp(void)
{
	struct sim m;
	g_autoptr(GArray) out = g_array_new(FALSE, FALSE, sizeof(guint64));
	struct streams_stats st;

	sim_init(&m, &defaults);
	g_assert_cmpuint(sim_open(&m, 100, 7), ==, 0);
	g_assert_cmpuint(sim_open(&m, 101, 7), ==, 0);
	/* 102 confirms: 103..106. */
	g_assert_cmpuint(streams_open(m.s, 1, 102, 7, out), ==, 4);
	g_assert_cmpuint(g_array_index(out, guint64, 0), ==, 103);
	g_assert_cmpuint(g_array_index(out, guint64, 3), ==, 106);
	g_array_set_size(out, 0);
	/* Ahead 8 from 103: 107..111. */
	g_assert_cmpuint(streams_open(m.s, 1, 103, 7, out), ==, 5);
	g_assert_cmpuint(g_array_index(out, guint64, 0), ==, 107);
	g_array_set_size(out, 0);
	g_assert_cmpuint(streams_open(m.s, 1, 104, 7, out), ==, 9);
	g_array_set_size(out, 0);
	/* 32 at most: 32 past the last open. */
	g_assert_cmpuint(streams_open(m.s, 1, 105, 7, out), ==, 17);
	g_assert_cmpuint(g_array_index(out, guint64, 16), ==, 105 + 32);
	g_array_set_size(out, 0);
	g_assert_cmpuint(streams_open(m.s, 1, 106, 7, out), ==, 1);
	g_array_set_size(out, 0);
	/* Another sequence is another stream. */
	g_assert_cmpuint(streams_open(m.s, 2, 107, 7, out), ==, 0);
	streams_get_stats(m.s, &st);
	g_assert_cmpuint(st.opens, ==, 8);
	g_assert_cmpuint(st.confirmed, ==, 1);
	g_assert_cmpuint(st.tracked, ==, 2);
	g_assert_cmpuint(st.announced, ==, 36);
	sim_clear(&m);
}

/* A stream's lookahead stops where another stream's run begins. */
static void test_streams_do_not_overlap(void)
{
	struct sim m;
	guint i;

	sim_init(&m, &defaults);
	for (i = 0; i < 3; i++) {
		sim_open(&m, 20 + i, 2);
		sim_open(&m, i, 1);
	}
	for (i = 3; i < 40; i++) {
		if (i < 20)
			sim_open(&m, i, 1);
		sim_open(&m, 20 + i, 2);
	}
	g_assert_cmpuint(m.twice, ==, 0);
	g_assert_cmpuint(m.after_open, ==, 0);
	/* Stream 1 read 0..19, all fetched ahead after its third, and
	 * announced nothing of 20 on, stream 2's; stream 2 likewise. */
	g_assert_cmpuint(m.hits, ==, (20 - 3) + (40 - 3));
	g_assert_cmpuint(sim_waste(&m), ==, 32);
	sim_clear(&m);
}

/*
 * @n readers, each reading @len positions from @stride * k on, opening in
 * turn in an order drawn from @seed (not strict round robin: readers run
 * at different speeds).
 */
static void run_interleaved(struct sim *m, guint n, guint len, guint64 stride,
			    gboolean know_readers, guint32 seed)
{
	g_autofree guint *done = g_new0(guint, n);
	g_autoptr(GRand) rnd = g_rand_new_with_seed(seed);
	guint left = n * len;

	while (left) {
		guint k = g_rand_int_range(rnd, 0, n);

		if (done[k] == len)
			continue;
		sim_open(m, stride * k + done[k]++,
			 know_readers ? 1000 + k : 0);
		left--;
	}
}

/* 64 interleaved streams, with readers known or not: after each one's
 * first three opens (four for a few, while the streams start), every open
 * was fetched ahead, and nothing twice. */
static void test_64_streams(void)
{
	int known;

	for (known = 0; known < 2; known++) {
		struct sim m;
		struct streams_stats st;

		sim_init(&m, &defaults);
		run_interleaved(&m, 64, 300, 100000, known, 64 + known);
		streams_get_stats(m.s, &st);
		g_assert_cmpuint(st.tracked, ==, 64);
		g_assert_cmpuint(st.confirmed, ==, 64);
		g_assert_cmpuint(m.twice, ==, 0);
		g_assert_cmpuint(m.after_open, ==, 0);
		g_assert_cmpuint(m.hits, >=, 64 * (300 - 4));
		/* What is left at the end: the last lookahead of each. */
		g_assert_cmpuint(sim_waste(&m), <=, 64 * 32);
		sim_clear(&m);
	}
}

/* A budget shares the lookahead out among the streams: 32 streams with
 * a budget of 64 get 4 each (ahead_min), one alone gets its 32. */
static void test_budget(void)
{
	struct streams_options o = { .budget = 64 };
	struct sim m;
	guint i;

	sim_init(&m, &o);
	run_interleaved(&m, 32, 100, 10000, TRUE, 3);
	/* What is announced and unopened at the end: each one's lookahead. */
	g_assert_cmpuint(sim_waste(&m), <=, 32 * 4);
	g_assert_cmpuint(m.hits, >=, 32 * (100 - 4));
	g_assert_cmpuint(m.twice, ==, 0);
	sim_clear(&m);

	sim_init(&m, &o);
	for (i = 0; i < 50; i++)
		sim_open(&m, i, 1);
	g_assert_cmpuint(sim_waste(&m), ==, 32);
	sim_clear(&m);
}

/* More streams than slots: they push each other out, and nothing is
 * announced for streams that can't be followed. */
static void test_more_streams_than_slots(void)
{
	struct streams_options o = { .slots = 64 };
	struct sim m;

	sim_init(&m, &o);
	run_interleaved(&m, 65, 50, 1000, TRUE, 1);
	/* Round robin would defeat LRU entirely; a random interleaving lets
	 * some through.  A stream pushed out and found again announces again
	 * what it had announced (still unopened: the readahead engine has it
	 * already), never what was opened. */
	g_assert_cmpuint(m.hits, >, 0);
	g_assert_cmpuint(m.after_open, ==, 0);
	sim_clear(&m);

	sim_init(&m, &o);
	{
		guint i, k;

		for (i = 0; i < 50; i++)
			for (k = 0; k < 65; k++)
				sim_open(&m, 1000 * k + i, 1000 + k);
	}
	g_assert_cmpuint(m.hits, ==, 0);
	g_assert_cmpuint(g_hash_table_size(m.announced), ==, 0);
	sim_clear(&m);
}

/*
 * DLIO's pytorch loader: each of a rank's @workers reads whole batches of
 * @batch consecutive files, worker w batches w, w + workers, ...; @ranks
 * ranks split the files into contiguous parts.  Workers take turns in an
 * order drawn from @seed.
 */
static void run_dlio(struct sim *m, guint ranks, guint workers, guint batch,
		     guint rounds, gboolean know_readers, guint32 seed)
{
	guint n = ranks * workers;
	guint per_rank = workers * batch * rounds;
	g_autofree guint *done = g_new0(guint, n);
	g_autoptr(GRand) rnd = g_rand_new_with_seed(seed);
	guint left = n * batch * rounds;

	while (left) {
		guint k = g_rand_int_range(rnd, 0, n);
		guint r = k / workers, w = k % workers, i = done[k];
		guint b = w + workers * (i / batch);
		guint64 pos =
			(guint64)r * per_rank + (guint64)b * batch + i % batch;

		if (i == batch * rounds)
			continue;
		done[k]++;
		sim_open(m, 5000 + pos, know_readers ? 4242 + k : 0);
		left--;
	}
}

static void test_dlio(void)
{
	static const guint ranks[] = { 1, 4 };
	guint i;

	for (i = 0; i < G_N_ELEMENTS(ranks); i++) {
		guint n = ranks[i] * 8, rounds = 30;
		guint64 opens = (guint64)n * 24 * rounds;
		struct streams_stats st;
		struct sim m;

		sim_init(&m, &defaults);
		run_dlio(&m, ranks[i], 8, 24, rounds, TRUE, 13 + i);
		streams_get_stats(m.s, &st);
		g_assert_cmpuint(st.batch_len, ==, 24);
		g_assert_cmpuint(st.batch_jump, ==, 8 * 24 - 23);
		/* Once the pattern is learned, each worker's next batch is
		 * fetched ahead too: nearly every open is a hit. */
		g_assert_cmpuint(st.jumps, >=, (guint64)n * (rounds - 4));
		g_assert_cmpuint(m.hits * 100, >=, opens * 95);
		/* Each stream's last prediction (ahead_min, 4), past its
		 * rank's files, lands past the end or among the next rank's,
		 * read long ago (and announced then): that is all that is
		 * fetched for nothing. */
		g_assert_cmpuint(m.after_open + sim_waste(&m), <=, n * 4);
		g_assert_cmpuint(m.twice, <=, m.after_open);
		if (ranks[i] == 1)
			g_assert_cmpuint(m.twice + m.after_open, ==, 0);
		sim_clear(&m);
	}
}

/* Without reader ids no pattern is learned, and every batch still gets
 * all but its first three fetched ahead. */
static void test_dlio_unknown_readers(void)
{
	struct streams_stats st;
	struct sim m;

	sim_init(&m, &defaults);
	run_dlio(&m, 1, 8, 24, 30, FALSE, 5);
	streams_get_stats(m.s, &st);
	g_assert_cmpuint(st.batch_len, ==, 0);
	g_assert_cmpuint(m.twice, ==, 0);
	g_assert_cmpuint(m.after_open, ==, 0);
	g_assert_cmpuint(m.hits, >=, 8 * 30 * (24 - 3) - 8 * 24);
	sim_clear(&m);
}

/*
 * Random order, from one reader or many, over a thousand files or more:
 * nothing is ever announced.  (Over a few hundred, the last files of an
 * epoch are mostly neighbours of files just opened, and a run of three
 * may pass for a stream.)
 */
static void test_random_announces_nothing(void)
{
	static const guint sizes[] = { 1000, 3000, 10000, 100000 };
	guint i, seed;

	for (i = 0; i < G_N_ELEMENTS(sizes); i++) {
		for (seed = 1; seed <= 5; seed++) {
			g_autoptr(GRand) rnd = g_rand_new_with_seed(seed);
			g_autofree guint64 *perm = g_new(guint64, sizes[i]);
			struct streams_stats st;
			struct sim m;
			guint j;

			for (j = 0; j < sizes[i]; j++)
				perm[j] = j;
			for (j = sizes[i] - 1; j > 0; j--) {
				guint r = g_rand_int_range(rnd, 0, j + 1);
				guint64 t = perm[j];

				perm[j] = perm[r];
				perm[r] = t;
			}
			sim_init(&m, &defaults);
			for (j = 0; j < MIN(sizes[i], 20000); j++)
				sim_open(&m, perm[j],
					 seed & 1 ? 1 + j % 32 : 0);
			streams_get_stats(m.s, &st);
			g_assert_cmpuint(st.announced, ==, 0);
			g_assert_cmpuint(g_hash_table_size(m.announced), ==, 0);
			sim_clear(&m);
		}
	}
}

/* A random reader next to sequential streams doesn't stop them, and
 * reset forgets them. */
static void test_mixed_and_reset(void)
{
	g_autoptr(GRand) rnd = g_rand_new_with_seed(9);
	g_autoptr(GArray) out = g_array_new(FALSE, FALSE, sizeof(guint64));
	struct streams_stats st;
	struct sim m;
	guint i, k;

	sim_init(&m, &defaults);
	for (i = 0; i < 200; i++) {
		for (k = 0; k < 8; k++)
			sim_open(&m, 1000000 * (k + 1) + i, 10 + k);
		sim_open(&m, g_rand_int_range(rnd, 0, 900000), 99);
	}
	g_assert_cmpuint(m.twice, ==, 0);
	g_assert_cmpuint(m.hits, >=, 8 * (200 - 3));
	streams_reset(m.s);
	streams_get_stats(m.s, &st);
	g_assert_cmpuint(st.tracked, ==, 0);
	g_assert_cmpuint(streams_open(m.s, 1, 1000000 + 200, 10, out), ==, 0);
	sim_clear(&m);
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/streams/ramp", test_ramp);
	g_test_add_func("/streams/no-overlap", test_streams_do_not_overlap);
	g_test_add_func("/streams/64-streams", test_64_streams);
	g_test_add_func("/streams/budget", test_budget);
	g_test_add_func("/streams/more-than-slots",
			test_more_streams_than_slots);
	g_test_add_func("/streams/dlio", test_dlio);
	g_test_add_func("/streams/dlio-unknown-readers",
			test_dlio_unknown_readers);
	g_test_add_func("/streams/random", test_random_announces_nothing);
	g_test_add_func("/streams/mixed-and-reset", test_mixed_and_reset);
	return g_test_run();
}
