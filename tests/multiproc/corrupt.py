#!/usr/bin/env python3
"""A corruption campaign: random bytes written into every part of a live shared fabric's file.

For each seed, datacheck runs as two processes on a fabric of its own (every byte checked;
guard pages around every registered region, so that a write outside registered memory kills
the process), and after a moment drawn from the seed this script writes random bytes into
one part of the fabric's file: the header (magic, devices, the live and used masks), the
slots (pids, tokens, clocks, bounds), the QP owner table, the next QP numbers, the CM's port
table, a ring's head or tail, a ring's parcels; or it cuts the file short (ftruncate). Each
run must end within a bound, and no process may crash: it passes (the damage hit nothing in
use), or ends with a clear error (a FAIL line of datacheck, or the fabric named corrupt).
Crashes (a process killed by a signal: SIGSEGV, SIGBUS, SIGABRT) and hangs fail the campaign.

  corrupt.py --dropin DIR --datacheck PATH --layout PATH [--seeds N] [--first S]

Prints one line per run that did not pass quietly and a tally; exit 1 on any crash or hang.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

PARTS = ["header", "slots", "next_qpn", "owner", "cm_ports", "ring_index", "ring_data", "cut"]


def corrupt(path, layout, rng, part):
    """Writes random bytes into `part` of the fabric's file (or cuts it short)."""
    fd = os.open(path, os.O_RDWR)
    try:
        if part == "cut":
            size = rng.choice([0, 4096, layout["rings"], layout["rings"] + rng.randrange(
                layout["file_bytes"] - layout["rings"])])
            os.ftruncate(fd, size)
            return f"cut to {size} bytes"
        slots = layout["slot_count"]
        ring_count = slots * slots
        if part == "header":
            lo, hi = 0, layout["slots"]
        elif part == "slots":
            lo, hi = layout["slots"], layout["slots"] + slots * layout["slot_bytes"]
        elif part == "next_qpn":
            lo, hi = layout["next_qpn"], layout["owner"]
        elif part == "owner":
            # Devices 0 and 1, QP numbers in use (17 and up), mostly.
            lo = layout["owner"] + rng.choice([0, 65536]) + 17
            hi = lo + 64
        elif part == "cm_ports":
            lo, hi = layout["cm_ports"], layout["cm_ports"] + 8 * 48
        else:
            ring = rng.randrange(ring_count)
            base = layout["rings"] + ring * layout["ring_bytes"]
            if part == "ring_index":
                lo, hi = base, layout["rings"] + ring * layout["ring_bytes"] + layout["ring_data"]
            else:  # where parcels are: near the start of the ring's data
                lo = base + layout["ring_data"]
                hi = lo + 65536
        writes = []
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(lo, max(lo + 1, hi))
            data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            os.pwrite(fd, data, at)
            writes.append(f"{len(data)}@{at}")
        return "wrote " + " ".join(writes)
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dropin", required=True)
    ap.add_argument("--datacheck", required=True)
    ap.add_argument("--layout", required=True, help="the fabric_layout program")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--bound", type=float, default=60.0, help="seconds a run may take")
    a = ap.parse_args()
    layout = json.loads(subprocess.run([a.layout], check=True, capture_output=True,
                                       text=True).stdout)
    tally = {"passed": 0, "clean error": 0, "crash": 0, "hang": 0, "not hit": 0}
    uid = os.getuid()
    for seed in range(a.first, a.first + a.seeds):
        rng = random.Random(seed)
        part = PARTS[seed % len(PARTS)]
        fabric = f"corrupt-{os.getpid()}-{seed}"
        path = f"/dev/shm/verbsim-fabric-{uid}-{fabric}"
        env = dict(os.environ, LD_LIBRARY_PATH=a.dropin, VERBSIM_FABRIC=fabric,
                   VERBSIM_SEED=str(seed))
        out = tempfile.TemporaryFile()
        start = time.time()
        p = subprocess.Popen([a.datacheck, "--procs", "2", "--ops", "2000", "--quiet",
                              "--guard-pages", "--deadline", str(a.bound / 4)],
                             env=env, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        what = "nothing (the run ended first)"
        while time.time() - start < 2 and not os.path.exists(path):
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.12))
        if p.poll() is None and os.path.exists(path):
            try:
                what = corrupt(path, layout, rng, part)
            except OSError as e:
                what = f"nothing ({e})"
        try:
            rc = p.wait(timeout=a.bound)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
        out.seek(0)
        text = out.read().decode(errors="replace")
        took = time.time() - start
        if rc is None:
            kind = "hang"
        elif "killed by" in text or rc < 0:
            kind = "crash"
        elif rc == 0 and "PASS" in text:
            kind = "passed" if not what.startswith("nothing") else "not hit"
        elif "FAIL" in text or "corrupt" in text:
            kind = "clean error"
        else:
            kind = "crash"  # an exit without a word is no clear error
        tally[kind] += 1
        if kind != "passed":
            first = next((l for l in text.splitlines() if "FAIL" in l or "corrupt" in l
                          or "killed" in l), text.strip().splitlines()[-1:] or [""])
            first = first if isinstance(first, str) else first[0]
            print(f"seed {seed} {part}: {what}: {kind} in {took:.1f} s: {first[:160]}")
        try:
            os.unlink(path)
        except OSError:
            pass
    print("corrupt.py: " + ", ".join(f"{k} {v}" for k, v in tally.items()) +
          f" of {a.seeds} runs")
    return 1 if tally["crash"] or tally["hang"] else 0


if __name__ == "__main__":
    sys.exit(main())
