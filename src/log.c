/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include <glib/gprintf.h>

#include "log.h"

#define LOG_REPEAT_SLOTS   64
#define LOG_DEFAULT_WINDOW (5 * G_USEC_PER_SEC)
#define LOG_DEFAULT_LEVEL  LOG_LEVEL_NOTICE
#define LOG_IDENT_MAX	   64

/*
 * Lines are carried around as "<level digit> <text>": the same string is
 * the rate-limiting key (level and text both count) and the line to emit.
 */
#define LOG_KEY_TEXT(key)  ((key) + 2)
#define LOG_KEY_LEVEL(key) ((enum log_level)((key)[0] - '0'))

/* One distinct line seen within the current window. */
struct log_repeat {
	char *key;
	gint64 start;	    /* when its window opened */
	guint64 suppressed; /* repeats not written since */
	GList link;	    /* in log_state.lru, data = this */
};

/* Where lines go; copied under the lock, used without it. */
struct log_target {
	gboolean to_syslog;
	gboolean to_stderr;
	log_sink_fn sink;
	void *sink_data;
	char ident[LOG_IDENT_MAX];
};

/*
 * The logging sink: the one global of bucketfs.  The lock is a pthread
 * mutex rather than a GMutex because GLib's futex-based GMutex is invisible
 * to ThreadSanitizer, and this lock is taken by every thread.
 */
static struct {
	pthread_mutex_t lock;
	gint max_level;		   /* atomic, read without the lock */
	gboolean initialized;	   /* protected by lock */
	gboolean to_stderr;	   /* protected by lock */
	char ident[LOG_IDENT_MAX]; /* protected by lock; openlog() keeps it */
	log_sink_fn sink;	   /* protected by lock */
	void *sink_data;	   /* protected by lock */
	gint64 window;		   /* protected by lock */
	gint64 next_expiry;	   /* protected by lock; earliest window end */
	GHashTable *repeats;	   /* protected by lock; key -> log_repeat */
	GQueue lru;		   /* protected by lock; most recent first */
} log_state = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.max_level = LOG_DEFAULT_LEVEL,
	.ident = "bucketfs",
	.window = LOG_DEFAULT_WINDOW,
	.next_expiry = G_MAXINT64,
	.lru = G_QUEUE_INIT,
};

static void log_escape_append(GString *out, const char *s, gsize len,
			      gboolean escape_backslash)
{
	const char *p = s;
	const char *end = s + len;

	while (p < end) {
		guchar c = (guchar)*p;
		gunichar u;

		if (c == '\\' && escape_backslash) {
			g_string_append(out, "\\\\");
			p++;
		} else if (c < 0x20 || c == 0x7f) {
			g_string_append_printf(out, "\\x%02x", c);
			p++;
		} else if (c < 0x80) {
			g_string_append_c(out, (char)c);
			p++;
		} else {
			u = g_utf8_get_char_validated(p, end - p);
			if (u == (gunichar)-1 || u == (gunichar)-2) {
				g_string_append_printf(out, "\\x%02x", c);
				p++;
				continue;
			}
			g_string_append_len(out, p, g_utf8_skip[c]);
			p += g_utf8_skip[c];
		}
	}
}

char *log_escape(const char *s, gssize len)
{
	GString *out;
	gsize n;

	g_return_val_if_fail(s != NULL || len == 0, NULL);

	n = len < 0 ? strlen(s) : (gsize)len;
	out = g_string_sized_new(n + 1);
	if (n > 0)
		log_escape_append(out, s, n, TRUE);
	return g_string_free(out, FALSE);
}

static const char *log_stderr_prefix(enum log_level level)
{
	switch (level) {
	case LOG_LEVEL_ERR:
		return "error: ";
	case LOG_LEVEL_WARNING:
		return "warning: ";
	case LOG_LEVEL_DEBUG:
		return "debug: ";
	case LOG_LEVEL_NOTICE:
	case LOG_LEVEL_INFO:
		break;
	}
	return "";
}

static int log_syslog_priority(enum log_level level)
{
	static const int priorities[] = {
		[LOG_LEVEL_ERR] = LOG_ERR,
		[LOG_LEVEL_WARNING] = LOG_WARNING,
		[LOG_LEVEL_NOTICE] = LOG_NOTICE,
		[LOG_LEVEL_INFO] = LOG_INFO,
		[LOG_LEVEL_DEBUG] = LOG_DEBUG,
	};

	return priorities[level];
}

