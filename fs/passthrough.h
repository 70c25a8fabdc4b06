/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * passthrough.h - files fetched whole handed to the kernel as a memfd
 * (FUSE passthrough, Linux >= 6.9 with CONFIG_FUSE_PASSTHROUGH): the
 * open's reply names a backing file, and the kernel serves every read and
 * mapping of the open file from it, without a request to the daemon.
 *
 * The object's bytes are written into a fresh memfd, which is registered
 * on the session's descriptor (FUSE_DEV_IOC_BACKING_OPEN) and closed at
 * once: the kernel holds it from then on.  The backing id stays
 * registered while the node has passthrough opens the daemon has not seen
 * released, so that a second open of the node names the same backing
 * file: the kernel refuses (EIO to the opener) an open of a node in
 * passthrough mode that names another backing file or none, and a
 * passthrough open of a node open in cached mode.  So each node has a
 * record: its live backing id, its object's ETag, and how many of its
 * opens are passthrough or cached (never both).  pt->lock, which guards
 * it, is a leaf.  A node open cached is opened cached again until all those
 * opens are released (counted as a fallback, "cached"); a node open in
 * passthrough is opened with the same backing id.  The record is taken
 * before the reply and dropped at RELEASE, which the kernel sends only
 * after it has let go of the file, so the daemon's record always covers
 * the kernel's.
 *
 * Memory: the memfd's pages are shmem charged to the daemon's memory
 * cgroup when it writes them, and stay charged to it while they live: the
 * reader's open file (and mapping) pins them, and so does the registration
 * until the node's last RELEASE.  They are not in memory_max, and without
 * swap cannot be reclaimed while held.
 *
 * Any failure (memfd_create(), its write, BACKING_OPEN) leaves the open
 * to the page-cache store (open_path.h), counted by reason; EPERM from
 * BACKING_OPEN turns passthrough off for the mount, with one log line.
 * Only files of the index use it: overlay files (names the index lacks) never
 * do.
 */
#ifndef BUCKETFS_FS_PASSTHROUGH_H
#define BUCKETFS_FS_PASSTHROUGH_H

#include <fuse_lowlevel.h>
#include <glib.h>

/* Why an open that could have passed through did not. */
enum pt_fallback {
	PT_FB_CACHED,  /* the node is open in cached mode */
	PT_FB_MEMFD,   /* memfd_create() or its write failed, or the bytes
			* were not the whole object */
	PT_FB_BACKING, /* FUSE_DEV_IOC_BACKING_OPEN failed */
	PT_FB_REPLY,   /* the open's reply could not carry the backing id
			* (libfuse's reply of an unknown size): the open
			* failed EIO */
	PT_FALLBACKS
};

/* How an open file was answered, in its handle. */
enum pt_mode {
	PT_NONE,   /* not recorded (passthrough off, or not fetched whole) */
	PT_CACHED, /* cached, recorded */
	PT_PASSTHROUGH, /* passthrough, recorded */
	PT_DIRECT,	/* direct_io, recorded: no passthrough open may start
			 * while it lives (the kernel would fail this open) */
};

struct pt_stats {
	gboolean on;	/* negotiated and not turned off */
	guint64 opens;	/* opens answered in passthrough */
	guint64 stale;	/* opens refused ESTALE (pt_open()) */
	guint64 direct; /* opens answered direct_io (pt_open_direct()) */
	guint64 fallbacks[PT_FALLBACKS];
	gboolean pooling; /* idle memfds are reused */
	/* The memfds that hold bytes copied from the heap (small files):
	 * bodies of a pool of their own (bufpool_new_shared()), or, where
	 * nothing is reused, a memfd per file. */
	guint64 memfds_made;	   /* made (or mapped) */
	guint64 memfds_reused;	   /* taken from the pool, idle */
	guint64 memfds_busy;	   /* idle, but a reader still held them:
				    * dropped */
	guint64 memfds_idle;	   /* in the pool now */
	guint64 memfds_idle_bytes; /* their sizes */
	guint64 bodies_lent;	   /* opens whose backing file is the GET's
				    * own body (no copy) */
};

struct passthrough;

/* A table, off until pt_enable().  Main thread. */
struct passthrough *pt_new(void);
void pt_free(struct passthrough *pt);

/* After INIT negotiated FUSE_PASSTHROUGH: opens may pass through, with
 * backing files registered on @dev_fd.  The INIT reply's thread. */
void pt_enable(struct passthrough *pt, int dev_fd);

