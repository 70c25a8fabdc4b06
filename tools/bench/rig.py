"""The benchmark rig: datasets, the 4 nginx endpoints, the test S3 server
for listings, and mounts (bucketfs, s3fs, rclone) that are always taken
down again.

Everything started here is a child process in its own session (so a Ctrl-C
on the terminal reaches run.py only), is remembered in a Cleanup stack, and
is stopped by its PID; every mount is unmounted with fusermount3 -u.
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BFS_BUILD_DIR", os.path.join(SRC, "build"))
S3SERVER = os.path.join(SRC, "tests", "s3server", "s3server.py")
AK = "bucketfs-test"
SK = "bucketfs-test-secret"
RETINA_SIZE = 322_624

T0 = time.monotonic()


def log(msg):
    """A progress line on stderr."""
    t = time.monotonic() - T0
    sys.stderr.write("[%4d:%02d] %s\n" % (t // 60, t % 60, msg))
    sys.stderr.flush()


_SNAPSHOT = {}


def snapshot_binaries(names=("bucketfs", "bucketfs-index"), optional=("bucketfs-compare",)):
    """Copies the binaries under test to a private directory, so that a
    rebuild in the tree during the run cannot swap or remove them midway.
    An @optional one that is not built is left out (its measurement says
    so)."""
    d = tempfile.mkdtemp(prefix="bfs-bench-bin-", dir="/var/tmp")
    CLEANUP.push("remove %s" % d, lambda: shutil.rmtree(d, ignore_errors=True))
    with open(os.path.join(d, "run.pid"), "w") as f:
        f.write("%d\n" % os.getpid())
    for n in list(names) + list(optional):
        try:
            src = binary(n)
        except FileNotFoundError:
            if n in optional:
                continue
            raise
        dst = os.path.join(d, n)
        shutil.copy2(src, dst)
        _SNAPSHOT[n] = (dst, src)
    return d


def snapshot_build(build_dir, rel, label, tool):
    """A private copy of @rel (say "fs/bucketfs") of the meson build in
    @build_dir, of any commit, so a rebuild meanwhile cannot change what
    is measured: the copy's directory, @rel laid out in it as in the build.
    @tool names the caller in the error for a directory without it."""
    src = os.path.join(os.path.abspath(build_dir), rel)
    if not os.path.exists(src):
        raise SystemExit("%s: %s: no %s (not a built meson build directory)"
                         % (tool, build_dir, rel))
    d = tempfile.mkdtemp(prefix="bfs-%s-%s-" % (tool.split(".")[0], label), dir="/var/tmp")
    CLEANUP.push("remove %s" % d, lambda: shutil.rmtree(d, ignore_errors=True))
    os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
    shutil.copy2(src, os.path.join(d, rel))
    return d


def binary(name):
    if name in _SNAPSHOT:
        return _SNAPSHOT[name][0]
    for sub in ("fs", "tools", ""):
        p = os.path.join(BUILD, sub, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError("%s is not built under %s" % (name, BUILD))


def client_env(**extra):
    """The environment for S3 clients: the test credentials, nothing else
    from AWS_* (AWS_CA_BUNDLE in particular breaks rclone on plain http)."""
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("AWS_") or k == "S3_ENDPOINT_URIS")}
    env.update({"AWS_ACCESS_KEY_ID": AK, "AWS_SECRET_ACCESS_KEY": SK,
                "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                "AWS_CONFIG_FILE": "/nonexistent"})
    env.update(extra)
    return env


# --------------------------------------------------------------------------
# Cleanup: a stack of undo actions, run on every exit path


class Cleanup:
    def __init__(self):
        self.stack = []

    def push(self, what, fn):
        self.stack.append((what, fn))
        return fn

    def remove(self, fn):
        self.stack = [(w, f) for (w, f) in self.stack if f is not fn]

    def run(self):
        while self.stack:
            what, fn = self.stack.pop()
            try:
                fn()
            except Exception as exc:   # keep undoing the rest
                log("cleanup: %s: %s" % (what, exc))


CLEANUP = Cleanup()


def stop_process(proc, name, sig=signal.SIGTERM, timeout=15):
    """Stops one child by its PID: sig, then SIGKILL after timeout."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log("%s (pid %d) did not exit on signal %d; SIGKILL" % (name, proc.pid, sig))
        os.kill(proc.pid, signal.SIGKILL)
        return proc.wait()


def drop_caches():
    """sync; echo 3 > /proc/sys/vm/drop_caches (root only)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def can_drop_caches():
    return os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK)


# --------------------------------------------------------------------------
# Datasets (kept under the cache directory, reused when complete)


class Dataset:
    """One bucket: a directory CACHE/buckets/NAME served by nginx and listed
    by the test S3 server.  meta/NAME.json marks it complete."""

    def __init__(self, cache, name):
        self.cache = cache
        self.name = name
        self.dir = os.path.join(cache, "buckets", name)
        self.meta_path = os.path.join(cache, "meta", name + ".json")
        self.meta = None
        self.files = []     # relative keys

    def load(self):
        try:
            with open(self.meta_path) as f:
                self.meta = json.load(f)
        except (OSError, ValueError):
            return False
        return self.meta.get("complete") is True and os.path.isdir(self.dir)

    def save(self, **meta):
        os.makedirs(os.path.dirname(self.meta_path), exist_ok=True)
        self.meta = dict(meta, complete=True, name=self.name)
        tmp = self.meta_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.meta, f)
        os.replace(tmp, self.meta_path)

    def start_fresh(self):
        if os.path.exists(self.meta_path):
            os.unlink(self.meta_path)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)

    def paths(self):
        return [os.path.join(self.dir, k) for k in self.files]

    def total_bytes(self):
        return self.meta["bytes"]


def _write_random_files(jobs):
    for path, size in jobs:
        with open(path, "wb") as f:
            left = size
            while left:
                n = min(left, 8 << 20)
                f.write(os.urandom(n))
                left -= n


def _parallel_write(jobs, procs=2):
    """Writes (path, size) random files with a few processes."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    shares = [jobs[i::procs] for i in range(procs)]
    ps = [ctx.Process(target=_write_random_files, args=(s,)) for s in shares]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError("dataset writer failed (exit %s)" % p.exitcode)


