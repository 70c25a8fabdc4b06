/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * stats.h - a mount's counters, as the JSON of the root's extended
 * attribute user.bucketfs.stats and as the summary logged at unmount.
 *
 * A leaf of fs/: it reads the engines of src/ (http, readahead) and plain
 * counters handed to it, and knows no struct fs.  The JSON is built with
 * json-glib, so every string (an endpoint's URL) is escaped.  Its keys:
 *   endpoints[]  url, requests, bytes, errors, hedges, ejections,
 *                inflight, ejected, p50_ms, p99_ms (http_get_stats());
 *   queued       requests waiting for a transfer slot (http_queued());
 *   readahead    the fields of struct ra_stats, by their names;
 *   files        reads (FUSE reads of files), handed_over (files stored
 *                in the page cache at open), open (files opened and not
 *                yet released: the kernel sends RELEASE after close());
 *   passthrough  on (FUSE passthrough negotiated and not turned off),
 *                opens (opens answered in passthrough from a memfd), and
 *                fallbacks: cached, memfd, backing, reply (opens that
 *                could have passed through and went to the page cache,
 *                by reason: see passthrough.h);
 *   stages       samples, and p50_ms and p99_ms of each request stage
 *                (http_get_stage_stats(), http_stage_name());
 *   streams      the fields of struct streams_stats, by their names;
 *   lookups      the fields of struct lookups_stats, by their names;
 *   ops          FUSE requests the mount answered, by kind: lookup,
 *                getattr, opendir, readdir, readdirplus, getxattr,
 *                listxattr, forget (nodes forgotten), and the entries
 *                readdir_entries and readdirplus_entries handed out;
 *   index        the index served: bucket, prefix, keys, created (seconds
 *                since the epoch) and generation (1 at the mount, one
 *                more at each switch: SIGHUP, index_max_age, a rebuild).
 * Tests and tools/bench read these names: keep them.
 */
#ifndef BUCKETFS_FS_STATS_H
#define BUCKETFS_FS_STATS_H

#include <glib.h>

#include "http.h"
#include "index.h"
#include "passthrough.h"
#include "lookups.h"
#include "readahead.h"
#include "streams.h"

/* The FUSE requests counted by kind (the "ops" object); stats_op_name(). */
enum stats_op {
	STATS_LOOKUP,
	STATS_GETATTR,
	STATS_OPENDIR,
	STATS_READDIR,
	STATS_READDIRPLUS,
	STATS_GETXATTR,
	STATS_LISTXATTR,
	STATS_FORGET,
	STATS_READDIR_ENTRIES,
	STATS_READDIRPLUS_ENTRIES,
	STATS_OPS
};

/* Where a mount's counters come from: borrowed, but for @idx, a reference
 * that stats_sources_clear() drops. */
struct stats_sources {
	struct http *http;
	struct readahead *ra;
	struct index *idx;  /* the index served */
	guint64 generation; /* its generation (fs.h) */
	struct streams_stats streams;
	struct lookups_stats lookups;
	guint64 reads;	     /* FUSE reads of files */
	guint64 handed_over; /* files stored in the page cache at open */
	guint64 open;	     /* handles not yet released */
	struct pt_stats pt;  /* passthrough.h */
	/* FUSE requests by kind. */
	guint64 ops[STATS_OPS];
	/* What FUSE INIT negotiated (fuse_init.h). */
	gboolean parallel_dirops, direct_io_allow_mmap;
};

/* Drops @src's reference on its index. */
void stats_sources_clear(struct stats_sources *src);

/* The counters as a JSON object, newly allocated (g_free()).  Any
 * thread. */
char *stats_json(const struct stats_sources *src);

/* One syslog line per endpoint, one for the request stages, one for
 * readahead and one for the streams.  At unmount. */
void stats_log_summary(const struct stats_sources *src);

#endif
