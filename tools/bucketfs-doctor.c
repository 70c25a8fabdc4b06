/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * bucketfs-doctor - preflight of everything a mount depends on: every
 * endpoint (DNS, TCP, TLS/HTTP, a signed ListObjectsV2, one GET, clock
 * skew), the credentials, the descriptor limit and /dev/fuse.  Each check
 * prints ✓ or ✗, the whole cause and the fix; ⚠ marks a server quirk or a
 * layout that works but deserves a note, and fails nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <curl/curl.h>

#include "config.h"
#include "cred_chain.h"
#include "credentials.h"
#include "emptydirs.h"
#include "error.h"
#include "index.h"
#include "log.h"
#include "s3.h"
#include "version.h"

/* Sockets beside the connection budget: FUSE, the index, logs, slack. */
#define FD_RESERVE	32
#define DOCTOR_ATTEMPTS 3
#define GET_PROBE_BYTES (1u << 20)
/* After a reply's headers, how long the ping waits for stray body bytes. */
#define PING_LINGER_MS 300
#define PING_MAX_BYTES 65536

struct doctor {
	struct config cfg;
	struct s3 *s3;
	guint checks;
	guint failed;
	guint warned;
};

static void report(struct doctor *d, gboolean ok, const char *indent,
		   const char *what, const char *detail, const char *fix)
{
	d->checks++;
	if (!ok)
		d->failed++;
	printf("%s%s %s: %s\n", indent, ok ? "✓" : "✗", what, detail);
	if (!ok && fix)
		printf("%s    fix: %s\n", indent, fix);
	fflush(stdout);
}

/* A check that passed with a note: counted as passed. */
static void warn(struct doctor *d, const char *indent, const char *what,
		 const char *detail, const char *fix)
{
	d->checks++;
	d->warned++;
	printf("%s⚠ %s: %s\n", indent, what, detail);
	if (fix)
		printf("%s    fix: %s\n", indent, fix);
	fflush(stdout);
}

static double now_s(void)
{
	return g_get_monotonic_time() / 1e6;
}

/* -- per-endpoint checks ------------------------------------------------ */

struct target {
	char *host; /* without IPv6 brackets */
	char *port;
	gboolean tls;
};

static void target_clear(struct target *t)
{
	g_free(t->host);
	g_free(t->port);
}

static void target_parse(const char *url, struct target *t)
{
	const char *hp = strstr(url, "://") + 3;
	const char *colon;

	t->tls = g_str_has_prefix(url, "https://");
	if (*hp == '[') {
		const char *close = strchr(hp, ']');

		t->host = g_strndup(hp + 1, close - hp - 1);
		colon = close[1] == ':' ? close + 1 : NULL;
	} else {
		colon = strrchr(hp, ':');
		t->host =
			g_strndup(hp, colon ? (gsize)(colon - hp) : strlen(hp));
	}
	t->port = g_strdup(colon ? colon + 1 : (t->tls ? "443" : "80"));
}

static char *addr_text(const struct sockaddr *sa)
{
	char buf[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr,
			  buf, sizeof(buf));
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6,
			  &((const struct sockaddr_in6 *)sa)->sin6_addr, buf,
			  sizeof(buf));
	return g_strdup(buf);
}

static gboolean check_dns(struct doctor *d, const struct target *t,
			  struct addrinfo **out)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
	g_autoptr(GString) addrs = g_string_new(NULL);
	struct addrinfo *ai;
	int rc;

	rc = getaddrinfo(t->host, t->port, &hints, out);
	if (rc) {
		g_autofree char *detail = g_strdup_printf(
			"cannot resolve '%s': %s%s%s", t->host,
			gai_strerror(rc), rc == EAI_SYSTEM ? ": " : "",
			rc == EAI_SYSTEM ? g_strerror(errno) : "");

		report(d, FALSE, "  ", "DNS", detail,
		       "check the endpoint's host name and /etc/resolv.conf");
		return FALSE;
	}
	for (ai = *out; ai; ai = ai->ai_next) {
		g_autofree char *a = addr_text(ai->ai_addr);

		if (!strstr(addrs->str, a))
			g_string_append_printf(addrs, "%s%s",
					       addrs->len ? ", " : "", a);
	}
	{
		g_autofree char *detail =
			g_strdup_printf("%s -> %s", t->host, addrs->str);

		report(d, TRUE, "  ", "DNS", detail, NULL);
	}
	return TRUE;
}

