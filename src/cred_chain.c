/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The provider chain: the providers in the SDKs' order, the first that is
 * configured answering, the trace of what each said, and the error that
 * lists the ways when none is.
 */
#include <errno.h>

#include "cred_chain.h"
#include "cred_provider.h"
#include "error.h"

#define NO_CREDENTIALS_HELP                                                    \
	"set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; or "                 \
	"AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN; or a profile "          \
	"(-o profile=NAME or AWS_PROFILE, else 'default') with static keys, "  \
	"role_arn or credential_process in %s or %s; or run where a "          \
	"container credentials endpoint or EC2 instance metadata answers; "    \
	"or use -o anonymous for a public bucket"

/* "expires in 3599 s" or "do not expire", for the trace. */
static char *expiry_text(const struct credentials *creds)
{
	if (!creds->expiration)
		return g_strdup("do not expire");
	return g_strdup_printf("expire in %" G_GINT64_FORMAT " s",
			       creds->expiration -
				       g_get_real_time() / G_USEC_PER_SEC);
}

static void trace_answer(struct chain *c, const char *provider,
			 const struct credentials *creds)
{
	g_autofree char *exp = expiry_text(creds);

	trace_add(c, "%s: answered: %s%s%s; they %s", provider, creds->source,
		  creds->role ? ", role " : "", creds->role ? creds->role : "",
		  exp);
}

typedef enum outcome (*provider_fn)(struct chain *c, struct credentials **out,
				    GError **error);

static const struct {
	const char *name;
	provider_fn fn;
} providers[] = {
	{ "environment", provider_environment },
	{ "web identity", provider_web_identity },
	{ "shared files", provider_profile },
	{ "container", provider_container },
	{ "IMDS", provider_imds },
};

static void no_credentials(struct chain *c, const struct cred_chain_options *o,
			   GError **error)
{
	g_autofree char *cred = NULL;
	g_autofree char *conf = NULL;
	struct aws_profile p;
	g_autoptr(GString) why = g_string_new(NULL);
	guint i;

	(void)o;
	if (aws_profile_read("default", &p, NULL)) {
		cred = g_strdup(p.cred_path);
		conf = g_strdup(p.conf_path);
		aws_profile_clear(&p);
	}
	for (i = 0; c->trace && i < c->trace->len; i++)
		g_string_append_printf(why, "; %s",
				       (char *)g_ptr_array_index(c->trace, i));
	g_set_error(error, BFS_ERROR, ENOENT,
		    "no credentials found: " NO_CREDENTIALS_HELP " [%s]",
		    cred ? cred : "~/.aws/credentials",
		    conf ? conf : "~/.aws/config",
		    why->len ? why->str + 2 : "");
}

struct credentials *cred_chain_resolve(const struct cred_chain_options *o,
				       GPtrArray *trace, GError **error)
{
	g_autoptr(GPtrArray) own = NULL;
	struct chain c = { .o = o, .trace = trace };
	struct credentials *creds = NULL;
	guint i;

	g_return_val_if_fail(error == NULL || *error == NULL, NULL);
	if (o->anonymous || o->profile) {
		creds = o->anonymous ? credentials_load(NULL, TRUE, error)
				     : resolve_profile(&c, o->profile, TRUE, 0,
						       error);
		if (creds)
			trace_answer(&c, o->anonymous ? "anonymous" : "profile",
				     creds);
		else if (!o->anonymous)
			g_prefix_error(error, "shared files (-o profile=%s): ",
				       o->profile);
		return creds;
	}
	/* The final error lists what each provider said. */
	if (!trace)
		c.trace = own = g_ptr_array_new_with_free_func(g_free);
	for (i = 0; i < G_N_ELEMENTS(providers); i++) {
		g_autoptr(GError) err = NULL;

		switch (providers[i].fn(&c, &creds, &err)) {
		case ANSWERED:
			trace_answer(&c, providers[i].name, creds);
			return creds;
		case FAILED:
			trace_add(&c, "%s", err->message);
			g_propagate_error(error, g_steal_pointer(&err));
			return NULL;
		case NOT_CONFIGURED:
			break;
		}
	}
	no_credentials(&c, o, error);
	return NULL;
}
