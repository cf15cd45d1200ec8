#!/usr/bin/python3
"""SPACE beside a peer (issue 17, item 5): the same whole-command timings for `space` and
Debian's podman (with runc) on the same busybox rootfs, in one run, with SPACE's ratio to
each. Started by bench/peer.sh (through bench/run.sh, which gives it a private spaced).
Standard library only; /usr/bin/python3.

  cold   `space create` (no warm pool: a memory limit the pool does not have) + `space exec
         ID -- echo hi` + `space rm ID`      vs  `podman run --rm IMG echo hi`
  warm   the same from the warm pool          vs  the same podman run
  exec   `space exec ID -- echo hi`           vs  `podman exec CTR echo hi`

Each figure is the median (and p90) of --n runs of whole CLI processes, alternating SPACE
and podman run by run so that load from elsewhere falls on both alike.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time


def run(argv, **kw):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip() or r.stdout.strip()}")
    return r.stdout


def timed(argv):
    t0 = time.perf_counter()
    out = run(argv)
    return (time.perf_counter() - t0) * 1000, out


def summary(ms):
    ms = sorted(ms)
    return statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.9))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--n", type=int, default=20)
    a = ap.parse_args()
    podman = shutil.which("podman")
    if not podman:
        print("peer: podman is not installed (scripts/install-deps.sh --bench installs it)", file=sys.stderr)
        return 2
    space = [os.path.join(a.bin, "space"), "--url", a.url, "--api-key", a.key]
    # podman gives containers RLIMIT_NOFILE and RLIMIT_NPROC near the host's hard limits,
    # which runc fails to set where the host itself runs in a container (EPERM): modest
    # limits of our own instead.
    ulimit = ["--ulimit", "nofile=1024:4096", "--ulimit", "nproc=4096:4096"]
    work = tempfile.mkdtemp(prefix="space-peer-")
    # podman keeps its images and containers here, not in the host's own storage.
    pm = [podman, "--root", work + "/root", "--runroot", work + "/run", "--runtime", "runc",
          "--storage-driver", "overlay", "--cgroup-manager", "cgroupfs", "--events-backend", "none"]
    ctr = None
    try:
        # The rootfs: a sandbox's own root, as space_bench's bare-crun baseline takes it.
        sid = run(space + ["create"]).strip()
        root = os.path.join(a.data_dir, "storage", "pool", "roots", sid)
        tar = work + "/rootfs.tar"
        with tarfile.open(tar, "w") as t:
            for name in sorted(os.listdir(root)):
                if name != ".space":
                    t.add(os.path.join(root, name), arcname=name)
        run(space + ["rm", sid])
        run(pm + ["import", "--quiet", tar, "space-peer:bench"])
        image = "localhost/space-peer:bench"
        # One of each first: images, layers and caches are warm for both sides.
        run(pm + ["run", "--rm", "--network", "none"] + ulimit + [image, "echo", "hi"])
        run(space + ["rm", run(space + ["create"]).strip()])

        def space_cycle(extra):
            t0 = time.perf_counter()
            sid = run(space + ["create"] + extra).strip()
            out = run(space + ["exec", sid, "--", "echo", "hi"])
            run(space + ["rm", sid])
            assert out == "hi\n", out
            return (time.perf_counter() - t0) * 1000

        def podman_cycle():
            ms, out = timed(pm + ["run", "--rm", "--network", "none"] + ulimit + [image, "echo", "hi"])
            assert out == "hi\n", out
            return ms

        cold, warm, prun = [], [], []
        for i in range(a.n):
            cold.append(space_cycle(["--memory", "300M"]))
            prun.append(podman_cycle())
            warm.append(space_cycle([]))
            time.sleep(0.3)  # the warm pool refills between claims, as it would between agents

        sid = run(space + ["create"]).strip()
        ctr = run(pm + ["run", "-d", "--network", "none"] + ulimit + [image, "sleep", "3600"]).strip()
        sexec, pexec = [], []
        for i in range(a.n):
            ms, out = timed(space + ["exec", sid, "--", "echo", "hi"])
            assert out == "hi\n", out
            sexec.append(ms)
            ms, out = timed(pm + ["exec", ctr, "echo", "hi"])
            assert out == "hi\n", out
            pexec.append(ms)
        run(space + ["rm", sid])

        version = run(pm + ["--version"]).strip()
        print(f"# peer: {version} with runc, the same busybox rootfs, {a.n} runs each, whole CLI processes")
        rows = [
            ("create+exec+rm, cold vs podman run --rm", cold, prun),
            ("create+exec+rm, warm vs podman run --rm", warm, prun),
            ("exec echo vs podman exec", sexec, pexec),
        ]
        worst = 0.0
        for name, s, p in rows:
            s50, s90 = summary(s)
            p50, p90 = summary(p)
            worst = max(worst, s50 / p50)
            print(f"{name:42s} space p50 {s50:7.1f} ms p90 {s90:7.1f} | podman p50 {p50:7.1f} ms p90 {p90:7.1f} | ratio {s50 / p50:.2f}x")
        print(json.dumps({"peer": "podman", "worst_ratio_p50": round(worst, 3)}))
        return 0
    finally:
        if ctr:
            subprocess.run(pm + ["rm", "-f", "-t", "0", ctr], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(pm + ["rmi", "-a", "-f"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["umount", "-R", "-l", work + "/root"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
