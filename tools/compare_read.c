/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * compare_read.c - reading both paths: through the mount (open, read to
 * the end, close) and with our own S3 client (GET), for --content (SHA-256
 * of each side) and --bench (files/s, MB/s, latencies).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "compare.h"

#define READ_BUF    (1u << 20)
#define GET_CHUNK   ((guint64)8 << 20)	/* --content: GETs beyond, in parts */
#define BENCH_WHOLE ((guint64)64 << 20) /* --bench: the same */

/* -- reading both paths --------------------------------------------------- */

struct read_result {
	guint64 bytes;
	double seconds;
	int err;       /* mount side: errno; 0 = fine */
	GError *error; /* S3 side */
	guchar digest[EVP_MAX_MD_SIZE];
};

/* open, read whole, close, through the mount; hashing if @md. */
static void read_mount(const char *path, EVP_MD_CTX *md, guchar *buf,
		       struct read_result *r)
{
	double t0 = compare_now();
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = 0;

	if (fd < 0) {
		r->err = errno;
		return;
	}
	/* The mount keeps pages across opens (the ETag pins them): drop
	 * them so that every read goes through bucketfs. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	while ((n = read(fd, buf, READ_BUF)) > 0) {
		r->bytes += (guint64)n;
		if (md)
			EVP_DigestUpdate(md, buf, (size_t)n);
	}
	if (n < 0)
		r->err = errno;
	close(fd);
	r->seconds = compare_now() - t0;
	if (md && !r->err)
		EVP_DigestFinal_ex(md, r->digest, NULL);
}

/* GETs @o whole (in @chunk parts beyond that); hashing if @md. */
static void read_s3(struct s3 *s3, const struct s3_object *o, guint64 chunk,
		    gboolean if_match, EVP_MD_CTX *md, struct read_result *r)
{
	double t0 = compare_now();
	guint64 off = 0;
	g_autofree char *first = NULL;

	do {
		struct s3_get_args a = {
			.offset = off,
			.length = o->size <= chunk ? 0
						   : MIN(chunk, o->size - off),
			.if_match = if_match ? o->etag : first,
			.endpoint = -1,
			.hedge = o->size <= chunk,
		};
		struct s3_object_meta meta = { 0 };
		g_autoptr(GBytes) b = s3_get(s3, o->key, &a, &meta, &r->error);
		gsize len;
		const void *p;

		/* Later parts must come from the object the first came
		 * from: a replaced one gives ESTALE, never a mixed hash. */
		if (!first && meta.etag)
			first = g_strdup(meta.etag);
		s3_object_meta_clear(&meta);
		if (!b)
			return;
		p = g_bytes_get_data(b, &len);
		if (md && len)
			EVP_DigestUpdate(md, p, len);
		r->bytes += len;
		off += len;
		if (len == 0)
			break;
	} while (off < o->size);
	r->seconds = compare_now() - t0;
	if (md)
		EVP_DigestFinal_ex(md, r->digest, NULL);
}

/* A pool of @procs threads running fn(t, i) for i in [0, n). */
struct pool {
	struct compare *t;
	guint n;
	gint next;
	gint done;
	void (*fn)(struct compare *t, guint i, guchar *buf, void *user);
	void *user;
	double t_start; /* before the first thread starts */
	double t_end;	/* when the last item completed */
};

static gpointer pool_worker(gpointer data)
{
	struct pool *p = data;
	g_autofree guchar *buf = g_malloc(READ_BUF);
	guint i;

	while ((i = (guint)g_atomic_int_add(&p->next, 1)) < p->n) {
		p->fn(p->t, i, buf, p->user);
		/* The wall time ends with the last item, not when the main
		 * thread notices. */
		if ((guint)g_atomic_int_add(&p->done, 1) + 1 == p->n)
			p->t_end = compare_now();
	}
	return NULL;
}

static void pool_run(struct pool *p, guint procs, const char *label)
{
	g_autofree GThread **th = g_new0(GThread *, procs);
	guint i;

	p->t_start = p->t_end = compare_now();
	for (i = 0; i < procs; i++)
		th[i] = g_thread_new("compare", pool_worker, p);
	/* The main thread only shows progress. */
	while ((guint)g_atomic_int_get(&p->done) < p->n) {
		compare_progress(p->t, FALSE, "%s: %d/%u", label,
				 g_atomic_int_get(&p->done), p->n);
		g_usleep(20000);
	}
	for (i = 0; i < procs; i++)
		g_thread_join(th[i]);
	compare_progress(p->t, TRUE, "%s: %u/%u", label, p->n, p->n);
}

static char *mount_error_text(int err)
{
	if (err == ESTALE)
		return g_strdup_printf(
			"read through the mount failed: %s (ESTALE: the "
			"object changed in S3 since the mount's index was "
			"built; its GET's If-Match failed)",
			g_strerror(err));
	return g_strdup_printf("read through the mount failed: %s",
			       g_strerror(err));
}

/* -- content -------------------------------------------------------------- */

struct content {
	GPtrArray *files; /* of struct s3_object *, borrowed */
	struct read_result *mount;
	struct read_result *s3;
};

static void content_one(struct compare *t, guint i, guchar *buf, void *user)
{
	struct content *c = user;
	const struct s3_object *o = c->files->pdata[i];
	g_autofree char *path =
		g_build_filename(t->mount, o->key + t->plen, NULL);
	EVP_MD_CTX *md = EVP_MD_CTX_new();

	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	read_mount(path, md, buf, &c->mount[i]);
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	read_s3(t->s3, o, GET_CHUNK, FALSE, md, &c->s3[i]);
	EVP_MD_CTX_free(md);
}

static char *hex(const guchar *d, guint n)
{
	GString *s = g_string_new(NULL);
	guint i;

	for (i = 0; i < n; i++)
		g_string_append_printf(s, "%02x", d[i]);
	return g_string_free(s, FALSE);
}

/* The first @n of @all (or all), in a seeded random order. */
static GPtrArray *sample(struct compare *t, guint n)
{
	GPtrArray *out = g_ptr_array_new();
	g_autoptr(GRand) rnd = g_rand_new_with_seed((guint32)t->seed);
	guint i;

	for (i = 0; i < t->common->len; i++)
		g_ptr_array_add(out, t->common->pdata[i]);
	/* Partial Fisher-Yates: the first n are a uniform sample. */
	for (i = 0; i < out->len && i < n; i++) {
		guint j = (guint)g_rand_int_range(rnd, (gint32)i,
						  (gint32)out->len);
		gpointer x = out->pdata[i];

		out->pdata[i] = out->pdata[j];
		out->pdata[j] = x;
	}
	if (out->len > n)
		g_ptr_array_set_size(out, n);
	return out;
}

void compare_content(struct compare *t)
{
	struct content c = { 0 };
	struct pool p = { .t = t, .fn = content_one, .user = &c };
	guint i;

	c.files = sample(t, t->all ? G_MAXUINT : (guint)t->sample);
	c.mount = g_new0(struct read_result, c.files->len);
	c.s3 = g_new0(struct read_result, c.files->len);
	p.n = c.files->len;
	pool_run(&p, MIN((guint)t->procs, MAX(p.n, 1)), "content");
	for (i = 0; i < c.files->len; i++) {
		const struct s3_object *o = c.files->pdata[i];
		const char *rel = o->key + t->plen;
		struct read_result *m = &c.mount[i], *s = &c.s3[i];

		if (m->err)
			compare_diffs_add(&t->ct, DIFF_MOUNT_ERROR, rel,
					  o->size, 0, mount_error_text(m->err));
		if (s->error)
			compare_diffs_add(&t->ct, DIFF_S3_ERROR, rel, o->size,
					  0, g_strdup(s->error->message));
		if (!m->err && !s->error &&
		    (m->bytes != s->bytes ||
		     memcmp(m->digest, s->digest, 32))) {
			g_autofree char *hm = hex(m->digest, 32);
			g_autofree char *hs = hex(s->digest, 32);

			compare_diffs_add(
				&t->ct, DIFF_CONTENT, rel, s->bytes, m->bytes,
				g_strdup_printf("sha256 %s in S3, %s on the "
						"mount",
						hs, hm));
		}
		g_clear_error(&s->error);
	}
	t->content_checked = c.files->len;
	compare_diffs_sort(&t->ct);
	g_free(c.mount);
	g_free(c.s3);
	g_ptr_array_free(c.files, TRUE);
}

/* -- bench ---------------------------------------------------------------- */

struct bench {
	GPtrArray *files;
	enum side side;
	struct read_result *r;
};

static void bench_one(struct compare *t, guint i, guchar *buf, void *user)
{
	struct bench *b = user;
	const struct s3_object *o = b->files->pdata[i];

	if (b->side == SIDE_MOUNT) {
		g_autofree char *path =
			g_build_filename(t->mount, o->key + t->plen, NULL);

		read_mount(path, NULL, buf, &b->r[i]);
	} else {
		/* As the mount asks: whole small objects, with If-Match
		 * and hedging; large ones in parts. */
		read_s3(t->s3, o, BENCH_WHOLE, TRUE, NULL, &b->r[i]);
	}
}

static int dbl_cmp(gconstpointer a, gconstpointer b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(const double *v, guint n, double q)
{
	guint i = (guint)(q * n);

	if (i < q * n)
		i++; /* the nearest rank: ceil(q * n) */

	return n ? v[i ? i - 1 : 0] : 0;
}

static void bench_side(struct compare *t, GPtrArray *files, enum side side,
		       struct bench_run *out)
{
	struct bench b = { .files = files, .side = side };
	struct pool p = {
		.t = t, .fn = bench_one, .user = &b, .n = files->len
	};
	g_autofree double *lat = g_new0(double, files->len);
	guint64 bytes = 0;
	guint i, ok = 0;
	double wall;

	b.r = g_new0(struct read_result, files->len);
	pool_run(&p, (guint)t->procs,
		 side == SIDE_MOUNT ? "bench mount" : "bench s3");
	wall = p.t_end - p.t_start;
	for (i = 0; i < files->len; i++) {
		struct read_result *r = &b.r[i];
		const struct s3_object *o = files->pdata[i];

		if (r->err || r->error) {
			out->errors++;
			if (!out->first_error)
				out->first_error = g_strdup_printf(
					"'%s': %s", o->key + t->plen,
					r->err ? g_strerror(r->err)
					       : r->error->message);
			g_clear_error(&r->error);
			continue;
		}
		bytes += r->bytes;
		lat[ok++] = r->seconds * 1e3;
	}
	qsort(lat, ok, sizeof(double), (GCompareFunc)dbl_cmp);
	out->files_s = wall > 0 ? ok / wall : 0;
	out->mb_s = wall > 0 ? bytes / 1e6 / wall : 0;
	out->p50 = pct(lat, ok, 0.5);
	out->p99 = pct(lat, ok, 0.99);
	out->max = ok ? lat[ok - 1] : 0;
	g_free(b.r);
}

static double median(double *v, guint n)
{
	qsort(v, n, sizeof(double), (GCompareFunc)dbl_cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * One untimed read of --procs files on each side first: the S3 client
 * starts with no connection while the mount's are open, which would
 * charge the first run's S3 side for the handshakes.  Failures show up
 * in the timed runs.
 */
static void bench_warm_up(struct compare *t, GPtrArray *files)
{
	g_autoptr(GPtrArray) some = g_ptr_array_new();
	struct bench_run dummy = { 0 };
	guint i;

	for (i = 0; i < files->len && i < (guint)t->procs; i++)
		g_ptr_array_add(some, files->pdata[i]);
	bench_side(t, some, SIDE_S3, &dummy);
	g_free(dummy.first_error);
	memset(&dummy, 0, sizeof(dummy));
	bench_side(t, some, SIDE_MOUNT, &dummy);
	g_free(dummy.first_error);
}

void compare_bench(struct compare *t)
{
	g_autoptr(GPtrArray) files = sample(t, (guint)t->files);
	g_autofree struct bench_run *runs =
		g_new0(struct bench_run, 2 * t->runs);
	g_autofree double *v = g_new0(double, t->runs);
	guint i, r, s;

	t->bench_res.files = files->len;
	for (i = 0; i < files->len; i++)
		t->bench_res.bytes +=
			((struct s3_object *)files->pdata[i])->size;
	bench_warm_up(t, files);
	for (r = 0; r < (guint)t->runs; r++) {
		gboolean s3_first = !strcmp(t->order, "s3-first") ||
				    (!strcmp(t->order, "alternate") && r % 2);

		bench_side(t, files, s3_first ? SIDE_S3 : SIDE_MOUNT,
			   &runs[2 * r + (s3_first ? 1 : 0)]);
		bench_side(t, files, s3_first ? SIDE_MOUNT : SIDE_S3,
			   &runs[2 * r + (s3_first ? 0 : 1)]);
	}
	for (s = 0; s < 2; s++) {
		struct bench_run *m = &t->bench_res.med[s];
		const char *side = s == SIDE_MOUNT ? "mount" : "s3";

#define MEDIAN_OF(field)                                                       \
	do {                                                                   \
		for (r = 0; r < (guint)t->runs; r++)                           \
			v[r] = runs[2 * r + s].field;                          \
		m->field = median(v, (guint)t->runs);                          \
	} while (0)
		MEDIAN_OF(files_s);
		MEDIAN_OF(mb_s);
		MEDIAN_OF(p50);
		MEDIAN_OF(p99);
		MEDIAN_OF(max);
#undef MEDIAN_OF
		for (r = 0; r < (guint)t->runs; r++) {
			struct bench_run *x = &runs[2 * r + s];

			t->bench_res.errors[s] += x->errors;
			if (x->first_error && !m->first_error)
				m->first_error = g_strdup(x->first_error);
			g_free(x->first_error);
		}
		if (t->bench_res.errors[s])
			compare_diffs_add(
				&t->bn,
				s == SIDE_MOUNT ? DIFF_MOUNT_ERROR
						: DIFF_S3_ERROR,
				"", 0, 0,
				g_strdup_printf("%u of %u %s reads failed; "
						"first: %s",
						t->bench_res.errors[s],
						files->len * t->runs, side,
						m->first_error));
	}
}
