/* bufpool: see bufpool.h. */
#include "bufpool.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "pages.h"

/* Four classes per doubling: n pages to the class index and back.
 * 1-4 pages are classes 0-3; above, a class is m * 2^(e-2) pages for
 * m = 5..8, so no body maps more than 25% over what it asked for. */
#define NCLASSES 256

struct bufpool {
	gatomicrefcount refs; /* the pool's own and one per body out */
	gsize page;
	gsize idle_max;
	gboolean shared;      /* mappings are memfds (bufpool_new_shared()) */
	pthread_mutex_t lock; /* not GMutex: invisible to TSan */
	struct bufpool_buf *idle[NCLASSES]; /* protected by lock */
	struct bufpool_stats stats;	    /* protected by lock */
};

static guint class_of(gsize pages)
{
	guint e;
	gsize step, m;

	if (pages <= 4)
		return (guint)(pages ? pages - 1 : 0);
	e = (guint)g_bit_storage(pages - 1) - 1;
	step = (gsize)1 << (e - 2);
	m = (pages + step - 1) / step;
	return 4 * (e - 1) + (guint)(m - 5);
}

static gsize class_pages(guint cls)
{
	guint e;

	if (cls < 4)
		return cls + 1;
	e = cls / 4 + 1;
	return (gsize)(cls % 4 + 5) << (e - 2);
}

/* The class for @bytes, and its size in bytes. */
static guint class_for(const struct bufpool *pool, gsize bytes, gsize *size)
{
	guint cls = class_of((bytes + pool->page - 1) / pool->page);

	g_assert(cls < NCLASSES);
	*size = class_pages(cls) * pool->page;
	return cls;
}

/*
 * A shared pool's mappings, by their address: each one's memfd.  A body
 * moves between records when it grows (grow()), so the memfd belongs to
 * the mapping, not to the record.  shared_lock is a leaf.
 */
struct shared_map {
	int fd;
	gsize len;     /* the body's length when it became bytes */
	gboolean lent; /* to the kernel since its last reuse */
	struct bufpool *pool;
};

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static GHashTable *shared_maps; /* protected by shared_lock: data -> map */

/* The shared mapping at @data, or NULL.  Under shared_lock. */
static struct shared_map *shared_at(const void *data)
{
	return shared_maps ? g_hash_table_lookup(shared_maps, data) : NULL;
}

/* Each shared mapping holds a descriptor while it lives, out or idle; the
 * sockets' budget counts on half of RLIMIT_NOFILE, so these take at most
 * a quarter of it, and SHARED_MAX: past that, bodies are anonymous
 * memory, copied into a memfd when lent. */
#define SHARED_MAX 4096u

static guint shared_limit(void)
{
	static gsize limit;

	if (g_once_init_enter(&limit)) {
		struct rlimit rl;
		gsize l = SHARED_MAX;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
		    rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 4 < l)
			l = (gsize)(rl.rlim_cur / 4);
		g_once_init_leave(&limit, l + 1); /* never 0 */
	}
	return (guint)(limit - 1);
}

/* @fd opened again through /proc, as an ordinary file, with @flags. */
static int reopen(int fd, int flags)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return open(path, flags | O_CLOEXEC);
}

int bufpool_memfd_new(const char *name, gboolean *leasable)
{
	int fd = memfd_create(name, MFD_CLOEXEC), rw;

	*leasable = FALSE;
	if (fd < 0)
		return -1;
	rw = reopen(fd, O_RDWR);
	if (rw < 0)
		return fd;
	close(fd);
	*leasable = TRUE;
	return rw;
}

gboolean bufpool_memfd_alone(int fd)
{
	if (fcntl(fd, F_SETLEASE, F_WRLCK) != 0)
		return FALSE;
	/* Let go at once: nothing is to wait for it to be broken. */
	(void)fcntl(fd, F_SETLEASE, F_UNLCK);
	return TRUE;
}

