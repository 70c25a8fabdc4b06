/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * log_capture.h - unit tests: a log sink that keeps every line, for
 * asserting on what was logged.  Header-only (static functions), for the
 * test programs that include it.
 */
#ifndef BFS_TEST_LOG_CAPTURE_H
#define BFS_TEST_LOG_CAPTURE_H

#include <pthread.h>
#include <string.h>

#include <glib.h>

#include "log.h"

/* What the test sink received. */
struct capture {
	pthread_mutex_t lock; /* not GMutex: visible to TSan */
	GPtrArray *lines;     /* of "<level digit> <text>" */
};

static void capture_sink(enum log_level level, const char *line, void *data)
{
	struct capture *c = data;

	pthread_mutex_lock(&c->lock);
	g_ptr_array_add(c->lines, g_strdup_printf("%d %s", level, line));
	pthread_mutex_unlock(&c->lock);
}

/* Every line from now on goes to @c, debug included; identical lines
 * within @repeat_window_us are folded (0: never). */
static void capture_start(struct capture *c, gint64 repeat_window_us)
{
	pthread_mutex_init(&c->lock, NULL);
	c->lines = g_ptr_array_new_with_free_func(g_free);
	log_testing_set_sink(capture_sink, c);
	log_set_level(LOG_LEVEL_DEBUG);
	log_testing_set_repeat_window(repeat_window_us);
}

static void capture_stop(struct capture *c)
{
	log_shutdown();
	g_ptr_array_unref(c->lines);
	pthread_mutex_destroy(&c->lock);
}

/* Line @i, as "<level digit> <text>". */
static G_GNUC_UNUSED const char *capture_line(struct capture *c, guint i)
{
	g_assert_cmpuint(i, <, c->lines->len);
	return g_ptr_array_index(c->lines, i);
}

/* Lines at @level containing @needle; the first one in *@first. */
static G_GNUC_UNUSED guint capture_count(struct capture *c,
					 enum log_level level,
					 const char *needle, char **first)
{
	guint i, n = 0;

	pthread_mutex_lock(&c->lock);
	for (i = 0; i < c->lines->len; i++) {
		const char *l = g_ptr_array_index(c->lines, i);

		if (l[0] - '0' != (int)level || !strstr(l + 2, needle))
			continue;
		if (!n++ && first)
			*first = g_strdup(l + 2);
	}
	pthread_mutex_unlock(&c->lock);
	return n;
}

#endif