/* Connects within the connect timeout; returns 0 or the errno. */
static int connect_one(const struct addrinfo *ai, int timeout_ms)
{
	struct pollfd pfd;
	socklen_t len = sizeof(int);
	int fd, err = 0;

	fd = socket(ai->ai_family,
		    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    ai->ai_protocol);
	if (fd < 0)
		return errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		err = errno;
		if (err == EINPROGRESS) {
			pfd.fd = fd;
			pfd.events = POLLOUT;
			err = poll(&pfd, 1, timeout_ms);
			if (err == 0)
				err = ETIMEDOUT;
			else if (err < 0)
				err = errno;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err,
					    &len) < 0)
				err = errno;
		}
	}
	close(fd);
	return err;
}

static gboolean check_tcp(struct doctor *d, const struct target *t,
			  const struct addrinfo *ais)
{
	const struct addrinfo *ai;
	g_autoptr(GString) why = g_string_new(NULL);

	for (ai = ais; ai; ai = ai->ai_next) {
		g_autofree char *a = addr_text(ai->ai_addr);
		double t0 = now_s();
		int err = connect_one(ai, (int)(d->cfg.connect_timeout * 1000));

		if (!err) {
			g_autofree char *detail =
				g_strdup_printf("%s port %s in %.1f ms", a,
						t->port, (now_s() - t0) * 1e3);

			report(d, TRUE, "  ", "TCP connect", detail, NULL);
			return TRUE;
		}
		g_string_append_printf(why, "%s%s port %s: %s [os errno %d]",
				       why->len ? "; " : "", a, t->port,
				       g_strerror(err), err);
	}
	report(d, FALSE, "  ", "TCP connect", why->str,
	       "is the S3 server running and listening on that address and "
	       "port? (a timeout means a firewall or a dead host; see "
	       "-o connect_timeout=)");
	return FALSE;
}

/* What an unsigned HEAD / on a connection of its own got back. */
struct ping {
	long status;
	gsize extra; /* bytes after the reply's headers: a HEAD has none */
	gboolean chunked;
};

/* Waits until curl's socket @fd can be read (or written); FALSE on
 * timeout.  Returns at once if @fd is unknown. */
static gboolean ping_wait(curl_socket_t fd, gboolean out, int ms)
{
	struct pollfd p = { .fd = fd, .events = out ? POLLOUT : POLLIN };

	return fd == CURL_SOCKET_BAD || poll(&p, 1, ms) > 0;
}

static gboolean ping_send(CURL *easy, curl_socket_t fd, const char *req, int ms,
			  GError **error)
{
	gsize len = strlen(req), done = 0;

	while (done < len) {
		size_t n = 0;
		CURLcode rc = curl_easy_send(easy, req + done, len - done, &n);

		if (rc == CURLE_AGAIN) {
			if (!ping_wait(fd, TRUE, ms)) {
				g_set_error(error, BFS_ERROR, ETIMEDOUT,
					    "sending HEAD /: no progress in "
					    "%d ms",
					    ms);
				return FALSE;
			}
			continue;
		}
		if (rc != CURLE_OK) {
			g_set_error(error, BFS_ERROR, EIO,
				    "sending HEAD /: curl %d (%s)", rc,
				    curl_easy_strerror(rc));
			return FALSE;
		}
		done += n;
	}
	return TRUE;
}

/* Reads the reply into @buf: its headers, then whatever follows them
 * within PING_LINGER_MS, up to the server's close. */
static gboolean ping_recv(CURL *easy, curl_socket_t fd, GString *buf, int ms,
			  GError **error)
{
	char chunk[4096];

	while (buf->len < PING_MAX_BYTES) {
		gboolean have_head = strstr(buf->str, "\r\n\r\n") != NULL;
		size_t n = 0;
		CURLcode rc = curl_easy_recv(easy, chunk, sizeof(chunk), &n);

		if (rc == CURLE_AGAIN) {
			if (ping_wait(fd, FALSE,
				      have_head ? PING_LINGER_MS : ms))
				continue;
			if (have_head)
				return TRUE;
			g_set_error(error, BFS_ERROR, ETIMEDOUT,
				    "no reply to HEAD / in %d ms", ms);
			return FALSE;
		}
		if (rc != CURLE_OK && !have_head) {
			g_set_error(error, BFS_ERROR, EIO,
				    "reading the reply to HEAD /: curl %d (%s)",
				    rc, curl_easy_strerror(rc));
			return FALSE;
		}
		if (rc != CURLE_OK || n == 0)
			break; /* closed */
		g_string_append_len(buf, chunk, n);
	}
	if (!strstr(buf->str, "\r\n\r\n")) {
		g_set_error(error, BFS_ERROR, EPROTO,
			    "the reply to HEAD / ended before its headers "
			    "(%" G_GSIZE_FORMAT " bytes)",
			    buf->len);
		return FALSE;
	}
	return TRUE;
}

