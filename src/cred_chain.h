/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * cred_chain.h - the AWS credential provider chain, in the AWS SDKs'
 * default order and with their variables and files.  The first provider
 * that is configured answers; a configured provider that fails ends the
 * chain with its error (the SDKs do the same), so that a broken web
 * identity never silently falls through to another identity.
 *
 *  1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 *     AWS_SESSION_TOKEN (see credentials.h);
 *  2. web identity: AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN and
 *     AWS_ROLE_SESSION_NAME (optional): STS AssumeRoleWithWebIdentity,
 *     unsigned, with the token file read again at every call;
 *  3. the profile (AWS_PROFILE, else "default") of the shared files
 *     (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE), in this order:
 *     role_arn with source_profile, credential_source (Environment,
 *     Ec2InstanceMetadata, EcsContainer) or web_identity_token_file: STS
 *     AssumeRole signed with the source's keys (role_session_name,
 *     external_id, duration_seconds), or AssumeRoleWithWebIdentity;
 *     static keys; credential_process (its JSON on stdout, Version 1);
 *  4. container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (on
 *     http://169.254.170.2), else AWS_CONTAINER_CREDENTIALS_FULL_URI
 *     (https, or http to a loopback address, 169.254.170.2 or
 *     169.254.170.23), with the Authorization header from
 *     AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read at every call) or
 *     AWS_CONTAINER_AUTHORIZATION_TOKEN;
 *  5. EC2 instance metadata, IMDSv2 only: PUT /latest/api/token, then
 *     the role name, then its credentials, each with a 1 s timeout, on
 *     AWS_EC2_METADATA_SERVICE_ENDPOINT (default http://169.254.169.254,
 *     or http://[fd00:ec2::254] with AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE
 *     =IPv6); AWS_EC2_METADATA_DISABLED=true skips it;
 *     AWS_METADATA_SERVICE_TIMEOUT (seconds) and
 *     AWS_METADATA_SERVICE_NUM_ATTEMPTS change the timeout and the attempts.
 *
 * With a profile named explicitly (-o profile=NAME) only that profile is
 * asked (and what it names as its source); with anonymous, nobody.
 *
 * STS: https://sts.REGION.amazonaws.com (.amazonaws.com.cn for cn-*),
 * overridden by AWS_ENDPOINT_URL_STS.  Requests go as POST forms so that
 * no token is in a URL.
 *
 * Secrets (keys, session tokens, web identity and container tokens) never
 * appear in an error, a trace line or a log line.
 */
#ifndef BUCKETFS_CRED_CHAIN_H
#define BUCKETFS_CRED_CHAIN_H

#include <glib.h>

#include "credentials.h"

struct cred_chain_options {
	const char *profile; /* -o profile, or NULL; borrowed */
	gboolean anonymous;
	const char *region;  /* for STS; NULL: us-east-1 */
	const char *ca_file; /* for https endpoints; NULL: the system's */
};

/*
 * Resolves credentials as described above.  When @trace is not NULL, one
 * line per provider asked is appended to it (newly allocated strings):
 * "web identity: AWS_WEB_IDENTITY_TOKEN_FILE not set", "IMDS: no role
 * attached to this instance", or for the one that answered what it did.
 *
 * Returns new credentials (provider, source, role and expiration set), or
 * NULL with @error (BFS_ERROR):
 *  - ENOENT: no provider is configured (the message lists the ways and
 *    what each provider said), a named profile does not exist, IMDS has no
 *    role;
 *  - EINVAL: a setting is wrong or incomplete (AWS_ROLE_ARN missing, an
 *    unknown credential_source, an http FULL_URI to another host...);
 *  - EACCES: STS refused (its Code and Message), the container endpoint
 *    answered 401/403, a credential_process exited non-zero;
 *  - EPROTO: an answer did not parse; ETIMEDOUT, ECONNREFUSED, EIO...:
 *    transport failures (cred_http.h).
 * Each error names the provider and the step.  Any thread; blocks for the
 * providers' I/O (seconds at most, except a hung credential_process).
 */
struct credentials *cred_chain_resolve(const struct cred_chain_options *o,
				       GPtrArray *trace, GError **error);

/*
 * The instance's region from IMDSv2 (/latest/meta-data/placement/region),
 * newly allocated, or NULL with @error: ENOENT when IMDS is disabled
 * (AWS_EC2_METADATA_DISABLED), else the transport or HTTP failure.  Any
 * thread; blocks up to about 2 s.
 */
char *cred_chain_imds_region(GError **error);

#endif