const char *bufpool_memfd_probe(int *err)
{
	gboolean leasable;
	int fd = bufpool_memfd_new("bucketfs-probe", &leasable);
	int ro;
	const char *why = NULL;

	*err = 0;
	if (fd < 0) {
		*err = errno;
		return "memfd_create() failed";
	}
	ro = leasable ? reopen(fd, O_RDONLY) : -1;
	if (ro < 0) {
		why = "a memfd could not be opened again through /proc";
	} else if (fcntl(fd, F_SETLEASE, F_WRLCK) == 0) {
		why = "the kernel granted a write lease on a file open "
		      "elsewhere read-only";
	} else if (errno != EAGAIN) {
		*err = errno;
		why = "a write lease could not be asked for";
	}
	if (ro >= 0)
		close(ro);
	if (!why && !bufpool_memfd_alone(fd)) {
		*err = errno;
		why = "a write lease on a memfd open nowhere else was refused";
	}
	close(fd);
	return why;
}

/* A shared mapping of @size bytes of a new memfd, or NULL (the caller
 * maps anonymous memory instead). */
static guint8 *map_shared(struct bufpool *pool, gsize size)
{
	gboolean leasable, full;
	int fd;
	struct shared_map *m;
	void *p;

	pthread_mutex_lock(&shared_lock);
	full = shared_maps && g_hash_table_size(shared_maps) >= shared_limit();
	pthread_mutex_unlock(&shared_lock);
	if (full)
		return NULL;
	fd = bufpool_memfd_new("bucketfs-body", &leasable);
	if (fd < 0)
		return NULL;
	if (!leasable || ftruncate(fd, (off_t)size) != 0) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	m = g_new0(struct shared_map, 1);
	m->fd = fd;
	m->pool = pool;
	pthread_mutex_lock(&shared_lock);
	if (!shared_maps)
		shared_maps = g_hash_table_new(g_direct_hash, g_direct_equal);
	g_hash_table_insert(shared_maps, p, m);
	pthread_mutex_unlock(&shared_lock);
	return p;
}

/* Unmaps a pool mapping, and closes its memfd if it has one. */
static void unmap(guint8 *data, gsize cap)
{
	struct shared_map *m = NULL;

	pthread_mutex_lock(&shared_lock);
	m = shared_at(data);
	if (m)
		g_hash_table_remove(shared_maps, data);
	pthread_mutex_unlock(&shared_lock);
	munmap(data, cap);
	if (m) {
		close(m->fd);
		g_free(m);
	}
}

struct bufpool *bufpool_new(gsize idle_max)
{
	struct bufpool *pool = g_new0(struct bufpool, 1);

	g_atomic_ref_count_init(&pool->refs);
	pool->page = (gsize)sysconf(_SC_PAGESIZE);
	pool->idle_max = idle_max;
	pthread_mutex_init(&pool->lock, NULL);
	return pool;
}

struct bufpool *bufpool_new_shared(gsize idle_max)
{
	struct bufpool *pool = bufpool_new(idle_max);

	pool->shared = TRUE;
	return pool;
}

struct bufpool *bufpool_ref(struct bufpool *pool)
{
	g_atomic_ref_count_inc(&pool->refs);
	return pool;
}

void bufpool_unref(struct bufpool *pool)
{
	guint i;

	if (!pool || !g_atomic_ref_count_dec(&pool->refs))
		return;
	for (i = 0; i < NCLASSES; i++) {
		struct bufpool_buf *b;

		while ((b = pool->idle[i])) {
			pool->idle[i] = b->next;
			unmap(b->data, b->cap);
			g_free(b);
		}
	}
	pthread_mutex_destroy(&pool->lock);
	g_free(pool);
}

void bufpool_get_stats(struct bufpool *pool, struct bufpool_stats *out)
{
	pthread_mutex_lock(&pool->lock);
	*out = pool->stats;
	pthread_mutex_unlock(&pool->lock);
}

static guint8 *map_or_die(gsize size)
{
	return pages_map_or_die(size, PAGES_HUGE, "bufpool");
}

/* An idle body of class @cls, or NULL; counts it busy. */
static struct bufpool_buf *take_idle(struct bufpool *pool, guint cls,
				     gsize size)
{
	struct bufpool_buf *b;

	pthread_mutex_lock(&pool->lock);
	b = pool->idle[cls];
	if (b) {
		pool->idle[cls] = b->next;
		pool->stats.idle_bytes -= b->cap;
		pool->stats.idle--;
		pool->stats.reuses++;
	} else {
		pool->stats.maps++;
	}
	pool->stats.busy_bytes += size;
	pthread_mutex_unlock(&pool->lock);
	return b;
}