static gboolean ping_parse(const GString *buf, struct ping *p, GError **error)
{
	const char *end = strstr(buf->str, "\r\n\r\n");
	g_autofree char *head = g_ascii_strdown(buf->str, end - buf->str);
	const char *te = strstr(head, "\r\ntransfer-encoding:");

	if (sscanf(head, "http/%*d.%*d %ld", &p->status) != 1) {
		g_autofree char *line =
			g_strndup(buf->str, strcspn(buf->str, "\r\n"));
		g_autofree char *shown = log_escape(line, -1);

		g_set_error(error, BFS_ERROR, EPROTO,
			    "the reply to HEAD / is not HTTP: '%s'", shown);
		return FALSE;
	}
	if (te) {
		const char *eol = strstr(te + 2, "\r\n");

		p->chunked = g_strstr_len(te, eol ? eol - te : -1, "chunked") !=
			     NULL;
	}
	p->extra = buf->len - (end + 4 - buf->str);
	return TRUE;
}

/*
 * An unsigned "HEAD /" on a connection of its own, closed afterwards, with
 * the request written by hand over curl's connection (TLS verified as the
 * mount does it): then every byte of the reply can be seen, and a server
 * that sends a body after a HEAD reply (Ceph RGW 16.2: a chunked
 * "0\r\n\r\n", tracker 66938) spoils no connection the next checks use.
 */
static gboolean ping(struct doctor *d, const char *url, const struct target *t,
		     struct ping *p, GError **error)
{
	int ms = (int)(d->cfg.connect_timeout * 1000);
	g_autofree char *host =
		strchr(t->host, ':')
			? g_strdup_printf("[%s]:%s", t->host, t->port)
			: g_strdup_printf("%s:%s", t->host, t->port);
	g_autofree char *req = g_strdup_printf(
		"HEAD / HTTP/1.1\r\nHost: %s\r\nUser-Agent: "
		"bucketfs-doctor/%s\r\nConnection: close\r\n\r\n",
		host, BUCKETFS_VERSION);
	g_autoptr(GString) buf = g_string_new(NULL);
	curl_socket_t fd = CURL_SOCKET_BAD;
	CURL *easy = curl_easy_init();
	gboolean ok = FALSE;
	CURLcode rc;

