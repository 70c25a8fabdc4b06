/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * cred_refresh.h - the credentials in use, kept fresh.
 *
 * Holds the credentials cred_chain_resolve() gave, and when they expire,
 * a thread of its own fetches new ones well before: at 5 minutes before
 * the expiry, or at half the lifetime of credentials that live less than
 * 10 minutes.  Readers never wait for it: they sign with the current
 * credentials, which a refresh replaces in one step.  A failed refresh
 * keeps the current credentials, logs its cause once (a warning, until a
 * refresh succeeds again) and tries again at a quarter of the time left
 * (1 s to 60 s; every 5 s once they expired).  The mount's log names the
 * provider at the start and at each refresh; never a secret.
 *
 * Replaced credentials are retired, not freed, until cred_refresh_free():
 * a pointer from cred_refresh_peek() stays valid without a lock, which
 * lets an HTTP attempt remember which credentials signed it.  (Hourly
 * credentials retire 24 small records a day.)
 *
 * Lock order: fetch_lock (one fetch at a time) before lock (the state).
 */
#ifndef BUCKETFS_CRED_REFRESH_H
#define BUCKETFS_CRED_REFRESH_H

#include <glib.h>

#include "cred_chain.h"
#include "credentials.h"

struct cred_refresh;

/*
 * Resolves the credentials once with @o (copied) and starts the refresher
 * when they expire.  Logs the provider (notice).  Returns the holder, or
 * NULL with the error of cred_chain_resolve().  Call before threads that
 * change the environment; blocks for the first fetch.
 */
struct cred_refresh *cred_refresh_new(const struct cred_chain_options *o,
				      GError **error);

/*
 * The current credentials, borrowed until cred_refresh_free().  Any
 * thread; never blocks on a fetch.
 */
const struct credentials *cred_refresh_peek(struct cred_refresh *r);

/*
 * The server refused @used as expired (S3's ExpiredToken).  When @used is
 * no longer current, returns TRUE at once (another request or the
 * refresher already replaced them).  Temporary credentials (those with an
 * expiry, which the refresher thread renews): wakes the refresher to fetch
 * now and returns TRUE at once, so that the caller retries after its
 * backoff with whatever is current then; the calling thread never waits
 * on STS, IMDS or a process.  Static keys: reads the environment and the
 * files again, on the calling thread (waiting for a fetch already under
 * way instead of starting another), and returns TRUE when the current
 * credentials are new.  Else FALSE with @error (BFS_ERROR): EACCES when
 * the source still gives the same credentials (the message says how to
 * renew them: a running process cannot see a changed environment; a file
 * must be rewritten), anonymous access; or the fetch's error.  Any thread.
 */
gboolean cred_refresh_renew(struct cred_refresh *r,
			    const struct credentials *used, GError **error);

/*
 * The number of successful refreshes so far (background and renewals).
 * Any thread.
 */
guint cred_refresh_count(struct cred_refresh *r);

/* Stops the refresher, waits for it and frees everything.  NULL ignored. */
void cred_refresh_free(struct cred_refresh *r);

#endif
