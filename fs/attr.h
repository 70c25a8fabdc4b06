/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * attr.h - what every namespace of the FUSE tree (the index in ops.c, the
 * declared directories in emptydir_ops.c, the overlay in overlay_ops.c)
 * fills its replies with: owners and modes, the attributes of an index
 * entry, readdir buffers, sized replies, and the interrupt hook of a
 * request answered later.
 *
 * Below the namespaces, above struct fs (fs_internal.h): nothing here
 * calls up, sends a request or takes a lock of ours (interrupt_hook()
 * takes libfuse's request lock, inside fuse_req_interrupt_func()).  Any
 * thread.
 */
#ifndef BUCKETFS_FS_ATTR_H
#define BUCKETFS_FS_ATTR_H

#include <fuse_lowlevel.h>
#include <glib.h>
#include <sys/stat.h>

#include "fs_internal.h"
#include "index.h"

/* A readdir reply being filled, in @buf of @size bytes (the caller's). */
struct dirbuf {
	fuse_req_t req;
	gboolean plus;
	char *buf;
	size_t size, used;
};

/*
 * The owner and st_mode of a node: type, then the mount's file_mode or
 * dir_mode, without write bits unless @can_write (a name that takes
 * writes: see fs_options).
 */
void fill_mode(const struct fs *fs, struct stat *st, gboolean is_dir,
	       gboolean can_write);

/* The attributes of entry @id of @idx (its st_ino is the index's). */
void fill_stat(const struct fs *fs, struct index *idx, index_id id,
	       struct stat *st);

/* Adds one entry followed by offset @next; FALSE when it doesn't fit. */
gboolean dirbuf_add(struct dirbuf *db, const char *name,
		    const struct fuse_entry_param *e, off_t next);

/* "." and "..", at offsets 0 and 1; FALSE when the buffer is full. */
gboolean dirbuf_dots(struct dirbuf *db, off_t *off, ino_t self, ino_t parent);

/*
 * Replies @value of @len bytes to a getxattr or listxattr that asked for
 * @size: its length when @size is 0, ERANGE when it is too small.
 */
void reply_sized(fuse_req_t req, const char *value, size_t len, size_t size);

/*
 * Sets @func as @req's interrupt hook (fuse_req_interrupt_func()).  When
 * the kernel's INTERRUPT came before the hook, libfuse runs @func at once,
 * inside the call and under the request's lock, where a reply would free
 * the request under that lock.  So a hook first asks interrupt_deferred():
 * TRUE there means "return without replying", and interrupt_hook() then
 * returns TRUE: the caller answers @req (EINTR) itself and starts no wait.
 * FUSE worker, in the op's handler.
 */
gboolean interrupt_hook(fuse_req_t req, fuse_interrupt_func_t func, void *data);

/* In an interrupt hook: TRUE if it runs inside interrupt_hook(). */
gboolean interrupt_deferred(void);

#endif