def retina_keys(n):
    w = len(str(n))
    return ["train/img_%0*d_of_%d.jpeg" % (w, i, n) for i in range(n)]


def retina_dataset(cache, n):
    """N files of 322,624 random bytes in one flat directory train/."""
    ds = Dataset(cache, "retina-%d" % n)
    ds.files = retina_keys(n)
    if ds.load():
        log("dataset %s: reusing %s" % (ds.name, ds.dir))
        return ds
    log("dataset %s: writing %d files of %d bytes (%.1f GB) to %s"
        % (ds.name, n, RETINA_SIZE, n * RETINA_SIZE / 1e9, ds.dir))
    ds.start_fresh()
    os.makedirs(os.path.join(ds.dir, "train"))
    t = time.monotonic()
    _parallel_write([(os.path.join(ds.dir, k), RETINA_SIZE) for k in ds.files])
    ds.save(kind="retina", files=n, bytes=n * RETINA_SIZE, file_size=RETINA_SIZE)
    log("dataset %s: written in %.0f s" % (ds.name, time.monotonic() - t))
    return ds


def large_dataset(cache, mib):
    """One file big.bin of MiB mebibytes of random bytes."""
    ds = Dataset(cache, "large-%dm" % mib)
    ds.files = ["big.bin"]
    if ds.load():
        log("dataset %s: reusing %s" % (ds.name, ds.dir))
        return ds
    log("dataset %s: writing big.bin, %d MiB" % (ds.name, mib))
    ds.start_fresh()
    t = time.monotonic()
    path = os.path.join(ds.dir, "big.bin")
    # Two writers, one per half, for speed.
    size = mib << 20
    half = (size // 2) & ~((1 << 20) - 1)
    with open(path, "wb") as f:
        f.truncate(size)
    import multiprocessing
    ctx = multiprocessing.get_context("fork")

    def fill(start, end):
        with open(path, "r+b") as f:
            f.seek(start)
            pos = start
            while pos < end:
                n = min(end - pos, 8 << 20)
                f.write(os.urandom(n))
                pos += n
    ps = [ctx.Process(target=fill, args=r) for r in ((0, half), (half, size))]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
        if p.exitcode:
            raise RuntimeError("large file writer failed")
    ds.save(kind="large", files=1, bytes=size)
    log("dataset %s: written in %.0f s" % (ds.name, time.monotonic() - t))
    return ds


UNET_RECORD = 146_600_628   # bytes of one UNet3D sample (MLPerf Storage's config)


def _write_npz(jobs):
    import numpy as np
    for path, nbytes, seed in jobs:
        rng = np.random.default_rng(seed)
        x = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
        tmp = path + ".tmp.npz"
        np.savez(tmp, x=x, y=np.zeros(1, dtype=np.uint8))
        os.replace(tmp, path)


def npz_dataset(cache, n):
    """N .npz files shaped like DLIO's UNet3D data: np.savez of x, one
    sample of 146,600,628 random bytes (uint8), and y, a label: about
    147 MB each, train/img_<i>_of_<N>.npz."""
    try:
        import numpy  # noqa: F401
    except ImportError as exc:
        raise RuntimeError("the .npz dataset needs numpy (apt-get install python3-numpy): %s"
                           % exc)
    ds = Dataset(cache, "unet3d-%d" % n)
    w = len(str(n))
    ds.files = ["train/img_%0*d_of_%d.npz" % (w, i, n) for i in range(n)]
    if ds.load():
        log("dataset %s: reusing %s" % (ds.name, ds.dir))
        return ds
    log("dataset %s: writing %d .npz files of a %d-byte sample" % (ds.name, n, UNET_RECORD))
    ds.start_fresh()
    os.makedirs(os.path.join(ds.dir, "train"))
    t = time.monotonic()
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    jobs = [(os.path.join(ds.dir, k), UNET_RECORD, i) for i, k in enumerate(ds.files)]
    ps = [ctx.Process(target=_write_npz, args=(jobs[i::2],)) for i in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
        if p.exitcode:
            raise RuntimeError(".npz writer failed (exit %s)" % p.exitcode)
    sizes = [os.path.getsize(os.path.join(ds.dir, k)) for k in ds.files]
    ds.save(kind="npz", files=n, bytes=sum(sizes), file_size=sizes[0], record=UNET_RECORD)
    log("dataset %s: written in %.0f s" % (ds.name, time.monotonic() - t))
    return ds


def tree_keys(fanout, levels=4, per_leaf=4, seed=7):
    """(key, size) of a deep tree: `levels` directory levels of `fanout`
    each, `per_leaf` files of 4-64 KiB in each leaf directory."""
    rng = random.Random(seed)
    out = []

    def walk(prefix, depth):
        if depth == levels:
            for k in range(per_leaf):
                out.append((prefix + "f%d.dat" % k, rng.randint(4096, 65536)))
            return
        for i in range(fanout):
            walk(prefix + "d%d/" % i, depth + 1)
    walk("", 0)
    return out


def tree_dataset(cache, fanout, levels=4, per_leaf=4):
    ds = Dataset(cache, "tree-%dx%d" % (levels, fanout))
    keys = tree_keys(fanout, levels, per_leaf)
    ds.files = [k for k, _ in keys]
    if ds.load():
        log("dataset %s: reusing %s" % (ds.name, ds.dir))
        return ds
    log("dataset %s: writing %d files of 4-64 KiB, %d levels x %d"
        % (ds.name, len(keys), levels, fanout))
    ds.start_fresh()
    for d in sorted({os.path.dirname(k) for k in ds.files}):
        os.makedirs(os.path.join(ds.dir, d), exist_ok=True)
    _parallel_write([(os.path.join(ds.dir, k), s) for k, s in keys])
    dirs = set()
    for k in ds.files:
        parts = k.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    ds.save(kind="tree", files=len(keys), bytes=sum(s for _, s in keys),
            dirs=len(dirs), levels=levels, fanout=fanout, per_leaf=per_leaf)
    return ds


def warm(paths, threads=8):
    """Reads files so they sit in the page cache (the server's side)."""
    import concurrent.futures

    def rd(p):
        with open(p, "rb", buffering=0) as f:
            while f.read(8 << 20):
                pass
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        list(ex.map(rd, paths, chunksize=64))


# --------------------------------------------------------------------------
# Servers


class S3Server:
    """tests/s3server/s3server.py: answers the listings nginx forwards."""

    def __init__(self, tmp, datasets, prefix=()):
        args = list(prefix) + ["/usr/bin/python3", S3SERVER, "--port", "0", "--quiet",
                "--etag-style", "nginx", "--timeout", "600"]
        for ds in datasets:
            args += ["--bucket", "%s=%s" % (ds.name, ds.dir)]
        self.log_path = os.path.join(tmp, "s3server.log")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                     stderr=open(self.log_path, "wb"),
                                     start_new_session=True, text=True)
        CLEANUP.push("stop the test S3 server", self.stop)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError("test S3 server did not start: %r %s"
                               % (line, open(self.log_path).read()[-2000:]))
        self.url = line.split()[2]
        self.port = int(self.url.rsplit(":", 1)[1])

    def stop(self):
        stop_process(self.proc, "s3server")
        self.proc.stdout.close()


NGINX_CONF = """\
# generated by tools/bench/rig.py: endpoint {i} of the benchmark
{load_modules}daemon off;
master_process off;
worker_processes 1;
pid {tmp}/nginx-{i}.pid;
error_log {tmp}/nginx-{i}.error.log warn;
events {{ worker_connections 10000; multi_accept on; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 100000000;
    keepalive_timeout 600s;
    server_tokens off;
    types {{ }}
    default_type application/octet-stream;
    open_file_cache max=8192 inactive=600s;
    open_file_cache_valid 600s;
    client_body_temp_path {tmp}/nginx-{i}.tmp/body;
    proxy_temp_path {tmp}/nginx-{i}.tmp/proxy;
    fastcgi_temp_path {tmp}/nginx-{i}.tmp/fastcgi;
    uwsgi_temp_path {tmp}/nginx-{i}.tmp/uwsgi;
    scgi_temp_path {tmp}/nginx-{i}.tmp/scgi;
    upstream s3server {{
        server 127.0.0.1:{s3port};
        keepalive 32;
    }}
{tls}{servers}}}
"""

# One port of the endpoint.  Objects: GET/HEAD/Range straight from the
# dataset directory (nginx ignores the S3 Authorization headers).  Listings
# (list-type=), bucket-level requests and "directories" go to the test S3
# server, with the client's Host header (it is part of the SigV4 signature)
# and the request URI untouched, never delayed.  On a delayed port an object
# request first waits (echo_sleep: a timer, no CPU), then is handed to the
# static-file location (echo_exec), which answers If-Match and Range as on
# the plain port: a fixed first-byte delay, as a remote store's.
NGINX_SERVER = """\
    server {{
        # {what}
        listen {host}:{port}{ssl} backlog=4096;
        root {root};
        location / {{
            error_page 418 = @s3server;
            if ($args ~ "(^|&)list-type=") {{ return 418; }}
            if ($request_method !~ ^(GET|HEAD)$) {{ return 418; }}
            if (-d $request_filename) {{ return 418; }}
{delay}        }}
        location @object {{ }}
        location @s3server {{
            proxy_pass http://s3server;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
"""

# The TLS ports' settings (the rig's own CA and server certificate, made
# by Tls): one session cache shared by the endpoint's ports, so a
# client that reconnects resumes instead of a full handshake.
NGINX_TLS = """\
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:tls{i}:16m;
    ssl_session_timeout 1h;
    ssl_buffer_size 16k;
"""

NGINX_DELAY = """\
            echo_sleep {seconds};
            echo_exec @object;
"""

# Debian's libnginx-mod-http-echo (echo_sleep, echo_exec).
ECHO_MODULE = "/usr/lib/nginx/modules/ngx_http_echo_module.so"


def echo_module():
    """The echo module's path, or None when it is not installed."""
    return ECHO_MODULE if os.path.exists(ECHO_MODULE) else None


def nginx_conf(tmp, i, ports, root, s3port, tls_ports=None, tls=None, host="127.0.0.1"):
    """The config of endpoint @i, listening on @host: @ports maps a
    first-byte delay (ms) to the port that answers with it; delay 0 is the
    plain static port.  @tls_ports, the same for the TLS ports, with @tls
    (a Tls) their certificate."""
    servers = []
    for scheme, pmap in (("http", ports), ("https", tls_ports or {})):
        for delay, port in sorted(pmap.items()):
            servers.append(NGINX_SERVER.format(
                what="%s: objects after a %g ms first-byte delay" % (scheme, delay) if delay
                else "%s: objects without delay" % scheme, host=host, port=port, root=root,
                ssl=" ssl" if scheme == "https" else "",
                delay=NGINX_DELAY.format(seconds="%.3f" % (delay / 1e3)) if delay else ""))
    delayed = any(d for d in list(ports) + list(tls_ports or {}))
    if delayed and not echo_module():
        raise RuntimeError("delayed endpoints need nginx's echo module (%s): apt-get "
                           "install libnginx-mod-http-echo" % ECHO_MODULE)
    return NGINX_CONF.format(
        i=i, tmp=tmp, s3port=s3port, servers="".join(servers),
        tls=NGINX_TLS.format(cert=tls.cert, key=tls.key, i=i) if tls_ports else "",
        load_modules="load_module %s;\n" % ECHO_MODULE if delayed else "")


def free_ports(n):
    import socket
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def wait_port(port, timeout=10, proc=None, host="127.0.0.1"):
    import socket
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), 0.5).close()
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError("exited with status %d" % proc.returncode)
            time.sleep(0.02)
    raise RuntimeError("port %d did not open in %d s" % (port, timeout))


