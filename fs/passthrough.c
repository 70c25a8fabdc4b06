/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * passthrough.c - files fetched whole served by the kernel from a memfd:
 * see passthrough.h.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bufpool.h"
#include "log.h"
#include "passthrough.h"

/* Linux 6.9's uapi (include/uapi/linux/fuse.h); Debian 12's stops at
 * 7.38. */
struct pt_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};

#define PT_DEV_IOC_MAGIC	 229
#define PT_DEV_IOC_BACKING_OPEN	 _IOW(PT_DEV_IOC_MAGIC, 1, struct pt_backing_map)
#define PT_DEV_IOC_BACKING_CLOSE _IOW(PT_DEV_IOC_MAGIC, 2, uint32_t)

/* Small bodies are copied into bodies of this size (one class, reused
 * whatever the file's size), and at most this many are kept idle. */
#define SMALL_BODY     BUFPOOL_HEAP_MAX
#define SMALL_IDLE_MAX (128 * SMALL_BODY)

/* A node's opens the kernel may still hold. */
struct pt_node {
	int backing_id; /* registered while passthrough > 0 */
	char *etag;	/* its object's, while passthrough > 0 */
	GBytes *body;	/* whose memfd is the backing file, lent
			 * (bufpool_bytes_lend()); NULL: a memfd of its
			 * own, which the kernel alone holds */
	guint passthrough;
	guint cached;
	guint direct; /* direct_io opens (pt_open_direct()) */
};

struct passthrough {
	GMutex lock;
	GHashTable *nodes; /* protected by lock: ino -> struct pt_node */
	int dev_fd;	   /* set by pt_enable() before enabled */
	gint enabled;	   /* atomic: pt_enable() ran */
	gint on;	   /* atomic: enabled and not turned off */
	guint64 opens;	   /* atomic */
	guint64 stale;	   /* atomic: opens refused ESTALE */
	guint64 fallbacks[PT_FALLBACKS]; /* atomic */
	/* Bodies for the bytes of files not fetched into a body that can be
	 * lent (make_backing()): a shared pool, set before pooling. */
	struct bufpool *small;
	gint pooling;	/* atomic: leases see read-only opens (pt_probe) */
	guint64 made;	/* atomic: memfds of their own (new_memfd()) */
	guint64 lent;	/* atomic: GET bodies lent as backing files */
	guint64 direct; /* atomic: opens answered direct_io */
};

static const char *const fallback_names[PT_FALLBACKS] = {
	[PT_FB_CACHED] = "cached",
	[PT_FB_MEMFD] = "memfd",
	[PT_FB_BACKING] = "backing",
	[PT_FB_REPLY] = "reply",
};

const char *pt_fallback_name(enum pt_fallback why)
{
	return fallback_names[why];
}

static void node_free(gpointer p)
{
	struct pt_node *n = p;

	if (n->body)
		g_bytes_unref(n->body);
	g_free(n->etag);
	g_free(n);
}

struct passthrough *pt_new(void)
{
	struct passthrough *pt = g_new0(struct passthrough, 1);

	g_mutex_init(&pt->lock);
	pt->nodes = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free,
					  node_free);
	pt->dev_fd = -1;
	return pt;
}

void pt_free(struct passthrough *pt)
{
	if (!pt)
		return;
	g_hash_table_destroy(pt->nodes);
	if (pt->small)
		bufpool_unref(pt->small);
	g_mutex_clear(&pt->lock);
	g_free(pt);
}

void pt_enable(struct passthrough *pt, int dev_fd)
{
	pt->dev_fd = dev_fd;
	/* Publishes dev_fd: read only after enabled or on is seen. */
	g_atomic_int_set(&pt->enabled, 1);
	g_atomic_int_set(&pt->on, 1);
}

void pt_disable(struct passthrough *pt)
{
	g_atomic_int_set(&pt->on, 0);
}

/*
 * Turns reuse of memfds on (the pool of small bodies, and the GETs'
 * bodies: readahead_share_bodies()) where the kernel's leases tell when a
 * memfd is free (bufpool_memfd_probe()); says which, once.  A reader's
 * open file in passthrough, and any mapping of it (which may outlive the
 * file's RELEASE where the kernel maps the backing file in its place;
 * Linux 6.18 sends the RELEASE only at munmap()), hold a read-only
 * backing file of the memfd's inode, whose last fput() may also come a
 * moment after the RELEASE; a granted write lease proves that no reader
 * still sees the memfd.
 */
