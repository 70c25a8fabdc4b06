/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * keyspace.h - strings between keys, for cutting a listing into ranges.
 *
 * Every string made here is valid UTF-8 of characters XML 1.0 allows (no
 * surrogate, no U+FFFE or U+FFFF) and no control character (C0, DEL, C1): some
 * servers copy start-after into their answer unescaped (Ceph RGW does, even
 * under encoding-type=url), and a byte that is not XML there makes every answer
 * unparseable.  Pure functions: no I/O, no clock; any thread.
 */
#ifndef BUCKETFS_KEYSPACE_H
#define BUCKETFS_KEYSPACE_H

#include <glib.h>

/* Whether @s is such a string: valid UTF-8, XML characters, no control. */
gboolean keyspace_clean(const char *s);

/*
 * A clean string strictly between @lo and @hi in byte order, or NULL when
 * none is found (or either is not valid UTF-8, or their common prefix is
 * not clean).  It is their common prefix, then a code point between
 * theirs, or, when those two are adjacent, @lo's code point and one above
 * its next.  Inside a run of digits or letters the new code point is
 * aimed at the middle of the run, where keys like "img_0042" are dense,
 * not at the middle of all code points.  Returns a new string (g_free).
 */
char *keyspace_between(const char *lo, const char *hi);

/*
 * The least clean string above every string that starts with the first
 * @n code points of @s: those, with the last raised by one (dropping
 * trailing U+10FFFF).  NULL when there is none, or @s is not valid UTF-8.
 * Returns a new string (g_free).
 */
char *keyspace_successor(const char *s, glong n);

/* How many code points @a and @b share at their start. */
glong keyspace_common_prefix(const char *a, const char *b);

#endif
