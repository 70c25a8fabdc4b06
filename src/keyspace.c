/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * keyspace.c - strings between keys, for cutting a listing.
 *
 * Byte order of UTF-8 is code point order, so the arithmetic is done on
 * code points and the result is always valid UTF-8.
 */
#include <string.h>

#include "keyspace.h"

/*
 * Whether @c may appear in a start-after: a character XML 1.0 allows
 * (no surrogates, not U+FFFE or U+FFFF), and no control character.
 */
static gboolean cp_clean(gunichar c)
{
	return c >= 0x20 && c != 0x7f && !(c >= 0x80 && c < 0xa0) &&
	       !(c >= 0xd800 && c < 0xe000) && c != 0xfffe && c != 0xffff &&
	       c <= 0x10ffff;
}

/* The least clean code point >= @c (above 0x10ffff if none). */
static gunichar cp_clean_up(gunichar c)
{
	if (c < 0x20)
		return 0x20;
	if (c >= 0x7f && c < 0xa0)
		return 0xa0;
	if (c >= 0xd800 && c < 0xe000)
		return 0xe000;
	if (c == 0xfffe || c == 0xffff)
		return 0x10000;
	return c;
}

gboolean keyspace_clean(const char *s)
{
	const char *p;

	if (!g_utf8_validate(s, -1, NULL))
		return FALSE;
	for (p = s; *p; p = g_utf8_next_char(p))
		if (!cp_clean(g_utf8_get_char(p)))
			return FALSE;
	return TRUE;
}

/*
 * The top of @c's run of similar characters (digits, lower or upper case
 * letters), plus one; 0 when @c is in no such run.  Keys are dense there:
 * a cut aimed inside the run finds keys, one aimed past it often none.
 */
static gunichar run_end(gunichar c)
{
	if (c >= '0' && c <= '9')
		return '9' + 1;
	if (c >= 'a' && c <= 'z')
		return 'z' + 1;
	if (c >= 'A' && c <= 'Z')
		return 'Z' + 1;
	return 0;
}

/* A clean code point in (@a, @b), aimed at @a's run; 0 if none. */
static gunichar between(gunichar a, gunichar b)
{
	gunichar top = run_end(a), c;

	if (!top || top > b)
		top = a < 0x80 && b > 0x80 ? 0x80 : b;
	if (top <= a + 1)
		top = b;
	if (b <= a + 1)
		return 0;
	c = cp_clean_up(a + (top - a) / 2);
	if (c <= a)
		c = cp_clean_up(a + 1);
	return c < b ? c : 0;
}

/*
 * A clean string strictly between @lo and @hi (both valid UTF-8, lo < hi
 * in byte order, which is code point order), or NULL when none is found:
 * their common prefix, then a code point between theirs, or, when those
 * two are adjacent, @lo's code point and one above its next.
 */
char *keyspace_between(const char *lo, const char *hi)
{
	g_autofree gunichar *a = g_utf8_to_ucs4(lo, -1, NULL, NULL, NULL);
	g_autofree gunichar *b = g_utf8_to_ucs4(hi, -1, NULL, NULL, NULL);
	g_autoptr(GString) s = g_string_new(NULL);
	gsize n = 0, i;
	gunichar c;

	if (!a || !b)
		return NULL;
	while (a[n] && a[n] == b[n])
		n++;
	if (!b[n] || b[n] < a[n])
		return NULL;
	for (i = 0; i < n; i++)
		if (!cp_clean(a[i]))
			return NULL;
		else
			g_string_append_unichar(s, a[i]);
	c = between(a[n], b[n]);
	if (c) {
		g_string_append_unichar(s, c);
	} else {
		/* Adjacent: @lo's code point, then one above its next. */
		gunichar next = a[n] ? a[n + 1] : 0;

		if (!cp_clean(a[n]))
			return NULL;
		c = between(next, 0x110000);
		if (!c)
			return NULL;
		g_string_append_unichar(s, a[n]);
		g_string_append_unichar(s, c);
	}
	if (strcmp(s->str, lo) <= 0 || strcmp(s->str, hi) >= 0)
		return NULL;
	return g_string_free(g_steal_pointer(&s), FALSE);
}

/*
 * The least clean string above every string that starts with the first
 * @n code points of @s: those, the last one raised by one.  NULL when
 * there is none (or @s is not valid UTF-8).
 */
char *keyspace_successor(const char *s, glong n)
{
	g_autofree gunichar *u = g_utf8_to_ucs4(s, -1, NULL, NULL, NULL);

	if (!u)
		return NULL;
	while (n > 0) {
		gunichar c = cp_clean_up(u[n - 1] + 1);

		if (c <= 0x10ffff) {
			char *s8;

			u[n - 1] = c;
			s8 = g_ucs4_to_utf8(u, n, NULL, NULL, NULL);
			if (s8 && !keyspace_clean(s8))
				g_clear_pointer(&s8, g_free);
			return s8;
		}
		n--;
	}
	return NULL;
}

/* Code points @a and @b share at their start. */
glong keyspace_common_prefix(const char *a, const char *b)
{
	glong n = 0;

	while (*a && *a == *b) {
		const char *na = g_utf8_next_char(a);

		if (strncmp(a, b, na - a) != 0)
			break;
		b += na - a;
		a = na;
		n++;
	}
	return n;
}