static void probe_pool(struct passthrough *pt)
{
	int err;
	const char *why = bufpool_memfd_probe(&err);

	if (err)
		log_msg(LOG_LEVEL_DEBUG, "FUSE passthrough: lease probe: %s",
			g_strerror(err));
	if (!why && !pt->small)
		pt->small = bufpool_new_shared(SMALL_IDLE_MAX);
	g_atomic_int_set(&pt->pooling, why == NULL);
	if (why)
		log_msg(LOG_LEVEL_INFO,
			"FUSE passthrough: each file gets a new memfd: %s, so "
			"an idle one cannot be known free of readers",
			why);
}

const char *pt_probe(struct passthrough *pt)
{
	uint32_t zero = 0;

	if (ioctl(pt->dev_fd, PT_DEV_IOC_BACKING_CLOSE, &zero) == 0)
		return "FUSE_DEV_IOC_BACKING_CLOSE of id 0 succeeded; "
		       "an unknown kernel";
	switch (errno) {
	case EINVAL:
		probe_pool(pt);
		return NULL;
	case EPERM:
		return "the kernel did not take it at INIT, or the daemon "
		       "lacks CAP_SYS_ADMIN in the initial user namespace "
		       "(FUSE_DEV_IOC_BACKING_CLOSE: EPERM)";
	case EOPNOTSUPP:
	case ENOTTY:
		return "the kernel has no FUSE_DEV_IOC_BACKING_CLOSE";
	default:
		log_msg(LOG_LEVEL_WARNING,
			"FUSE passthrough: FUSE_DEV_IOC_BACKING_CLOSE of id 0: "
			"%s",
			g_strerror(errno));
		return "FUSE_DEV_IOC_BACKING_CLOSE of id 0 failed "
		       "unexpectedly";
	}
}

gboolean pt_on(struct passthrough *pt)
{
	return g_atomic_int_get(&pt->on);
}

gboolean pt_negotiated(struct passthrough *pt)
{
	return g_atomic_int_get(&pt->enabled);
}

gboolean pt_reuses_memfds(struct passthrough *pt)
{
	return g_atomic_int_get(&pt->pooling);
}

void pt_count_fallback(struct passthrough *pt, enum pt_fallback why)
{
	__atomic_add_fetch(&pt->fallbacks[why], 1, __ATOMIC_RELAXED);
}

/* Counts an open answered as @mode: a cached one as fallback @why
 * (PT_FALLBACKS: none). */
static void count_open(struct passthrough *pt, enum pt_mode mode,
		       enum pt_fallback why)
{
	if (mode == PT_PASSTHROUGH)
		__atomic_add_fetch(&pt->opens, 1, __ATOMIC_RELAXED);
	else if (mode == PT_DIRECT)
		__atomic_add_fetch(&pt->direct, 1, __ATOMIC_RELAXED);
	else if (mode == PT_CACHED && why < PT_FALLBACKS)
		pt_count_fallback(pt, why);
}

static void close_backing(struct passthrough *pt, int id)
{
	uint32_t u = (uint32_t)id;

	if (ioctl(pt->dev_fd, PT_DEV_IOC_BACKING_CLOSE, &u) != 0)
		log_msg(LOG_LEVEL_WARNING,
			"FUSE passthrough: closing backing id %d: %s", id,
			g_strerror(errno));
}

/* Writes @len bytes of @buf at the start of @fd; FALSE with errno on
 * failure. */
static gboolean write_all(int fd, const guint8 *buf, gsize len)
{
	off_t off = 0;

	while (len > 0) {
		ssize_t n = pwrite(fd, buf, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = ENOSPC;
			return FALSE;
		}
		buf += n;
		off += n;
		len -= (gsize)n;
	}
	return TRUE;
}

/* Registers @fd as a backing file: its id, or -1 with the reason in
 * *@why.  EPERM (no CAP_SYS_ADMIN in the initial user namespace) turns
 * passthrough off for the mount. */
static int register_backing(struct passthrough *pt, int fd,
			    enum pt_fallback *why)
{
	struct pt_backing_map map = { .fd = fd };
	int id = ioctl(pt->dev_fd, PT_DEV_IOC_BACKING_OPEN, &map);
	int err = errno;

