/* Unit tests for bufpool: reuse, growth, cut, the idle cap, threads, and
 * the shared pool's bodies lent as files. */
#include "bufpool.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_reuse(void)
{
	struct bufpool *pool = bufpool_new(1 << 20);
	struct bufpool_stats st;
	struct bufpool_buf *b = bufpool_buf_new(pool, BUFPOOL_HEAP_MAX + 5000);
	guint8 *first = b->data;
	gsize page = (gsize)sysconf(_SC_PAGESIZE);

	g_assert_nonnull(b->data);
	g_assert_cmpuint(b->cap, >=, BUFPOOL_HEAP_MAX + 5000);
	g_assert_cmpuint((guintptr)b->data % page, ==, 0);
	bufpool_buf_append(b, "abc", 3);
	bufpool_buf_free(b);
	bufpool_get_stats(pool, &st);
	g_assert_cmpuint(st.busy_bytes, ==, 0);
	g_assert_cmpuint(st.idle_bytes, >=, BUFPOOL_HEAP_MAX + 5000);
	/* Same class: the same mapping back, empty. */
	b = bufpool_buf_new(pool, BUFPOOL_HEAP_MAX + 4500);
	g_assert_true(b->data == first);
	g_assert_cmpuint(b->len, ==, 0);
	bufpool_get_stats(pool, &st);
	g_assert_cmpuint(st.reuses, ==, 1);
	g_assert_cmpuint(st.maps, ==, 1);
	bufpool_buf_free(b);
	bufpool_unref(pool);
}

static void test_grow_and_cut(void)
{
	struct bufpool *pool = bufpool_new(0);
	struct bufpool_buf *b = bufpool_buf_new(pool, 0);
	guint8 chunk[1000];
	guint i;
	struct bufpool_stats st;

	g_assert_null(b->data);
	for (i = 0; i < 3000; i++) {
		memset(chunk, (int)(i & 0xff), sizeof(chunk));
		bufpool_buf_append(b, chunk, sizeof(chunk));
	}
	g_assert_cmpuint(b->len, ==, 3000 * 1000);
	for (i = 0; i < 3000; i++)
		g_assert_cmpuint(b->data[i * 1000 + 999], ==, i & 0xff);
	bufpool_buf_cut(b, 1000, 2500);
	g_assert_cmpuint(b->len, ==, 2500);
	g_assert_cmpuint(b->data[0], ==, 1);
	g_assert_cmpuint(b->data[1999], ==, 2);
	bufpool_buf_free(b);
	/* idle_max 0: nothing is kept. */
	bufpool_get_stats(pool, &st);
	g_assert_cmpuint(st.idle_bytes, ==, 0);
	g_assert_cmpuint(st.busy_bytes, ==, 0);
	/* Each growth moved the bytes to a bigger mapping: every one made
	 * was given back, and none kept. */
	g_assert_cmpuint(st.unmaps, ==, st.maps);
	g_assert_cmpuint(st.maps, >, 1);
	bufpool_unref(pool);
}

static void test_idle_cap(void)
{
	struct bufpool *pool = bufpool_new(3 * BUFPOOL_HEAP_MAX);
	struct bufpool_buf *b[5];
	struct bufpool_stats st;
	guint i;

	for (i = 0; i < 5; i++)
		b[i] = bufpool_buf_new(pool, BUFPOOL_HEAP_MAX);
	for (i = 0; i < 5; i++)
		bufpool_buf_free(b[i]);
	bufpool_get_stats(pool, &st);
	g_assert_cmpuint(st.idle_bytes, ==, 3 * BUFPOOL_HEAP_MAX);
	g_assert_cmpuint(st.unmaps, ==, 2);
	bufpool_unref(pool);
}

/* Small bodies are malloc'd at their size, not mapped; one that grows
 * past BUFPOOL_HEAP_MAX moves into the pool with its bytes. */
static void test_heap(void)
{
	struct bufpool *pool = bufpool_new(1 << 20);
	struct bufpool_stats st;
	struct bufpool_buf *b = bufpool_buf_new(pool, 1000);
	guint8 chunk[4096];
	guint i;

	g_assert_cmpuint(b->cap, ==, 1000);
	bufpool_buf_append(b, "x", 1);
	bufpool_get_stats(pool, &st);
	g_assert_cmpuint(st.maps, ==, 0);
	g_assert_cmpuint(st.busy_bytes, ==, 0);
	for (i = 0; i < 40; i++) {
		memset(chunk, (int)i, sizeof(chunk));
		bufpool_buf_append(b, chunk, sizeof(chunk));
	}
	g_assert_cmpuint(b->len, ==, 1 + 40 * 4096);
	g_assert_cmpuint(b->data[0], ==, 'x');
	for (i = 0; i < 40; i++)
		g_assert_cmpuint(b->data[1 + i * 4096 + 4095], ==, i);
	bufpool_get_stats(pool, &st);
	g_assert_cmpuint(st.maps, >=, 1);
	g_assert_cmpuint(st.busy_bytes, ==, b->cap);
	bufpool_buf_free(b);
	bufpool_get_stats(pool, &st);
	g_assert_cmpuint(st.busy_bytes, ==, 0);
	bufpool_unref(pool);
}

