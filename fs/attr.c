/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Attributes and readdir buffers, shared by the namespaces of the FUSE
 * tree; the contract is attr.h.
 */
#include <errno.h>
#include <string.h>

#include "attr.h"

void fill_mode(const struct fs *fs, struct stat *st, gboolean is_dir,
	       gboolean can_write)
{
	mode_t perm = is_dir ? fs->opts.dir_mode : fs->opts.file_mode;

	st->st_uid = fs->opts.uid;
	st->st_gid = fs->opts.gid;
	st->st_mode = (is_dir ? S_IFDIR : S_IFREG) |
		      (can_write ? perm : perm & ~(mode_t)0222);
}

/*
 * st_blksize of an indexed file: the "preferred I/O size" buffered
 * readers size their buffer by (Python's open() sizes its BufferedReader
 * to it; cp and cat read at least that much).  A file fetched whole is
 * read from the daemon's memory without the page cache under
 * direct_io=auto, so each read(2) is a FUSE round trip.  With 4 KiB, a
 * reader that opens a 315 KB image with open() and reads 16 bytes, then
 * 64 KiB at a time (PIL's way, DLIO's load) made 7 READs: a 4 KiB fill,
 * then 60 KiB and 64 KiB reads past the buffer, then end of file.  With
 * the file's size rounded up to a power of two it makes 3: the whole
 * file into the buffer, then end of file twice.  At most 1 MiB
 * (IO_BLOCK_MAX, what NFS reports), at least BLOCK; a power of two, as
 * the kernel keeps it as i_blkbits.
 */
static blksize_t io_block(guint64 size)
{
	blksize_t b = BLOCK;

	while ((guint64)b < size && b < (blksize_t)IO_BLOCK_MAX)
		b <<= 1;
	return b;
}

void fill_stat(const struct fs *fs, struct index *idx, index_id id,
	       struct stat *st)
{
	struct index_attr a;

	index_get_attr(idx, id, &a);
	memset(st, 0, sizeof(*st));
	st->st_ino = a.ino;
	/* Directories take new names unless -o ro (overlay.h); indexed
	 * objects stay read-only. */
	fill_mode(fs, st, a.is_dir, a.is_dir && fs_writes(fs));
	st->st_nlink = a.is_dir ? 2 : 1;
	st->st_size = (off_t)a.size;
	st->st_blksize = a.is_dir ? BLOCK : io_block(a.size);
	st->st_blocks = (blkcnt_t)((a.size + 511) / 512);
	st->st_mtime = st->st_ctime = st->st_atime = (time_t)a.mtime;
}

gboolean dirbuf_add(struct dirbuf *db, const char *name,
		    const struct fuse_entry_param *e, off_t next)
{
	size_t n, room = db->size - db->used;

	n = db->plus ? fuse_add_direntry_plus(db->req, db->buf + db->used, room,
					      name, e, next)
		     : fuse_add_direntry(db->req, db->buf + db->used, room,
					 name, &e->attr, next);
	if (n > room)
		return FALSE;
	db->used += n;
	return TRUE;
}

gboolean dirbuf_dots(struct dirbuf *db, off_t *off, ino_t self, ino_t parent)
{
	for (; *off < 2; (*off)++) {
		struct fuse_entry_param e = { 0 };

		e.attr.st_ino = *off == 0 ? self : parent;
		e.attr.st_mode = S_IFDIR;
		if (!dirbuf_add(db, *off == 0 ? "." : "..", &e, *off + 1))
			return FALSE;
	}
	return TRUE;
}

void reply_sized(fuse_req_t req, const char *value, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, value, len);
}

/* Per thread: set only inside interrupt_hook()'s own call. */
static __thread gboolean hooking, deferred;

gboolean interrupt_hook(fuse_req_t req, fuse_interrupt_func_t func, void *data)
{
	gboolean early;

	hooking = TRUE;
	deferred = FALSE;
	fuse_req_interrupt_func(req, func, data);
	early = deferred;
	hooking = FALSE;
	deferred = FALSE;
	return early;
}

gboolean interrupt_deferred(void)
{
	if (hooking)
		deferred = TRUE;
	return hooking;
}