	if (id >= 0)
		return id;
	*why = PT_FB_BACKING;
	if (err == EPERM && g_atomic_int_compare_and_exchange(&pt->on, 1, 0)) {
		log_msg(LOG_LEVEL_INFO,
			"FUSE passthrough off: FUSE_DEV_IOC_BACKING_OPEN: %s "
			"(it needs CAP_SYS_ADMIN in the initial user "
			"namespace); files fetched whole go to the page cache",
			g_strerror(err));
	} else {
		log_msg(LOG_LEVEL_DEBUG,
			"FUSE passthrough: FUSE_DEV_IOC_BACKING_OPEN: %s; the "
			"page cache instead",
			g_strerror(err));
	}
	return -1;
}

/* A new backing id for @len bytes of @buf written into a memfd of their
 * own, which the kernel alone holds from then on; -1 with the reason in
 * *@why. */
static int new_memfd(struct passthrough *pt, const void *buf, gsize len,
		     enum pt_fallback *why)
{
	gboolean leasable;
	int fd = bufpool_memfd_new("bucketfs", &leasable), id, err;

	if (fd < 0 || !write_all(fd, buf, len)) {
		err = errno;
		if (fd >= 0)
			close(fd);
		log_msg(LOG_LEVEL_DEBUG,
			"FUSE passthrough: memfd of %" G_GSIZE_FORMAT
			" bytes: %s; the page cache instead",
			len, g_strerror(err));
		*why = PT_FB_MEMFD;
		return -1;
	}
	__atomic_add_fetch(&pt->made, 1, __ATOMIC_RELAXED);
	id = register_backing(pt, fd, why);
	close(fd);
	return id;
}

/*
 * A new backing id for the object's bytes, or -1 with the reason in
 * *@why.  The backing file is a body's memfd, lent (bufpool_bytes_lend()),
 * and *@held takes a reference to that body until the id is closed:
 * @body itself if it can be lent (the GET's, from the engine's shared
 * pool: no byte is copied), else a copy of @buf (@len bytes) in a body
 * of the pool of small ones, whose idle memfds already have their pages
 * and are written again only once no reader holds them.  Where neither
 * can be lent (no reuse here: probe_pool(); past the bound of shared
 * mappings), @buf goes into a memfd of its own.
 */
static int make_backing(struct passthrough *pt, GBytes *body, const void *buf,
			gsize len, enum pt_fallback *why, GBytes **held)
{
	GBytes *lent = NULL;
	int fd = body ? bufpool_bytes_lend(body) : -1, id;

	*held = NULL;
	if (fd >= 0) {
		lent = g_bytes_ref(body);
	} else if (len && g_atomic_int_get(&pt->pooling)) {
		struct bufpool_buf *b =
			bufpool_buf_new_mapped(pt->small, MAX(len, SMALL_BODY));

		bufpool_buf_append(b, buf, len);
		lent = bufpool_buf_free_to_bytes(b);
		fd = bufpool_bytes_lend(lent);
		if (fd < 0)
			g_clear_pointer(&lent, g_bytes_unref);
	}
	if (fd < 0)
		return new_memfd(pt, buf, len, why);
	id = register_backing(pt, fd, why);
	if (id < 0) {
		g_bytes_unref(lent);
		return -1;
	}
	if (lent == body)
		__atomic_add_fetch(&pt->lent, 1, __ATOMIC_RELAXED);
	*held = lent;
	return id;
}

static struct pt_node *node_get(struct passthrough *pt, fuse_ino_t ino)
{
	guint64 key = ino;
	struct pt_node *n = g_hash_table_lookup(pt->nodes, &key);

	if (!n) {
		guint64 *k = g_new(guint64, 1);

		*k = ino;
		n = g_new0(struct pt_node, 1);
		n->backing_id = -1;
		g_hash_table_insert(pt->nodes, k, n);
	}
	return n;
}

static void node_maybe_drop(struct passthrough *pt, fuse_ino_t ino,
			    struct pt_node *n)
{
	guint64 key = ino;

	if (!n->passthrough && !n->cached && !n->direct)
		g_hash_table_remove(pt->nodes, &key);
}

/* The kernel refuses a node open both ways (fuse_file_io_open()), and a
 * direct_io open of a node in passthrough. */
