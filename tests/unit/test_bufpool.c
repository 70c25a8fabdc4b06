/* Unit tests for bufpool: reuse, growth, cut, the idle cap, threads. */
#include "bufpool.h"

#include <pthread.h>
#include <string.h>
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

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);
	g_test_add_func("/bufpool/reuse", test_reuse);
	g_test_add_func("/bufpool/grow_and_cut", test_grow_and_cut);
	g_test_add_func("/bufpool/idle_cap", test_idle_cap);
	g_test_add_func("/bufpool/heap", test_heap);
	g_test_add_func("/bufpool/bytes_outlive_pool", test_bytes_outlive_pool);
	g_test_add_func("/bufpool/threads", test_threads);
	return g_test_run();
}
