/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * replay_main - runs a fuzz target's LLVMFuzzerTestOneInput() once on each
 * file named on the command line (a directory: on each file in it), like
 * libFuzzer does with files but without libFuzzer, so that the seed corpora
 * and saved crashes are regression tests in every build, gcc and sanitizer
 * builds included.  Fails when there is no input at all, so that a wrong
 * path cannot pass by testing nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <glib.h>

#include "fuzz.h"

static void run_file(const char *path, guint *count)
{
	g_autoptr(GError) error = NULL;
	g_autofree char *buf = NULL;
	g_autofree guint8 *exact = NULL;
	gsize len = 0;

	if (!g_file_get_contents(path, &buf, &len, &error)) {
		fprintf(stderr, "replay: %s\n", error->message);
		exit(1);
	}
	/* libFuzzer hands over exactly @len bytes: no terminating NUL. */
	exact = g_memdup2(buf, len);
	LLVMFuzzerTestOneInput(exact, len);
	(*count)++;
}

static int cmp_str(const void *a, const void *b)
{
	return g_strcmp0(*(char *const *)a, *(char *const *)b);
}

static void run_dir(const char *path, guint *count)
{
	g_autoptr(GError) error = NULL;
	g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
	GDir *dir = g_dir_open(path, 0, &error);
	const char *name;

	if (!dir) {
		fprintf(stderr, "replay: %s\n", error->message);
		exit(1);
	}
	while ((name = g_dir_read_name(dir)))
		g_ptr_array_add(names, g_build_filename(path, name, NULL));
	g_dir_close(dir);
	g_ptr_array_sort(names, cmp_str);
	for (guint i = 0; i < names->len; i++) {
		if (g_file_test(names->pdata[i], G_FILE_TEST_IS_REGULAR))
			run_file(names->pdata[i], count);
	}
}

int main(int argc, char **argv)
{
	guint count = 0;

	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		if (g_file_test(argv[i], G_FILE_TEST_IS_DIR))
			run_dir(argv[i], &count);
		else
			run_file(argv[i], &count);
	}
	printf("replayed %u inputs\n", count);
	return count > 0 ? 0 : 1;
}