/* Whether idle body @b (taken) may be written again: its memfd, if it
 * was lent, is open nowhere else, and is its whole size again. */
static gboolean reusable(struct bufpool *pool, struct bufpool_buf *b)
{
	struct shared_map *m;
	gboolean lent = FALSE;
	int fd = -1;

	if (!pool->shared)
		return TRUE;
	pthread_mutex_lock(&shared_lock);
	m = shared_at(b->data);
	if (m) {
		lent = m->lent;
		fd = m->fd;
	}
	pthread_mutex_unlock(&shared_lock);
	if (!lent)
		return TRUE;
	/* The record is the caller's: nobody lends it meanwhile. */
	if (!bufpool_memfd_alone(fd) || ftruncate(fd, (off_t)b->cap))
		return FALSE;
	pthread_mutex_lock(&shared_lock);
	m->lent = FALSE;
	pthread_mutex_unlock(&shared_lock);
	return TRUE;
}

/* Drops idle body @b (taken, counted busy), which a reader still holds:
 * the kernel keeps its pages for the reader. */
static void drop_held(struct bufpool *pool, struct bufpool_buf *b)
{
	pthread_mutex_lock(&pool->lock);
	pool->stats.busy_bytes -= b->cap;
	pool->stats.reuses--; /* take_idle() counted it */
	pool->stats.held++;
	pthread_mutex_unlock(&pool->lock);
	unmap(b->data, b->cap);
	g_free(b);
}

/* A record holding pool pages for at least @bytes: an idle body of
 * their class, or a new mapping (counted busy either way).  Its len,
 * next and pool are the caller's to set. */
static struct bufpool_buf *take_or_map(struct bufpool *pool, gsize bytes)
{
	gsize size;
	guint cls = class_for(pool, bytes, &size);
	struct bufpool_buf *b;

	while ((b = take_idle(pool, cls, size)) && !reusable(pool, b))
		drop_held(pool, b);
	if (!b) {
		b = g_new0(struct bufpool_buf, 1);
		b->data = pool->shared ? map_shared(pool, size) : NULL;
		if (!b->data)
			b->data = map_or_die(size);
		b->cap = size;
	}
	return b;
}

/* A body of @pool with room for @reserve bytes; @heap_max: below it, of
 * the heap. */
static struct bufpool_buf *buf_new(struct bufpool *pool, gsize reserve,
				   gsize heap_max)
{
	struct bufpool_buf *b = NULL;

	if (reserve && reserve < heap_max) {
		b = g_new0(struct bufpool_buf, 1);
		b->data = g_malloc(reserve);
		b->cap = reserve;
		b->heap = TRUE;
	} else if (reserve) {
		b = take_or_map(pool, reserve);
	} else {
		b = g_new0(struct bufpool_buf, 1);
	}
	b->len = 0;
	b->next = NULL;
	b->pool = bufpool_ref(pool);
	return b;
}

struct bufpool_buf *bufpool_buf_new(struct bufpool *pool, gsize reserve)
{
	return buf_new(pool, reserve, BUFPOOL_HEAP_MAX);
}

struct bufpool_buf *bufpool_buf_new_mapped(struct bufpool *pool, gsize reserve)
{
	return buf_new(pool, reserve, 0);
}

/*
 * Makes room for @need bytes in all.  Past BUFPOOL_HEAP_MAX, into a
 * bigger body of the pool, with one copy of what is held; the old memory
 * is freed as a body of its own.  Not mremap(): TSan does not follow the
 * pages it moves, and a GET's reserve is its Content-Length, so growth is
 * rare (error documents, unknown lengths).
 */
