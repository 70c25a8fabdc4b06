/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * test_keyspace - the strings the lister sends as start-after: on random
 * pairs of keys made of awkward code points (controls, DEL, C1, emoji,
 * U+E000-U+FFFF, U+10FFFF), every string made is clean (valid UTF-8, no
 * control character, no surrogate) and strictly between its two keys; a
 * successor is above every string with that prefix; cuts inside runs of
 * digits land inside the run.
 */
#include <string.h>

#include "keyspace.h"

static const gunichar awkward[] = {
	0x01,	0x1f,	' ',	 '+',	  '/',	    '0',      '5',    '9',
	':',	'A',	'Z',	 '_',	  'a',	    'z',      '~',    0x7f,
	0x80,	0x9f,	0xa0,	 0xe9,	  0x7ff,    0x800,    0xd7ff, 0xe000,
	0xfffd, 0xffff, 0x10000, 0x1f600, 0x10fffe, 0x10ffff,
};

static char *random_key(GRand *rnd)
{
	GString *s = g_string_new(NULL);
	guint n = g_rand_int_range(rnd, 0, 7), i;

	for (i = 0; i < n; i++)
		g_string_append_unichar(
			s, awkward[g_rand_int_range(rnd, 0,
						    G_N_ELEMENTS(awkward))]);
	return g_string_free(s, FALSE);
}

static void test_clean(void)
{
	g_assert_true(keyspace_clean(""));
	g_assert_true(keyspace_clean("train/img_0001 \xf0\x9f\x98\x80"));
	g_assert_false(keyspace_clean("a\x01"));
	g_assert_false(keyspace_clean("a\x7f"));
	g_assert_false(keyspace_clean("a\xc2\x85"));	/* U+0085, C1 */
	g_assert_false(keyspace_clean("\x98\x9a"));	/* not UTF-8 */
	g_assert_false(keyspace_clean("\xed\xa0\x80")); /* a surrogate */
	g_assert_false(keyspace_clean("\xef\xbf\xbf")); /* U+FFFF */
}

static void test_between_random(void)
{
	g_autoptr(GRand) rnd = g_rand_new_with_seed(7);
	guint made = 0, i;

	for (i = 0; i < 200000; i++) {
		g_autofree char *a = random_key(rnd);
		g_autofree char *b = random_key(rnd);
		g_autofree char *m = NULL;
		int c = strcmp(a, b);
		const char *lo = c < 0 ? a : b, *hi = c < 0 ? b : a;

		if (c == 0)
			continue;
		m = keyspace_between(lo, hi);
		if (!m)
			continue;
		made++;
		g_assert_true(keyspace_clean(m));
		g_assert_cmpint(strcmp(lo, m), <, 0);
		g_assert_cmpint(strcmp(m, hi), <, 0);
	}
	/* Most pairs have room; NULL is for the rest. */
	g_assert_cmpuint(made, >, 100000);
}

static void test_between_cases(void)
{
	static const struct {
		const char *lo, *hi, *want;
	} cases[] = {
		{ "a", "c", "b" },
		{ "train/img_0000999", "train/img_1", "train/img_05" },
		{ "train/img_0100000", "train/img_0500000", "train/img_03" },
		{ "d3/e2/f1", "d6", "d4" },
		{ "a", "b", "a@" },
		/* lo's next code point is high: still above it. */
		{ "x\xf4\x8f\xbf\xbe", "y", "x\xf4\x8f\xbf\xbf" },
		/* a control character in the shared prefix: no clean answer */
		{ "a\x01"
		  "a",
		  "a\x01"
		  "c",
		  NULL },
	};
	guint i;

	for (i = 0; i < G_N_ELEMENTS(cases); i++) {
		g_autofree char *m = keyspace_between(cases[i].lo, cases[i].hi);

		g_assert_cmpstr(m, ==, cases[i].want);
	}
	g_assert_null(keyspace_between("b", "a"));
	g_assert_null(keyspace_between("a", "a"));
	g_assert_null(keyspace_between("\x98", "\x99"));
}

static void test_successor(void)
{
	g_autoptr(GRand) rnd = g_rand_new_with_seed(11);
	guint i;

	for (i = 0; i < 100000; i++) {
		g_autofree char *a = random_key(rnd);
		glong len = g_utf8_strlen(a, -1), n;
		g_autofree char *s = NULL;
		g_autoptr(GString) top = NULL;

		if (!g_utf8_validate(a, -1, NULL))
			continue;
		n = len ? g_rand_int_range(rnd, 0, len + 1) : 0;
		s = keyspace_successor(a, n);
		if (!s)
			continue;
		g_assert_true(keyspace_clean(s));
		/* Above the prefix followed by the highest code points. */
		top = g_string_new_len(a, g_utf8_offset_to_pointer(a, n) - a);
		g_string_append(top, "\xf4\x8f\xbf\xbf\xf4\x8f\xbf\xbf");
		g_assert_cmpint(strcmp(s, top->str), >, 0);
		g_assert_cmpint(strcmp(s, a), >, 0);
	}
	{
		g_autofree char *s = keyspace_successor("train/img_", 10);
		g_autofree char *t = keyspace_successor("ab\x1f", 3);
		g_autofree char *u = keyspace_successor("a\xf4\x8f\xbf\xbf", 2);

		g_assert_cmpstr(s, ==, "train/img`");
		g_assert_cmpstr(t, ==, "ab ");
		g_assert_cmpstr(u, ==, "b");
	}
	g_assert_null(keyspace_successor("abc", 0));
	g_assert_null(keyspace_successor("\xf4\x8f\xbf\xbf", 1));
}

static void test_common_prefix(void)
{
	g_assert_cmpint(keyspace_common_prefix("abc", "abd"), ==, 2);
	g_assert_cmpint(keyspace_common_prefix("", "abd"), ==, 0);
	g_assert_cmpint(keyspace_common_prefix("\xc3\xa9"
					       "a",
					       "\xc3\xa9"
					       "b"),
			==, 1);
	/* U+00E9 and U+00EA share their first byte, not a code point. */
	g_assert_cmpint(keyspace_common_prefix("\xc3\xa9", "\xc3\xaa"), ==, 0);
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/keyspace/clean", test_clean);
	g_test_add_func("/keyspace/between-random", test_between_random);
	g_test_add_func("/keyspace/between-cases", test_between_cases);
	g_test_add_func("/keyspace/successor", test_successor);
	g_test_add_func("/keyspace/common-prefix", test_common_prefix);
	return g_test_run();
}
