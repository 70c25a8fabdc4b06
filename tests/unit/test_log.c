/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "log.h"
#include "log_capture.h"

static void assert_escape(const char *in, gssize len, const char *want)
{
	g_autofree char *got = log_escape(in, len);

	g_assert_cmpstr(got, ==, want);
}

static void test_escape(void)
{
	assert_escape("", -1, "");
	assert_escape("plain/key.jpeg", -1, "plain/key.jpeg");
	assert_escape("a\nb\rc\td", -1, "a\\x0ab\\x0dc\\x09d");
	assert_escape("\x01\x1f\x7f", -1, "\\x01\\x1f\\x7f");
	assert_escape("back\\slash", -1, "back\\\\slash");
	assert_escape("a\0b", 3, "a\\x00b");
	assert_escape("abc", 2, "ab");
	assert_escape(NULL, 0, "");
	/* Valid multibyte UTF-8 is kept: 2, 3 and 4 byte sequences. */
	assert_escape("caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80", -1,
		      "caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80");
	/* Invalid: stray continuation, lone lead, overlong, surrogate. */
	assert_escape("\x80", -1, "\\x80");
	assert_escape("a\xc3", -1, "a\\xc3");
	assert_escape("\xc3(", -1, "\\xc3(");
	assert_escape("\xc0\x80", -1, "\\xc0\\x80");
	assert_escape("\xed\xa0\x80", -1, "\\xed\\xa0\\x80");
	assert_escape("\xff\xfe", -1, "\\xff\\xfe");
	/* A truncated sequence at the end of a counted string. */
	assert_escape("\xe6\x97\xa5", 2, "\\xe6\\x97");
}

static void test_msg_sanitized(void)
{
	struct capture c;
	GError *error;

	capture_start(&c, (gint64)3600 * G_USEC_PER_SEC);
	log_msg(LOG_LEVEL_ERR, "read '%s': failed", "a\nb");
	log_msg(LOG_LEVEL_ERR, "path %s", "C:\\dir");
	log_msg(LOG_LEVEL_ERR, "nul %c here", 0);
	log_msg(LOG_LEVEL_ERR, "bad \xff utf8 \xc3\xa9");
	error = g_error_new(BFS_ERROR, EIO, "GET s3://b/k: line1\nline2");
	log_error(LOG_LEVEL_WARNING, error, "read '%s'", "k");
	log_error(LOG_LEVEL_WARNING, error, NULL);
	log_error(LOG_LEVEL_NOTICE, NULL, "no error");
	g_error_free(error);

	g_assert_cmpuint(c.lines->len, ==, 7);
	g_assert_cmpstr(capture_line(&c, 0), ==, "0 read 'a\\x0ab': failed");
	/* Backslashes are not doubled in messages: keys use log_escape. */
	g_assert_cmpstr(capture_line(&c, 1), ==, "0 path C:\\dir");
	g_assert_cmpstr(capture_line(&c, 2), ==, "0 nul \\x00 here");
	g_assert_cmpstr(capture_line(&c, 3), ==, "0 bad \\xff utf8 \xc3\xa9");
	g_assert_cmpstr(capture_line(&c, 4), ==,
			"1 read 'k': GET s3://b/k: line1\\x0aline2");
	g_assert_cmpstr(capture_line(&c, 5), ==,
			"1 GET s3://b/k: line1\\x0aline2");
	g_assert_cmpstr(capture_line(&c, 6), ==, "2 no error: unknown error");
	capture_stop(&c);
}

static void test_levels(void)
{
	struct capture c;

	capture_start(&c, (gint64)3600 * G_USEC_PER_SEC);
	log_set_level(LOG_LEVEL_WARNING);
	g_assert_true(log_enabled(LOG_LEVEL_ERR));
	g_assert_true(log_enabled(LOG_LEVEL_WARNING));
	g_assert_false(log_enabled(LOG_LEVEL_NOTICE));
	g_assert_false(log_enabled(LOG_LEVEL_DEBUG));
	log_msg(LOG_LEVEL_DEBUG, "debug");
	log_msg(LOG_LEVEL_INFO, "info");
	log_msg(LOG_LEVEL_NOTICE, "notice");
	log_msg(LOG_LEVEL_WARNING, "warning");
	log_msg(LOG_LEVEL_ERR, "err");
	log_error(LOG_LEVEL_INFO, NULL, "filtered");
	g_assert_cmpuint(c.lines->len, ==, 2);
	g_assert_cmpstr(capture_line(&c, 0), ==, "1 warning");
	g_assert_cmpstr(capture_line(&c, 1), ==, "0 err");

	log_set_level(LOG_LEVEL_DEBUG);
	g_assert_true(log_enabled(LOG_LEVEL_DEBUG));
	log_msg(LOG_LEVEL_DEBUG, "debug");
	g_assert_cmpuint(c.lines->len, ==, 3);
	g_assert_cmpstr(capture_line(&c, 2), ==, "4 debug");
	capture_stop(&c);

	/* After shutdown the default is NOTICE again. */
	g_assert_true(log_enabled(LOG_LEVEL_NOTICE));
	g_assert_false(log_enabled(LOG_LEVEL_INFO));
}

