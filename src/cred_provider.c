/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What the providers of the chain share: their trace lines and the small
 * files that hold a token; and the first provider, the environment's
 * static keys.  Variables are read with credentials_env_get(), as the
 * static keys are.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "cred_provider.h"
#include "error.h"

void trace_add(struct chain *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->trace)
		return;
	va_start(ap, fmt);
	g_ptr_array_add(c->trace, g_strdup_vprintf(fmt, ap));
	va_end(ap);
}

/* Wipes and frees a buffer of read_secret_file(). */
static void secret_buffer_free(GString *s)
{
	explicit_bzero(s->str, s->allocated_len);
	g_string_free(s, TRUE);
}

/* Reads a small file that holds a secret (a token); wipe the result. */
char *read_secret_file(const char *path, const char *what, GError **error)
{
	char buf[4096];
	/* Sized once, never grown: a realloc would leave a copy behind. */
	GString *s = g_string_sized_new(SMALL_FILE_MAX + sizeof(buf) + 1);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	char *token;

	if (fd < 0) {
		int err = errno;

		g_set_error(error, BFS_ERROR, err, "%s %s: %s", what, path,
			    g_strerror(err));
		g_string_free(s, TRUE);
		return NULL;
	}
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || s->len + (gsize)n > SMALL_FILE_MAX) {
			int err = n < 0 ? errno : EFBIG;

			g_set_error(error, BFS_ERROR, err, "%s %s: %s", what,
				    path,
				    n < 0 ? g_strerror(err)
					  : "larger than 64 KiB, not a token");
			close(fd);
			explicit_bzero(buf, sizeof(buf));
			secret_buffer_free(s);
			return NULL;
		}
		if (n == 0)
			break;
		g_string_append_len(s, buf, n);
	}
	close(fd);
	explicit_bzero(buf, sizeof(buf));
	/* Stripping moves bytes past the NUL: the whole buffer is wiped. */
	token = g_strdup(g_strstrip(s->str));
	secret_buffer_free(s);
	if (!*token || strpbrk(token, "\r\n")) {
		g_set_error(error, BFS_ERROR, EINVAL, "%s %s: %s", what, path,
			    *token ? "holds more than one line" : "is empty");
		credentials_secret_free(token);
		return NULL;
	}
	return token;
}

enum outcome provider_environment(struct chain *c, struct credentials **out,
				  GError **error)
{
	if (!credentials_from_environment(out, error))
		return FAILED;
	if (*out)
		return ANSWERED;
	trace_add(c, "environment: AWS_ACCESS_KEY_ID and "
		     "AWS_SECRET_ACCESS_KEY not set");
	return NOT_CONFIGURED;
}
