#!/usr/bin/python3
"""Owners and modes (-o uid=, gid=, file_mode=, dir_mode=), checked by a
second, unprivileged user (nobody) on root mounts made with allow_other:
/dev/fuse is 0600, so that user cannot mount, only use what root mounted.
The kernel enforces the modes (default_permissions).

- The default owner is the user who mounted: the daemon's real uid and gid
  (a mount made by a daemon whose real uid is 4321 shows 4321).
- uid=/gid= (numbers or names) show as the owner; the modes decide what
  the other user may read.
- Without -o ro the defaults (dirs 0755, files 0644) let the other
  user read but not create, write or remove; dir_mode=0777 and
  file_mode=0666 let them in, and what they write reaches S3.
- Write bits show only where writes can work.
- Bad values are refused with the option and the value, from -o and from
  the config file alike."""

import errno
import functools
import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Mount  # noqa: E402

if not os.path.exists("/dev/fuse"):
    print("no /dev/fuse: skipping")
    sys.exit(harness.SKIP)

NOBODY = 65534
DATA = {f"train/img_{i}_of_2.jpeg": bytes([65 + i]) * 1000 for i in range(2)}

# Run as the other user: each operation's result, or its errno's name.
CHILD = r"""
import errno, json, os, sys
out = []
for op, path, *arg in json.loads(sys.argv[1]):
    try:
        if op == "stat":
            st = os.stat(path)
            r = [st.st_uid, st.st_gid, st.st_mode & 0o7777]
        elif op == "listdir":
            r = sorted(os.listdir(path))
        elif op == "read":
            with open(path, "rb") as f:
                r = f.read().decode()
        elif op == "create":
            with open(path, "xb") as f:
                f.write(arg[0].encode())
            r = "ok"
        elif op == "append":
            with open(path, "ab") as f:
                f.write(arg[0].encode())
            r = "ok"
        else:
            getattr(os, op)(path)
            r = "ok"
    except OSError as e:
        r = errno.errorcode[e.errno]
    out.append(r)
print(json.dumps(out))
"""


def as_nobody(*ops):
    """The results of @ops (tuples: op, path, args...) run by nobody."""
    r = subprocess.run(["/usr/bin/python3", "-c", CHILD, json.dumps(ops)],
                       user=NOBODY, group=NOBODY, extra_groups=[],
                       capture_output=True, cwd="/", timeout=60,
                       env={"PATH": "/usr/bin:/bin"})
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode())
    return json.loads(r.stdout)


