/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuse_init.c - FUSE_DIRECT_IO_ALLOW_MMAP asked for at INIT through the
 * session's custom I/O: see fuse_init.h.
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

/* Linux 6.6's uapi; Debian 12's headers stop at 7.38. */
#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#endif

/* The longest INIT reply we patch: fuse_init_out and its header. */
#define INIT_REPLY_MAX                                                         \
	(sizeof(struct fuse_out_header) + sizeof(struct fuse_init_out))

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

/*
 * Writes libfuse's INIT reply (@iov) with the two flags added, from a
 * copy: @iov points into libfuse's frame.  -1 with errno as writev().
 */
static ssize_t write_init_reply(int fd, struct fuse_init_state *st,
				const struct iovec *iov, int count,
				size_t total)
{
	guint8 buf[INIT_REPLY_MAX];
	struct fuse_out_header *out = (void *)buf;
	struct fuse_init_out *arg = (void *)(out + 1);
	size_t at = 0;
	ssize_t n;
	int i;

	for (i = 0; i < count; i++) {
		memcpy(buf + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	arg->flags |= FUSE_INIT_EXT;
	arg->flags2 |= (guint32)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32);
	n = write(fd, buf, total);
	if (n == (ssize_t)total) {
		g_atomic_int_set(&st->allow_mmap, 1);
		log_outcome(st, NULL);
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
	if (total < sizeof(struct fuse_out_header) +
			    offsetof(struct fuse_init_out, flags2) +
			    sizeof(guint32) ||
	    total > INIT_REPLY_MAX)
		return "libfuse's INIT reply has no flags2";
	return NULL;
}

static ssize_t hook_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct fuse_init_state *st = state_of(userdata);
	const struct fuse_out_header *out = iov[0].iov_base;
	const char *why;
	size_t total = 0;
	int i;

	if (g_atomic_int_get(&st->stage) != 1 || count < 1 ||
	    iov[0].iov_len < sizeof(*out) || out->unique != st->unique)
		return writev(fd, iov, count);
	for (i = 0; i < count; i++)
		total += iov[i].iov_len;
	g_atomic_int_set(&st->stage, 2);
	why = refusal(st, total, out->error);
	if (!why)
		return write_init_reply(fd, st, iov, count, total);
	log_outcome(st, why);
	return writev(fd, iov, count);
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