	if (!easy) {
		g_set_error(error, BFS_ERROR, ENOMEM, "curl_easy_init failed");
		return FALSE;
	}
	curl_easy_setopt(easy, CURLOPT_URL, url);
	curl_easy_setopt(easy, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long)ms);
	if (d->cfg.ca_file)
		curl_easy_setopt(easy, CURLOPT_CAINFO, d->cfg.ca_file);
	rc = curl_easy_perform(easy);
	if (rc != CURLE_OK) {
		g_set_error(error, BFS_ERROR, EIO, "HEAD %s/: curl %d (%s)",
			    url, rc, curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(easy, CURLINFO_ACTIVESOCKET, &fd);
	ok = ping_send(easy, fd, req, ms, error) &&
	     ping_recv(easy, fd, buf, ms, error) && ping_parse(buf, p, error);
	if (!ok)
		g_prefix_error(error, "HEAD %s/: ", url);
out:
	curl_easy_cleanup(easy);
	return ok;
}

static void check_http(struct doctor *d, const char *url,
		       const struct target *t)
{
	const char *what = t->tls ? "TLS + HTTP" : "HTTP";
	g_autoptr(GError) error = NULL;
	g_autofree char *detail = NULL;
	struct ping p = { 0 };
	double t0 = now_s();

	if (!ping(d, url, t, &p, &error)) {
		report(d, FALSE, "  ", what, error->message,
		       t->tls ? "for a private CA give -o ca_file=PATH or "
				"AWS_CA_BUNDLE; check the certificate's name "
				"matches the endpoint host"
			      : "check that the endpoint speaks HTTP (not "
				"https) on that port");
		return;
	}
	detail = g_strdup_printf("%sHEAD / answered HTTP %ld in %.1f ms",
				 t->tls ? "handshake verified; " : "", p.status,
				 (now_s() - t0) * 1e3);
	if (!p.extra) {
		report(d, TRUE, "  ", what, detail, NULL);
		return;
	}
	{
		g_autofree char *quirk = g_strdup_printf(
			"%s, and then %" G_GSIZE_FORMAT " bytes of body%s, "
			"which a reply to HEAD must not have: a client that "
			"sent its next request on this connection would read "
			"them as its reply (curl 1 \"Received HTTP/0.9\").  "
			"A server quirk (Ceph RGW 16.2, tracker 66938); this "
			"check used a connection of its own, and bucketfs "
			"never sends HEAD /",
			detail, p.extra, p.chunked ? " (chunked)" : "");

		warn(d, "  ", what, quirk, NULL);
	}
}

static const char *fix_for(int code)
{
	switch (code) {
	case EACCES:
		return "check the credentials (AWS_ACCESS_KEY_ID/"
		       "AWS_SECRET_ACCESS_KEY, AWS_PROFILE), the bucket "
		       "policy, -o region= and this host's clock";
	case ENOENT:
		return "check the bucket name and -o region=";
	case ETIMEDOUT:
		return "the endpoint accepts no connection in time: check "
		       "the address, firewalls and -o connect_timeout=";
	default:
		return "see the cause above; the endpoint, -o endpoint=, "
		       "S3_ENDPOINT_URIS and -o ca_file= are the usual "
		       "suspects";
	}
}

static void check_skew(struct doctor *d, gint64 server_date)
{
	gint64 skew = g_get_real_time() / G_USEC_PER_SEC - server_date;
	g_autofree char *detail = NULL;

	if (!server_date) {
		report(d, TRUE, "  ", "clock skew",
		       "not measurable: the server sent no Date header", NULL);
		return;
	}
	detail = g_strdup_printf("this host's clock is %+" G_GINT64_FORMAT
				 " s from the server's Date%s",
				 skew,
				 ABS(skew) > 300 ? " (S3 rejects requests "
						   "beyond 15 minutes)"
						 : "");
	report(d, ABS(skew) <= 900, "  ", "clock skew", detail,
	       "synchronize this host's clock (systemd-timesyncd, chrony)");
}

/* Lists one key, then GETs it; returns nothing, reports both. */
static void check_s3(struct doctor *d, guint i)
{
	struct s3_list_args la = {
		.prefix = *d->cfg.prefix ? d->cfg.prefix : NULL,
		.max_keys = 1,
		.endpoint = (int)i,
	};
	struct s3_object_meta meta = { 0 };
	g_autoptr(GError) error = NULL;
	g_autofree char *detail = NULL;
	g_autofree char *key = NULL;
	g_autoptr(GBytes) data = NULL;
	struct s3_list_page *page;
	guint64 size = 0;
	double t0 = now_s();

	page = s3_list(d->s3, &la, &meta, &error);
	if (!page) {
		report(d, FALSE, "  ", "ListObjectsV2 (signed, max-keys=1)",
		       error->message, fix_for(bfs_error_errno(error)));
		s3_object_meta_clear(&meta);
		return;
	}
	if (page->objects->len) {
		struct s3_object *o = g_ptr_array_index(page->objects, 0);

		key = g_strdup(o->key);
		size = o->size;
	}
	{
		g_autofree char *k = key ? log_escape(key, -1) : NULL;
		g_autofree char *first =
			k ? g_strdup_printf("first key '%s'", k)
			  : g_strdup("no key under the prefix");

		detail = g_strdup_printf("%s in %.1f ms (RequestId: %s)", first,
					 (now_s() - t0) * 1e3,
					 meta.request_id ? meta.request_id
							 : "none");
	}
	report(d, TRUE, "  ", "ListObjectsV2 (signed, max-keys=1)", detail,
	       NULL);
	check_skew(d, meta.server_date);
	s3_object_meta_clear(&meta);
	s3_list_page_free(page);
	if (!key) {
		report(d, TRUE, "  ", "GET", "skipped: nothing to read", NULL);
		return;
	}
	{
		struct s3_get_args ga = {
			.length = MIN(size, GET_PROBE_BYTES),
			.endpoint = (int)i,
		};
		g_autofree char *k = log_escape(key, -1);

		t0 = now_s();
		data = size ? s3_get(d->s3, key, &ga, &meta, &error)
			    : g_bytes_new(NULL, 0);
		g_free(detail);
		if (!data) {
			report(d, FALSE, "  ", "GET", error->message,
			       fix_for(bfs_error_errno(error)));
		} else {
			detail = g_strdup_printf("'%s': %" G_GSIZE_FORMAT
						 " of %" G_GUINT64_FORMAT
						 " bytes in %.1f ms",
						 k, g_bytes_get_size(data),
						 size, (now_s() - t0) * 1e3);
			report(d, TRUE, "  ", "GET", detail, NULL);
		}
		s3_object_meta_clear(&meta);
	}
}

static void check_endpoint(struct doctor *d, guint i, const char *url)
{
	struct target t = { 0 };
	struct addrinfo *ais = NULL;

	printf("endpoint %s\n", url);
	target_parse(url, &t);
	if (check_dns(d, &t, &ais) && check_tcp(d, &t, ais))
		check_http(d, url, &t);
	/* The signed request runs regardless: its cause chain names the
	 * endpoint and every attempt, which is what a log reader needs. */
	check_s3(d, i);
	if (ais)
		freeaddrinfo(ais);
	target_clear(&t);
}

/* -- the bucket's layout ------------------------------------------------ */

/* Whether PREFIX+@dir holds a key (one-key LIST on endpoint 0); -1 when
 * the LIST fails (the endpoint checks have reported that already). */
static int has_keys(struct doctor *d, const char *dir)
{
	g_autofree char *prefix = g_strconcat(d->cfg.prefix, dir, NULL);
	struct s3_list_args la = { .prefix = prefix, .max_keys = 1 };
	struct s3_object_meta meta = { 0 };
	g_autoptr(GError) error = NULL;
	struct s3_list_page *page = s3_list(d->s3, &la, &meta, &error);
	int n;

	s3_object_meta_clear(&meta);
	if (!page)
		return -1;
	n = page->objects->len > 0;
	s3_list_page_free(page);
	return n;
}

/*
 * The DLIO layout (emptydirs_dlio(): the mount logs the same at mount
 * time): a warning, with the fix, for train/ without valid/, unless
 * -o empty_dirs= declares valid.  Nothing when a LIST fails.
 */
static void check_dlio_layout(struct doctor *d)
{
	g_autofree char *detail = NULL;
	int train = has_keys(d, "train/");
	int valid = train == 1 ? has_keys(d, "valid/") : -1;

	if (train < 0 || valid < 0)
		return;
	switch (emptydirs_dlio(train, valid, d->cfg.empty_dirs, d->cfg.bucket,
			       d->cfg.prefix, &detail)) {
	case EMPTYDIRS_DLIO_NONE:
		break;
	case EMPTYDIRS_DLIO_DECLARED:
		report(d, TRUE, "", "DLIO layout", detail, NULL);
		break;
	case EMPTYDIRS_DLIO_MISSING:
		warn(d, "", "DLIO layout", detail, EMPTYDIRS_DLIO_FIX);
		break;
	}
}

/* -- host checks -------------------------------------------------------- */

static void check_fds(struct doctor *d)
{
	struct rlimit rl;
	guint planned;
	rlim_t need;
	g_autofree char *detail = NULL;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		report(d, FALSE, "", "file descriptors", g_strerror(errno),
		       NULL);
		return;
	}
	/* As the mount will: its soft limit raised to the hard one. */
	planned = d->cfg.max_connections
			  ? d->cfg.max_connections
			  : config_mount_connections(rl.rlim_max);
	need = planned + FD_RESERVE;
	detail = g_strdup_printf(
		"RLIMIT_NOFILE soft %llu, hard %llu; the mount plans %u "
		"connections + %d for FUSE, the index and logs%s",
		(unsigned long long)rl.rlim_cur,
		(unsigned long long)rl.rlim_max, planned, FD_RESERVE,
		rl.rlim_cur >= need ? ""
		: rl.rlim_max >= need
			? " (the mount raises the soft limit to the "
			  "hard one)"
			: "");
	report(d, rl.rlim_max >= need, "", "file descriptors", detail,
	       "raise the hard limit (ulimit -Hn, LimitNOFILE= in the systemd "
	       "unit, /etc/security/limits.conf) or lower -o "
	       "max_connections=");
}

