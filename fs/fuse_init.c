/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuse_init.c - FUSE_DIRECT_IO_ALLOW_MMAP and FUSE_PASSTHROUGH asked for
 * at INIT through the session's custom I/O, and the backing id put into
 * passthrough opens' replies: see fuse_init.h.
 */
#include <errno.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "error.h"
#include "fs_internal.h"
#include "fuse_init.h"
#include "log.h"
#include "passthrough.h"

/* Linux 6.6's uapi; Debian 12's headers stop at 7.38. */
#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#endif

/* Linux 6.9's uapi: passthrough (protocol 7.40). */
#ifndef FUSE_PASSTHROUGH
#define FUSE_PASSTHROUGH (1ULL << 37)
#endif
#ifndef FOPEN_PASSTHROUGH
#define FOPEN_PASSTHROUGH (1 << 7)
#endif

/* fuse_init_out as of 7.40: max_stack_depth right after flags2, where
 * 7.38 had unused[0].  Not offsetof(unused): 7.40's headers moved unused
 * past max_stack_depth (40), 7.43's past request_timeout (42). */
#define INIT_OUT_STACK_DEPTH                                                   \
	(offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t))
G_STATIC_ASSERT(INIT_OUT_STACK_DEPTH == 36);

/* fuse_open_out as of 7.40: backing_id where 7.38 had padding. */
struct open_out_740 {
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id;
};
G_STATIC_ASSERT(sizeof(struct open_out_740) == sizeof(struct fuse_open_out));
/* libfuse 3's fuse_reply_open() sends its own fuse_open_out, 16 bytes in
 * every 3.x (3.14's padding is 3.16's backing_id): the hook patches that
 * reply and nothing else. */
G_STATIC_ASSERT(FUSE_MAJOR_VERSION == 3);
G_STATIC_ASSERT(sizeof(struct open_out_740) == 16);

/* The longest INIT reply we patch: fuse_init_out and its header. */
#define INIT_REPLY_MAX                                                         \
	(sizeof(struct fuse_out_header) + sizeof(struct fuse_init_out))

/* Whether an INIT reply of @total bytes can be patched and reaches @end
 * bytes into its fuse_init_out. */
static gboolean reply_reaches(size_t total, size_t end)
{
	return total >= sizeof(struct fuse_out_header) + end &&
	       total <= INIT_REPLY_MAX;
}

static struct fuse_init_state *state_of(void *userdata)
{
	return &((struct fs *)userdata)->init;
}

/* Notes the kernel's INIT request in @buf (@len bytes read). */
static void note_init(struct fuse_init_state *st, const void *buf, size_t len)
{
	const struct fuse_in_header *in = buf;
	const struct fuse_init_in *arg = (const void *)(in + 1);
	size_t flags2_end = sizeof(*in) +
			    offsetof(struct fuse_init_in, flags2) +
			    sizeof(arg->flags2);

	if (len < sizeof(*in) + offsetof(struct fuse_init_in, flags2) ||
	    in->opcode != FUSE_INIT)
		return;
	st->unique = in->unique;
	st->minor = arg->major == 7 ? arg->minor : 0;
	st->offered = arg->flags;
	if ((arg->flags & FUSE_INIT_EXT) && len >= flags2_end)
		st->offered |= (guint64)arg->flags2 << 32;
	g_atomic_int_set(&st->stage, 1);
}

static ssize_t hook_read(int fd, void *buf, size_t len, void *userdata)
{
	struct fuse_init_state *st = state_of(userdata);
	ssize_t n = read(fd, buf, len);

	if (n > 0 && g_atomic_int_get(&st->stage) == 0)
		note_init(st, buf, (size_t)n);
	return n;
}

/* Says once, at info, what INIT gave mmap of direct_io files. */
static void log_outcome(const struct fuse_init_state *st, const char *why)
{
	if (!why)
		log_msg(LOG_LEVEL_INFO,
			"kernel FUSE 7.%u: FUSE_DIRECT_IO_ALLOW_MMAP "
			"negotiated (direct_io files map MAP_SHARED)",
			st->minor);
	else
		log_msg(LOG_LEVEL_INFO,
			"kernel FUSE 7.%u: no FUSE_DIRECT_IO_ALLOW_MMAP (%s): "
			"every file goes through the page cache unless "
			"direct_io= says otherwise",
			st->minor, why);
}