class OwnershipTest(harness.MountCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="bfs-owner-")
        # nobody must reach the mount points and nothing else here.
        os.chmod(cls.tmp, 0o711)
        cls.server = harness.TestServer("--bucket",
                                        f"own={cls.mkdir('data')}")
        for k, v in DATA.items():
            harness.put_object(cls.server.url, "own", k, v)

    def mount(self, name, *opts, real_id=None, env=None):
        """A mount with allow_other; @real_id: the daemon's real uid and
        gid (it stays root in effect, so it may mount)."""
        args = ("s3://own", self.server.url,
                os.path.join(self.tmp, name + ".idx"), "allow_other", *opts)
        kw = dict(log=os.path.join(self.tmp, name + ".log"), env=env)
        if real_id is None:
            m = Mount(*args, **kw)
        else:
            def become():
                os.setresgid(real_id, 0, 0)
                os.setresuid(real_id, 0, 0)
            popen = functools.partial(subprocess.Popen, preexec_fn=become)
            with mock.patch.object(harness.subprocess, "Popen", popen):
                m = Mount(*args, **kw)
        self.mounts.append(m)
        return m

    def modes(self, m):
        return {p: oct(os.stat(m.path(*p.split("/"))).st_mode & 0o7777)
                for p in ("", "train", "train/img_0_of_2.jpeg")}

    def test_default_owner_is_the_mounting_user(self):
        m = self.mount("root-default")
        st = os.stat(m.path("train", "img_0_of_2.jpeg"))
        self.assertEqual((st.st_uid, st.st_gid), (0, 0))
        self.assertIn("default_permissions", self.mount_options(m))
        self.unmount(m)
        m = self.mount("user-default", real_id=4321)
        self.assertIn("user_id=4321", self.mount_options(m))
        for p in ("", "train", "train/img_1_of_2.jpeg"):
            st = os.stat(m.path(*p.split("/")))
            self.assertEqual((st.st_uid, st.st_gid), (4321, 4321), p)
        # Seen so by the other user too.
        self.assertEqual(as_nobody(("stat", m.path("train")))[0][:2],
                         [4321, 4321])
        self.unmount(m)

    def mount_options(self, m):
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                if fields[1] == m.dir:
                    return fields[3].split(",")
        self.fail(f"{m.dir} not in /proc/mounts")

    def test_uid_gid_options(self):
        m = self.mount("ids", "uid=1234,gid=2345")
        for p in ("", "train", "train/img_0_of_2.jpeg"):
            st = os.stat(m.path(*p.split("/")))
            self.assertEqual((st.st_uid, st.st_gid), (1234, 2345), p)
        self.unmount(m)
        m = self.mount("names", "uid=nobody", f"gid={NOBODY}")
        st = os.stat(m.path("train"))
        self.assertEqual((st.st_uid, st.st_gid), (NOBODY, NOBODY))
        self.unmount(m)

    def test_read_only_modes(self):
        f = "train/img_0_of_2.jpeg"
        m = self.mount("ro-default", "ro")
        self.assertEqual(self.modes(m), {"": "0o555", "train": "0o555",
                                         f: "0o444"})
        self.assertEqual(as_nobody(("listdir", m.path("train")),
                                   ("read", m.path(f)),
                                   ("create", m.path("x"), "no"),
                                   ("unlink", m.path(f))),
                         [sorted(k.split("/")[1] for k in DATA), "A" * 1000,
                          "EACCES", "EACCES"])
        self.unmount(m)
        # Others out: listing and reading refused by the kernel.
        m = self.mount("ro-private", "ro,file_mode=0640,dir_mode=0750")
        self.assertEqual(self.modes(m), {"": "0o550", "train": "0o550",
                                         f: "0o440"})
        self.assertEqual(as_nobody(("listdir", m.path()),
                                   ("stat", m.path(f)),
                                   ("read", m.path(f))),
                         ["EACCES", "EACCES", "EACCES"])
        with open(m.path(f), "rb") as fh:  # root: the owner
            self.assertEqual(fh.read(), b"A" * 1000)
        self.unmount(m)
        # Listing allowed, files private; then nobody as the owner.
        m = self.mount("ro-files", "file_mode=0600")
        self.assertEqual(as_nobody(("listdir", m.path("train")),
                                   ("read", m.path(f))),
                         [sorted(k.split("/")[1] for k in DATA), "EACCES"])
        self.unmount(m)
        m = self.mount("ro-owner", "uid=nobody,file_mode=0400,dir_mode=0500")
        self.assertEqual(as_nobody(("read", m.path(f)),
                                   ("stat", m.path(f))),
                         ["A" * 1000, [NOBODY, 0, 0o400]])
        self.unmount(m)

    def test_writable_defaults_keep_others_out(self):
        f = "train/img_1_of_2.jpeg"
        m = self.mount("rw-default", "writable")
        # The owner (root) may create; indexed objects show no write bit.
        with open(m.path("mine"), "wb") as fh:
            fh.write(b"root's")
        self.assertEqual(self.modes(m), {"": "0o755", "train": "0o755",
                                         "train/img_0_of_2.jpeg": "0o444"})
        self.assertEqual(oct(os.stat(m.path("mine")).st_mode & 0o7777),
                         "0o644")
        self.assertEqual(as_nobody(
            ("read", m.path(f)),
            ("read", m.path("mine")),
            ("create", m.path(".probe"), "x"),
            ("create", m.path("train", "new"), "x"),
            ("mkdir", m.path("valid")),
            ("append", m.path("mine"), "x"),
            ("unlink", m.path("mine")),
            ("rmdir", m.path("train"))),
            ["B" * 1000, "root's", "EACCES", "EACCES", "EACCES", "EACCES",
             "EACCES", "EACCES"])
        self.assertTrue(self.on_s3("mine"))
        self.assertFalse(self.on_s3(".probe"))
        os.unlink(m.path("mine"))
        self.unmount(m)

    def test_writable_modes_let_others_in(self):
        m = self.mount("rw-open", "writable,dir_mode=0777,file_mode=0666")
        self.assertEqual(as_nobody(
            ("create", m.path(".probe"), "nobody's"),
            ("read", m.path(".probe")),
            ("append", m.path(".probe"), "!"),
            ("stat", m.path(".probe")),
            ("mkdir", m.path("valid")),
            ("create", m.path("valid", "f"), "v"),
            ("listdir", m.path("valid"))),
            ["ok", "nobody's", "ok", [0, 0, 0o666], "ok", "ok", ["f"]])
        self.assertTrue(self.on_s3(".probe", size=9))
        self.assertTrue(self.on_s3("valid/f", size=1))
        self.assertEqual(as_nobody(("unlink", m.path("valid", "f")),
                                   ("rmdir", m.path("valid")),
                                   ("unlink", m.path(".probe"))),
                         ["ok", "ok", "ok"])
        self.assertFalse(self.on_s3(".probe"))
        self.unmount(m)
        # The other user as the owner: the default modes let them in.
        m = self.mount("rw-nobody", "writable,uid=nobody,gid=nogroup")
        self.assertEqual(as_nobody(("create", m.path(".mine"), "n"),
                                   ("unlink", m.path(".mine"))),
                         ["ok", "ok"])
        self.unmount(m)

    def on_s3(self, key, size=None):
        r = harness.run([harness.binary("s3-client"), "-o",
                         f"endpoint={self.server.url}", "head",
                         f"s3://own/{key}"])
        if r.returncode != 0:
            return False
        return size is None or f"size={size} " in r.stdout.decode()

    def fails(self, *opts, env=None):
        r = harness.run([harness.binary("bucketfs"), "-f", "-o",
                         ",".join([f"endpoint={self.server.url}", *opts]),
                         "s3://own", self.tmp], env=env, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr.decode())
        return r.stderr.decode().strip()

    def test_bad_values_refused(self):
        cases = [
            ("file_mode=9z", "'9z' is not an octal mode from 0 to 0777"),
            ("dir_mode=1777", "'1777' is not an octal mode from 0 to 0777"),
            ("dir_mode=", "'' is not an octal mode from 0 to 0777"),
            ("file_mode=-644", "'-644' is not an octal mode"),
            ("uid=no-such-user-here", "'no-such-user-here' is not a user "
             "id (0 to 4294967294) nor the name of a user on this host"),
            ("gid=-1", "'-1' is not a group id (0 to 4294967294) nor the "
             "name of a group on this host"),
            ("uid=4294967295", "'4294967295' is not a user id"),
        ]
        for opt, message in cases:
            with self.subTest(opt=opt):
                name = opt.split("=")[0]
                err = self.fails(opt)
                self.assertTrue(err.startswith(
                    f"bucketfs: option '{name}': "), err)
                self.assertIn(message, err)

    def test_config_file_keys(self):
        conf = os.path.join(self.tmp, "bucketfs.conf")
        with open(conf, "w") as f:
            f.write("[s3://own]\nuid = 1234\ngid = 2345\n"
                    "file_mode = 0640\ndir_mode = 0750\n")
        os.chmod(conf, 0o600)
        env = harness.client_env(BUCKETFS_CONFIG=conf)
        m = self.mount("conf", env=env)
        st = os.stat(m.path("train", "img_0_of_2.jpeg"))
        self.assertEqual((st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)),
                         (1234, 2345, "0o440"))
        self.unmount(m)
        # -o beats the file.
        m = self.mount("conf-o", "uid=7", env=env)
        self.assertEqual(os.stat(m.path("train")).st_uid, 7)
        self.unmount(m)
        with open(conf, "w") as f:
            f.write("[default]\nfile_mode = 9z\n")
        self.assertEqual(self.fails(env=env),
                         f"bucketfs: {conf}:2: [default]: option "
                         "'file_mode': '9z' is not an octal mode from 0 to "
                         "0777")


if __name__ == "__main__":
    harness.main()