static void test_bytes_outlive_pool(void)
{
	struct bufpool *pool = bufpool_new(1 << 20);
	struct bufpool_buf *b = bufpool_buf_new(pool, 10);
	GBytes *bytes;
	gsize n;

	bufpool_buf_append(b, "hello", 5);
	bytes = bufpool_buf_free_to_bytes(b);
	bufpool_unref(pool); /* the body keeps it */
	g_assert_cmpmem(g_bytes_get_data(bytes, &n), 5, "hello", 5);
	g_bytes_unref(bytes);
	bytes = bufpool_buf_free_to_bytes(
		bufpool_buf_new(pool = bufpool_new(0), 0));
	g_assert_cmpuint(g_bytes_get_size(bytes), ==, 0);
	g_bytes_unref(bytes);
	bufpool_unref(pool);
}

#define THREADS 4
#define ROUNDS	5000

/* The handoff between producers and consumers: a pthread queue, not a
 * GAsyncQueue, whose futex locks TSan cannot see (their happens-before
 * would be reported as races on the bodies). */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	GQueue q;
} handoff = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
	      G_QUEUE_INIT };

static void handoff_push(struct bufpool_buf *b)
{
	pthread_mutex_lock(&handoff.lock);
	g_queue_push_tail(&handoff.q, b);
	pthread_cond_signal(&handoff.cond);
	pthread_mutex_unlock(&handoff.lock);
}

static struct bufpool_buf *handoff_pop(void)
{
	struct bufpool_buf *b;

	pthread_mutex_lock(&handoff.lock);
	while (!(b = g_queue_pop_head(&handoff.q)))
		pthread_cond_wait(&handoff.cond, &handoff.lock);
	pthread_mutex_unlock(&handoff.lock);
	return b;
}

/* Allocates, fills and passes bodies on; another thread frees them. */
static gpointer producer(gpointer data)
{
	struct bufpool *pool = data;
	GRand *r = g_rand_new_with_seed(GPOINTER_TO_UINT(g_thread_self()));
	guint i;

	for (i = 0; i < ROUNDS; i++) {
		gsize n = (gsize)g_rand_int_range(r, 1, 300000);
		struct bufpool_buf *b =
			bufpool_buf_new(pool, g_rand_boolean(r) ? n : 0);
		guint8 fill = (guint8)i;

		while (b->len < n) {
			gsize k = MIN(n - b->len, 16384);
			guint8 tmp[16384];

			memset(tmp, fill, k);
			bufpool_buf_append(b, tmp, k);
		}
		handoff_push(b);
	}
	g_rand_free(r);
	return NULL;
}

static gpointer consumer(gpointer data)
{
	guint i;

	(void)data;
	for (i = 0; i < ROUNDS; i++) {
		struct bufpool_buf *b = handoff_pop();

		g_assert_cmpuint(b->data[0], ==, b->data[b->len - 1]);
		if (i & 1)
			g_bytes_unref(bufpool_buf_free_to_bytes(b));
		else
			bufpool_buf_free(b);
	}
	return NULL;
}

static void test_threads(void)
{
	struct bufpool *pool = bufpool_new(8 << 20);
	GThread *t[2 * THREADS];
	struct bufpool_stats st;
	guint i;

	for (i = 0; i < THREADS; i++) {
		t[2 * i] = g_thread_new("producer", producer, pool);
		t[2 * i + 1] = g_thread_new("consumer", consumer, NULL);
	}
	for (i = 0; i < 2 * THREADS; i++)
		g_thread_join(t[i]);
	bufpool_get_stats(pool, &st);
	g_assert_cmpuint(st.busy_bytes, ==, 0);
	g_assert_cmpuint(st.idle_bytes, <=, 8 << 20);
	g_assert_cmpuint(st.reuses, >, 0);
	bufpool_unref(pool);
}

/* A body of the shared pool holding @n bytes of @c, as GBytes. */
static GBytes *shared_body(struct bufpool *pool, gsize n, int c)
{
	struct bufpool_buf *b = bufpool_buf_new(pool, n);
	guint8 *tmp = g_malloc(n);

	memset(tmp, c, n);
	bufpool_buf_append(b, tmp, n);
	g_free(tmp);
	return bufpool_buf_free_to_bytes(b);
}

/* Reopens @fd read-only, as the kernel's backing file of a reader. */
static int reader_of(int fd)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return open(path, O_RDONLY | O_CLOEXEC);
}