/* Called with the lock held. */
static void log_target_snapshot(struct log_target *t)
{
	t->sink = log_state.sink;
	t->sink_data = log_state.sink_data;
	/* Before log_init() there is no syslog, but errors must show. */
	t->to_syslog = log_state.initialized;
	t->to_stderr = !log_state.initialized || log_state.to_stderr;
	g_strlcpy(t->ident, log_state.ident, sizeof(t->ident));
}

/* Called without the lock: syslog() and stderr may block. */
static void log_emit(const struct log_target *t, const char *key)
{
	enum log_level level = LOG_KEY_LEVEL(key);
	const char *text = LOG_KEY_TEXT(key);

	if (t->sink) {
		t->sink(level, text, t->sink_data);
		return;
	}
	if (t->to_syslog)
		syslog(log_syslog_priority(level), "%s", text);
	/* One fprintf() per line: stdio's lock keeps lines whole. */
	if (t->to_stderr)
		fprintf(stderr, "%s: %s%s\n", t->ident,
			log_stderr_prefix(level), text);
}

static void log_emit_all(const struct log_target *t, GPtrArray *lines)
{
	guint i;

	if (!lines)
		return;
	for (i = 0; i < lines->len; i++)
		log_emit(t, g_ptr_array_index(lines, i));
}

static void log_repeat_free(gpointer data)
{
	struct log_repeat *r = data;

	g_free(r->key);
	g_free(r);
}

/* Called with the lock held.  Queues r's summary, if any, and drops r. */
static void log_repeat_retire(struct log_repeat *r, GPtrArray **pending)
{
	if (r->suppressed > 0) {
		if (!*pending)
			*pending = g_ptr_array_new_with_free_func(g_free);
		g_ptr_array_add(
			*pending,
			g_strdup_printf("%s (repeated %" G_GUINT64_FORMAT
					" times)",
					r->key, r->suppressed));
	}
	g_queue_unlink(&log_state.lru, &r->link);
	g_hash_table_remove(log_state.repeats, r->key);
}

/* Called with the lock held.  Retires every line whose window closed. */
static void log_repeat_expire(gint64 now, GPtrArray **pending)
{
	gint64 next = G_MAXINT64;
	GList *l = log_state.lru.head;

	while (l) {
		struct log_repeat *r = l->data;

		l = l->next;
		if (now - r->start >= log_state.window)
			log_repeat_retire(r, pending);
		else
			next = MIN(next, r->start + log_state.window);
	}
	log_state.next_expiry = next;
}

/* Called with the lock held.  Retires every tracked line. */
static void log_repeat_retire_all(GPtrArray **pending)
{
	while (log_state.lru.tail)
		log_repeat_retire(log_state.lru.tail->data, pending);
	log_state.next_expiry = G_MAXINT64;
}

/*
 * Called with the lock held.  Returns whether @key is to be written now,
 * and queues in @pending the summaries of windows that closed.
 */
static gboolean log_repeat_check(const char *key, gint64 now,
				 GPtrArray **pending)
{
	struct log_repeat *r;

	if (log_state.window <= 0)
		return TRUE;
	if (now >= log_state.next_expiry)
		log_repeat_expire(now, pending);
	if (!log_state.repeats)
		log_state.repeats = g_hash_table_new_full(
			g_str_hash, g_str_equal, NULL, log_repeat_free);

	r = g_hash_table_lookup(log_state.repeats, key);
	if (r) {
		r->suppressed++;
		g_queue_unlink(&log_state.lru, &r->link);
		g_queue_push_head_link(&log_state.lru, &r->link);
		return FALSE;
	}

	if (g_hash_table_size(log_state.repeats) >= LOG_REPEAT_SLOTS)
		log_repeat_retire(log_state.lru.tail->data, pending);
	r = g_new0(struct log_repeat, 1);
	r->key = g_strdup(key);
	r->start = now;
	r->link.data = r;
	g_hash_table_insert(log_state.repeats, r->key, r);
	g_queue_push_head_link(&log_state.lru, &r->link);
	log_state.next_expiry =
		MIN(log_state.next_expiry, now + log_state.window);
	return TRUE;
}

/* Takes @line, a key as described at LOG_KEY_TEXT. */
static void log_submit(GString *line)
{
	GPtrArray *pending = NULL;
	struct log_target target;
	gboolean emit;

	pthread_mutex_lock(&log_state.lock);
	emit = log_repeat_check(line->str, g_get_monotonic_time(), &pending);
	log_target_snapshot(&target);
	pthread_mutex_unlock(&log_state.lock);

	log_emit_all(&target, pending);
	if (emit)
		log_emit(&target, line->str);
	if (pending)
		g_ptr_array_unref(pending);
	g_string_free(line, TRUE);
}

