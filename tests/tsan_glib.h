/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * tsan_glib.h - force-included (-include) into every file of the TSan build
 * by tools/run-tests.sh, and nowhere else.
 *
 * GLib's GMutex and GCond are futex-based inside libglib, which is not
 * built with -fsanitize=thread, so TSan cannot see them order anything and
 * reports every access made under a GMutex as a race.  These wrappers
 * announce each lock, unlock and wait to TSan (sanitizer/tsan_interface.h)
 * around the real GLib call; the locking itself is unchanged.  Only our
 * own calls are wrapped: GLib's internal locks stay invisible.
 *
 * (log.c and http.c use pthread mutexes instead, which TSan sees; the same
 * change in s3.c, lister.c and readahead.c would make this file moot.)
 *
 * The __has_include() guard lets meson's compiler sanity checks, which
 * have no GLib include path, pass.
 */
#if !defined(BFS_TSAN_GLIB_H) && __has_include(<glib.h>)
#define BFS_TSAN_GLIB_H
#include <glib.h>
#include <sanitizer/tsan_interface.h>

static inline void bfs_tsan_mutex_lock(GMutex *m)
{
	__tsan_mutex_pre_lock(m, 0);
	(g_mutex_lock)(m);
	__tsan_mutex_post_lock(m, 0, 0);
}

static inline void bfs_tsan_mutex_unlock(GMutex *m)
{
	__tsan_mutex_pre_unlock(m, 0);
	(g_mutex_unlock)(m);
	__tsan_mutex_post_unlock(m, 0);
}

static inline gboolean bfs_tsan_mutex_trylock(GMutex *m)
{
	gboolean ok;

	__tsan_mutex_pre_lock(m, __tsan_mutex_try_lock);
	ok = (g_mutex_trylock)(m);
	__tsan_mutex_post_lock(m,
			       __tsan_mutex_try_lock |
				       (ok ? 0 : __tsan_mutex_try_lock_failed),
			       0);
	return ok;
}

static inline void bfs_tsan_cond_wait(GCond *c, GMutex *m)
{
	__tsan_mutex_pre_unlock(m, 0);
	__tsan_mutex_post_unlock(m, 0);
	(g_cond_wait)(c, m);
	__tsan_mutex_pre_lock(m, 0);
	__tsan_mutex_post_lock(m, 0, 0);
}

static inline gboolean bfs_tsan_cond_wait_until(GCond *c, GMutex *m, gint64 end)
{
	gboolean ok;

	__tsan_mutex_pre_unlock(m, 0);
	__tsan_mutex_post_unlock(m, 0);
	ok = (g_cond_wait_until)(c, m, end);
	__tsan_mutex_pre_lock(m, 0);
	__tsan_mutex_post_lock(m, 0, 0);
	return ok;
}

#define g_mutex_lock(m)		   bfs_tsan_mutex_lock(m)
#define g_mutex_unlock(m)	   bfs_tsan_mutex_unlock(m)
#define g_mutex_trylock(m)	   bfs_tsan_mutex_trylock(m)
#define g_cond_wait(c, m)	   bfs_tsan_cond_wait(c, m)
#define g_cond_wait_until(c, m, e) bfs_tsan_cond_wait_until(c, m, e)
#endif