def _raise_nofile():
    """With master_process off, nginx's worker_rlimit_nofile is not applied:
    the one process keeps the limit it was started with (raised here to the
    hard limit), and the open file cache (8,192) plus the connections
    (10,000) must fit under it."""
    import resource
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Nginx:
    """One nginx instance (one process: master_process off) per endpoint,
    so that one endpoint can be killed by its PID.  @ports maps a
    first-byte delay in ms to a port; 0 must be there.  With @wire (a
    Wire), it runs in the wire's network namespace, on the store's
    address."""

    def __init__(self, tmp, i, ports, root, s3port, tls_ports=None, tls=None, wire=None):
        self.tmp, self.i, self.port = tmp, i, ports[0]
        self.host = WIRE_STORE if wire else "127.0.0.1"
        self.prefix = wire.prefix() if wire else []
        self.conf = os.path.join(tmp, "nginx-%d.conf" % i)
        os.makedirs(os.path.join(tmp, "nginx-%d.tmp" % i), exist_ok=True)
        with open(self.conf, "w") as f:
            f.write(nginx_conf(tmp, i, ports, root, s3port, tls_ports, tls, self.host))
        self.proc = None
        self.ports = dict(ports)
        self.ports.update({("tls", d): p for d, p in (tls_ports or {}).items()})
        self.url = "http://%s:%d" % (self.host, self.port)
        self.urls = {d: "http://%s:%d" % (self.host, p) for d, p in ports.items()}
        # The TLS ports' URLs, by delay (empty without TLS).
        self.tls_urls = {d: "https://%s:%d" % (self.host, p)
                         for d, p in (tls_ports or {}).items()}
        self.start()
        CLEANUP.push("stop nginx endpoint %d" % i, self.stop)

    def start(self):
        self.proc = subprocess.Popen(
            self.prefix + ["nginx", "-p", self.tmp, "-c", self.conf,
             "-e", os.path.join(self.tmp, "nginx-%d.error.log" % self.i)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.tmp, "nginx-%d.stderr" % self.i), "ab"),
            start_new_session=True, preexec_fn=_raise_nofile)
        try:
            for port in self.ports.values():
                wait_port(port, proc=self.proc, host=self.host)
        except RuntimeError as exc:
            raise RuntimeError("nginx on port %d: %s: %s" % (
                self.port, exc, open(os.path.join(self.tmp, "nginx-%d.error.log"
                                                  % self.i)).read()[-2000:]))

    def kill(self):
        """Hard failure of this endpoint: SIGKILL (connections reset)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc is not None:
            stop_process(self.proc, "nginx %d" % self.i, signal.SIGTERM)


class Endpoints:
    """4 nginx endpoints in front of one dataset root + the test S3 server.
    Each endpoint has a port per first-byte delay of @delays (ms; 0, the
    plain port, always): urls are the plain ones, delay_urls[d] those that
    answer after d ms.  With @tls (a Tls), each endpoint also has a TLS
    port per delay, the same scheme on other ports: tls_delay_urls[d].
    With @wire (a Wire), the test S3 server and nginx run in the wire's
    network namespace and are reached over it."""

    def __init__(self, tmp, root, datasets, n=4, delays=(), tls=None, wire=None):
        self.wire = wire
        self.s3 = S3Server(tmp, datasets, wire.prefix() if wire else ())
        self.delays = sorted(set([0] + [d for d in delays]))
        self.tls = tls
        k = len(self.delays)
        ports = free_ports(n * k * (2 if tls else 1))
        self.nginx = []
        for i in range(n):
            plain = {d: ports[i * k + j] for j, d in enumerate(self.delays)}
            tls_ports = {d: ports[(n + i) * k + j] for j, d in enumerate(self.delays)} \
                if tls else None
            self.nginx.append(Nginx(tmp, i, plain, root, self.s3.port, tls_ports, tls, wire))
        self.urls = [x.url for x in self.nginx]
        self.delay_urls = {d: [x.urls[d] for x in self.nginx] for d in self.delays}
        self.tls_delay_urls = {d: [x.tls_urls[d] for x in self.nginx] for d in self.delays} \
            if tls else {}

    def urls_for(self, delay):
        """The 4 URLs answering after @delay ms in the scheme in use
        (use_tls()): the TLS ports' while it is on, else the plain ones."""
        if TLS:
            if not self.tls:
                raise RuntimeError("the rig was started without TLS ports")
            return self.tls_delay_urls[delay]
        return self.delay_urls[delay]

    def pids(self):
        """The endpoints' processes: the nginx ones, the test S3 server and
        the wire's."""
        return [x.proc.pid for x in self.nginx if x.proc] + \
            ([self.s3.proc.pid] if self.s3.proc else []) + \
            ([self.wire.proc.pid] if self.wire else [])