static GString *log_line_new(enum log_level level)
{
	GString *line = g_string_sized_new(128);

	g_string_append_c(line, (char)('0' + level));
	g_string_append_c(line, ' ');
	return line;
}

G_GNUC_PRINTF(2, 0)
static void log_line_append_vprintf(GString *line, const char *fmt, va_list ap)
{
	char *text = NULL;
	gint len;

	len = g_vasprintf(&text, fmt, ap);
	if (len > 0)
		log_escape_append(line, text, (gsize)len, FALSE);
	g_free(text);
}

gboolean log_enabled(enum log_level level)
{
	return (gint)level <= g_atomic_int_get(&log_state.max_level);
}

void log_set_level(enum log_level max_level)
{
	g_return_if_fail(max_level <= LOG_LEVEL_DEBUG);

	g_atomic_int_set(&log_state.max_level, (gint)max_level);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	GString *line;
	va_list ap;

	g_return_if_fail(level <= LOG_LEVEL_DEBUG);
	g_return_if_fail(fmt != NULL);

	if (!log_enabled(level))
		return;
	line = log_line_new(level);
	va_start(ap, fmt);
	log_line_append_vprintf(line, fmt, ap);
	va_end(ap);
	log_submit(line);
}

void log_error(enum log_level level, const GError *error, const char *fmt, ...)
{
	const char *message = error ? error->message : "unknown error";
	GString *line;
	va_list ap;

	g_return_if_fail(level <= LOG_LEVEL_DEBUG);

	if (!log_enabled(level))
		return;
	line = log_line_new(level);
	if (fmt) {
		va_start(ap, fmt);
		log_line_append_vprintf(line, fmt, ap);
		va_end(ap);
		g_string_append(line, ": ");
	}
	if (!message)
		message = "unknown error";
	log_escape_append(line, message, strlen(message), FALSE);
	log_submit(line);
}

void log_flush(void)
{
	GPtrArray *pending = NULL;
	struct log_target target;

	pthread_mutex_lock(&log_state.lock);
	log_repeat_retire_all(&pending);
	log_target_snapshot(&target);
	pthread_mutex_unlock(&log_state.lock);

	log_emit_all(&target, pending);
	if (pending)
		g_ptr_array_unref(pending);
}

void log_init(const char *ident, gboolean to_stderr, enum log_level max_level)
{
	g_return_if_fail(max_level <= LOG_LEVEL_DEBUG);

	pthread_mutex_lock(&log_state.lock);
	if (log_state.initialized) {
		pthread_mutex_unlock(&log_state.lock);
		g_critical("log_init() called twice");
		return;
	}
	g_strlcpy(log_state.ident, ident ? ident : "bucketfs",
		  sizeof(log_state.ident));
	log_state.to_stderr = to_stderr;
	log_state.initialized = TRUE;
	openlog(log_state.ident, LOG_PID, LOG_DAEMON);
	pthread_mutex_unlock(&log_state.lock);

	g_atomic_int_set(&log_state.max_level, (gint)max_level);
}

void log_shutdown(void)
{
	log_flush();

	pthread_mutex_lock(&log_state.lock);
	if (log_state.initialized)
		closelog();
	log_state.initialized = FALSE;
	log_state.to_stderr = FALSE;
	g_strlcpy(log_state.ident, "bucketfs", sizeof(log_state.ident));
	log_state.sink = NULL;
	log_state.sink_data = NULL;
	log_state.window = LOG_DEFAULT_WINDOW;
	g_clear_pointer(&log_state.repeats, g_hash_table_destroy);
	pthread_mutex_unlock(&log_state.lock);

	g_atomic_int_set(&log_state.max_level, LOG_DEFAULT_LEVEL);
}

void log_testing_set_sink(log_sink_fn fn, void *data)
{
	pthread_mutex_lock(&log_state.lock);
	log_state.sink = fn;
	log_state.sink_data = fn ? data : NULL;
	pthread_mutex_unlock(&log_state.lock);
}

void log_testing_set_repeat_window(gint64 usec)
{
	log_flush();

	pthread_mutex_lock(&log_state.lock);
	log_state.window = usec;
	log_state.next_expiry = G_MAXINT64;
	pthread_mutex_unlock(&log_state.lock);
}
