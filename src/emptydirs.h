/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * emptydirs.h - directories declared with -o empty_dirs= that the bucket
 * may not hold.
 *
 * S3 has no directories, only keys: a directory exists in the index when
 * a key lies below it (or a "dir/" marker does).  A dataset written to S3
 * therefore has no empty directory, yet some readers insist on one: DLIO
 * lists DATA/valid at start and dies when it is missing.  The user
 * declares such directories (paths relative to the mount's root, checked
 * by src/config_options.c), and the mount shows each one, and each
 * directory above it, wherever the index lacks them.
 *
 * Why at the fs layer and not as entries built into the index: the
 * option then works whatever index the mount serves -- one listed before
 * the option was set, one published by another host without it (-o
 * index_url=), one a SIGHUP switched to -- with no rebuild and no change
 * to the index format; and a directory that later fills up on S3 is
 * simply found in the next index instead.  A directory the index has is
 * shown from the index, merged with nothing.  A path on which the index
 * has an object (a file "valid", or "a" for "a/b") shows the object: the
 * declaration yields, and emptydirs_state() says so, for a notice.
 *
 * This module holds the declared tree: nodes numbered 1..count, each a
 * directory key (prefix included, ending with '/') with its name and its
 * parent's key, and the children of each key in name order.  The fs
 * layer looks them up by key, so a declared directory shows up under an
 * indexed parent and under a declared one alike.  Immutable once made;
 * any thread.  Nothing here fails: the paths were validated.
 */
#ifndef BUCKETFS_EMPTYDIRS_H
#define BUCKETFS_EMPTYDIRS_H

#include <glib.h>

#include "index.h"

struct emptydirs;

/*
 * The tree of the @paths (of char *, as config_options.c leaves them in
 * cfg->empty_dirs: relative, no trailing '/', valid names) under @prefix
 * ("" or ending with '/').  Copies what it needs.  Free with
 * emptydirs_free() (NULL allowed).
 */
struct emptydirs *emptydirs_new(const char *prefix, const GPtrArray *paths);
void emptydirs_free(struct emptydirs *d);

/* Nodes: every declared directory and those above it, not the root. */
guint emptydirs_count(const struct emptydirs *d);

/*
 * The node of the child @name of the directory with key @dir_key (the
 * prefix for the root, else ending with '/'); 0 when none is declared.
 */
guint emptydirs_child(const struct emptydirs *d, const char *dir_key,
		      const char *name);

/*
 * For readdir: the @pos'th declared child (0-based, in byte order of the
 * names) of @dir_key; FALSE past the last one.
 */
gboolean emptydirs_child_at(const struct emptydirs *d, const char *dir_key,
			    guint64 pos, guint *node);

/*
 * Of node @node (1..count): its full key ("valid/", "p/a/b/"), its name
 * ("b") and its parent's key ("p/a/"; the prefix for a top-level one).
 * Borrowed until emptydirs_free().
 */
const char *emptydirs_key(const struct emptydirs *d, guint node);
const char *emptydirs_name(const struct emptydirs *d, guint node);
const char *emptydirs_parent_key(const struct emptydirs *d, guint node);

/* The declared paths, as given (relative): 0..declared_count - 1. */
guint emptydirs_declared_count(const struct emptydirs *d);
const char *emptydirs_declared(const struct emptydirs *d, guint i);

/* What the index does with a declared path. */
enum emptydirs_state {
	EMPTYDIRS_SHOWN,   /* not in the index: shown empty by the mount */
	EMPTYDIRS_INDEXED, /* a directory of the index: shown from it */
	EMPTYDIRS_OBJECT,  /* an object of the index is on its path: the
			    * object is shown, the directory is not */
};

/*
 * The state of declared path @i in @idx.  For EMPTYDIRS_OBJECT, *@object
 * (if not NULL) gets the object's full key, newly allocated; else NULL.
 */
enum emptydirs_state emptydirs_state(const struct emptydirs *d, guint i,
				     const struct index *idx, char **object);

/*
 * The DLIO layout: DLIO (and MLPerf Storage) read DATA/train/ and also
 * open DATA/valid/, which S3 cannot hold empty, so a mount of a bucket
 * with train/ and no valid/ stops their run at once with ENOENT.  Given
 * whether s3://@bucket/@prefix's train/ has keys (@train) and valid/ has
 * (@valid), and the declared paths @declared (config's empty_dirs, may be
 * NULL): NONE when it is not that layout; DECLARED when valid/ has no key
 * but -o empty_dirs=valid shows it; MISSING when nothing does: then the
 * fix is EMPTYDIRS_DLIO_FIX.  *@detail (newly allocated) says so for the
 * last two, else NULL.  The doctor asks S3 (a LIST of each), the mount its
 * index (emptydirs_dlio_of_index()); both say the same.  Any thread.
 */
enum emptydirs_dlio {
	EMPTYDIRS_DLIO_NONE,
	EMPTYDIRS_DLIO_DECLARED,
	EMPTYDIRS_DLIO_MISSING,
};
#define EMPTYDIRS_DLIO_FIX                                                     \
	"mount with -o empty_dirs=valid (an empty valid/ directory)"
enum emptydirs_dlio emptydirs_dlio(gboolean train, gboolean valid,
				   const GPtrArray *declared,
				   const char *bucket, const char *prefix,
				   char **detail);

/* emptydirs_dlio() of the tree of @idx: train/ and valid/ have keys when
 * they are directories of it. */
enum emptydirs_dlio emptydirs_dlio_of_index(const struct index *idx,
					    const GPtrArray *declared,
					    char **detail);

/*
 * Logs a notice for each declared path that an object of @idx hides, and
 * at debug level the others' state (@d may be NULL: nothing).  At each
 * index switch.  Any thread.
 */
void emptydirs_report(const struct emptydirs *d, const struct index *idx);

#endif