static void test_repeat_flush(void)
{
	struct capture c;
	int i;

	capture_start(&c, (gint64)3600 * G_USEC_PER_SEC);
	for (i = 0; i < 513; i++)
		log_msg(LOG_LEVEL_ERR, "connect to %s: refused", "10.0.0.7");
	/* Same text at another level is another line. */
	log_msg(LOG_LEVEL_WARNING, "connect to %s: refused", "10.0.0.7");
	log_msg(LOG_LEVEL_WARNING, "once");
	g_assert_cmpuint(c.lines->len, ==, 3);
	log_flush();
	g_assert_cmpuint(c.lines->len, ==, 4);
	g_assert_cmpstr(capture_line(&c, 0), ==,
			"0 connect to 10.0.0.7: refused");
	g_assert_cmpstr(capture_line(&c, 1), ==,
			"1 connect to 10.0.0.7: refused");
	g_assert_cmpstr(capture_line(&c, 2), ==, "1 once");
	g_assert_cmpstr(capture_line(&c, 3), ==,
			"0 connect to 10.0.0.7: refused (repeated 512 times)");

	/* After a flush the line is new again; a flush with nothing
	 * suppressed says nothing. */
	log_msg(LOG_LEVEL_ERR, "connect to %s: refused", "10.0.0.7");
	log_flush();
	log_flush();
	g_assert_cmpuint(c.lines->len, ==, 5);
	g_assert_cmpstr(capture_line(&c, 4), ==,
			"0 connect to 10.0.0.7: refused");
	capture_stop(&c);
}

static void test_repeat_window_closes(void)
{
	struct capture c;

	capture_start(&c, (gint64)3600 * G_USEC_PER_SEC);
	log_testing_set_repeat_window(20 * 1000);
	log_msg(LOG_LEVEL_ERR, "x");
	log_msg(LOG_LEVEL_ERR, "x");
	log_msg(LOG_LEVEL_ERR, "x");
	g_usleep(60 * 1000);
	/* Any later call notices the closed window. */
	log_msg(LOG_LEVEL_NOTICE, "y");
	g_assert_cmpuint(c.lines->len, ==, 3);
	g_assert_cmpstr(capture_line(&c, 0), ==, "0 x");
	g_assert_cmpstr(capture_line(&c, 1), ==, "0 x (repeated 2 times)");
	g_assert_cmpstr(capture_line(&c, 2), ==, "2 y");

	/* The same line after its window closed is written again. */
	log_msg(LOG_LEVEL_ERR, "x");
	g_assert_cmpuint(c.lines->len, ==, 4);
	g_assert_cmpstr(capture_line(&c, 3), ==, "0 x");

	/* A window with no repeats closes silently. */
	g_usleep(60 * 1000);
	log_msg(LOG_LEVEL_NOTICE, "z");
	g_assert_cmpuint(c.lines->len, ==, 5);
	g_assert_cmpstr(capture_line(&c, 4), ==, "2 z");

	/* Shutdown reports what is pending. */
	log_msg(LOG_LEVEL_NOTICE, "z");
	log_shutdown();
	g_assert_cmpuint(c.lines->len, ==, 6);
	g_assert_cmpstr(capture_line(&c, 5), ==, "2 z (repeated 1 times)");
	capture_stop(&c);
}

static void test_repeat_disabled(void)
{
	struct capture c;

	capture_start(&c, (gint64)3600 * G_USEC_PER_SEC);
	log_msg(LOG_LEVEL_ERR, "x");
	log_msg(LOG_LEVEL_ERR, "x");
	/* Turning it off reports what was pending. */
	log_testing_set_repeat_window(0);
	g_assert_cmpuint(c.lines->len, ==, 2);
	g_assert_cmpstr(capture_line(&c, 1), ==, "0 x (repeated 1 times)");
	log_msg(LOG_LEVEL_ERR, "x");
	log_msg(LOG_LEVEL_ERR, "x");
	log_flush();
	g_assert_cmpuint(c.lines->len, ==, 4);
	capture_stop(&c);
}

static void test_repeat_bounded(void)
{
	struct capture c;
	int i;

	capture_start(&c, (gint64)3600 * G_USEC_PER_SEC);
	/* "hot" stays tracked while 100 other lines pass: it is recent. */
	for (i = 0; i < 100; i++) {
		log_msg(LOG_LEVEL_ERR, "hot");
		log_msg(LOG_LEVEL_ERR, "cold %d", i);
		log_msg(LOG_LEVEL_ERR, "cold %d", i);
	}
	/* 1 hot + 100 cold written, and the cold ones pushed out of the
	 * 64 slots reported their one repeat. */
	g_assert_cmpuint(c.lines->len, ==, 101 + (100 - 63));
	log_flush();
	g_assert_cmpuint(c.lines->len, ==, 101 + 100 + 1);
	g_assert_cmpstr(capture_line(&c, 0), ==, "0 hot");
	g_assert_cmpstr(capture_line(&c, 1), ==, "0 cold 0");
	g_assert_true(g_ptr_array_find_with_equal_func(
		c.lines, "0 hot (repeated 99 times)", g_str_equal, NULL));
	g_assert_true(g_ptr_array_find_with_equal_func(
		c.lines, "0 cold 0 (repeated 1 times)", g_str_equal, NULL));
	capture_stop(&c);
}