static void node_check(const struct pt_node *n)
{
	g_assert(!(n->cached && n->passthrough));
	g_assert(!(n->direct && n->passthrough));
	g_assert((n->backing_id >= 0) == (n->passthrough > 0));
}

/* Whether node @n is in passthrough from another object than @etag's:
 * the kernel would serve that object's bytes to the new open. */
static gboolean is_stale(const struct pt_node *n, const char *etag)
{
	return n->passthrough && g_strcmp0(n->etag, etag) != 0;
}

/* An open refused with ESTALE (the node's backing file is another
 * object's): PT_NONE, nothing recorded. */
static enum pt_mode refuse_stale(struct passthrough *pt, int *err)
{
	__atomic_add_fetch(&pt->stale, 1, __ATOMIC_RELAXED);
	*err = ESTALE;
	return PT_NONE;
}

/*
 * Records an open of @ino (object @etag) that made no backing file, as
 * @as (PT_CACHED, why: @why, PT_FALLBACKS: not a fallback, counted
 * nowhere; or PT_DIRECT, counted as such), unless another open of the
 * node got it into passthrough meanwhile (its backing file holds the
 * whole object), which this one then joins with *@backing_id; or refused
 * (*@err) if that backing file holds another object.
 */
static enum pt_mode record_unbacked(struct passthrough *pt, fuse_ino_t ino,
				    const char *etag, enum pt_mode as,
				    enum pt_fallback why, int *backing_id,
				    int *err)
{
	struct pt_node *n;
	enum pt_mode mode = as;

	g_mutex_lock(&pt->lock);
	n = node_get(pt, ino);
	if (is_stale(n, etag)) {
		g_mutex_unlock(&pt->lock);
		return refuse_stale(pt, err);
	}
	if (n->passthrough) {
		n->passthrough++;
		*backing_id = n->backing_id;
		mode = PT_PASSTHROUGH;
	} else if (as == PT_DIRECT) {
		n->direct++;
	} else {
		n->cached++;
	}
	node_check(n);
	g_mutex_unlock(&pt->lock);
	count_open(pt, mode, why);
	return mode;
}

/* record_unbacked() of an open that is no fallback, once negotiated. */
static enum pt_mode record_if_negotiated(struct passthrough *pt, fuse_ino_t ino,
					 const char *etag, enum pt_mode as,
					 int *backing_id, int *err)
{
	*err = 0;
	if (!g_atomic_int_get(&pt->enabled))
		return PT_NONE;
	return record_unbacked(pt, ino, etag, as, PT_FALLBACKS, backing_id,
			       err);
}

enum pt_mode pt_open_unfetched(struct passthrough *pt, fuse_ino_t ino,
			       const char *etag, int *backing_id, int *err)
{
	return record_if_negotiated(pt, ino, etag, PT_CACHED, backing_id, err);
}

enum pt_mode pt_open(struct passthrough *pt, fuse_ino_t ino, const char *etag,
		     GBytes *body, const void *buf, gsize len, int *backing_id,
		     int *err)
{
	enum pt_fallback why = PT_FB_CACHED;
	GBytes *held = NULL, *spare_body = NULL;
	struct pt_node *n;
	int fresh, spare = -1;
	enum pt_mode mode;

	*err = 0;
	if (!g_atomic_int_get(&pt->enabled))
		return PT_NONE; /* never negotiated */
	/* The common case first: nothing else has the node open. */
	g_mutex_lock(&pt->lock);
	n = node_get(pt, ino);
	if (!pt_on(pt) && !n->passthrough) {
		/* Turned off: only a node in passthrough mode stays so. */
		node_maybe_drop(pt, ino, n);
		g_mutex_unlock(&pt->lock);
		return PT_NONE;
	}
	node_check(n);
	if (is_stale(n, etag)) {
		g_mutex_unlock(&pt->lock);
		return refuse_stale(pt, err);
	}
	mode = PT_NONE;
	if (n->cached) {
		n->cached++;
		mode = PT_CACHED;
	} else if (n->direct) {
		n->direct++;
		mode = PT_DIRECT;
	} else if (n->passthrough) {
		n->passthrough++;
		*backing_id = n->backing_id;
		mode = PT_PASSTHROUGH;
	} else {
		node_maybe_drop(pt, ino, n);
	}
	g_mutex_unlock(&pt->lock);
	if (mode != PT_NONE) {
		count_open(pt, mode, PT_FB_CACHED);
		return mode;
	}

	if (!buf)
		return record_unbacked(pt, ino, etag, PT_CACHED, PT_FB_MEMFD,
				       backing_id, err);
	/* Outside the lock: another open of the node may get there first. */
	fresh = make_backing(pt, body, buf, len, &why, &held);
	if (fresh < 0)
		return record_unbacked(pt, ino, etag, PT_CACHED, why,
				       backing_id, err);
	g_mutex_lock(&pt->lock);
	n = node_get(pt, ino);
	if (is_stale(n, etag)) {
		spare = fresh;
		spare_body = held;
		mode = PT_NONE;
	} else if (n->cached) {
		n->cached++;
		spare = fresh;
		spare_body = held;
		mode = PT_CACHED;
	} else if (n->direct) {
		n->direct++;
		spare = fresh;
		spare_body = held;
		mode = PT_DIRECT;
	} else {
		if (n->passthrough) {
			spare = fresh;
			spare_body = held;
		} else {
			n->backing_id = fresh;
			n->body = held;
			n->etag = g_strdup(etag);
		}
		n->passthrough++;
		*backing_id = n->backing_id;
		mode = PT_PASSTHROUGH;
	}
	node_check(n);
	g_mutex_unlock(&pt->lock);
	if (spare >= 0)
		close_backing(pt, spare);
	if (spare_body)
		g_bytes_unref(spare_body);
	if (mode == PT_NONE)
		return refuse_stale(pt, err);
	count_open(pt, mode, PT_FB_CACHED);
	return mode;
}

