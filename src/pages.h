/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * pages.h - private anonymous mappings: the memory of the daemon's large
 * buffers (response bodies in bufpool.c, upload parts in upload.c, the
 * bytes of a file being written in fs/overlay_stream.c).  Mapped pages,
 * not the heap, so that they go back to the system when unmapped,
 * whichever thread frees them: a thread's malloc arena keeps its
 * high-water mark.  Any thread.
 */
#pragma once

#include <glib.h>

/* Mappings this large ask for transparent huge pages. */
#define PAGES_HUGE_MIN (2u << 20)

enum pages_flags {
	PAGES_POPULATE = 1 << 0, /* fault every page in now */
	PAGES_HUGE = 1 << 1, /* madvise(MADV_HUGEPAGE) from PAGES_HUGE_MIN */
};

/* The system's page size. */
gsize pages_size(void);

/* @size rounded up to whole pages. */
gsize pages_round(gsize size);

/*
 * @size bytes (whole pages: pages_round()), zeroed, readable and
 * writable.  NULL with @error (ENOMEM and the system's reason) when the
 * system refuses.
 */
void *pages_map(gsize size, enum pages_flags flags, GError **error);

/* The same, aborting the daemon when the system refuses, as g_malloc()
 * does; @what names the buffer in the message. */
void *pages_map_or_die(gsize size, enum pages_flags flags, const char *what);

/* Unmaps what pages_map() gave; NULL does nothing. */
void pages_unmap(void *p, gsize size);