static void check_fuse(struct doctor *d)
{
	struct stat st;
	g_autofree char *fm = g_find_program_in_path("fusermount3");
	g_autofree char *detail = NULL;
	int fd;

	if (stat("/dev/fuse", &st) < 0 || !S_ISCHR(st.st_mode)) {
		report(d, FALSE, "", "/dev/fuse",
		       errno ? g_strerror(errno) : "not a character device",
		       "load the module (modprobe fuse); in a container, pass "
		       "--device /dev/fuse");
		return;
	}
	fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		detail = g_strdup_printf("cannot open read/write: %s",
					 g_strerror(errno));
		report(d, FALSE, "", "/dev/fuse", detail,
		       "run as root or add the user to the 'fuse' group");
		return;
	}
	close(fd);
	detail = g_strdup_printf("character device, opens read/write; "
				 "fusermount3: %s",
				 fm ? fm : "not found");
	report(d, fm != NULL, "", "/dev/fuse", detail,
	       "install the fuse3 package (it provides fusermount3)");
}

static void check_index(struct doctor *d)
{
	g_autofree char *path =
		d->cfg.index_path
			? g_strdup(d->cfg.index_path)
			: index_default_path(d->cfg.bucket, d->cfg.prefix);
	g_autoptr(GError) error = NULL;
	g_autofree char *detail = NULL;
	struct index_stats s;
	struct index *idx;

	idx = index_open(path, d->cfg.bucket, d->cfg.prefix, &error);
	if (!idx && error->code == ENOENT) {
		detail = g_strdup_printf("none yet at %s: the first mount "
					 "lists the bucket once",
					 path);
		report(d, TRUE, "", "index", detail, NULL);
		return;
	}
	if (!idx) {
		report(d, FALSE, "", "index", error->message,
		       "bucketfs-index build (a mount also rebuilds a bad "
		       "index by itself)");
		return;
	}
	index_get_stats(idx, &s);
	detail = g_strdup_printf(
		"%s: %" G_GUINT64_FORMAT " keys, built %" G_GINT64_FORMAT
		" s ago",
		path, s.keys, g_get_real_time() / G_USEC_PER_SEC - s.created);
	report(d, TRUE, "", "index", detail, NULL);
	index_unref(idx);
}

