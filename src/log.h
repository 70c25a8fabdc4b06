/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * log.h - the sink for cause chains: syslog, and stderr in the foreground.
 *
 * Every line goes to syslog (ident "bucketfs", facility LOG_DAEMON) and,
 * when log_init() was asked to, to stderr as well.  The stderr form is
 *
 *	bucketfs: error: GET s3://ds/train/x via http://10.0.0.7:9000: ...
 *	bucketfs: warning: endpoint http://10.0.0.8:9000 is slow
 *	bucketfs: mounted s3://ds/ on /mnt/ds
 *	bucketfs: debug: retrying ...
 *
 * that is "<ident>: " then "error: ", "warning: " or "debug: " for those
 * levels (nothing for notice and info), then the text.  syslog adds its own
 * ident, pid and priority, so a syslog record is the bare text.
 *
 * One record is always one line: control characters (0x00-0x1f, 0x7f) and
 * bytes that are not valid UTF-8 are written as \xNN wherever they come
 * from.  Keys and paths put into a message should still go through
 * log_escape(), which also escapes backslashes, so that the escaping can be
 * undone unambiguously.
 *
 * Identical lines (same level, same text) are rate-limited: the first one is
 * written, the repeats within the repeat window (5 s) are counted, and when
 * the window closes one line "<text> (repeated N times)" reports the N
 * suppressed repeats.  A window is noticed to have closed at the next log
 * call of any thread, at log_flush() and at log_shutdown(); the next
 * identical line after that is written again and opens a new window.  At
 * most 64 distinct lines are tracked; the least recently repeated one is
 * dropped (its count reported) to make room, so memory stays bounded.
 *
 * Before log_init() (and after log_shutdown()) lines go to stderr only, at
 * levels up to LOG_LEVEL_NOTICE, so that early errors are not lost.
 *
 * Threads: everything may be called from any thread, except log_init(),
 * log_shutdown(), log_testing_set_sink() and
 * log_testing_set_repeat_window(), which must be called while no other
 * thread logs.  An internal mutex protects the rate-limiting state;
 * syslog(), stderr and the test sink are always called without holding it,
 * so a slow syslog never blocks the bookkeeping of other threads.
 *
 * This module holds the only global state of bucketfs.
 */
#ifndef BUCKETFS_LOG_H
#define BUCKETFS_LOG_H

#include <glib.h>

/* In order of decreasing severity; maps onto syslog's priorities. */
enum log_level {
	LOG_LEVEL_ERR,
	LOG_LEVEL_WARNING,
	LOG_LEVEL_NOTICE,
	LOG_LEVEL_INFO,
	LOG_LEVEL_DEBUG,
};

/*
 * Opens syslog with @ident (NULL means "bucketfs"; copied, at most 63
 * bytes) and facility LOG_DAEMON, and also writes to stderr if @to_stderr.
 * Lines less severe than @max_level are dropped.  Call once, before any
 * thread is started (again only after log_shutdown()).
 */
void log_init(const char *ident, gboolean to_stderr, enum log_level max_level);

/* Changes the most verbose level that is written.  Any thread. */
void log_set_level(enum log_level max_level);

/*
 * Whether a line at @level would be written: a cheap check (one atomic
 * read) before building costly debug text.  Any thread.
 */
gboolean log_enabled(enum log_level level);

/*
 * Writes one line at @level: @fmt formatted, control characters and
 * invalid UTF-8 escaped, subject to rate limiting.  Any thread.
 */
void log_msg(enum log_level level, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

/*
 * Writes "<@fmt formatted>: <@error->message>", or just the message when
 * @fmt is NULL: the one place where a cause chain is logged.  @error is
 * borrowed; NULL is logged as "unknown error" rather than crashing the
 * error path.  Any thread.
 */
void log_error(enum log_level level, const GError *error, const char *fmt, ...)
	G_GNUC_PRINTF(3, 4);

/*
 * Returns a newly allocated (g_free) copy of the @len bytes at @s (or up to
 * the NUL if @len is -1) that is safe to put into a message: control
 * characters (0x00-0x1f, 0x7f) and bytes that are not part of valid UTF-8
 * become \xNN (lower-case hex), a backslash becomes \\, valid UTF-8 is kept
 * as it is.  Never fails.  Any thread.
 */
char *log_escape(const char *s, gssize len);

/*
 * Writes the pending "(repeated N times)" lines now and forgets all tracked
 * lines.  Any thread.
 */
void log_flush(void);

/*
 * Flushes, closes syslog and returns to the state before log_init(): level
 * NOTICE, stderr only, no sink, default repeat window.  Call after the
 * other threads have stopped.
 */
void log_shutdown(void);

/*
 * Test hooks (module_testing_*()): for the tests only.  The shipped
 * binaries never call one, and leave them out (--gc-sections,
 * src/meson.build; tests/check_test_hooks.sh checks).
 *
 * Sends every line (the bare text, without ident or level
 * prefix) to @fn instead of syslog and stderr; NULL restores them.  @fn is
 * called from the logging thread without the internal lock held, so it must
 * be thread-safe when several threads log.  @data is borrowed until the
 * sink is replaced.
 */
typedef void (*log_sink_fn)(enum log_level level, const char *line, void *data);
void log_testing_set_sink(log_sink_fn fn, void *data);

/*
 * Test hook.  Sets the rate-limiting window to @usec microseconds (default
 * 5 s); 0 or less turns rate limiting off.  Pending repeats are flushed
 * first.
 */
void log_testing_set_repeat_window(gint64 usec);

#endif
