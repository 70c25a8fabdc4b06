/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * compare_output.c - bucketfs-compare's report: text for people, one JSON
 * object for programs.  Keys are printed escaped (log_escape()); in JSON
 * they are raw when valid UTF-8, else escaped the same way.
 */
#include <stdio.h>
#include <string.h>

#include "compare.h"
#include "log.h"
#include "version.h"

static const char *const diff_ids[DIFF_KINDS] = {
	"missing_on_mount",	"extra_on_mount",
	"size_mismatch",	"type_mismatch",
	"dir_missing_on_mount", "dir_extra_on_mount",
	"mount_error",		"s3_error",
	"content_mismatch",
};

/* Appends @s as a JSON string: raw if valid UTF-8, else log_escape()d. */
static void json_str(GString *out, const char *s)
{
	g_autofree char *esc = NULL;
	const char *p;

	if (!s) {
		g_string_append(out, "null");
		return;
	}
	if (!g_utf8_validate(s, -1, NULL))
		s = esc = log_escape(s, -1);
	g_string_append_c(out, '"');
	for (p = s; *p; p++) {
		guchar c = (guchar)*p;

		if (c == '"' || c == '\\')
			g_string_append_printf(out, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			g_string_append_printf(out, "\\u%04x", c);
		else
			g_string_append_c(out, (char)c);
	}
	g_string_append_c(out, '"');
}

/* -- output --------------------------------------------------------------- */

guint64 compare_total_diffs(const struct compare *t)
{
	return t->ns.all->len + t->ct.all->len + t->bn.all->len;
}

static void print_diff(const struct diff *d)
{
	g_autofree char *p = log_escape(d->path, -1);

	switch (d->kind) {
	case DIFF_MISSING:
		printf("    missing on mount: '%s' (%" G_GUINT64_FORMAT
		       " bytes in S3)\n",
		       p, d->s3_size);
		break;
	case DIFF_EXTRA:
		printf("    extra on mount: '%s' (%s)\n", p,
		       d->detail ? d->detail : "a file that is not in S3");
		break;
	case DIFF_SIZE:
		printf("    size mismatch: '%s': %" G_GUINT64_FORMAT
		       " bytes in S3, %" G_GUINT64_FORMAT
		       " bytes on the mount\n",
		       p, d->s3_size, d->mount_size);
		break;
	case DIFF_TYPE:
		printf("    type mismatch: '%s': %s\n", p, d->detail);
		break;
	case DIFF_DIR_MISSING:
		printf("    directory missing on mount: '%s/'\n", p);
		break;
	case DIFF_DIR_EXTRA:
		printf("    extra directory on mount: '%s/' (no key makes "
		       "it)\n",
		       p);
		break;
	case DIFF_MOUNT_ERROR:
		printf("    mount error: '%s': %s\n", p, d->detail);
		break;
	case DIFF_S3_ERROR:
		printf("    S3 error: '%s': %s\n", p, d->detail);
		break;
	case DIFF_CONTENT:
		printf("    content differs: '%s': %s\n", p, d->detail);
		break;
	case DIFF_KINDS:
		g_assert_not_reached();
	}
}

static void print_diffs(const struct compare *t, const struct diffs *ds)
{
	guint i;

	printf("  differences: %u\n", ds->all->len);
	for (i = 0; i < ds->all->len && i < (guint)t->max_diffs; i++)
		print_diff(ds->all->pdata[i]);
	if (ds->all->len > (guint)t->max_diffs)
		printf("    ... and %u more (--max-diffs)\n",
		       ds->all->len - t->max_diffs);
}

static guint64 hidden_total(const struct compare *t)
{
	return t->hidden_count[COMPARE_KEY_EMPTY] +
	       t->hidden_count[COMPARE_KEY_DOT] +
	       t->hidden_count[COMPARE_KEY_LONG] +
	       t->hidden_count[COMPARE_KEY_DEEP] + t->shadowed;
}

void compare_print_text(const struct compare *t)
{
	guint i;

	printf("bucketfs-compare %s: %s against s3://%s/%s\n", BUCKETFS_VERSION,
	       t->mount, t->cfg.bucket, t->cfg.prefix);
	printf("  endpoints: ");
	for (i = 0; i < t->cfg.endpoints->len; i++)
		printf("%s%s", i ? ", " : "",
		       (char *)t->cfg.endpoints->pdata[i]);
	printf(" (%s)\n", t->endpoint_note);
	printf("namespace: %u keys; %u files and %u directories expected, "
	       "%u files and %u directories on the mount\n",
	       t->objects->len, g_hash_table_size(t->expected_files),
	       g_hash_table_size(t->expected_dirs),
	       g_hash_table_size(t->mount_files),
	       g_hash_table_size(t->mount_dirs));
	printf("  not shown by the key rules (not differences): "
	       "%" G_GUINT64_FORMAT "\n",
	       hidden_total(t));
	for (i = 0; i < t->hidden->len && i < (guint)t->max_diffs; i++) {
		const struct hidden *h = t->hidden->pdata[i];
		g_autofree char *k = log_escape(h->key, -1);

		printf("    not a path: '%s': %s\n", k, h->reason);
	}
	if (hidden_total(t) > MIN(t->hidden->len, (guint)t->max_diffs))
		printf("    ... and %" G_GUINT64_FORMAT " more\n",
		       hidden_total(t) -
			       MIN(t->hidden->len, (guint)t->max_diffs));
	print_diffs(t, &t->ns);
	if (t->content) {
		printf("content: %u of %u files compared (sha256; GET "
		       "against read through the mount; %s, seed "
		       "%" G_GINT64_FORMAT ")\n",
		       t->content_checked, t->common->len,
		       t->all ? "all" : "a random sample", t->seed);
		print_diffs(t, &t->ct);
	}
	if (t->bench) {
		const struct bench_run *m = &t->bench_res.med[SIDE_MOUNT];
		const struct bench_run *s = &t->bench_res.med[SIDE_S3];

		printf("bench: %u files (%.1f MB), %d workers per side, "
		       "%d run%s (medians), order %s\n",
		       t->bench_res.files, t->bench_res.bytes / 1e6, t->procs,
		       t->runs, t->runs > 1 ? "s" : "", t->order);
		printf("  %-9s %10s %10s %9s %9s %9s\n", "", "files/s", "MB/s",
		       "p50 ms", "p99 ms", "max ms");
		printf("  %-9s %10.1f %10.1f %9.2f %9.2f %9.2f\n", "mount",
		       m->files_s, m->mb_s, m->p50, m->p99, m->max);
		printf("  %-9s %10.1f %10.1f %9.2f %9.2f %9.2f\n", "s3",
		       s->files_s, s->mb_s, s->p50, s->p99, s->max);
		printf("  %-9s %9.2fx %9.2fx\n", "mount/s3",
		       s->files_s > 0 ? m->files_s / s->files_s : 0,
		       s->mb_s > 0 ? m->mb_s / s->mb_s : 0);
		print_diffs(t, &t->bn);
	}
	if (compare_total_diffs(t))
		printf("result: %" G_GUINT64_FORMAT " difference%s\n",
		       compare_total_diffs(t),
		       compare_total_diffs(t) == 1 ? "" : "s");
	else
		printf("result: the two sides match\n");
}

static void json_diffs(GString *o, const struct compare *t,
		       const struct diffs *ds)
{
	guint i;
	int k;

	g_string_append_printf(o, "\"differences\": {\"count\": %u",
			       ds->all->len);
	for (k = 0; k < DIFF_KINDS; k++)
		if (ds->count[k])
			g_string_append_printf(o,
					       ", \"%s\": %" G_GUINT64_FORMAT,
					       diff_ids[k], ds->count[k]);
	g_string_append(o, ", \"first\": [");
	for (i = 0; i < ds->all->len && i < (guint)t->max_diffs; i++) {
		const struct diff *d = ds->all->pdata[i];

		g_string_append_printf(o, "%s{\"kind\": \"%s\", \"path\": ",
				       i ? ", " : "", diff_ids[d->kind]);
		json_str(o, d->path);
		if (d->kind == DIFF_SIZE || d->kind == DIFF_MISSING ||
		    d->kind == DIFF_CONTENT)
			g_string_append_printf(
				o, ", \"s3_size\": %" G_GUINT64_FORMAT,
				d->s3_size);
		if (d->kind == DIFF_SIZE || d->kind == DIFF_EXTRA ||
		    d->kind == DIFF_CONTENT)
			g_string_append_printf(
				o, ", \"mount_size\": %" G_GUINT64_FORMAT,
				d->mount_size);
		g_string_append(o, ", \"detail\": ");
		json_str(o, d->detail);
		g_string_append_c(o, '}');
	}
	g_string_append(o, "]}");
}

static void json_run(GString *o, const char *name, const struct bench_run *r,
		     guint errors)
{
	g_string_append_printf(o,
			       "\"%s\": {\"files_per_s\": %.2f, \"mb_per_s\": "
			       "%.2f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
			       "\"max_ms\": %.3f, \"errors\": %u}",
			       name, r->files_s, r->mb_s, r->p50, r->p99,
			       r->max, errors);
}

void compare_print_json(const struct compare *t)
{
	g_autoptr(GString) o = g_string_new("{\"mount\": ");
	guint i;

	json_str(o, t->mount);
	g_string_append(o, ", \"url\": ");
	{
		g_autofree char *u = g_strdup_printf(
			"s3://%s/%s", t->cfg.bucket, t->cfg.prefix);

		json_str(o, u);
	}
	g_string_append(o, ", \"endpoints\": [");
	for (i = 0; i < t->cfg.endpoints->len; i++) {
		if (i)
			g_string_append(o, ", ");
		json_str(o, t->cfg.endpoints->pdata[i]);
	}
	g_string_append(o, "], \"endpoint_source\": ");
	json_str(o, t->endpoint_note);
	g_string_append_printf(
		o,
		", \"result\": \"%s\", \"total_differences\": "
		"%" G_GUINT64_FORMAT
		",\n \"namespace\": {\"keys\": %u, \"expected_files\": %u, "
		"\"expected_dirs\": %u, \"mount_files\": %u, \"mount_dirs\": "
		"%u, \"markers\": %" G_GUINT64_FORMAT ", \"not_shown\": "
		"{\"count\": %" G_GUINT64_FORMAT ", \"empty_component\": "
		"%" G_GUINT64_FORMAT ", \"dot_component\": %" G_GUINT64_FORMAT
		", \"name_too_long\": %" G_GUINT64_FORMAT
		", \"too_deep\": %" G_GUINT64_FORMAT
		", \"shadowed\": %" G_GUINT64_FORMAT ", \"first\": [",
		compare_total_diffs(t) ? "differences" : "match",
		compare_total_diffs(t), t->objects->len,
		g_hash_table_size(t->expected_files),
		g_hash_table_size(t->expected_dirs),
		g_hash_table_size(t->mount_files),
		g_hash_table_size(t->mount_dirs), t->markers, hidden_total(t),
		t->hidden_count[COMPARE_KEY_EMPTY],
		t->hidden_count[COMPARE_KEY_DOT],
		t->hidden_count[COMPARE_KEY_LONG],
		t->hidden_count[COMPARE_KEY_DEEP], t->shadowed);
	for (i = 0; i < t->hidden->len && i < (guint)t->max_diffs; i++) {
		const struct hidden *h = t->hidden->pdata[i];

		g_string_append(o, i ? ", {\"key\": " : "{\"key\": ");
		json_str(o, h->key);
		g_string_append_printf(o, ", \"reason\": \"%s\"}",
				       h->reason_id);
	}
	g_string_append(o, "]}, ");
	json_diffs(o, t, &t->ns);
	g_string_append(o, "}");
	if (t->content) {
		g_string_append_printf(o,
				       ",\n \"content\": {\"compared\": %u, "
				       "\"candidates\": %u, \"all\": %s, "
				       "\"seed\": %" G_GINT64_FORMAT ", ",
				       t->content_checked, t->common->len,
				       t->all ? "true" : "false", t->seed);
		json_diffs(o, t, &t->ct);
		g_string_append(o, "}");
	}
	if (t->bench) {
		const struct bench_run *m = &t->bench_res.med[SIDE_MOUNT];
		const struct bench_run *s = &t->bench_res.med[SIDE_S3];

		g_string_append_printf(
			o,
			",\n \"bench\": {\"files\": %u, \"bytes\": "
			"%" G_GUINT64_FORMAT ", \"procs\": %d, \"runs\": %d, "
			"\"order\": \"%s\", \"seed\": %" G_GINT64_FORMAT ", ",
			t->bench_res.files, t->bench_res.bytes, t->procs,
			t->runs, t->order, t->seed);
		json_run(o, "mount", m, t->bench_res.errors[SIDE_MOUNT]);
		g_string_append(o, ", ");
		json_run(o, "s3", s, t->bench_res.errors[SIDE_S3]);
		g_string_append_printf(o,
				       ", \"ratio_files_per_s\": %.4f, "
				       "\"ratio_mb_per_s\": %.4f, ",
				       s->files_s > 0 ? m->files_s / s->files_s
						      : 0,
				       s->mb_s > 0 ? m->mb_s / s->mb_s : 0);
		json_diffs(o, t, &t->bn);
		g_string_append(o, "}");
	}
	g_string_append(o, "}\n");
	fputs(o->str, stdout);
}