/* Turns passthrough off again (the INIT reply was not written, or the
 * kernel did not take it: pt_probe()); opens already recorded stay so.
 * Any thread. */
void pt_disable(struct passthrough *pt);

/* Right after the INIT reply's write, which the kernel processes before
 * the write returns: NULL if the kernel took FUSE_PASSTHROUGH and lets the
 * daemon register backing files, else why not.  Asks with
 * FUSE_DEV_IOC_BACKING_CLOSE of id 0: EINVAL (no such id) when it may,
 * EPERM when passthrough is off in the connection or the daemon lacks
 * CAP_SYS_ADMIN in the initial user namespace. */
const char *pt_probe(struct passthrough *pt);

/* Whether opens may pass through.  Any thread. */
gboolean pt_on(struct passthrough *pt);

/* Whether INIT negotiated passthrough, on or turned off since: nodes may
 * be in passthrough, and opens are recorded.  Any thread. */
gboolean pt_negotiated(struct passthrough *pt);

/* Whether a memfd lent to the kernel can be known free of readers again
 * (pt_probe() asked the kernel's leases), so that its pages are reused:
 * memfds of the pool, and GET bodies lent as backing files
 * (bufpool_new_shared()).  Any thread. */
gboolean pt_reuses_memfds(struct passthrough *pt);

/*
 * Decides how the open of node @ino, whose whole object (ETag @etag) is
 * @buf (@len bytes; NULL if its bytes are not the whole object: no memfd
 * is made of them, counted as PT_FB_MEMFD), is answered, and records it:
 * PT_PASSTHROUGH with *@backing_id to put in the reply, PT_CACHED,
 * PT_DIRECT (the node has direct_io opens: pt_open_direct()), or
 * PT_NONE when passthrough is off (nothing recorded).  @body, if not
 * NULL, holds the same bytes as the GET's body: if its memory is a memfd
 * (bufpool_bytes_lend()), that is the backing file, held until the node's
 * last RELEASE, and nothing is copied; else the bytes are written into a
 * memfd.  PT_NONE with
 * ESTALE in *@err (else 0) refuses the open: the node is open in
 * passthrough from another object than @etag's (the index was refreshed,
 * SIGHUP, and the key's object changed while a reader held the file), and
 * the kernel would serve that object's bytes; the open is to fail with
 * *@err.  A recorded open must end with pt_release() (its RELEASE, or its
 * reply failing).  Any thread; may block on the memfd's write and an
 * ioctl.
 */
enum pt_mode pt_open(struct passthrough *pt, fuse_ino_t ino, const char *etag,
		     GBytes *body, const void *buf, gsize len, int *backing_id,
		     int *err);

/*
 * The same for an open of an index file that is not fetched whole (empty,
 * or larger than readahead's whole-file limit) and not direct_io: the
 * kernel refuses a cached open of a node in passthrough, so it is
 * recorded too, cached or joining the node's live backing file (the same
 * object), or refused ESTALE as pt_open().  Counted as no fallback.
 */
enum pt_mode pt_open_unfetched(struct passthrough *pt, fuse_ino_t ino,
			       const char *etag, int *backing_id, int *err);

/*
 * The same for an open of a file fetched whole whose object is not here
 * yet: it is answered at once with direct_io, and its READs wait for the
 * GET, so that the reader's open overlaps it and the daemon copies each
 * READ into the reader's buffer as the bytes arrive (a passthrough open
 * would wait for the whole object, then leave the copy to the reader).
 * Recorded as PT_DIRECT; or PT_PASSTHROUGH with *@backing_id if the node
 * is in passthrough already (the kernel refuses any other open of it); or
 * refused as pt_open().  PT_NONE when passthrough was never negotiated.
 */
enum pt_mode pt_open_direct(struct passthrough *pt, fuse_ino_t ino,
			    const char *etag, int *backing_id, int *err);

/* Counts a fallback. */
void pt_count_fallback(struct passthrough *pt, enum pt_fallback why);

/* Drops the record of an open of @ino answered as @mode (PT_NONE: does
 * nothing).  The last passthrough open closes the backing id.  Any
 * thread. */
void pt_release(struct passthrough *pt, fuse_ino_t ino, enum pt_mode mode);

/* A snapshot of the counters.  Any thread. */
void pt_get_stats(struct passthrough *pt, struct pt_stats *out);

/* The name of fallback reason @why in the stats ("cached", ...). */
const char *pt_fallback_name(enum pt_fallback why);

#endif