static void test_shared_lend(void)
{
	struct bufpool *pool = bufpool_new_shared(8 << 20);
	struct bufpool *plain = bufpool_new(8 << 20);
	const gsize n = 322624;
	GBytes *bytes = shared_body(pool, n, 'a'), *slice, *other;
	guint8 *got = g_malloc(n);
	struct stat st;
	int fd, fd2;

	/* The memfd is the body: truncated to it, the same bytes. */
	fd = bufpool_bytes_lend(bytes);
	g_assert_cmpint(fd, >=, 0);
	g_assert_cmpint(fstat(fd, &st), ==, 0);
	g_assert_cmpint(st.st_size, ==, n);
	g_assert_cmpint(pread(fd, got, n, 0), ==, (ssize_t)n);
	g_assert_true(memcmp(got, g_bytes_get_data(bytes, NULL), n) == 0);
	/* Lent again (a second node of the same object): the same file. */
	fd2 = bufpool_bytes_lend(bytes);
	g_assert_cmpint(fd2, ==, fd);
	/* Not a slice (it would cut the body), not the heap, not the
	 * ordinary pool. */
	slice = g_bytes_new_from_bytes(bytes, 0, n - 1);
	g_assert_cmpint(bufpool_bytes_lend(slice), ==, -1);
	g_bytes_unref(slice);
	other = shared_body(pool, 1000, 'b');
	g_assert_cmpint(bufpool_bytes_lend(other), ==, -1);
	g_bytes_unref(other);
	other = bufpool_buf_free_to_bytes(bufpool_buf_new(plain, n));
	g_assert_cmpint(bufpool_bytes_lend(other), ==, -1);
	g_bytes_unref(other);
	/* A small body taken mapped can be: its memfd is truncated to the
	 * bytes, not to the 64 KiB asked for. */
	{
		struct bufpool_buf *b =
			bufpool_buf_new_mapped(pool, BUFPOOL_HEAP_MAX);

		bufpool_buf_append(b, "small", 5);
		other = bufpool_buf_free_to_bytes(b);
		fd2 = bufpool_bytes_lend(other);
		g_assert_cmpint(fd2, >=, 0);
		g_assert_cmpint(fstat(fd2, &st), ==, 0);
		g_assert_cmpint(st.st_size, ==, 5);
		g_assert_cmpint(pread(fd2, got, 16, 0), ==, 5);
		g_assert_true(memcmp(got, "small", 5) == 0);
		g_bytes_unref(other);
	}
	g_bytes_unref(bytes);
	g_free(got);
	bufpool_unref(plain);
	bufpool_unref(pool);
}

static void test_shared_reuse_needs_no_reader(void)
{
	struct bufpool *pool = bufpool_new_shared(8 << 20);
	struct bufpool_stats st;
	const gsize n = 322624;
	GBytes *bytes = shared_body(pool, n, 'a');
	const guint8 *first = g_bytes_get_data(bytes, NULL);
	guint8 *got = g_malloc(n);
	struct bufpool_buf *b;
	int fd = bufpool_bytes_lend(bytes), ro;
	gboolean leasable;
	int probe = bufpool_memfd_new("probe", &leasable);

	g_assert_cmpint(probe, >=, 0);
	close(probe);
	if (!leasable) {
		g_test_skip("no /proc to open a memfd again");
		g_bytes_unref(bytes);
		g_free(got);
		bufpool_unref(pool);
		return;
	}
	/* A reader still has the file: its pages are never written again. */
	ro = reader_of(fd);
	g_assert_cmpint(ro, >=, 0);
	g_bytes_unref(bytes);
	b = bufpool_buf_new(pool, n);
	/* (A new mapping may land at the old one's address.) */
	memset(b->data, 'z', n);
	bufpool_get_stats(pool, &st);
	g_assert_cmpuint(st.held, ==, 1);
	g_assert_cmpuint(st.reuses, ==, 0);
	g_assert_cmpint(pread(ro, got, n, 0), ==, (ssize_t)n);
	g_assert_cmpint(got[0], ==, 'a');
	g_assert_cmpint(got[n - 1], ==, 'a');
	close(ro);
	bufpool_buf_free(b);

	/* No reader left: the lent body's mapping is reused, whole again. */
	bytes = shared_body(pool, n, 'c');
	first = g_bytes_get_data(bytes, NULL);
	g_assert_cmpint(bufpool_bytes_lend(bytes), >=, 0);
	g_bytes_unref(bytes);
	b = bufpool_buf_new(pool, n);
	g_assert_true(b->data == first);
	bufpool_get_stats(pool, &st);
	/* The 'z' body's mapping for 'c', then 'c''s again. */
	g_assert_cmpuint(st.reuses, ==, 2);
	g_assert_cmpuint(st.held, ==, 1);
	memset(b->data, 'd', b->cap); /* every page of it, past the old end */
	bufpool_buf_free(b);
	g_free(got);
	bufpool_unref(pool);
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/bufpool/reuse", test_reuse);
	g_test_add_func("/bufpool/grow_and_cut", test_grow_and_cut);
	g_test_add_func("/bufpool/idle_cap", test_idle_cap);
	g_test_add_func("/bufpool/heap", test_heap);
	g_test_add_func("/bufpool/bytes_outlive_pool", test_bytes_outlive_pool);
	g_test_add_func("/bufpool/threads", test_threads);
	g_test_add_func("/bufpool/shared_lend", test_shared_lend);
	g_test_add_func("/bufpool/shared_reuse_needs_no_reader",
			test_shared_reuse_needs_no_reader);
	return g_test_run();
}