# --------------------------------------------------------------------------
# The wire: the endpoints in a network namespace of their own, a model of a
# store on another host

WIRE_NETNS = "bucketfs-bench-store"
WIRE_TAPS = ("bfsbench0", "bfsbench1")    # this host's side, the store's
WIRE_HOST, WIRE_STORE = "10.77.0.1", "10.77.0.2"
# Frames a tap holds for the wire to read (a NIC's ring).  At 1,000, the
# default, bursts of many streams overflowed the store's tap while the
# wire waited for a CPU, and TCP's retransmission timeouts (200 ms) showed
# in every p99; a lossless link is the model.
WIRE_QUEUE = "20000"
WIRE_LABEL = ("wire: the endpoints in a network namespace of their own, reached over a "
              "pair of taps that tools/bench/wire.c joins, a model of a store on another host")


# Why --wire runs unpinned only: a frame the wire writes into a tap is
# received (softirq, TCP) on the wire's own CPU, so pinned with the
# endpoints on CPU 0 it would move all the daemon's receive work there,
# which no host's NIC does.
WIRE_UNPINNED = ("--wire runs unpinned only: the wire receives every frame on its own "
                 "CPU, so pinned beside the endpoints it would put the daemon's TCP "
                 "receive work on their core")


class Wire:
    """The network namespace WIRE_NETNS, the taps WIRE_TAPS (one in it,
    one here) and tools/bench/wire.c, built into @tmp, carrying frames
    between them.  On loopback the client's and the server's TCP work run
    in each other's system calls; over the wire each frame is received in
    the wire's process, as a NIC's interrupt would take it, so the
    daemon's CPU is its own socket's work only (wire.c says more)."""

    def __init__(self, tmp):
        self.proc = None
        binary_ = os.path.join(tmp, "wire")
        r = subprocess.run(["cc", "-O2", "-pthread", "-o", binary_,
                            os.path.join(HERE, "wire.c")], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError("building wire.c: %s" % r.stderr.strip()[-500:])
        remove_netns()   # one left by a run that was SIGKILLed
        self._ip("netns", "add", WIRE_NETNS)
        CLEANUP.push("remove network namespace %s" % WIRE_NETNS, remove_netns)
        self.proc = subprocess.Popen([binary_, WIRE_TAPS[0], WIRE_TAPS[1]],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=open(os.path.join(tmp, "wire.log"), "ab"),
                                     start_new_session=True, text=True)
        CLEANUP.push("stop the wire", self.stop)
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.wait()
            raise RuntimeError("wire did not start: %s"
                               % open(os.path.join(tmp, "wire.log")).read()[-500:])
        self._ip("link", "set", WIRE_TAPS[1], "netns", WIRE_NETNS)
        self._ip("addr", "add", WIRE_HOST + "/30", "dev", WIRE_TAPS[0])
        self._ip("link", "set", WIRE_TAPS[0], "up", "txqueuelen", WIRE_QUEUE)
        for args in (("addr", "add", WIRE_STORE + "/30", "dev", WIRE_TAPS[1]),
                     ("link", "set", WIRE_TAPS[1], "up", "txqueuelen", WIRE_QUEUE),
                     ("link", "set", "lo", "up")):
            self._ip("-n", WIRE_NETNS, *args)

    @staticmethod
    def _ip(*args):
        r = subprocess.run(["ip"] + list(args), capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError("ip %s: %s" % (" ".join(args), r.stderr.strip()))

    @staticmethod
    def prefix():
        """The command prefix that runs a program in the store's namespace."""
        return ["ip", "netns", "exec", WIRE_NETNS]

    def stop(self):
        if self.proc is not None:
            stop_process(self.proc, "wire")
            self.proc.stdout.close()


def remove_netns():
    """Removes WIRE_NETNS if it exists (its tap goes with it)."""
    if os.path.exists("/run/netns/" + WIRE_NETNS):
        subprocess.run(["ip", "netns", "del", WIRE_NETNS], capture_output=True)


# --------------------------------------------------------------------------
# TLS: the rig's own CA and server certificate, made with openssl at set-up

# The Tls of the rig while its passes go to the TLS ports, else None.
TLS = None
TLS_LABEL = "TLS: the same endpoints over HTTPS"


class Tls:
    """A self-signed CA and a server certificate for 127.0.0.1, localhost
    and the wire's store address signed by it, made by openssl in @tmp (the run's directory,
    removed at the end; never in the tree).  ca is the CA's PEM, the file
    every client verifies the endpoints with (bucketfs -o ca_file=, curl
    --cacert, Python's ssl)."""

    def __init__(self, tmp):
        d = os.path.join(tmp, "tls")
        os.makedirs(d, mode=0o700)
        self.ca = os.path.join(d, "ca.pem")
        ca_key = os.path.join(d, "ca.key")
        self.cert = os.path.join(d, "server.pem")
        self.key = os.path.join(d, "server.key")
        csr = os.path.join(d, "server.csr")
        ext = os.path.join(d, "server.ext")
        with open(ext, "w") as f:
            f.write("basicConstraints = critical, CA:FALSE\n"
                    "keyUsage = critical, digitalSignature, keyEncipherment\n"
                    "extendedKeyUsage = serverAuth\n"
                    "subjectAltName = IP:127.0.0.1, IP:%s, DNS:localhost\n" % WIRE_STORE)
        steps = [
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", ca_key, "-out", self.ca, "-days", "2",
             "-subj", "/CN=bucketfs bench rig CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", self.key, "-out", csr, "-subj", "/CN=127.0.0.1"],
            ["openssl", "x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", ca_key,
             "-CAcreateserial", "-out", self.cert, "-days", "2", "-extfile", ext],
        ]
        for cmd in steps:
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError("TLS set-up: %s: %s" % (" ".join(cmd[:3]),
                                                           r.stderr.strip()[-500:]))
        r = subprocess.run(["openssl", "x509", "-in", self.cert, "-noout", "-enddate"],
                           capture_output=True, text=True)
        self.describe = ("EC P-256, CN=127.0.0.1, subjectAltName IP:127.0.0.1, IP:%s and "
                         "DNS:localhost, %s" % (WIRE_STORE, r.stdout.strip() or "?"))


def use_tls(rig_, on):
    """Passes to the TLS ports (on) or the plain ones (off): what
    Endpoints.urls_for() gives, and the CA the clients load."""
    global TLS
    if on and not rig_.endpoints.tls:
        raise RuntimeError("the rig was started without TLS ports")
    TLS = rig_.endpoints.tls if on else None
    import readers
    readers.CA_FILE = TLS.ca if TLS else None


def curl_tls_args():
    """curl's options for the scheme in use: the rig's CA while on TLS."""
    return ["--cacert", TLS.ca] if TLS else []


# --------------------------------------------------------------------------
# Pinned mode: a model of a host with a spare core

# (the readers' and endpoints' CPU, the daemon's CPU) while pinned, else None.
PIN = None
PINNED_LABEL = "pinned: a model of a host with a spare core"


def set_affinity(pid, cpus):
    """Every thread of @pid on @cpus (threads it starts later inherit it)."""
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            pass   # the thread ended meanwhile


def pin(endpoints, on):
    """Pinned mode on or off.  On: this process (and so the readers, curl
    and dd it starts), the nginx endpoints and the test S3 server run on
    CPU 0 only, and every bucketfs daemon started from now on on CPU 1
    only (taskset); a reference path gets the same CPU 0 and leaves CPU 1
    idle.  Off: everything on every CPU again."""
    global PIN
    if on and (os.cpu_count() or 1) < 2:
        raise RuntimeError("pinned mode needs 2 CPUs")
    PIN = (0, 1) if on else None
    cpus = {0} if on else set(range(os.cpu_count() or 1))
    for pid in [os.getpid()] + endpoints.pids():
        set_affinity(pid, cpus)


# --------------------------------------------------------------------------
# A host's memory, modelled: a VM's free page reporting paused

PAGE_REPORTING = "/sys/module/page_reporting/parameters"
# Larger than the largest block the buddy allocator keeps (order 10 on
# x86-64), so that no free block is ever large enough to be reported.
NO_REPORTING_ORDER = "11"
# What the model leaves untouched: the page cache of the datasets and the
# daemons' memory need room too.
MEMORY_MARGIN = 4 << 30
VM_MEMORY_LABEL = ("memory backed: this VM's free page reporting paused and free memory "
                   "touched once, a model of a host's memory")


def meminfo(field):
    """A /proc/meminfo field, in bytes (0 if missing)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10
    return 0


def back_memory(mode):
    """The memory model of a run, "backed" or "as-is"; what was done, for
    the report.

    A VM with free page reporting (virtio-balloon's page_reporting) hands
    the free memory it has not touched for a while back to its host; the
    first write to such a page then costs a fault in the host: 1.6-2.6 s
    per GB here, against 0.4 s for memory freed moments ago
    (docs/PERFORMANCE.md).  Every page a FUSE
    daemon stores into the page cache is such a first write, and the
    direct path, whose readers reuse their buffers, pays almost none of it.
    "backed" models a host whose memory stays backed, as bare metal's
    does: reporting is paused for the run (page_reporting_order beyond the
    largest free block; restored by the Cleanup stack) and the free memory
    but MEMORY_MARGIN is written once, all of it held until the last
    byte is written, so that it is backed again.  The margin may not be:
    m_large() warms the mount up before its first measured pass.  "as-is"
    measures the VM as it is."""
    if mode != "backed":
        return {"mode": "as-is", "note": "free page reporting left as it is"}
    knob = os.path.join(PAGE_REPORTING, "page_reporting_order")
    if not os.path.exists(knob):
        return {"mode": "as-is", "note": "no free page reporting on this machine "
                "(%s missing): memory stays backed anyway" % PAGE_REPORTING}
    with open(knob) as f:
        saved = f.read().strip()
    try:
        with open(knob, "w") as f:
            f.write(NO_REPORTING_ORDER)
    except OSError as exc:
        log("memory: cannot pause free page reporting (%s): measuring the VM as it is" % exc)
        return {"mode": "as-is", "note": "pausing free page reporting failed: %s" % exc}

    def restore():
        with open(knob, "w") as f:
            f.write(saved)
    CLEANUP.push("restore page_reporting_order=%s" % saved, restore)
    import mmap
    n = max(0, meminfo("MemAvailable") - MEMORY_MARGIN) & ~((1 << 20) - 1)
    t = time.monotonic()
    chunk = b"\1" * (1 << 20)
    step = max(1 << 30, n // 20)
    # Every chunk stays mapped until all are written: a chunk unmapped at
    # once would hand its pages back to the free lists, the next chunk
    # would take much the same pages again, and only about a chunk's worth
    # of memory would end up backed (then the first 2 GiB dd of a run pays
    # the host's faults).  Holding takes about twice as long; alternated
    # with chunk-by-chunk freeing over nine sittings it changed the DLIO
    # passes by 0.96x, within their spread (docs/PERFORMANCE.md).
    held = []
    try:
        for lo in range(0, n, step):
            size = min(step, n - lo)
            m = mmap.mmap(-1, size)
            held.append(m)
            for off in range(0, size, 1 << 20):
                m[off:off + (1 << 20)] = chunk
    finally:
        for m in held:
            m.close()
    dt = time.monotonic() - t
    log("memory: free page reporting paused (page_reporting_order %s -> %s), %.1f GiB "
        "written once in %.1f s" % (saved, NO_REPORTING_ORDER, n / 2**30, dt))
    return {"mode": "backed", "reporting_order_was": saved, "touched_bytes": n,
            "touch_s": dt, "note": VM_MEMORY_LABEL}


# --------------------------------------------------------------------------
# Mounts


def model_host(rig_, vm_memory, pinned):
    """The host a one-off measurement (ab.py, profile.py) models: memory
    backed or as-is (back_memory(), which logs what it did when it backs
    the memory; the as-is note is logged here), and pinned mode (pin()) on
    @rig_'s endpoints when @pinned."""
    mem = back_memory(vm_memory)
    if mem["mode"] != "backed":
        log("memory: %s" % mem["note"])
    if pinned:
        pin(rig_.endpoints, True)


def is_mount(path):
    try:
        return os.path.ismount(path)
    except OSError:
        return False


def unmount(mnt):
    """fusermount3 -u, retried while busy, then lazily (-uz) as a last resort."""
    for _ in range(50):
        if not is_mount(mnt):
            return True
        r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True, text=True)
        if r.returncode == 0 or not is_mount(mnt):
            return True
        time.sleep(0.2)
    subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
    log("unmount %s: busy, detached lazily (fusermount3 -uz)" % mnt)
    return not is_mount(mnt)


class Mount:
    """A FUSE daemon run in the foreground as our child, stderr to a log.

    kind: bucketfs | s3fs | rclone.  Mounted on enter, unmounted (and the
    daemon waited for, else stopped by PID) on exit, also on Ctrl-C."""

    def __init__(self, kind, rig, ds, tag="", nofile=None, extra_opts=(), urls=None):
        self.kind, self.rig, self.ds = kind, rig, ds
        self.urls = urls   # bucketfs's endpoints, if not the rig's plain ones
        self.mnt = os.path.join(rig.tmp, "mnt-%s-%s%s" % (kind, ds.name, tag))
        self.log_path = os.path.join(rig.tmp, "%s-%s%s.log" % (kind, ds.name, tag))
        self.nofile = nofile
        self.extra_opts = list(extra_opts)
        self.proc = None
        self.ready_s = None

    def command(self):
        r = self.rig
        if self.kind == "bucketfs":
            opts = ["endpoint=%s" % u for u in (self.urls or r.endpoints.urls)]
            opts.append("index=%s" % r.index_path(self.ds))
            opts += getattr(r, "mount_opts", []) + self.extra_opts
            cmd = [binary("bucketfs"), "-f", "-o", ",".join(opts),
                   getattr(self.ds, "url", "s3://%s" % self.ds.name), self.mnt]
            if self.nofile:
                cmd = ["prlimit", "--nofile=%d:%d" % (self.nofile, self.nofile)] + cmd
            if PIN:
                cmd = ["taskset", "-c", str(PIN[1])] + cmd
            return cmd, r.client_env()
        if self.kind == "s3fs":
            opts = ["url=%s" % r.endpoints.urls[0], "use_path_request_style",
                    "passwd_file=%s" % r.s3fs_passwd(), "ro"] + self.extra_opts
            return ["s3fs", self.ds.name, self.mnt, "-f", "-o", ",".join(opts)], client_env()
        if self.kind == "rclone":
            return (["rclone", "mount", "--config", r.rclone_conf(),
                     "bench:%s" % self.ds.name, self.mnt, "--read-only",
                     "--vfs-cache-mode", "off", "--dir-cache-time", "1000h",
                     "--poll-interval", "0", "--log-level", "NOTICE"] + self.extra_opts,
                    {k: v for k, v in os.environ.items() if not k.startswith("AWS_")})
        raise ValueError(self.kind)

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        cmd, env = self.command()
        self.logf = open(self.log_path, "ab")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self.logf, stderr=self.logf,
                                     start_new_session=True)
        self._undo = CLEANUP.push("unmount %s" % self.mnt, self.close)
        deadline = t0 + 600
        while not is_mount(self.mnt):
            if self.proc.poll() is not None:
                self.close()
                raise RuntimeError("%s exited with status %s before mounting: %s"
                                   % (self.kind, self.proc.returncode, self.log_tail()))
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("%s did not mount in 600 s" % self.kind)
            time.sleep(0.005)
        self.ready_s = time.monotonic() - t0
        return self

    def log_tail(self, n=2000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self):
        if self.proc is None:
            return
        unmount(self.mnt)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            stop_process(self.proc, self.kind)
        self.logf.close()
        CLEANUP.remove(self._undo)
        self.proc = None

    def __exit__(self, *exc):
        self.close()

    def path(self, key=""):
        return os.path.join(self.mnt, key)


