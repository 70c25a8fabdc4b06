/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * emptydir_ops.h - the directories of -o empty_dirs= (emptydirs.h) in the
 * FUSE tree, for the dispatch of ops.c to call: a namespace beside the
 * overlay's (overlay_ops.h), on the helpers of attr.h and fs_internal.h.
 *
 * A declared directory the current index lacks is a node of generation
 * EMPTY_GEN (fs_internal.h) whose low bits are its emptydirs.h node
 * number: the set is fixed for the mount's life, so its node ids are
 * never forgotten nor reused and need no lookup count.  It is an empty,
 * read-only directory (write bits unless -o ro, where names can
 * be made in it like in any other) with st_ino index_key_ino() of its key
 * (the number it gets once S3 holds something below it), and the current
 * index's creation time as its times.  Once an index has the directory
 * (after a SIGHUP or index_max_age), resolve() answers its node from that
 * index instead, so cached names keep working and show what S3 holds.
 *
 * Lookup order of a name in a directory: the index, then the declared
 * directories, then the overlay.  An object of the index
 * wins over a declared directory of the same name: emptydirs_report()
 * logs a notice for each such path every time an index is switched to.
 *
 * Any thread; none of this sends a request.
 */
#ifndef BUCKETFS_FS_EMPTYDIR_OPS_H
#define BUCKETFS_FS_EMPTYDIR_OPS_H

#include <fuse_lowlevel.h>

#include "attr.h"
#include "fs_internal.h"

/*
 * The ops for a node resolve() found no index entry for: each replies and
 * returns TRUE when @ino is a declared directory; else FALSE, without
 * replying (the node is stale).
 */
gboolean empty_dir_getattr(fuse_req_t req, struct fs *fs, fuse_ino_t ino);
gboolean empty_dir_opendir(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
			   struct fuse_file_info *fi);

/*
 * lookup of @name, which the index lacks, in directory @parent: entry
 * @dir of @idx, or with @idx NULL a declared directory.  Replies with the
 * entry and returns TRUE when @name is declared there; FALSE, without
 * replying, otherwise.
 */
gboolean empty_dir_lookup(fuse_req_t req, struct fs *fs, struct index *idx,
			  index_id dir, fuse_ino_t parent, const char *name);

/*
 * readdir: adds to @db the declared children of @dir_key that directory
 * @dir of @idx lacks (all of them when @idx is NULL), at offsets
 * EMPTY_DIROFF + i + 1, from offset @off on.  FALSE when @db filled up.
 */
gboolean dirbuf_empty_dirs(struct dirbuf *db, struct fs *fs, off_t off,
			   const char *dir_key, struct index *idx,
			   index_id dir);

/*
 * readdir of declared directory @ino (empty_dir_key() is not NULL): adds
 * "." and ".." and its declared children to @db from offset *@off on,
 * which moves past the dots.  FALSE when @db filled up.  The caller adds
 * the overlay's names and replies.
 */
gboolean dirbuf_empty_dir(struct dirbuf *db, struct fs *fs, fuse_ino_t ino,
			  off_t *off);

#endif
