/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fuzz.h - what every fuzz target shares: the entry points libFuzzer and
 * replay_main.c call, and CHECK(), an invariant that aborts (a crash to
 * libFuzzer, a failure to the replay test) in every build, NDEBUG or not.
 */
#ifndef BFS_FUZZ_H
#define BFS_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Optional, as in libFuzzer: define it only to set something up. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			abort();                                               \
		}                                                              \
	} while (0)

#endif
