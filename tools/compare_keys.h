/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * compare_keys.h - which keys a bucketfs mount shows, and as what: the
 * rules of docs/INDEX-FORMAT.md ("From keys to paths"), per key, for
 * bucketfs-compare.
 *
 * The rule for one component is the index's (index_component_check());
 * the walk over a key's components is restated from key_place() in
 * src/index.c, which applies it while building and keeps only counts.  The one
 * rule that needs the whole listing, an object hidden by a directory of the
 * same name, is left to the caller: it knows every directory the listing makes
 * (see compare_key_classify()'s @dir_len).
 *
 * Pure functions: no I/O, any thread.
 */
#ifndef BUCKETFS_COMPARE_KEYS_H
#define BUCKETFS_COMPARE_KEYS_H

#include <glib.h>

enum compare_key_kind {
	COMPARE_KEY_ROOT,   /* the prefix itself: the root's marker */
	COMPARE_KEY_FILE,   /* a file, unless a directory hides it */
	COMPARE_KEY_MARKER, /* "dir/": makes the directory exist */
	COMPARE_KEY_EMPTY,  /* not shown: an empty component */
	COMPARE_KEY_DOT,    /* not shown: a "." or ".." component */
	COMPARE_KEY_LONG,   /* not shown: a component over 255 bytes */
	COMPARE_KEY_DEEP,   /* not shown: over 1024 components */
};

/*
 * Classifies @rel (@len bytes: the key with the prefix removed).  Sets
 * *@dir_len to the length of the leading part of @rel whose components
 * are directories that exist because of this key ("a/b" for "a/b/c",
 * "a/b/" or "a/b//c"; 0 for none); every '/' inside that part ends one
 * more of them.  Never fails.
 */
enum compare_key_kind compare_key_classify(const char *rel, gsize len,
					   gsize *dir_len);

/*
 * A short human reason for a kind that is not shown ("an empty
 * component"), or NULL for ROOT, FILE and MARKER.  Static.
 */
const char *compare_key_reason(enum compare_key_kind kind);

/* The same as a JSON-friendly word ("empty_component"), or NULL. */
const char *compare_key_reason_id(enum compare_key_kind kind);

#endif
