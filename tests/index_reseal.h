/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * index_reseal.h - a test helper, linked into the tests and the fuzzer
 * only (the library and the shipped binaries do not have it).
 */
#ifndef BUCKETFS_TESTS_INDEX_RESEAL_H
#define BUCKETFS_TESTS_INDEX_RESEAL_H

#include <glib.h>

/*
 * Recomputes, in the @len bytes at @data (a whole index file), the
 * checksums of every section the header describes and then of the header,
 * so that a deliberately damaged body passes index_open() and
 * index_verify()'s checksums and reaches the accessors.  Does nothing if
 * the header is too damaged to tell where the sections are.  Written from
 * docs/INDEX-FORMAT.md, not from src/index.c: the two must agree.
 */
void index_reseal(void *data, gsize len);

#endif
