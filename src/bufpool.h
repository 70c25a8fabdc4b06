/*
 * bufpool: response bodies in memory of the daemon's own.
 *
 * A body is page-aligned anonymous memory (mmap) in a size class (whole
 * pages, four classes per doubling).  A freed body goes back to its
 * class's free list with its pages still faulted in, so the next body
 * of that class costs no page fault and no malloc; what is kept idle is
 * bounded by the pool's idle_max, and a body freed above it is unmapped.
 * Bodies of BUFPOOL_HEAP_MAX bytes or more never come from malloc, so no
 * thread's malloc arena holds them (glibc keeps an arena's high-water
 * mark and fragments it; the soak showed the event threads' arenas
 * growing for ever).  Smaller ones are malloc'd at their exact size: a
 * mapping each would cost a whole page for a few bytes (more memory than
 * memory_max counts) and one kernel VMA each, and enough small objects
 * held at once would pass vm.max_map_count.  A heap body that grows past
 * BUFPOOL_HEAP_MAX moves into the pool (one copy).
 *
 * Any thread may allocate and free; a body is used by one thread at a
 * time.  Out of memory aborts, as g_malloc() does.
 */
#pragma once

#include <glib.h>

struct bufpool;

/* Bodies below this many bytes are malloc'd (see above). */
#define BUFPOOL_HEAP_MAX (64u << 10)

/* A body.  @data and @cap may change on append; @len <= @cap. */
struct bufpool_buf {
	guint8 *data; /* NULL while @cap is 0 */
	gsize len;
	gsize cap;
	/* private */
	gboolean heap; /* @data is g_malloc()'d, not a pool mapping */
	struct bufpool *pool;
	struct bufpool_buf *next; /* on a free list */
};

struct bufpool_stats {
	guint64 idle;	    /* bodies on free lists */
	guint64 idle_bytes; /* mapped, on free lists */
	guint64 busy_bytes; /* mapped, in bodies held */
	guint64 maps;	    /* mmap() calls (new bodies, growth from 0) */
	guint64 reuses;	    /* bodies taken from a free list */
	guint64 unmaps;	    /* bodies given back above idle_max */
	guint64 lent;	    /* shared: memfds lent (bufpool_bytes_lend()) */
	guint64 held;	    /* shared: idle memfds a reader still held,
			     * dropped instead of reused */
};

/* A pool that keeps at most @idle_max bytes idle.  Any thread. */
struct bufpool *bufpool_new(gsize idle_max);

/*
 * The same, but its mappings are memfds, mapped shared, so that a body
 * can be lent to the kernel as a file (bufpool_bytes_lend()): FUSE
 * passthrough then serves a reader the body's own pages, with no copy by
 * the daemon.  A body whose memfd was lent is reused only once no other
 * file of it is open (a write lease is granted: the kernel counts every
 * open, and a reader's mapping holds its open file); else it is dropped.
 * Where a memfd cannot be made or opened again through /proc, or past
 * 4,096 shared mappings at once (or a quarter of RLIMIT_NOFILE: each
 * holds a descriptor), a mapping is anonymous, as in bufpool_new(), and
 * cannot be lent.
 */
struct bufpool *bufpool_new_shared(gsize idle_max);

/*
 * A memfd (@name) opened as an ordinary file, read-write, so that the
 * kernel counts it in its checks for leases (memfd_create()'s own file is
 * not counted as a writer, so a write lease on it is always refused).
 * *@leasable is FALSE if it could not be opened again through /proc: the
 * memfd_create() file is returned as it is.  -1 with errno on failure.
 */
int bufpool_memfd_new(const char *name, gboolean *leasable);

/* Whether no file of memfd @fd (opened by bufpool_memfd_new()) is open
 * anywhere but @fd: a write lease on it is granted, and let go at once.
 * FALSE with errno (EAGAIN: another is open). */
gboolean bufpool_memfd_alone(int fd);

/*
 * Why bufpool_memfd_alone() cannot be trusted here, or NULL if it can:
 * it asks for a write lease on a memfd that a second, read-only open of
 * it holds (refused, EAGAIN), then once that is closed (granted).  Linux
 * counts read-only opens for leases since 5.3; without /proc, with
 * fs.leases-enable 0, or on a kernel that does not count them, a reused
 * memfd could still be read.  *@err: the errno behind it, or 0.
 */
const char *bufpool_memfd_probe(int *err);

/* A pool lives while it is referenced or holds bodies that are out;
 * the last unref unmaps the idle ones.  Any thread. */
struct bufpool *bufpool_ref(struct bufpool *pool);
void bufpool_unref(struct bufpool *pool);

/* Counters at this moment.  Any thread. */
void bufpool_get_stats(struct bufpool *pool, struct bufpool_stats *out);

/* An empty body with room for at least @reserve bytes (0: none mapped
 * until the first append).  Free with bufpool_buf_free(). */
struct bufpool_buf *bufpool_buf_new(struct bufpool *pool, gsize reserve);

/* The same, but of the pool's mappings however small (never the heap):
 * for bytes to be lent whatever their length (bufpool_bytes_lend()).
 * Each holds a mapping, and in a shared pool a descriptor. */
struct bufpool_buf *bufpool_buf_new_mapped(struct bufpool *pool, gsize reserve);

/* Appends @n bytes; past its cap, moves the body to a bigger one. */
void bufpool_buf_append(struct bufpool_buf *b, const void *p, gsize n);
/* Makes room for @n more bytes at @data + @len, for the caller to write
 * there (a socket's recv(), say) and add to @len. */
void bufpool_buf_reserve(struct bufpool_buf *b, gsize n);

/* Keeps only bytes [@off, @off + @len) of @b, moved to its start. */
void bufpool_buf_cut(struct bufpool_buf *b, gsize off, gsize len);

/* Returns @b's memory to its pool.  NULL is ignored. */
void bufpool_buf_free(struct bufpool_buf *b);

/* Turns @b (taken) into GBytes of its @len bytes, with no copy; the
 * memory goes back to the pool when the last reference is dropped, on
 * whichever thread that is. */
GBytes *bufpool_buf_free_to_bytes(struct bufpool_buf *b);

/*
 * If @bytes are a whole body of a shared pool with a memfd
 * (bufpool_buf_free_to_bytes()), that memfd, truncated to their length,
 * for the kernel to read as a file; else -1.  The descriptor stays the
 * pool's: the caller registers it with the kernel, which takes its own
 * reference, and must hold @bytes while it lends it.  Any thread.
 */
int bufpool_bytes_lend(GBytes *bytes);