/* -- main --------------------------------------------------------------- */

static gboolean parse_args(struct doctor *d, int argc, char **argv,
			   gboolean *verbose, GError **error)
{
	g_auto(GStrv) opts = NULL;
	gboolean version = FALSE;
	GOptionEntry entries[] = {
		{ "option", 'o', 0, G_OPTION_ARG_STRING_ARRAY, &opts,
		  "S3 options (see below); repeatable", "OPT[,OPT...]" },
		{ "verbose", 'v', 0, G_OPTION_ARG_NONE, verbose,
		  "Log every request and retry to stderr", NULL },
		{ "version", 'V', 0, G_OPTION_ARG_NONE, &version,
		  "Print the version and exit", NULL },
		G_OPTION_ENTRY_NULL
	};
	g_autoptr(GOptionContext) ctx =
		g_option_context_new("s3://BUCKET[/PREFIX]");
	guint i;

	g_option_context_set_summary(
		ctx, "Checks every endpoint (DNS, TCP, TLS, a signed "
		     "ListObjectsV2, one GET, clock skew), the credentials, "
		     "the persisted index, the descriptor limit and "
		     "/dev/fuse, and names the cause "
		     "and the fix of each failure; a server quirk or a "
		     "layout worth a note is a warning, not a failure.  "
		     "Exit status 0 when every check passes, 1 when one "
		     "fails, 2 on bad usage.");
	g_option_context_set_description(ctx, config_options_help());
	g_option_context_add_main_entries(ctx, entries, NULL);
	if (!g_option_context_parse(ctx, &argc, &argv, error))
		return FALSE;
	if (version) {
		printf("bucketfs-doctor %s\n", BUCKETFS_VERSION);
		exit(0);
	}
	if (argc != 2) {
		g_set_error(error, BFS_ERROR, EINVAL,
			    "expected one s3://BUCKET[/PREFIX] argument "
			    "(see --help)");
		return FALSE;
	}
	/* A doctor should answer quickly: fewer attempts unless asked, and
	 * a store that cannot be reached is reported, not waited for. */
	d->cfg.max_attempts = DOCTOR_ATTEMPTS;
	d->cfg.retry_deadline = 0;
	if (!config_parse_url(&d->cfg, argv[1], error))
		return FALSE;
	for (i = 0; opts && opts[i]; i++)
		if (!config_parse_options(&d->cfg, opts[i], NULL, error))
			return FALSE;
	return config_finish(&d->cfg, error);
}

