/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A mount's counters as JSON (json-glib) and as the unmount summary; the
 * contract is stats.h.
 */
#include <json-glib/json-glib.h>

#include "log.h"
#include "stats.h"

static void add_uint(JsonBuilder *b, const char *name, guint64 v)
{
	json_builder_set_member_name(b, name);
	json_builder_add_int_value(b, (gint64)MIN(v, (guint64)G_MAXINT64));
}

static void add_bool(JsonBuilder *b, const char *name, gboolean v)
{
	json_builder_set_member_name(b, name);
	json_builder_add_boolean_value(b, v);
}

static void add_double(JsonBuilder *b, const char *name, double v)
{
	json_builder_set_member_name(b, name);
	json_builder_add_double_value(b, v);
}

static void add_endpoints(JsonBuilder *b, struct http *http)
{
	guint n = http_endpoint_count(http), i;
	g_autofree struct http_endpoint_stats *es =
		g_new0(struct http_endpoint_stats, n);

	http_get_stats(http, es);
	json_builder_set_member_name(b, "endpoints");
	json_builder_begin_array(b);
	for (i = 0; i < n; i++) {
		json_builder_begin_object(b);
		json_builder_set_member_name(b, "url");
		json_builder_add_string_value(b, es[i].url);
		add_uint(b, "requests", es[i].requests);
		add_uint(b, "bytes", es[i].bytes);
		add_uint(b, "errors", es[i].errors);
		add_uint(b, "hedges", es[i].hedges);
		add_uint(b, "ejections", es[i].ejections);
		add_uint(b, "direct", es[i].direct);
		add_uint(b, "connects", es[i].connects);
		add_uint(b, "tls_resumed", es[i].tls_resumed);
		add_uint(b, "inflight", es[i].inflight);
		add_bool(b, "ejected", es[i].ejected);
		add_double(b, "p50_ms", es[i].p50_ms);
		add_double(b, "p99_ms", es[i].p99_ms);
		json_builder_end_object(b);
	}
	json_builder_end_array(b);
}

static void add_readahead(JsonBuilder *b, struct readahead *ra)
{
	struct ra_stats rs;

	readahead_get_stats(ra, &rs);
	json_builder_set_member_name(b, "readahead");
	json_builder_begin_object(b);
	add_uint(b, "objects_fetched", rs.objects_fetched);
	add_uint(b, "parts_fetched", rs.parts_fetched);
	add_uint(b, "direct_reads", rs.direct_reads);
	add_uint(b, "prefetch_hits", rs.prefetch_hits);
	add_uint(b, "prefetch_wasted", rs.prefetch_wasted);
	add_uint(b, "prefetch_late", rs.prefetch_late);
	add_uint(b, "prefetch_queued", rs.prefetch_queued);
	add_uint(b, "prefetch_unopened", rs.prefetch_unopened);
	add_uint(b, "stream_fetched", rs.stream_fetched);
	add_uint(b, "stream_hits", rs.stream_hits);
	add_uint(b, "stream_wasted", rs.stream_wasted);
	add_uint(b, "stream_late", rs.stream_late);
	add_uint(b, "lookup_fetched", rs.lookup_fetched);
	add_uint(b, "lookup_hits", rs.lookup_hits);
	add_uint(b, "lookup_wasted", rs.lookup_wasted);
	add_uint(b, "memory_used", rs.memory_used);
	add_uint(b, "memory_max", rs.memory_max);
	json_builder_end_object(b);
}

/* "stages": where recent requests' time went (http_get_stage_stats()). */
static void add_stages(JsonBuilder *b, struct http *http)
{
	struct http_stage_stats st;
	guint i;

	http_get_stage_stats(http, &st);
	json_builder_set_member_name(b, "stages");
	json_builder_begin_object(b);
	add_uint(b, "samples", st.samples);
	for (i = 0; i < HTTP_STAGES; i++) {
		json_builder_set_member_name(b, http_stage_name(i));
		json_builder_begin_object(b);
		add_double(b, "p50_ms", st.p50_ms[i]);
		add_double(b, "p99_ms", st.p99_ms[i]);
		json_builder_end_object(b);
	}
	json_builder_end_object(b);
}

static void add_streams(JsonBuilder *b, const struct streams_stats *ss)
{
	json_builder_set_member_name(b, "streams");
	json_builder_begin_object(b);
	add_uint(b, "opens", ss->opens);
	add_uint(b, "continued", ss->continued);
	add_uint(b, "confirmed", ss->confirmed);
	add_uint(b, "announced", ss->announced);
	add_uint(b, "jumps", ss->jumps);
	add_uint(b, "batch_len", ss->batch_len);
	add_uint(b, "batch_jump", ss->batch_jump);
	add_uint(b, "tracked", ss->tracked);
	json_builder_end_object(b);
}

