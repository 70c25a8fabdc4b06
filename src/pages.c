/* SPDX-License-Identifier: GPL-2.0-or-later */
/* pages.c - private anonymous mappings (pages.h). */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "error.h"
#include "pages.h"

gsize pages_size(void)
{
	static gsize page;

	if (!page)
		page = (gsize)sysconf(_SC_PAGESIZE);
	return page;
}

gsize pages_round(gsize size)
{
	gsize page = pages_size();

	return (size + page - 1) / page * page;
}

void *pages_map(gsize size, enum pages_flags flags, GError **error)
{
	int mflags = MAP_PRIVATE | MAP_ANONYMOUS;
	void *p;

	if (flags & PAGES_POPULATE)
		mflags |= MAP_POPULATE;
	p = mmap(NULL, pages_round(size), PROT_READ | PROT_WRITE, mflags, -1,
		 0);
	if (p == MAP_FAILED) {
		int e = errno;

		g_set_error(error, BFS_ERROR, ENOMEM,
			    "cannot map %" G_GSIZE_FORMAT " bytes: %s", size,
			    g_strerror(e));
		return NULL;
	}
	if ((flags & PAGES_HUGE) && size >= PAGES_HUGE_MIN)
		(void)madvise(p, pages_round(size), MADV_HUGEPAGE);
	return p;
}

void *pages_map_or_die(gsize size, enum pages_flags flags, const char *what)
{
	g_autoptr(GError) error = NULL;
	void *p = pages_map(size, flags, &error);

	if (!p)
		g_error("%s: %s", what, error->message);
	return p;
}

void pages_unmap(void *p, gsize size)
{
	if (p)
		munmap(p, pages_round(size));
}