/*
 * Asks the provider chain as the mount will, printing what each provider
 * said ("· IMDS: disabled by AWS_EC2_METADATA_DISABLED"), then which one
 * answered, with the role and the time left, or the failing step's cause.
 */
static void check_credentials(struct doctor *d)
{
	g_autoptr(GPtrArray) trace = g_ptr_array_new_with_free_func(g_free);
	g_autoptr(GError) error = NULL;
	g_autoptr(GString) detail = g_string_new(NULL);
	struct cred_chain_options o = {
		.profile = d->cfg.profile,
		.anonymous = d->cfg.anonymous,
		.region = d->cfg.region,
		.ca_file = d->cfg.ca_file,
	};
	struct credentials *creds = cred_chain_resolve(&o, trace, &error);
	guint i;

	/* The last line, the answer or the failure, is reported below. */
	for (i = 0; i + 1 < trace->len; i++)
		printf("  · %s\n", (char *)g_ptr_array_index(trace, i));
	if (!creds) {
		report(d, FALSE, "", "credentials", error->message,
		       "see the cause above; bucketfs-doctor(1) lists the "
		       "providers in their order and what each reads");
		return;
	}
	g_string_printf(detail, "%s: %s", creds->provider, creds->source);
	if (creds->role)
		g_string_append_printf(detail, ", role %s", creds->role);
	if (creds->expiration)
		g_string_append_printf(
			detail, "; they expire in %" G_GINT64_FORMAT " s",
			creds->expiration - g_get_real_time() / G_USEC_PER_SEC);
	else if (!creds->anonymous)
		g_string_append(detail, "; static keys, no expiry");
	report(d, TRUE, "", "credentials", detail->str, NULL);
	credentials_free(creds);
}

int main(int argc, char **argv)
{
	struct doctor d = { 0 };
	g_autoptr(GError) error = NULL;
	gboolean verbose = FALSE;
	g_autofree char *desc = NULL;
	guint i;

	config_init(&d.cfg);
	if (!parse_args(&d, argc, argv, &verbose, &error)) {
		fprintf(stderr, "bucketfs-doctor: %s\n", error->message);
		config_clear(&d.cfg);
		return 2;
	}
	log_init("bucketfs-doctor", TRUE,
		 verbose ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARNING);
	desc = config_describe(&d.cfg);
	printf("bucketfs-doctor %s\n%s\n", BUCKETFS_VERSION, desc);
	printf("credential providers:\n");
	check_credentials(&d);
	d.s3 = s3_new(&d.cfg, &error);
	if (!d.s3) {
		/* The network checks still tell something: run them
		 * unsigned. */
		g_clear_error(&error);
		d.cfg.anonymous = TRUE;
		d.s3 = s3_new(&d.cfg, &error);
	}
	if (!d.s3)
		report(&d, FALSE, "", "client", error->message, NULL);
	for (i = 0; d.s3 && s3_endpoints(d.s3)[i]; i++)
		check_endpoint(&d, i, s3_endpoints(d.s3)[i]);
	if (d.s3)
		check_dlio_layout(&d);
	check_index(&d);
	check_fds(&d);
	check_fuse(&d);
	if (d.failed)
		printf("✗ %u of %u checks failed", d.failed, d.checks);
	else
		printf("✓ all %u checks passed", d.checks);
	if (d.warned)
		printf(" (%u with a warning)", d.warned);
	printf("\n");
	s3_free(d.s3);
	config_clear(&d.cfg);
	log_shutdown();
	return d.failed ? 1 : 0;
}