static void add_lookups(JsonBuilder *b, const struct lookups_stats *ls)
{
	json_builder_set_member_name(b, "lookups");
	json_builder_begin_object(b);
	add_uint(b, "lookups", ls->lookups);
	add_uint(b, "fetched", ls->fetched);
	add_uint(b, "followed", ls->followed);
	add_uint(b, "hits", ls->hits);
	add_uint(b, "wasted", ls->wasted);
	add_uint(b, "credit", ls->credit);
	add_uint(b, "pending", ls->pending);
	json_builder_end_object(b);
}

static void add_index(JsonBuilder *b, const struct stats_sources *src)
{
	struct index_stats s;

	index_get_stats(src->idx, &s);
	json_builder_set_member_name(b, "index");
	json_builder_begin_object(b);
	json_builder_set_member_name(b, "bucket");
	json_builder_add_string_value(b, index_bucket(src->idx));
	json_builder_set_member_name(b, "prefix");
	json_builder_add_string_value(b, index_prefix(src->idx));
	add_uint(b, "keys", s.keys);
	json_builder_set_member_name(b, "created");
	json_builder_add_int_value(b, s.created);
	add_uint(b, "generation", src->generation);
	json_builder_end_object(b);
}

static const char *const op_names[STATS_OPS] = {
	"lookup",	   "getattr",
	"opendir",	   "readdir",
	"readdirplus",	   "getxattr",
	"listxattr",	   "forget",
	"readdir_entries", "readdirplus_entries",
};

static void add_ops(JsonBuilder *b, const guint64 *ops)
{
	guint i;

	json_builder_set_member_name(b, "ops");
	json_builder_begin_object(b);
	for (i = 0; i < STATS_OPS; i++)
		add_uint(b, op_names[i], ops[i]);
	json_builder_end_object(b);
}

/* What FUSE INIT negotiated with the kernel. */
static void add_fuse_init(JsonBuilder *b, const struct stats_sources *src)
{
	json_builder_set_member_name(b, "fuse_init");
	json_builder_begin_object(b);
	add_bool(b, "parallel_dirops", src->parallel_dirops);
	add_bool(b, "direct_io_allow_mmap", src->direct_io_allow_mmap);
	json_builder_end_object(b);
}

void stats_sources_clear(struct stats_sources *src)
{
	g_clear_pointer(&src->idx, index_unref);
}

static void add_passthrough(JsonBuilder *b, const struct pt_stats *pt)
{
	guint i;

	json_builder_set_member_name(b, "passthrough");
	json_builder_begin_object(b);
	add_bool(b, "on", pt->on);
	add_uint(b, "opens", pt->opens);
	add_uint(b, "stale", pt->stale);
	add_uint(b, "direct", pt->direct);
	json_builder_set_member_name(b, "memfds");
	json_builder_begin_object(b);
	add_bool(b, "reused_when_idle", pt->pooling);
	add_uint(b, "made", pt->memfds_made);
	add_uint(b, "reused", pt->memfds_reused);
	add_uint(b, "busy", pt->memfds_busy);
	add_uint(b, "idle", pt->memfds_idle);
	add_uint(b, "idle_bytes", pt->memfds_idle_bytes);
	add_uint(b, "bodies_lent", pt->bodies_lent);
	json_builder_end_object(b);
	json_builder_set_member_name(b, "fallbacks");
	json_builder_begin_object(b);
	for (i = 0; i < PT_FALLBACKS; i++)
		add_uint(b, pt_fallback_name(i), pt->fallbacks[i]);
	json_builder_end_object(b);
	json_builder_end_object(b);
}

char *stats_json(const struct stats_sources *src)
{
	g_autoptr(JsonBuilder) b = json_builder_new();
	g_autoptr(JsonGenerator) gen = json_generator_new();
	g_autoptr(JsonNode) root = NULL;

	json_builder_begin_object(b);
	add_endpoints(b, src->http);
	add_uint(b, "queued", http_queued(src->http));
	add_readahead(b, src->ra);
	json_builder_set_member_name(b, "files");
	json_builder_begin_object(b);
	add_uint(b, "reads", src->reads);
	add_uint(b, "handed_over", src->handed_over);
	add_uint(b, "open", src->open);
	json_builder_end_object(b);
	add_passthrough(b, &src->pt);
	add_stages(b, src->http);
	add_streams(b, &src->streams);
	add_lookups(b, &src->lookups);
	add_ops(b, src->ops);
	add_fuse_init(b, src);
	add_index(b, src);
	json_builder_end_object(b);
	root = json_builder_get_root(b);
	json_generator_set_root(gen, root);
	json_generator_set_pretty(gen, TRUE);
	json_generator_set_indent(gen, 1);
	return json_generator_to_data(gen, NULL);
}