static void grow(struct bufpool_buf *b, gsize need)
{
	gsize want = MAX(need, b->cap * 2);
	struct bufpool_buf *d, old;

	if ((b->heap || !b->cap) && want < BUFPOOL_HEAP_MAX) {
		b->data = g_realloc(b->data, want);
		b->cap = want;
		b->heap = TRUE;
		return;
	}
	d = take_or_map(b->pool, want);
	if (b->len)
		memcpy(d->data, b->data, b->len);
	/* @b takes the new pages (the pool's: not heap); @d, given the old
	 * memory, is freed as a body of its own. */
	old = *b;
	b->data = d->data;
	b->cap = d->cap;
	b->heap = FALSE;
	d->data = old.data;
	d->cap = old.cap;
	d->heap = old.heap;
	d->pool = bufpool_ref(b->pool);
	bufpool_buf_free(d);
}

void bufpool_buf_reserve(struct bufpool_buf *b, gsize n)
{
	g_assert(b->len + n >= b->len);
	if (b->len + n > b->cap)
		grow(b, b->len + n);
}

void bufpool_buf_append(struct bufpool_buf *b, const void *p, gsize n)
{
	if (!n)
		return;
	bufpool_buf_reserve(b, n);
	memcpy(b->data + b->len, p, n);
	b->len += n;
}

void bufpool_buf_cut(struct bufpool_buf *b, gsize off, gsize len)
{
	g_return_if_fail(off <= b->len && len <= b->len - off);
	if (off && len)
		memmove(b->data, b->data + off, len);
	b->len = len;
}

/* Puts @b's mapping on its class's free list (TRUE: @b is on it now) or,
 * above idle_max, unmaps it (FALSE: @b is the caller's to free). */
static gboolean give_back(struct bufpool *pool, struct bufpool_buf *b)
{
	gboolean keep;
	gsize size;
	guint cls = class_for(pool, b->cap, &size);

	g_assert(size == b->cap);
	pthread_mutex_lock(&pool->lock);
	pool->stats.busy_bytes -= b->cap;
	keep = pool->stats.idle_bytes + b->cap <= pool->idle_max;
	if (keep) {
		b->next = pool->idle[cls];
		pool->idle[cls] = b;
		pool->stats.idle_bytes += b->cap;
		pool->stats.idle++;
	} else {
		pool->stats.unmaps++;
	}
	pthread_mutex_unlock(&pool->lock);
	if (!keep)
		unmap(b->data, b->cap);
	return keep;
}

void bufpool_buf_free(struct bufpool_buf *b)
{
	struct bufpool *pool;
	gboolean keep = FALSE;

	if (!b)
		return;
	pool = b->pool;
	if (b->heap)
		g_free(b->data);
	else if (b->cap)
		keep = give_back(pool, b);
	if (!keep)
		g_free(b);
	bufpool_unref(pool);
}

GBytes *bufpool_buf_free_to_bytes(struct bufpool_buf *b)
{
	struct shared_map *m;

	/* GBytes wants non-NULL data for a free func to run. */
	if (!b->cap) {
		bufpool_buf_free(b);
		return g_bytes_new(NULL, 0);
	}
	if (!b->heap && b->pool->shared) {
		pthread_mutex_lock(&shared_lock);
		m = shared_at(b->data);
		if (m)
			m->len = b->len;
		pthread_mutex_unlock(&shared_lock);
	}
	return g_bytes_new_with_free_func(b->data, b->len,
					  (GDestroyNotify)bufpool_buf_free, b);
}

int bufpool_bytes_lend(GBytes *bytes)
{
	gsize len;
	const void *data = g_bytes_get_data(bytes, &len);
	struct shared_map *m = NULL;
	struct bufpool *pool = NULL;
	int fd = -1;

	if (!data || !len)
		return -1;
	pthread_mutex_lock(&shared_lock);
	m = shared_at(data);
	/* Only the whole body: a shorter slice would cut the others'. */
	if (m && m->len == len) {
		m->lent = TRUE;
		fd = m->fd;
		pool = m->pool;
	}
	pthread_mutex_unlock(&shared_lock);
	if (fd < 0 || ftruncate(fd, (off_t)len) != 0)
		return -1;
	pthread_mutex_lock(&pool->lock);
	pool->stats.lent++;
	pthread_mutex_unlock(&pool->lock);
	return fd;
}
