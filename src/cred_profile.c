/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The profile of the shared files: roles assumed from a source profile or
 * credential_source, static keys, and credential_process run as a child
 * that is killed if it hangs.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cred_parse.h"
#include "cred_provider.h"
#include "error.h"
#include "log.h"

/* A credential_process that has said nothing by then is killed. */
#define PROCESS_TIMEOUT_MS 60000
/* A role chain longer than this is a loop. */
#define CHAIN_DEPTH_MAX 5

/* -- credential_process ------------------------------------------------- */

/* The last non-empty line of a process's stderr, short and escaped. */
static char *last_line(const char *s)
{
	g_auto(GStrv) lines = g_strsplit(s ? s : "", "\n", -1);
	gint i;

	for (i = (gint)g_strv_length(lines) - 1; i >= 0; i--) {
		g_strstrip(lines[i]);
		if (*lines[i]) {
			g_autofree char *cut = g_strndup(lines[i], 200);

			return log_escape(cut, -1);
		}
	}
	return NULL;
}

/*
 * Reads @fd until EOF into @buf, at most SMALL_FILE_MAX bytes; FALSE once
 * it is done (EOF, error or full).
 */
static gboolean drain_fd(int fd, GString *buf)
{
	char chunk[4096];
	ssize_t n = read(fd, chunk, sizeof(chunk));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return TRUE;
	if (n <= 0)
		return FALSE;
	if (buf->len < SMALL_FILE_MAX)
		g_string_append_len(buf, chunk,
				    MIN((gsize)n, SMALL_FILE_MAX - buf->len));
	return TRUE;
}

/*
 * Runs @argv with no stdin and collects its stdout and stderr, for at
 * most PROCESS_TIMEOUT_MS: a process that hangs is killed, so that it
 * stalls neither the refresher nor an unmount.  FALSE with ENOENT if it
 * could not start, ETIMEDOUT if it was killed for the time.
 */
static gboolean spawn_bounded(char **argv, const char *what, GString *out,
			      GString *err_out, int *wait_status,
			      GError **error)
{
	g_autoptr(GError) err = NULL;
	gint64 deadline = g_get_monotonic_time() + PROCESS_TIMEOUT_MS * 1000;
	struct pollfd fds[2];
	GPid pid;
	int out_fd, err_fd;

	if (!g_spawn_async_with_pipes(
		    NULL, argv, NULL,
		    G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
			    G_SPAWN_CLOEXEC_PIPES | G_SPAWN_STDIN_FROM_DEV_NULL,
		    NULL, NULL, &pid, NULL, &out_fd, &err_fd, &err)) {
		g_set_error(error, BFS_ERROR, ENOENT, "%s: %s", what,
			    err->message);
		return FALSE;
	}
	fds[0] = (struct pollfd){ .fd = out_fd, .events = POLLIN };
	fds[1] = (struct pollfd){ .fd = err_fd, .events = POLLIN };
	while (fds[0].fd >= 0 || fds[1].fd >= 0) {
		gint64 left = (deadline - g_get_monotonic_time()) / 1000;
		int i;

		if (left <= 0)
			break;
		if (poll(fds, 2, (int)MIN(left, G_MAXINT)) < 0 &&
		    errno != EINTR)
			break;
		for (i = 0; i < 2; i++) {
			if (fds[i].fd < 0 || !fds[i].revents)
				continue;
			if (!drain_fd(fds[i].fd, i ? err_out : out)) {
				close(fds[i].fd);
				fds[i].fd = -1;
			}
		}
	}
	if (fds[0].fd >= 0 || fds[1].fd >= 0) {
		kill(pid, SIGKILL);
		if (fds[0].fd >= 0)
			close(fds[0].fd);
		if (fds[1].fd >= 0)
			close(fds[1].fd);
		(void)waitpid(pid, wait_status, 0);
		g_spawn_close_pid(pid);
		g_set_error(error, BFS_ERROR, ETIMEDOUT,
			    "%s: no answer within %d s: killed", what,
			    PROCESS_TIMEOUT_MS / 1000);
		return FALSE;
	}
	while (waitpid(pid, wait_status, 0) < 0 && errno == EINTR)
		;
	g_spawn_close_pid(pid);
	return TRUE;
}

