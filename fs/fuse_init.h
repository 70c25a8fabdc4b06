/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuse_init.h - what libfuse 3.14 cannot ask the kernel for at FUSE INIT,
 * asked for through the session's custom I/O (fuse_session_custom_io()).
 *
 * FUSE_DIRECT_IO_ALLOW_MMAP (protocol 7.39, Linux 6.6) lets a file opened
 * with FOPEN_DIRECT_IO be mapped MAP_SHARED: the kernel then fills the
 * page cache of the mapping through FUSE READs.  libfuse 3.14 knows
 * neither the flag nor a way to set it (3.16 added
 * FUSE_CAP_DIRECT_IO_ALLOW_MMAP), so the
 * session reads and writes /dev/fuse through fuse_init.c's read() and
 * writev(): the kernel's INIT request is noted as it is read (its
 * `unique` and the flags it offers), and libfuse's reply to it gets
 * FUSE_INIT_EXT and FUSE_DIRECT_IO_ALLOW_MMAP added as it is written,
 * only if the kernel offered both and the reply is long enough to carry
 * flags2.  FUSE_PASSTHROUGH (7.40, Linux 6.9) is added likewise, with
 * max_stack_depth 1, unless the kernel does not offer it, the reply asks
 * for the writeback cache (which the kernel refuses it with), or
 * pt_off says why not; the opens that pass through get FOPEN_PASSTHROUGH
 * and their backing id added to their reply (fuse_init_reply_open()).
 * FUSE_PARALLEL_DIROPS, which libfuse 3.14 wants by default but leaves
 * out of its reply, is added if the kernel offered it (dirops_refusal()).
 * Every other request and reply passes through untouched.
 *
 * What it costs: libfuse splices neither way with custom I/O that has no
 * splice hooks; bucketfs has no write_buf op and asks for no
 * splice_write, so it never spliced.  clone_fd and the multithreaded loop
 * work as before: the hooks use the descriptor they are given.
 */
#ifndef BUCKETFS_FS_FUSE_INIT_H
#define BUCKETFS_FS_FUSE_INIT_H

#include <fuse_lowlevel.h>
#include <glib.h>

/* What INIT negotiated; in struct fs (se's userdata).  Zero before. */
struct fuse_init_state {
	/* Written by the thread that reads INIT, read by the same thread
	 * when it replies; no other request comes before the reply. */
	guint64 unique;
	guint64 offered;      /* the kernel's flags | flags2 << 32 */
	guint minor;	      /* the kernel's protocol minor */
	gint stage;	      /* atomic: 0 before INIT, 1 read, 2 answered */
	gint allow_mmap;      /* atomic: FUSE_DIRECT_IO_ALLOW_MMAP negotiated */
	gint parallel_dirops; /* atomic: FUSE_PARALLEL_DIROPS negotiated */
	/* Why FUSE_PASSTHROUGH is not to be asked for (an option, no
	 * CAP_SYS_ADMIN), or NULL: set before the loop. */
	const char *pt_off;
};

/*
 * Routes @se's /dev/fuse I/O through the hooks above; @se's userdata is
 * the struct fs that holds the state.  Call after fuse_session_mount()
 * (the hooks keep its descriptor) and before the session loop.  FALSE
 * with @error (errno code) if libfuse refused, and the session then runs
 * as before.  Main thread.
 */
gboolean fuse_init_hook(struct fuse_session *se, GError **error);

/*
 * fuse_reply_open() of @req with @fi, its reply carrying FOPEN_PASSTHROUGH
 * and @backing_id (FUSE_DEV_IOC_BACKING_OPEN's, passthrough.h): libfuse
 * writes the reply on the calling thread, through the hook, which adds
 * them.  Returns what fuse_reply_open() did; *@passed says whether the
 * reply carried them.  FALSE only if libfuse's reply was not the 7.40
 * fuse_open_out's size (not with libfuse 3: a build-time assertion), and
 * then the kernel got EIO instead of the reply and opened nothing.
 * Requires fuse_init_hook().  Any thread.
 */
int fuse_init_reply_open(fuse_req_t req, const struct fuse_file_info *fi,
			 int backing_id, gboolean *passed);

#endif