#define HAMMER_THREADS 8
#define HAMMER_LINES   5000

static gpointer hammer_thread(gpointer data)
{
	int id = GPOINTER_TO_INT(data);
	int i;

	for (i = 0; i < HAMMER_LINES; i++) {
		switch (i % 4) {
		case 0:
			log_msg(LOG_LEVEL_ERR, "shared line");
			break;
		case 1:
			log_msg(LOG_LEVEL_WARNING, "thread %d line %d", id,
				i % 50);
			break;
		case 2:
			log_msg(LOG_LEVEL_DEBUG, "distinct %d %d", id, i);
			break;
		default:
			g_assert_true(log_enabled(LOG_LEVEL_DEBUG));
			log_error(LOG_LEVEL_ERR, NULL, "thread %d", id % 2);
			break;
		}
	}
	return NULL;
}

/* The number of log calls a captured line stands for. */
static guint64 line_weight(const char *line)
{
	const char *p = strstr(line, " (repeated ");
	char *end;
	guint64 n;

	if (!p)
		return 1;
	n = g_ascii_strtoull(p + strlen(" (repeated "), &end, 10);
	g_assert_cmpstr(end, ==, " times)");
	g_assert_cmpuint(n, >, 0);
	return n;
}

static void test_threads(void)
{
	GThread *threads[HAMMER_THREADS];
	struct capture c;
	guint64 total = 0;
	guint i;

	capture_start(&c, (gint64)3600 * G_USEC_PER_SEC);
	for (i = 0; i < HAMMER_THREADS; i++)
		threads[i] = g_thread_new("hammer", hammer_thread,
					  GINT_TO_POINTER(i));
	for (i = 0; i < HAMMER_THREADS; i++)
		g_thread_join(threads[i]);
	log_flush();

	/* Every call is accounted for exactly once. */
	for (i = 0; i < c.lines->len; i++)
		total += line_weight(capture_line(&c, i));
	g_assert_cmpuint(total, ==, (guint64)HAMMER_THREADS * HAMMER_LINES);
	g_assert_true(g_ptr_array_find_with_equal_func(c.lines, "0 shared line",
						       g_str_equal, NULL));
	capture_stop(&c);
}

static void test_stderr_format(void)
{
	if (g_test_subprocess()) {
		log_msg(LOG_LEVEL_ERR, "before init");
		log_msg(LOG_LEVEL_INFO, "before init, filtered");
		log_init("bfs-test", TRUE, LOG_LEVEL_DEBUG);
		log_msg(LOG_LEVEL_ERR, "an error");
		log_msg(LOG_LEVEL_WARNING, "a warning");
		log_msg(LOG_LEVEL_NOTICE, "a notice");
		log_msg(LOG_LEVEL_INFO, "some info");
		log_msg(LOG_LEVEL_DEBUG, "a detail");
		log_msg(LOG_LEVEL_DEBUG, "a detail");
		log_shutdown();
		exit(0);
	}
	g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
	g_test_trap_assert_passed();
	g_test_trap_assert_stderr(
		"bucketfs: error: before init\n"
		"bfs-test: error: an error\n"
		"bfs-test: warning: a warning\n"
		"bfs-test: a notice\n"
		"bfs-test: some info\n"
		"bfs-test: debug: a detail\n"
		"bfs-test: debug: a detail (repeated 1 times)\n");
}

static void test_no_stderr(void)
{
	if (g_test_subprocess()) {
		log_init(NULL, FALSE, LOG_LEVEL_DEBUG);
		log_msg(LOG_LEVEL_ERR, "to syslog only");
		log_shutdown();
		exit(0);
	}
	g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
	g_test_trap_assert_passed();
	g_test_trap_assert_stderr("");
}

int main(int argc, char **argv)
{
	g_test_init(&argc, &argv, NULL);

	g_test_add_func("/log/escape", test_escape);
	g_test_add_func("/log/msg-sanitized", test_msg_sanitized);
	g_test_add_func("/log/levels", test_levels);
	g_test_add_func("/log/repeat/flush", test_repeat_flush);
	g_test_add_func("/log/repeat/window-closes", test_repeat_window_closes);
	g_test_add_func("/log/repeat/disabled", test_repeat_disabled);
	g_test_add_func("/log/repeat/bounded", test_repeat_bounded);
	g_test_add_func("/log/threads", test_threads);
	g_test_add_func("/log/stderr-format", test_stderr_format);
	g_test_add_func("/log/no-stderr", test_no_stderr);

	return g_test_run();
}