static struct credentials *run_process(const char *profile, const char *cmd,
				       GError **error)
{
	g_auto(GStrv) argv = NULL;
	g_autoptr(GString) errout = g_string_new(NULL);
	g_autoptr(GString) outbuf = g_string_new(NULL);
	g_autofree char *prog = NULL;
	g_autofree char *what = NULL;
	char *out = NULL;
	struct credentials *creds = NULL;
	int wait_status = 0;

	/* GLib's message quotes the whole command line: not here, since
	 * its arguments might hold something private. */
	if (!g_shell_parse_argv(cmd, NULL, &argv, NULL)) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "credential_process of profile '%s' does not "
			    "parse as a command line (unbalanced quotes?)",
			    profile);
		return NULL;
	}
	/* Only the program: its arguments might hold something private. */
	prog = g_strdup(argv[0]);
	what = g_strdup_printf("credential_process '%s' of profile '%s'", prog,
			       profile);
	if (!spawn_bounded(argv, what, outbuf, errout, &wait_status, error)) {
		explicit_bzero(outbuf->str, outbuf->len);
		return NULL;
	}
	out = g_string_free(g_steal_pointer(&outbuf), FALSE);
	if (!WIFEXITED(wait_status) || WEXITSTATUS(wait_status) != 0) {
		g_autofree char *line = last_line(errout->str);

		g_set_error(error, BFS_ERROR, EACCES,
			    "credential_process '%s' of profile '%s' %s %d%s%s",
			    prog, profile,
			    WIFEXITED(wait_status) ? "exited with status"
						   : "was killed by signal",
			    WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
						   : WTERMSIG(wait_status),
			    line ? ": " : "", line ? line : "");
		goto out;
	}
	creds = cred_parse_json(out, strlen(out), CRED_JSON_PROCESS, "output",
				error);
	if (!creds) {
		g_prefix_error(error,
			       "credential_process '%s' of profile '%s': ",
			       prog, profile);
		goto out;
	}
	creds->provider = g_strdup("credential-process");
	creds->source = g_strdup_printf(
		"credential_process '%s' of profile '%s'", prog, profile);
out:
	credentials_secret_free(out);
	return creds;
}

/* -- the shared files --------------------------------------------------- */

/* The credentials a role_arn profile assumes its role with. */
static struct credentials *role_source(struct chain *c,
				       const struct aws_profile *p, guint depth,
				       GError **error)
{
	const char *cs = p->credential_source;
	struct credentials *creds = NULL;
	enum outcome r = NOT_CONFIGURED;

	if (p->source_profile) {
		/* A profile may name itself: then its own static keys. */
		if (!strcmp(p->source_profile, p->name))
			return credentials_load(p->name, FALSE, error);
		return resolve_profile(c, p->source_profile, TRUE, depth + 1,
				       error);
	}
	if (!cs) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "profile '%s': role_arn needs source_profile, "
			    "credential_source or web_identity_token_file",
			    p->name);
		return NULL;
	}
	if (!strcmp(cs, "Environment")) {
		if (!credentials_from_environment(&creds, error))
			return NULL;
		if (!creds)
			g_set_error(error, BFS_ERROR, ENOENT,
				    "profile '%s': credential_source "
				    "Environment, but AWS_ACCESS_KEY_ID is not "
				    "set",
				    p->name);
		return creds;
	}
	if (!strcmp(cs, "Ec2InstanceMetadata"))
		r = provider_imds(c, &creds, error);
	else if (!strcmp(cs, "EcsContainer"))
		r = provider_container(c, &creds, error);
	else {
		g_autofree char *v = log_escape(cs, -1);

		g_set_error(error, BFS_ERROR, EINVAL,
			    "profile '%s': credential_source '%s' is not "
			    "Environment, Ec2InstanceMetadata or EcsContainer",
			    p->name, v);
		return NULL;
	}
	if (r == NOT_CONFIGURED && !(error && *error))
		g_set_error(error, BFS_ERROR, ENOENT,
			    "profile '%s': credential_source %s: not "
			    "available here",
			    p->name, cs);
	return creds;
}