enum pt_mode pt_open_direct(struct passthrough *pt, fuse_ino_t ino,
			    const char *etag, int *backing_id, int *err)
{
	return record_if_negotiated(pt, ino, etag, PT_DIRECT, backing_id, err);
}

void pt_release(struct passthrough *pt, fuse_ino_t ino, enum pt_mode mode)
{
	guint64 key = ino;
	GBytes *body = NULL;
	struct pt_node *n;
	int close_id = -1;

	if (mode == PT_NONE)
		return;
	g_mutex_lock(&pt->lock);
	n = g_hash_table_lookup(pt->nodes, &key);
	if (n && mode == PT_CACHED && n->cached) {
		n->cached--;
	} else if (n && mode == PT_DIRECT && n->direct) {
		n->direct--;
	} else if (n && mode == PT_PASSTHROUGH && n->passthrough) {
		if (--n->passthrough == 0) {
			close_id = n->backing_id;
			n->backing_id = -1;
			body = g_steal_pointer(&n->body);
			g_clear_pointer(&n->etag, g_free);
		}
	}
	if (n) {
		node_check(n);
		node_maybe_drop(pt, ino, n);
	}
	g_mutex_unlock(&pt->lock);
	/* After the lock: a new open makes its own backing file. */
	if (close_id >= 0)
		close_backing(pt, close_id);
	/* Its pool reuses it only once no reader holds it
	 * (bufpool_new_shared()). */
	if (body)
		g_bytes_unref(body);
}

void pt_get_stats(struct passthrough *pt, struct pt_stats *out)
{
	guint i;

	out->on = pt_on(pt);
	out->opens = __atomic_load_n(&pt->opens, __ATOMIC_RELAXED);
	out->stale = __atomic_load_n(&pt->stale, __ATOMIC_RELAXED);
	out->direct = __atomic_load_n(&pt->direct, __ATOMIC_RELAXED);
	out->pooling = g_atomic_int_get(&pt->pooling);
	out->memfds_made = __atomic_load_n(&pt->made, __ATOMIC_RELAXED);
	out->bodies_lent = __atomic_load_n(&pt->lent, __ATOMIC_RELAXED);
	out->memfds_reused = out->memfds_busy = out->memfds_idle = 0;
	out->memfds_idle_bytes = 0;
	if (out->pooling) {
		struct bufpool_stats b;

		bufpool_get_stats(pt->small, &b);
		out->memfds_made += b.maps;
		out->memfds_reused = b.reuses;
		out->memfds_busy = b.held;
		out->memfds_idle = b.idle;
		out->memfds_idle_bytes = b.idle_bytes;
	}
	for (i = 0; i < PT_FALLBACKS; i++)
		out->fallbacks[i] =
			__atomic_load_n(&pt->fallbacks[i], __ATOMIC_RELAXED);
}
