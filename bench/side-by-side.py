#!/usr/bin/env python3
"""Side-by-side benchmark of vouch, restic and borg on one machine, in one run.

Data: ../shared/bench/fetch-data.sh (default /var/tmp/vouch-bench):
linux-6.1, linux-6.12 (real sources), big/random.bin (512 MiB random),
small/ (4000 x 16 KiB random). Each step runs each tool with caches dropped
first (root), and records wall time, user+system CPU, and peak RSS of the
tool's process (os.wait4). Encryption and zstd are on for every tool:
vouch default (AES-256-GCM, zstd 3), restic 0.14 (repo v2, compression
auto), borg 1.2 (repokey-blake2, -C zstd,3).

Usage: bench/side-by-side.py --vouch target/release/vouch [--data DIR] [--work DIR]
       [--tools vouch,restic,borg] [--steps kernel,big,small] [--runs N]
Prints a Markdown table (median over runs) and writes JSON next to it.
This is a stop-gap until `vouch bench` (issue 3); it is not run in CI.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, time, platform

PW = "bench-passphrase"


def drop_caches():
    subprocess.run(["sync"])
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return "cold"
    except OSError:
        return "warm"


def run(cmd, env=None, cold=True, cwd=None):
    state = drop_caches() if cold else "warm"
    e = dict(os.environ)
    e.update(env or {})
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=e, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 3):
        sys.exit(f"{cmd} failed with {code}: {err[-2000:]}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mib": ru.ru_maxrss / 1024, "cache": state}


def du(path):
    return int(subprocess.check_output(["du", "-sb", path]).split()[0])


class Tool:
    def __init__(self, name, vouch_bin, work):
        self.name, self.vouch, self.work = name, vouch_bin, work

    def repo(self, tag):
        return os.path.join(self.work, f"{self.name}-{tag}")

    def env(self):
        return {"VOUCH_PASSWORD": PW, "RESTIC_PASSWORD": PW, "BORG_PASSPHRASE": PW,
                "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK": "yes", "BORG_RELOCATED_REPO_ACCESS_IS_OK": "yes",
                "BORG_CACHE_DIR": os.path.join(self.work, "borg-cache"),
                "RESTIC_CACHE_DIR": os.path.join(self.work, "restic-cache")}

    def init(self, tag):
        r = self.repo(tag)
        shutil.rmtree(r, ignore_errors=True)
        if self.name == "vouch":
            cmd = [self.vouch, "-r", r, "init", "-q"]
        elif self.name == "restic":
            cmd = ["restic", "-r", r, "init", "-q"]
        else:
            cmd = ["borg", "init", "-e", "repokey-blake2", r]
        run(cmd, self.env(), cold=False)

    def backup(self, tag, path, n, cold=True):
        r = self.repo(tag)
        if self.name == "vouch":
            cmd = [self.vouch, "-r", r, "backup", "-q", path]
        elif self.name == "restic":
            cmd = ["restic", "-r", r, "backup", "-q", path]
        else:
            cmd = ["borg", "create", "-C", "zstd,3", f"{r}::s{n}", path]
        return run(cmd, self.env(), cold)

    def restore(self, tag, target):
        r = self.repo(tag)
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        if self.name == "vouch":
            return run([self.vouch, "-r", r, "restore", "-q", "latest", "--target", target], self.env())
        if self.name == "restic":
            return run(["restic", "-r", r, "restore", "-q", "latest", "--target", target], self.env())
        last = subprocess.check_output(["borg", "list", "--short", "--last", "1", r], env={**os.environ, **self.env()}).decode().strip()
        return run(["borg", "extract", f"{r}::{last}"], self.env(), cwd=target)

    def check(self, tag):
        r = self.repo(tag)
        if self.name == "vouch":
            return run([self.vouch, "-r", r, "verify", "-q", "--read-data"], self.env())
        if self.name == "restic":
            return run(["restic", "-r", r, "check", "-q", "--read-data"], self.env())
        return run(["borg", "check", "--verify-data", r], self.env())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vouch", required=True)
    ap.add_argument("--data", default=os.environ.get("VOUCH_BENCH_DIR", "/var/tmp/vouch-bench"))
    ap.add_argument("--work", default="/var/tmp/vouch-bench-work")
    ap.add_argument("--tools", default="vouch,restic,borg")
    ap.add_argument("--steps", default="kernel,big,small")
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    vouch_bin = os.path.abspath(a.vouch)
    os.makedirs(a.work, exist_ok=True)
    tools = [Tool(t, vouch_bin, a.work) for t in a.tools.split(",")]
    steps = a.steps.split(",")
    results = {}

    def record(step, tool, r):
        results.setdefault(step, {}).setdefault(tool, []).append(r)

    for run_no in range(a.runs):
        if "kernel" in steps:
            src = os.path.join(a.work, "src")
            if os.path.lexists(src):
                sys.exit(f"{src} exists: a previous run was interrupted; move it back to {a.data}/linux-6.1 or linux-6.12")
            for t in tools:
                t.init("kernel")
                os.rename(os.path.join(a.data, "linux-6.1"), src)
                record("first backup, linux-6.1", t.name, t.backup("kernel", src, 1))
                os.rename(src, os.path.join(a.data, "linux-6.1"))
                os.rename(os.path.join(a.data, "linux-6.12"), src)
                record("linux-6.12 at the same path", t.name, t.backup("kernel", src, 2))
                record("unchanged re-run", t.name, t.backup("kernel", src, 3))
                record("full restore of 6.12", t.name, t.restore("kernel", os.path.join(a.work, "restore")))
                shutil.rmtree(os.path.join(a.work, "restore"), ignore_errors=True)
                record("repository size after three backups (MiB)", t.name, {"size_mib": du(t.repo("kernel")) / 2**20})
                record("verify --read-data (restic check --read-data, borg check --verify-data)", t.name, t.check("kernel"))
                os.rename(src, os.path.join(a.data, "linux-6.12"))
                shutil.rmtree(t.repo("kernel"), ignore_errors=True)
        if "big" in steps:
            for t in tools:
                t.init("big")
                record("512 MiB random, one file", t.name, t.backup("big", os.path.join(a.data, "big"), 1))
                shutil.rmtree(t.repo("big"), ignore_errors=True)
        if "small" in steps:
            for t in tools:
                t.init("small")
                record("4000 x 16 KiB random files, cold", t.name, t.backup("small", os.path.join(a.data, "small"), 1))
                t.init("small")
                run(["cat"] + [os.path.join(a.data, "small", f) for f in sorted(os.listdir(os.path.join(a.data, "small")))[:1]], cold=False)
                subprocess.run(f"cat {a.data}/small/* > /dev/null", shell=True)
                record("4000 x 16 KiB random files, warm", t.name, t.backup("small", os.path.join(a.data, "small"), 1, cold=False))
                shutil.rmtree(t.repo("small"), ignore_errors=True)

    def fmt(rs):
        if "size_mib" in rs[0]:
            return f"{statistics.median(r['size_mib'] for r in rs):.0f} MiB"
        w = statistics.median(r["wall"] for r in rs)
        c = statistics.median(r["cpu"] for r in rs)
        m = max(r["rss_mib"] for r in rs)
        return f"{w:.2f} s (cpu {c:.1f} s, {m:.0f} MiB)"

    names = [t.name for t in tools]
    print("| step | " + " | ".join(names) + " | " + " | ".join(f"vouch/{n}" for n in names if n != "vouch") + " |")
    print("|---" * (1 + len(names) + len(names) - 1) + "|")
    for step, per in results.items():
        cells = [fmt(per[n]) if n in per else "" for n in names]
        ratios = []
        for n in names:
            if n == "vouch" or n not in per or "vouch" not in per:
                continue
            key = "size_mib" if "size_mib" in per[n][0] else "wall"
            v = statistics.median(r[key] for r in per["vouch"])
            o = statistics.median(r[key] for r in per[n])
            ratios.append(f"{v / o:.2f}")
        print(f"| {step} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    cond = {"cpu": platform.processor() or open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "),
            "cores": os.cpu_count(), "kernel": platform.release(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "fs": subprocess.check_output(["df", "-T", a.work]).decode().splitlines()[-1]}
    print("\nconditions:", json.dumps(cond))
    with open(os.path.join(a.work, "results.json"), "w") as f:
        json.dump({"conditions": cond, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