static struct credentials *assume_role(struct chain *c,
				       const struct aws_profile *p, guint depth,
				       GError **error)
{
	struct credentials *source;
	g_autofree char *name = NULL;
	struct credentials *creds;

	if (p->web_identity_token_file)
		return web_identity(c, p->role_arn, p->web_identity_token_file,
				    p->role_session_name, p->duration_seconds,
				    error);
	source = role_source(c, p, depth, error);
	if (!source)
		return NULL;
	name = p->role_session_name ? g_strdup(p->role_session_name)
				    : default_session_name();
	{
		const char *params[] = { "Action",
					 "AssumeRole",
					 "Version",
					 STS_VERSION,
					 "RoleArn",
					 p->role_arn,
					 "RoleSessionName",
					 name,
					 "ExternalId",
					 p->external_id,
					 "DurationSeconds",
					 p->duration_seconds,
					 NULL };

		creds = sts_call(c, "AssumeRole", params, source, error);
	}
	if (!creds)
		g_prefix_error(error, "with the credentials from %s: ",
			       source->source);
	credentials_free(source);
	if (!creds)
		return NULL;
	if (!creds->role)
		creds->role = g_strdup(p->role_arn);
	return creds;
}

/* What a profile without any credential setting means. */
static void profile_empty(const struct aws_profile *p, gboolean named,
			  GError **error)
{
	if (!p->found)
		g_set_error(error, BFS_ERROR, ENOENT,
			    "profile '%s' not found in %s or %s", p->name,
			    p->cred_path, p->conf_path);
	else if (p->has_sso)
		g_set_error(error, BFS_ERROR, EINVAL,
			    "profile '%s': SSO (sso_start_url, sso_session) is "
			    "not supported yet: use 'aws configure "
			    "export-credentials --format process' as its "
			    "credential_process",
			    p->name);
	else
		g_set_error(error, BFS_ERROR, named ? EINVAL : ENOENT,
			    "profile '%s' in %s or %s has no credentials "
			    "(aws_access_key_id, role_arn, credential_process "
			    "or web_identity_token_file)",
			    p->name, p->cred_path, p->conf_path);
}

static struct credentials *profile_answer(struct chain *c,
					  const struct aws_profile *p,
					  guint depth, GError **error)
{
	struct credentials *creds;

	if (p->role_arn) {
		creds = assume_role(c, p, depth, error);
		if (creds) {
			g_free(creds->provider);
			creds->provider = g_strdup(p->web_identity_token_file
							   ? "web-identity"
							   : "assume-role");
		}
		return creds;
	}
	if (p->web_identity_token_file) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "profile '%s': web_identity_token_file needs "
			    "role_arn",
			    p->name);
		return NULL;
	}
	if (p->has_keys)
		return credentials_load(p->name, FALSE, error);
	return run_process(p->name, p->credential_process, error);
}

struct credentials *resolve_profile(struct chain *c, const char *name,
				    gboolean named, guint depth, GError **error)
{
	struct aws_profile p;
	struct credentials *creds = NULL;

	if (depth > CHAIN_DEPTH_MAX) {
		g_set_error(error, BFS_ERROR, ELOOP,
			    "profile '%s': more than %d source_profile links "
			    "(a loop?)",
			    name, CHAIN_DEPTH_MAX);
		return NULL;
	}
	if (!aws_profile_read(name, &p, error))
		return NULL;
	if (!p.role_arn && !p.has_keys && !p.credential_process &&
	    !p.web_identity_token_file) {
		profile_empty(&p, named, error);
		goto out;
	}
	creds = profile_answer(c, &p, depth, error);
	if (!creds && depth > 0)
		g_prefix_error(error, "source_profile '%s': ", name);
out:
	aws_profile_clear(&p);
	return creds;
}

enum outcome provider_profile(struct chain *c, struct credentials **out,
			      GError **error)
{
	const char *name = c->o->profile ? c->o->profile
					 : credentials_env_get("AWS_PROFILE");
	gboolean named = name != NULL;
	g_autoptr(GError) err = NULL;

	*out = resolve_profile(c, named ? name : "default", named, 0, &err);
	if (*out)
		return ANSWERED;
	/* The default profile may simply not exist: ask the next one. */
	if (!named && err->code == ENOENT &&
	    g_str_has_prefix(err->message, "profile 'default' ")) {
		trace_add(c, "shared files: %s", err->message);
		return NOT_CONFIGURED;
	}
	g_propagate_prefixed_error(error, g_steal_pointer(&err),
				   "shared files: ");
	return FAILED;
}