/* Says once, at info, whether files fetched whole pass through. */
static void log_passthrough(const struct fuse_init_state *st, const char *why)
{
	if (!why)
		log_msg(LOG_LEVEL_INFO,
			"kernel FUSE 7.%u: FUSE_PASSTHROUGH negotiated (files "
			"fetched whole are read by the kernel from a memfd)",
			st->minor);
	else
		log_msg(LOG_LEVEL_INFO,
			"kernel FUSE 7.%u: no FUSE passthrough (%s): files "
			"fetched whole are stored in the page cache at open",
			st->minor, why);
}

/* Says once, at info, whether lookups in one directory run in parallel. */
static void log_dirops(const struct fuse_init_state *st, const char *why)
{
	if (!why)
		log_msg(LOG_LEVEL_INFO,
			"kernel FUSE 7.%u: FUSE_PARALLEL_DIROPS negotiated "
			"(lookups in one directory run in parallel)",
			st->minor);
	else
		log_msg(LOG_LEVEL_INFO,
			"kernel FUSE 7.%u: no FUSE_PARALLEL_DIROPS (%s): the "
			"kernel sends one lookup of a directory at a time",
			st->minor, why);
}

/* Copies the @count pieces of @iov, which the caller has checked fit, into
 * @buf, one reply to patch. */
