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

/* A node's opens the kernel may still hold. */
struct pt_node {
	int backing_id; /* registered while passthrough > 0 */
	char *etag;	/* its object's, while passthrough > 0 */
	guint passthrough;
	guint cached;
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

const char *pt_probe(struct passthrough *pt)
{
	uint32_t zero = 0;

	if (ioctl(pt->dev_fd, PT_DEV_IOC_BACKING_CLOSE, &zero) == 0)
		return "FUSE_DEV_IOC_BACKING_CLOSE of id 0 succeeded; "
		       "an unknown kernel";
	switch (errno) {
	case EINVAL:
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

void pt_count_fallback(struct passthrough *pt, enum pt_fallback why)
{
	__atomic_add_fetch(&pt->fallbacks[why], 1, __ATOMIC_RELAXED);
}

static void close_backing(struct passthrough *pt, int id)
{
	uint32_t u = (uint32_t)id;

	if (ioctl(pt->dev_fd, PT_DEV_IOC_BACKING_CLOSE, &u) != 0)
		log_msg(LOG_LEVEL_WARNING,
			"FUSE passthrough: closing backing id %d: %s", id,
			g_strerror(errno));
}

/* Writes @len bytes of @buf to @fd; FALSE with errno on failure. */
static gboolean write_all(int fd, const guint8 *buf, gsize len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = ENOSPC;
			return FALSE;
		}
		buf += n;
		len -= (gsize)n;
	}
	return TRUE;
}

/*
 * A new backing id for a memfd holding @buf, or -1 with the reason in
 * *@why.  EPERM (no CAP_SYS_ADMIN in the initial user namespace) turns
 * passthrough off for the mount.
 */
static int make_backing(struct passthrough *pt, const void *buf, gsize len,
			enum pt_fallback *why)
{
	struct pt_backing_map map = { 0 };
	int fd = memfd_create("bucketfs", MFD_CLOEXEC);
	int id, err;

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
	map.fd = fd;
	id = ioctl(pt->dev_fd, PT_DEV_IOC_BACKING_OPEN, &map);
	err = errno;
	/* The kernel holds the file from here on (or never will). */
	close(fd);
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

	if (!n->passthrough && !n->cached)
		g_hash_table_remove(pt->nodes, &key);
}

/* The kernel refuses a node open both ways (fuse_file_io_open()). */
static void node_check(const struct pt_node *n)
{
	g_assert(!(n->cached && n->passthrough));
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
 * Records an open of @ino (object @etag) that made no backing file (why:
 * @why, PT_FALLBACKS: not a fallback, counted nowhere): cached, unless
 * another open of the node got it into passthrough meanwhile (its memfd
 * holds the whole object), which this one then joins with *@backing_id;
 * or refused (*@err) if that memfd holds another object.
 */
static enum pt_mode record_cached(struct passthrough *pt, fuse_ino_t ino,
				  const char *etag, enum pt_fallback why,
				  int *backing_id, int *err)
{
	struct pt_node *n;
	enum pt_mode mode = PT_CACHED;

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
	} else {
		n->cached++;
	}
	node_check(n);
	g_mutex_unlock(&pt->lock);
	if (mode == PT_PASSTHROUGH)
		__atomic_add_fetch(&pt->opens, 1, __ATOMIC_RELAXED);
	else if (why < PT_FALLBACKS)
		pt_count_fallback(pt, why);
	return mode;
}

enum pt_mode pt_open_unfetched(struct passthrough *pt, fuse_ino_t ino,
			       const char *etag, int *backing_id, int *err)
{
	*err = 0;
	if (!g_atomic_int_get(&pt->enabled))
		return PT_NONE;
	return record_cached(pt, ino, etag, PT_FALLBACKS, backing_id, err);
}

enum pt_mode pt_open(struct passthrough *pt, fuse_ino_t ino, const char *etag,
		     const void *buf, gsize len, int *backing_id, int *err)
{
	enum pt_fallback why = PT_FB_CACHED;
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
	if (n->cached) {
		n->cached++;
		g_mutex_unlock(&pt->lock);
		pt_count_fallback(pt, PT_FB_CACHED);
		return PT_CACHED;
	}
	if (n->passthrough) {
		n->passthrough++;
		*backing_id = n->backing_id;
		g_mutex_unlock(&pt->lock);
		__atomic_add_fetch(&pt->opens, 1, __ATOMIC_RELAXED);
		return PT_PASSTHROUGH;
	}
	node_maybe_drop(pt, ino, n);
	g_mutex_unlock(&pt->lock);

	if (!buf)
		return record_cached(pt, ino, etag, PT_FB_MEMFD, backing_id,
				     err);
	/* Outside the lock: another open of the node may get there first. */
	fresh = make_backing(pt, buf, len, &why);
	if (fresh < 0)
		return record_cached(pt, ino, etag, why, backing_id, err);
	g_mutex_lock(&pt->lock);
	n = node_get(pt, ino);
	if (is_stale(n, etag)) {
		spare = fresh;
		mode = PT_NONE;
	} else if (n->cached) {
		n->cached++;
		spare = fresh;
		mode = PT_CACHED;
	} else {
		if (n->passthrough) {
			spare = fresh;
		} else {
			n->backing_id = fresh;
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
	if (mode == PT_NONE)
		return refuse_stale(pt, err);
	if (mode == PT_CACHED)
		pt_count_fallback(pt, PT_FB_CACHED);
	else
		__atomic_add_fetch(&pt->opens, 1, __ATOMIC_RELAXED);
	return mode;
}

void pt_release(struct passthrough *pt, fuse_ino_t ino, enum pt_mode mode)
{
	guint64 key = ino;
	struct pt_node *n;
	int close_id = -1;

	if (mode == PT_NONE)
		return;
	g_mutex_lock(&pt->lock);
	n = g_hash_table_lookup(pt->nodes, &key);
	if (n && mode == PT_CACHED && n->cached) {
		n->cached--;
	} else if (n && mode == PT_PASSTHROUGH && n->passthrough) {
		if (--n->passthrough == 0) {
			close_id = n->backing_id;
			n->backing_id = -1;
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
}

void pt_get_stats(struct passthrough *pt, struct pt_stats *out)
{
	guint i;

	out->on = pt_on(pt);
	out->opens = __atomic_load_n(&pt->opens, __ATOMIC_RELAXED);
	out->stale = __atomic_load_n(&pt->stale, __ATOMIC_RELAXED);
	for (i = 0; i < PT_FALLBACKS; i++)
		out->fallbacks[i] =
			__atomic_load_n(&pt->fallbacks[i], __ATOMIC_RELAXED);
}
