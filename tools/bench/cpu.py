"""What a measurement cost in CPU: the daemon's own (from /proc/PID/stat
and, per thread name, /proc/PID/task/*/stat) and how busy the whole
machine was meanwhile (from /proc/stat), so that every number can be
given with its CPU per file and per GB and with the share of the machine
that other work took.

  probe = CpuProbe(pid)        # before the measurement
  ...
  cost = probe.stop(files=n, nbytes=b, wall_s=t)
  cost -> {"cpu_s", "cpu_ms_per_file", "cpu_s_per_gb", "core_pct",
           "threads": {name: {"cpu_s", "core_pct", "ms_per_file"}},
           "busy_pct"}

pid may be None (a reference path without a daemon): then only the
machine's busy share is measured.

With others=[PID, ...] (the endpoints' processes), stop() also gives
"total_cpu_s" and "total_ms_per_file": the CPU of every process of the
path over the measurement, the daemon's, the endpoints', this process's
and its children's that ended meanwhile (the readers, curl, dd), so that a
path's cost shows apart from its throughput.  "busy_per_cpu" is how busy
each CPU was (in pinned mode CPU 0 has the readers and the endpoints, CPU
1 the daemon).
"""

import os
import resource

HZ = os.sysconf("SC_CLK_TCK")


def _stat_fields(path):
    """The fields after the command name of a /proc stat file (the name
    may contain spaces and parentheses)."""
    st = open(path).read()
    return st[st.index("(") + 1:st.rindex(")")], st[st.rindex(")") + 2:].split()


def process_ticks(pid):
    """utime + stime of the whole process, clock ticks; it includes the
    threads that have already ended."""
    _name, f = _stat_fields("/proc/%d/stat" % pid)
    return int(f[11]) + int(f[12])


def thread_ticks(pid, counts=None):
    """utime + stime so far per thread name (threads of one name summed);
    @counts, a dict, gets how many threads have each name."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            name, f = _stat_fields("/proc/%d/task/%s/stat" % (pid, tid))
        except (OSError, ValueError):
            continue  # the thread ended meanwhile
        out[name] = out.get(name, 0) + int(f[11]) + int(f[12])
        if counts is not None:
            counts[name] = counts.get(name, 0) + 1
    return out


def thread_counts(pid):
    """{name: threads} of @pid now: libfuse's workers keep the process's
    name (so does the main thread, which is no worker); bucketfs's own
    threads are named bfs-*."""
    counts = {}
    thread_ticks(pid, counts)
    return counts


def switches(pid):
    """Context switches (voluntary + not) of @pid's threads so far: one per
    wake-up and more, so their count per file says how often the daemon's
    threads sleep and are woken for a file."""
    n = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if "ctxt_switches:" in line:
                        n += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return n


def machine_idle():
    """(idle + iowait, total) jiffies of all CPUs so far."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[3] + v[4], sum(v[:8])


def busy_since(before):
    """Percent of all CPUs busy since @before (a machine_idle() value)."""
    idle, total = machine_idle()
    return 100.0 * (1 - (idle - before[0]) / max(1, total - before[1]))


def cpus_idle():
    """[(idle + iowait, total)] jiffies of each CPU so far."""
    out = []
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                v = [int(x) for x in line.split()[1:]]
                out.append((v[3] + v[4], sum(v[:8])))
    return out


def own_seconds():
    """User + system seconds of this process and of its reaped children."""
    t = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        t += r.ru_utime + r.ru_stime
    return t


def others_ticks(pids):
    t = 0
    for p in pids:
        try:
            t += process_ticks(p)
        except (OSError, ValueError, IndexError):
            pass   # an endpoint killed meanwhile (the failover run)
    return t


class CpuProbe:
    def __init__(self, pid=None, others=None):
        self.pid = pid
        self.others = others
        if others is not None:
            self.own0 = own_seconds()
            self.others0 = others_ticks(others)
        self.cpus0 = cpus_idle()
        self.idle0 = machine_idle()
        self.proc0 = process_ticks(pid) if pid else 0
        self.threads0 = thread_ticks(pid) if pid else {}
        self.switches0 = switches(pid) if pid else 0

    def stop(self, files=0, nbytes=0, wall_s=0.0):
        out = {"busy_pct": busy_since(self.idle0)}
        out["busy_per_cpu"] = [100.0 * (1 - (i1 - i0) / max(1, t1 - t0)) for (i0, t0), (i1, t1)
                               in zip(self.cpus0, cpus_idle())]
        if self.others is not None:
            total = own_seconds() - self.own0 + \
                (others_ticks(self.others) - self.others0) / HZ
            if self.pid:
                try:
                    total += (process_ticks(self.pid) - self.proc0) / HZ
                except OSError:
                    pass
            out["total_cpu_s"] = total
            out["total_ms_per_file"] = total * 1e3 / files if files else None
            out["total_s_per_gb"] = total / (nbytes / 1e9) if nbytes else None
        if not self.pid:
            return out
        try:
            cpu_s = (process_ticks(self.pid) - self.proc0) / HZ
            counts = {}
            threads = thread_ticks(self.pid, counts)
        except OSError as exc:
            out["cpu_error"] = "the daemon's /proc entry: %s" % exc
            return out
        out["cpu_s"] = cpu_s
        try:
            out["switches_per_file"] = (switches(self.pid) - self.switches0) / files \
                if files else None
        except OSError:
            pass
        out["cpu_ms_per_file"] = cpu_s * 1e3 / files if files else None
        out["cpu_s_per_gb"] = cpu_s / (nbytes / 1e9) if nbytes else None
        out["core_pct"] = 100.0 * cpu_s / wall_s if wall_s else None
        out["threads"] = {}
        for name, t in sorted(threads.items()):
            s = (t - self.threads0.get(name, 0)) / HZ
            if s <= 0:
                continue
            out["threads"][name] = {
                "cpu_s": s, "count": counts.get(name, 1),
                "core_pct": 100.0 * s / wall_s if wall_s else None,
                "ms_per_file": s * 1e3 / files if files else None,
                "s_per_gb": s / (nbytes / 1e9) if nbytes else None}
        return out


def describe(cost):
    """One line: the daemon's CPU per file / per GB, its threads, the
    machine's busy share."""
    parts = []
    if cost.get("cpu_s") is not None:
        if cost.get("cpu_ms_per_file") is not None:
            parts.append("daemon %.3f ms CPU/file" % cost["cpu_ms_per_file"])
        if cost.get("cpu_s_per_gb") is not None:
            parts.append("%.2f s CPU/GB" % cost["cpu_s_per_gb"])
        th = ["%s%s %.0f%%" % (k, "×%d" % v["count"] if v.get("count", 1) > 1 else "",
                                v["core_pct"]) for k, v in cost.get("threads", {}).items()
              if v.get("core_pct") and v["core_pct"] >= 0.5]
        if th:
            parts.append("threads (%% of a core): %s" % ", ".join(th))
    if cost.get("switches_per_file") is not None:
        parts.append("%.1f daemon context switches/file" % cost["switches_per_file"])
    if cost.get("total_ms_per_file") is not None:
        parts.append("every process %.3f ms CPU/file" % cost["total_ms_per_file"])
    elif cost.get("total_s_per_gb") is not None:
        parts.append("every process %.2f s CPU/GB" % cost["total_s_per_gb"])
    parts.append("machine %.0f%% busy" % cost["busy_pct"])
    if len(cost.get("busy_per_cpu") or []) > 1:
        parts[-1] += " (%s)" % " / ".join("%.0f%%" % b for b in cost["busy_per_cpu"])
    return "; ".join(parts)
