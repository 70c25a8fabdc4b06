"""run.py's real-endpoint mode: the user's endpoints and bucket instead of
the local rig (no nginx, no test S3 server, no generated dataset).

The credentials are the ones the mount takes: the environment
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or the
profile (AWS_PROFILE, the shared files), passed through untouched to
bucketfs, bucketfs-index and bucketfs-compare.  Listing the keys to read
and the optional upload (--upload) go through botocore, which resolves
the same credentials the same way.
"""

import concurrent.futures
import os
import tempfile
import types

import rig
from rig import CLEANUP, log


def _not_a_path(rel):
    """Keys the mount does not show as files (docs/INDEX-FORMAT.md):
    markers, empty/'.'/'..' components, names over 255 bytes."""
    if not rel or rel.endswith("/"):
        return True
    parts = rel.split("/")
    return len(parts) > 1024 or any(
        p in ("", ".", "..") or len(p.encode()) > 255 for p in parts)


def parse_bucket(url):
    """s3://BUCKET[/PREFIX] -> (bucket, prefix ending in '/' or '')."""
    if not url.startswith("s3://") or len(url) <= 5:
        raise ValueError("--bucket: expected s3://BUCKET[/PREFIX], got %r" % url)
    bucket, _, prefix = url[5:].partition("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


class RemoteDataset:
    """The objects under s3://BUCKET/PREFIX: what the mount will show.
    Nothing is on local disk, so there is nothing to re-warm."""

    def __init__(self, bucket, prefix):
        self.name = bucket
        self.prefix = prefix
        self.url = "s3://%s/%s" % (bucket, prefix)
        self.files = []     # keys relative to the prefix: paths on the mount
        self.sizes = {}
        self.list_dir = ""  # the directory m_mount counts entries of
        self.meta = {"kind": "remote", "url": self.url, "files": 0, "bytes": 0}

    def paths(self):
        return []

    def total_bytes(self):
        return self.meta["bytes"]


class RemoteRig:
    """Stands in for rig.Rig: a private temporary directory, the user's
    endpoints, and the options every bucketfs tool gets."""

    def __init__(self, a):
        self.tmp = tempfile.mkdtemp(prefix="bfs-bench-", dir="/var/tmp")
        with open(os.path.join(self.tmp, "run.pid"), "w") as f:
            f.write("%d\n" % os.getpid())
        self.logs_dir = None
        CLEANUP.push("remove %s" % self.tmp, self._remove_tmp)
        self.endpoints = types.SimpleNamespace(urls=list(a.endpoint), nginx=[], s3=None)
        self.mount_opts = []
        if a.region:
            self.mount_opts.append("region=%s" % a.region)
        if a.ca_file:
            self.mount_opts.append("ca_file=%s" % a.ca_file)

    def _remove_tmp(self):
        rig.remove_run_dir(self.tmp, self.logs_dir)

    def index_path(self, ds):
        return os.path.join(self.tmp, "%s.idx" % ds.name)

    @staticmethod
    def client_env():
        """The caller's environment as it is: its credentials are the
        ones to use (rig.client_env() would put the test keys in)."""
        return dict(os.environ)


def s3_client(a):
    """A botocore S3 client on the first endpoint, path-style, with the
    default credential chain (environment, then profile)."""
    try:
        import botocore.config
        import botocore.session
    except ImportError:
        raise RuntimeError("--upload and the remote listing need botocore "
                           "(apt-get install python3-botocore)")
    session = botocore.session.get_session()
    region = a.region or os.environ.get("AWS_REGION") or \
        os.environ.get("AWS_DEFAULT_REGION") or session.get_config_variable("region") or \
        "us-east-1"
    cfg = botocore.config.Config(s3={"addressing_style": "path"},
                                 retries={"max_attempts": 5, "mode": "standard"},
                                 max_pool_connections=32)
    return session.create_client("s3", endpoint_url=a.endpoint[0], region_name=region,
                                 verify=a.ca_file or os.environ.get("AWS_CA_BUNDLE") or None,
                                 config=cfg)


def list_dataset(client, ds, limit=None):
    """Fills ds.files/ds.sizes from ListObjectsV2, in listing order, up to
    @limit files the mount shows."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=ds.name, Prefix=ds.prefix)
    skipped = 0
    for page in pages:
        for o in page.get("Contents", []):
            rel = o["Key"][len(ds.prefix):]
            if _not_a_path(rel):
                skipped += 1
                continue
            ds.files.append(rel)
            ds.sizes[rel] = o["Size"]
            if limit and len(ds.files) >= limit:
                break
        if limit and len(ds.files) >= limit:
            break
    ds.meta.update(files=len(ds.files), bytes=sum(ds.sizes.values()), not_paths=skipped,
                   limited=bool(limit and len(ds.files) >= limit))
    return ds


def upload_retina(client, bucket, prefix, n, threads=16):
    """PUTs the RetinaNet shape under PREFIX: n files of 322,624 random
    bytes, train/img_<i>_of_<n>.jpeg.  Keys already there with the right
    size are kept (a rerun completes an interrupted upload)."""
    keys = [prefix + k for k in rig.retina_keys(n)]
    have = {}
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                              Prefix=prefix + "train/")
    for page in pages:
        for o in page.get("Contents", []):
            have[o["Key"]] = o["Size"]
    todo = [k for k in keys if have.get(k) != rig.RETINA_SIZE]
    log("upload: %d of %d objects of %d bytes to s3://%s/%s (the others are there)"
        % (len(todo), n, rig.RETINA_SIZE, bucket, prefix))

    def put(key):
        client.put_object(Bucket=bucket, Key=key, Body=os.urandom(rig.RETINA_SIZE))
    done = 0
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        for _ in ex.map(put, todo):
            done += 1
            if done % 1000 == 0:
                log("upload: %d/%d" % (done, len(todo)))
    return len(todo)