static void gather(guint8 *buf, const struct iovec *iov, int count)
{
	size_t at = 0;
	int i;

	for (i = 0; i < count; i++) {
		memcpy(buf + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
}

/*
 * Writes libfuse's INIT reply (@iov) with FUSE_DIRECT_IO_ALLOW_MMAP
 * (@mmap), FUSE_PASSTHROUGH (@pt) and FUSE_PARALLEL_DIROPS (@dirops)
 * added, from a copy: @iov points into libfuse's frame.  -1 with errno as
 * writev().
 */
static ssize_t write_init_reply(int fd, struct fs *fs, const struct iovec *iov,
				int count, size_t total, gboolean mmap,
				gboolean pt, gboolean dirops)
{
	struct fuse_init_state *st = &fs->init;
	guint8 buf[INIT_REPLY_MAX];
	struct fuse_out_header *out = (void *)buf;
	struct fuse_init_out *arg = (void *)(out + 1);
	guint32 depth = 1; /* backing files on a filesystem that stacks none */
	ssize_t n;

	gather(buf, iov, count);
	if (mmap || pt)
		arg->flags |= FUSE_INIT_EXT;
	if (dirops)
		arg->flags |= FUSE_PARALLEL_DIROPS;
	if (mmap)
		arg->flags2 |= (guint32)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32);
	if (pt) {
		arg->flags2 |= (guint32)(FUSE_PASSTHROUGH >> 32);
		memcpy((guint8 *)arg + INIT_OUT_STACK_DEPTH, &depth,
		       sizeof(depth));
	}
	/* Before the write: once the kernel has the reply, other workers
	 * may answer opens, and each must see what INIT gave. */
	if (mmap)
		g_atomic_int_set(&st->allow_mmap, 1);
	if (pt)
		pt_enable(fs->pt, fuse_session_fd(fs->se));
	n = write(fd, buf, total);
	if (n != (ssize_t)total) {
		/* The session ends: no open is answered. */
		g_atomic_int_set(&st->allow_mmap, 0);
		if (pt)
			pt_disable(fs->pt);
		return n;
	}
	if (mmap)
		log_outcome(st, NULL);
	if (dirops) {
		g_atomic_int_set(&st->parallel_dirops, 1);
		log_dirops(st, NULL);
	}
	if (pt) {
		const char *why = pt_probe(fs->pt);

		if (why)
			pt_disable(fs->pt);
		else if (pt_reuses_memfds(fs->pt))
			/* GETs of files fetched whole from now on get
			 * bodies that can be backing files themselves. */
			readahead_share_bodies(fs->ra);
		log_passthrough(st, why);
	}
	return n;
}

/* Why the INIT reply (@total bytes, error @err) cannot carry the flag. */
static const char *refusal(const struct fuse_init_state *st, size_t total,
			   int err)
{
	const guint64 want = FUSE_INIT_EXT | FUSE_DIRECT_IO_ALLOW_MMAP;

	if (err)
		return "INIT failed";
	if ((st->offered & want) != want)
		return "the kernel does not offer it; Linux >= 6.6 does";
	if (!reply_reaches(total, offsetof(struct fuse_init_out, flags2) +
					  sizeof(guint32)))
		return "libfuse's INIT reply has no flags2";
	return NULL;
}

/* The flags libfuse's INIT reply (@iov, @total bytes) gives. */
static guint32 reply_flags(const struct iovec *iov, int count, size_t total)
{
	guint8 buf[INIT_REPLY_MAX];
	const struct fuse_init_out *arg =
		(const void *)(buf + sizeof(struct fuse_out_header));

	if (!reply_reaches(total, offsetof(struct fuse_init_out, flags) +
					  sizeof(arg->flags)))
		return 0;
	gather(buf, iov, count);
	return arg->flags;
}

/*
 * Why the INIT reply (@iov, @total bytes, error @err) cannot ask for
 * FUSE_PARALLEL_DIROPS, or NULL.  libfuse 3.14 wants it by default
 * (FUSE_CAP_PARALLEL_DIROPS) but never writes the flag into its reply
 * (3.17 does), so without this the kernel takes a directory's lock
 * around every LOOKUP in it (fuse_lock_inode()): 32 readers opening
 * files of one directory queue for it, each LOOKUP's round trip and the
 * reader's wake-up after it one at a time (docs/PERFORMANCE.md).  Lookups and
 * listings are safe in parallel here: the index and the overlay take their own
 * locks, as they do for requests on different directories.  Sets *@already if
 * libfuse asked for it.
 */
static const char *dirops_refusal(const struct fuse_init_state *st,
				  const struct iovec *iov, int count,
				  size_t total, int err, gboolean *already)
{
	*already = FALSE;
	if (err)
		return "INIT failed";
	if (!(st->offered & FUSE_PARALLEL_DIROPS))
		return "the kernel does not offer it";
	if (!reply_reaches(total, offsetof(struct fuse_init_out, flags) +
					  sizeof(guint32)))
		return "libfuse's INIT reply has no flags";
	*already = (reply_flags(iov, count, total) & FUSE_PARALLEL_DIROPS) != 0;
	return NULL;
}

/* Why the INIT reply cannot turn passthrough on, or NULL. */
static const char *pt_refusal(const struct fuse_init_state *st,
			      const struct iovec *iov, int count, size_t total,
			      int err)
{
	const guint64 want = FUSE_INIT_EXT | FUSE_PASSTHROUGH;

	if (st->pt_off)
		return st->pt_off;
	if (err)
		return "INIT failed";
	if ((st->offered & want) != want)
		return "the kernel does not offer it; Linux >= 6.9 built "
		       "with CONFIG_FUSE_PASSTHROUGH does";
	if (!reply_reaches(total, INIT_OUT_STACK_DEPTH + sizeof(guint32)))
		return "libfuse's INIT reply has no max_stack_depth";
	if (reply_flags(iov, count, total) & FUSE_WRITEBACK_CACHE)
		return "the kernel refuses it with the writeback cache";
	return NULL;
}

/* Set by fuse_init_reply_open() around its fuse_reply_open(), which
 * writes the reply on the calling thread. */
static __thread int open_backing_id = -1;
static __thread gboolean open_patched;

/* Writes the open reply @iov with FOPEN_PASSTHROUGH and @backing_id. */
static ssize_t write_open_reply(int fd, const struct iovec *iov, int count,
				int backing_id)
{
	guint8 buf[sizeof(struct fuse_out_header) +
		   sizeof(struct open_out_740)];
	struct fuse_out_header *out = (void *)buf;
	struct open_out_740 *arg = (void *)(out + 1);
	ssize_t n;

	gather(buf, iov, count);
	arg->open_flags |= FOPEN_PASSTHROUGH;
	arg->backing_id = backing_id;
	n = write(fd, buf, sizeof(buf));
	open_patched = TRUE;
	return n;
}

/*
 * Answers the open whose reply (@total bytes, request @unique) could not
 * carry the backing id with EIO instead, so that the kernel opens nothing
 * the daemon did not record: the caller sees the reply unpatched and lets
 * go of the record and the handle (no RELEASE comes).  Returns @total
 * when written, as the writev() of the reply would have.
 */
static ssize_t write_open_refusal(int fd, uint64_t unique, size_t total)
{
	struct fuse_out_header out = {
		.len = sizeof(out),
		.error = -EIO,
		.unique = unique,
	};
	ssize_t n;

	log_msg(LOG_LEVEL_ERR,
		"FUSE passthrough: libfuse's open reply is %zu bytes, not %zu; "
		"the open fails (EIO)",
		total, sizeof(out) + sizeof(struct open_out_740));
	n = write(fd, &out, sizeof(out));
	return n == (ssize_t)sizeof(out) ? (ssize_t)total : n;
}

static ssize_t hook_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct fs *fs = userdata;
	struct fuse_init_state *st = state_of(userdata);
	const struct fuse_out_header *out = iov[0].iov_base;
	const char *why, *pt_why, *dirops_why;
	gboolean dirops_there, dirops;
	size_t total = 0;
	int i;

	if (count < 1 || iov[0].iov_len < sizeof(*out))
		return writev(fd, iov, count);
	for (i = 0; i < count; i++)
		total += iov[i].iov_len;
	if (open_backing_id >= 0) {
		if (out->error != 0)
			return writev(fd, iov, count);
		if (total == sizeof(*out) + sizeof(struct open_out_740))
			return write_open_reply(fd, iov, count,
						open_backing_id);
		/* Cannot be with libfuse 3 (above); were it so, the open
		 * fails rather than opening unrecorded. */
		return write_open_refusal(fd, out->unique, total);
	}
	if (g_atomic_int_get(&st->stage) != 1 || out->unique != st->unique)
		return writev(fd, iov, count);
	g_atomic_int_set(&st->stage, 2);
	why = refusal(st, total, out->error);
	pt_why = pt_refusal(st, iov, count, total, out->error);
	dirops_why = dirops_refusal(st, iov, count, total, out->error,
				    &dirops_there);
	dirops = !dirops_why && !dirops_there; /* to be added */
	if (dirops_why) {
		log_dirops(st, dirops_why);
	} else if (dirops_there) {
		/* libfuse (3.17 on) asked for it itself. */
		g_atomic_int_set(&st->parallel_dirops, 1);
		log_dirops(st, NULL);
	}
	if (!why || !pt_why || dirops) {
		if (why)
			log_outcome(st, why);
		if (pt_why)
			log_passthrough(st, pt_why);
		return write_init_reply(fd, fs, iov, count, total, !why,
					!pt_why, dirops);
	}
	log_outcome(st, why);
	log_passthrough(st, pt_why);
	return writev(fd, iov, count);
}

int fuse_init_reply_open(fuse_req_t req, const struct fuse_file_info *fi,
			 int backing_id, gboolean *passed)
{
	int rc;

	open_backing_id = backing_id;
	open_patched = FALSE;
	rc = fuse_reply_open(req, fi);
	*passed = open_patched;
	open_backing_id = -1;
	return rc;
}

gboolean fuse_init_hook(struct fuse_session *se, GError **error)
{
	static const struct fuse_custom_io io = {
		.read = hook_read,
		.writev = hook_writev,
	};
	int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se));

	if (rc != 0) {
		g_set_error(error, BFS_ERROR, -rc, "fuse_session_custom_io: %s",
			    g_strerror(-rc));
		return FALSE;
	}
	return TRUE;
}