class Rig:
    """The run's temporary directory, the endpoints and client configs."""

    def __init__(self, cache, datasets, delays=(), tls=False, wire=False):
        self.cache = cache
        self.tmp = tempfile.mkdtemp(prefix="bfs-bench-", dir="/var/tmp")
        with open(os.path.join(self.tmp, "run.pid"), "w") as f:
            f.write("%d\n" % os.getpid())
        self.logs_dir = None
        CLEANUP.push("remove %s" % self.tmp, self._remove_tmp)
        self.root = os.path.join(cache, "buckets")
        self.datasets = datasets
        self.tls = Tls(self.tmp) if tls else None
        self.wire = Wire(self.tmp) if wire else None
        self.endpoints = Endpoints(self.tmp, self.root, datasets, delays=delays, tls=self.tls,
                                   wire=self.wire)
        self._passwd = self._rclone = None

    def _remove_tmp(self):
        # rclone.conf holds the test keys; the other configs are kept.
        remove_run_dir(self.tmp, self.logs_dir, (".log", ".stderr", ".conf"),
                       skip=("rclone.conf",))

    def index_path(self, ds):
        return os.path.join(self.tmp, "%s.idx" % ds.name)

    @staticmethod
    def client_env():
        return client_env()

    def s3fs_passwd(self):
        if not self._passwd:
            self._passwd = os.path.join(self.tmp, "s3fs.passwd")
            fd = os.open(self._passwd, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.write(fd, ("%s:%s\n" % (AK, SK)).encode())
            os.close(fd)
        return self._passwd

    def rclone_conf(self):
        if not self._rclone:
            self._rclone = os.path.join(self.tmp, "rclone.conf")
            with open(self._rclone, "w") as f:
                f.write("[bench]\ntype = s3\nprovider = Other\nenv_auth = false\n"
                        "access_key_id = %s\nsecret_access_key = %s\n"
                        "endpoint = %s\nregion = us-east-1\n"
                        % (AK, SK, self.endpoints.urls[0]))
            os.chmod(self._rclone, 0o600)
        return self._rclone

    def object_url(self, ds, key, i=0, delay=0):
        urls = self.endpoints.urls_for(delay)
        return "%s/%s/%s" % (urls[i % len(urls)], ds.name, key)


def remove_run_dir(tmp, logs_dir, suffixes=(".log", ".stderr"), skip=()):
    """Copies the daemons' and servers' logs (the files of @tmp whose names
    end in one of @suffixes, but not those in @skip) to @logs_dir, if set,
    then removes @tmp."""
    if logs_dir:
        os.makedirs(logs_dir, exist_ok=True)
        for name in os.listdir(tmp):
            if name.endswith(tuple(suffixes)) and name not in skip:
                try:
                    shutil.copy(os.path.join(tmp, name), logs_dir)
                except OSError:
                    pass
    shutil.rmtree(tmp, ignore_errors=True)


def clear_stale(cache_tmp_parent="/var/tmp"):
    """Unmounts mounts left by an earlier run that was SIGKILLed (its run.pid
    names a dead process) and removes its directory."""
    for name in os.listdir(cache_tmp_parent):
        if not name.startswith("bfs-bench-"):
            continue
        d = os.path.join(cache_tmp_parent, name)
        try:
            pid = int(open(os.path.join(d, "run.pid")).read())
        except (OSError, ValueError):
            continue
        if os.path.exists("/proc/%d" % pid):
            continue
        with open("/proc/mounts") as f:
            mnts = [line.split()[1] for line in f if line.split()[1].startswith(d + "/")]
        for m in mnts:
            log("stale mount from an earlier run: %s; unmounting" % m)
            subprocess.run(["fusermount3", "-uz", m], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


def http_get(url, headers=None, timeout=30):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