void stats_log_summary(const struct stats_sources *src)
{
	struct http *http = src->http;
	const struct streams_stats *ss = &src->streams;
	guint n = http_endpoint_count(http), i;
	g_autofree struct http_endpoint_stats *es =
		g_new0(struct http_endpoint_stats, n);
	struct http_stage_stats st;
	struct ra_stats rs;

	http_get_stats(http, es);
	for (i = 0; i < n; i++)
		log_msg(LOG_LEVEL_NOTICE,
			"endpoint %s: %" G_GUINT64_FORMAT
			" requests, %" G_GUINT64_FORMAT
			" bytes, %" G_GUINT64_FORMAT
			" errors, %" G_GUINT64_FORMAT
			" hedges, %" G_GUINT64_FORMAT
			" ejections, %" G_GUINT64_FORMAT
			" received directly on %" G_GUINT64_FORMAT
			" connections (%" G_GUINT64_FORMAT
			" TLS sessions resumed), p50 %.1f ms, p99 %.1f ms",
			es[i].url, es[i].requests, es[i].bytes, es[i].errors,
			es[i].hedges, es[i].ejections, es[i].direct,
			es[i].connects, es[i].tls_resumed, es[i].p50_ms,
			es[i].p99_ms);
	http_get_stage_stats(http, &st);
	if (st.samples)
		log_msg(LOG_LEVEL_NOTICE,
			"requests (the last %u), p50/p99 ms: waiting "
			"%.1f/%.1f, "
			"first byte %.1f/%.1f, body %.1f/%.1f, hand-off "
			"%.1f/%.1f",
			st.samples, st.p50_ms[HTTP_STAGE_WAIT],
			st.p99_ms[HTTP_STAGE_WAIT],
			st.p50_ms[HTTP_STAGE_FIRST_BYTE],
			st.p99_ms[HTTP_STAGE_FIRST_BYTE],
			st.p50_ms[HTTP_STAGE_BODY], st.p99_ms[HTTP_STAGE_BODY],
			st.p50_ms[HTTP_STAGE_HANDOFF],
			st.p99_ms[HTTP_STAGE_HANDOFF]);
	readahead_get_stats(src->ra, &rs);
	log_msg(LOG_LEVEL_NOTICE,
		"readahead: %" G_GUINT64_FORMAT
		" whole objects, %" G_GUINT64_FORMAT
		" parts, %" G_GUINT64_FORMAT " direct reads, %" G_GUINT64_FORMAT
		" prefetch hits, %" G_GUINT64_FORMAT
		" prefetches unused, %" G_GUINT64_FORMAT
		" announced files read before their prefetch",
		rs.objects_fetched, rs.parts_fetched, rs.direct_reads,
		rs.prefetch_hits, rs.prefetch_wasted, rs.prefetch_late);
	log_msg(LOG_LEVEL_NOTICE,
		"streams: %" G_GUINT64_FORMAT " confirmed in %" G_GUINT64_FORMAT
		" opens, %" G_GUINT64_FORMAT
		" files guessed ahead, %" G_GUINT64_FORMAT
		" fetched: %" G_GUINT64_FORMAT " hits, %" G_GUINT64_FORMAT
		" unused, %" G_GUINT64_FORMAT
		" unopened at unmount, %" G_GUINT64_FORMAT
		" opened before their fetch",
		ss->confirmed, ss->opens, ss->announced, rs.stream_fetched,
		rs.stream_hits, rs.stream_wasted,
		rs.stream_fetched - rs.stream_hits - rs.stream_wasted,
		rs.stream_late);
	log_msg(LOG_LEVEL_NOTICE,
		"lookups: %" G_GUINT64_FORMAT
		" files looked up, %" G_GUINT64_FORMAT
		" fetched at the lookup: %" G_GUINT64_FORMAT
		" opened, %" G_GUINT64_FORMAT " unopened",
		src->lookups.lookups, src->lookups.fetched, src->lookups.hits,
		src->lookups.wasted);
}
