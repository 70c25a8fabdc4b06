/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * error.h - the one GError domain of bucketfs.
 *
 * Every fallible core function takes `GError **error` last.  The error's
 * domain is BFS_ERROR and its code is always a positive errno, chosen once,
 * where the meaning of the failure is known (404 -> ENOENT, 403 -> EACCES,
 * ETag mismatch -> ESTALE, exhausted retries -> EIO or ETIMEDOUT).  The
 * message is the cause chain: the lowest layer writes everything it knows,
 * each layer above prefixes one clause with g_prefix_error() and never
 * replaces the message.
 */
#ifndef BUCKETFS_ERROR_H
#define BUCKETFS_ERROR_H

#include <glib.h>

#define BFS_ERROR (bfs_error_quark())

/* The quark of the bucketfs error domain.  Any thread. */
GQuark bfs_error_quark(void);

/*
 * Makes one error, so that GLib sets up what it sets up lazily on the
 * first (the error domains' lock) on this thread: call before starting
 * threads that make errors at once (GLib's lazy set-up is not visible to
 * ThreadSanitizer and reads as a data race).  Any thread; cheap.
 */
void bfs_error_init(void);

/*
 * The errno carried by @error: its code when it is in BFS_ERROR, else EIO.
 * @error may be NULL (then EIO).  Any thread.
 */
int bfs_error_errno(const GError *error);

#endif
