/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * overlay_ops.h - the FUSE operations of names the index lacks, on top of
 * the overlay (overlay.h), and the answers every mount gives to writes.
 *
 * Names the index doesn't have are looked up on S3 and, unless -o ro
 * (which answers EROFS to every write), can be made, written and
 * removed; indexed objects stay read-only; rename and link answer EXDEV,
 * so mv copies and a hard link is refused as if across filesystems.
 *
 * The op_*() functions are entries of fs_ops (ops.c).  The others are the
 * overlay branches of the read path's operations, called by the dispatch
 * of ops.c for overlay nodes and names the index lacks.  A namespace beside the
 * declared directories (emptydir_ops.h), on the helpers of attr.h and
 * fs_internal.h.  Errors are logged here once, with their cause
 * chain, and replied as errno (ENOENT, EEXIST and ENOTEMPTY unlogged).
 * FUSE worker threads; the calls that reach S3 block.
 */
#ifndef BUCKETFS_FS_OVERLAY_OPS_H
#define BUCKETFS_FS_OVERLAY_OPS_H

#include <fuse_lowlevel.h>

#include "attr.h"
#include "fs_internal.h"
#include "overlay.h"

/* The attributes of overlay node @a, with the mount's owner and modes. */
void ov_fill_stat(const struct fs *fs, const struct ov_attr *a,
		  struct stat *st);

/* lookup of @name in @parent, a name the index doesn't have (or any name
 * under an overlay directory): from the overlay or S3. */
void lookup_overlay(fuse_req_t req, struct fs *fs, fuse_ino_t parent,
		    const char *name);

/*
 * Adds the overlay's names in directory @dir_key ("" or ending with '/')
 * to @db, after the indexed ones of entry @dir of @idx (those win a
 * clash; @idx may be NULL), from offset @off on.
 */
void dirbuf_overlay(struct dirbuf *db, struct fs *fs, off_t off,
		    const char *dir_key, struct index *idx, index_id dir);

/* readdir of overlay directory @ino; replies. */
void readdir_overlay(struct dirbuf *db, struct fs *fs, fuse_ino_t ino,
		     off_t off);

/* open of overlay file @ino; replies. */
void open_overlay(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
		  struct fuse_file_info *fi);

/* The write operations of fs_ops. */
void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
	      off_t off, struct fuse_file_info *fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
	      struct fuse_file_info *fi);
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		struct fuse_file_info *fi);
void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi);
void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	      dev_t rdev);
void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
	       fuse_ino_t newparent, const char *newname, unsigned int flags);
void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
	     const char *newname);
void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		const char *name);
void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

#endif
