#!/usr/bin/python3
"""Draws a simulated run's timeline (VERBSIM_TIMELINE) as a PNG, for docs and bug reports.

    verbsim-plot-timeline TIMELINE.json OUT.png [--from US] [--to US] [--title TEXT] [--rows]
    verbsim-plot-timeline TIMELINE.json --rows

(in the source tree: scripts/plot-timeline.py)

Three panels over virtual time (microseconds), from the Trace Event JSON the simulator writes
(docs/OBSERVABILITY.md, "Timeline"):
  1. work requests outstanding on each queue (device, QP, send or receive): a step line that
     rises at each post and falls at each completion, from the WR slices;
  2. the packets each device sent, one row per device and kind (requests, ACKs, NAKs by code),
     from the packet slices where packets leave (not those where they arrive), with dropped
     ones hollow;
  3. instants: faults that fired, failed completions, async and CM events, one row per device.
Perfetto's UI (https://ui.perfetto.dev) shows the same file interactively; this is the picture
that fits in a document. --rows prints the second panel's rows as text (device, kind, packets
sent, of them lost), with or without a picture. Drawing needs python3-matplotlib
(scripts/setup.sh installs it).
"""
import argparse
import collections
import json
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    processes = {}
    threads = {}
    for e in events:
        if e.get("ph") != "M":
            continue
        if e["name"] == "process_name":
            processes[e["pid"]] = e["args"]["name"]
        elif e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return events, processes, threads


def queue_of(thread_name):
    """'QP 17 recv (3)' -> ('QP 17', 'recv'); other tracks -> None."""
    words = thread_name.split()
    if len(words) >= 3 and words[0] == "QP" and words[2] in ("send", "recv"):
        return "QP " + words[1], words[2]
    return None


def packet_kind(name):
    """'SEND psn 4096' -> 'SEND'; 'NAK rnr psn 7' -> 'NAK rnr'."""
    return name.split(" psn")[0]


def arrives(e, after):
    """Whether packet slice `e`, followed in the file by event `after`, is where it arrives."""
    return (after is not None and after.get("ph") == "f" and after.get("cat") == "packet" and
            (after.get("pid"), after.get("tid"), after.get("ts")) ==
            (e.get("pid"), e.get("tid"), e.get("ts")))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("timeline")
    ap.add_argument("out", nargs="?", help="the PNG to write (optional with --rows)")
    ap.add_argument("--from", dest="start", type=float, default=None, help="first µs shown")
    ap.add_argument("--to", dest="end", type=float, default=None, help="last µs shown")
    ap.add_argument("--title", default=None)
    ap.add_argument("--rows", action="store_true",
                    help="print the packet rows: device, kind, packets sent, of them lost")
    a = ap.parse_args()
    if a.out is None and not a.rows:
        ap.error("give OUT.png, --rows or both")

    events, processes, threads = load(a.timeline)
    dev = lambda pid: processes.get(pid, "pid %d" % pid)  # noqa: E731

    # 1. Outstanding WRs per queue: +1 at a slice's start, -1 at its end.
    steps = collections.defaultdict(list)
    packets = collections.defaultdict(list)  # (device, kind) -> [(ts, dropped)]
    instants = collections.defaultdict(list)  # device -> [(ts, text)]
    # A packet has a slice where it leaves and one where it arrives, joined by a flow. The
    # simulator writes each slice with its end of the flow right after it: a slice followed by a
    # flow's finish ("f") on its track at its time is where a packet arrives. (A slice's track
    # and time do not tell: a responder's ACK leaves on the track, and at the time, where the
    # request arrived.)
    for i, e in enumerate(events):
        ph = e.get("ph")
        where = threads.get((e.get("pid"), e.get("tid")), "")
        if ph == "X" and e.get("cat") == "wr":
            q = queue_of(where)
            if q is None:
                continue
            key = "%s %s %s" % (dev(e["pid"]), q[0], q[1])
            steps[key].append((e["ts"], 1))
            steps[key].append((e["ts"] + e.get("dur", 0), -1))
        elif ph == "X" and e.get("cat") == "packet":
            if arrives(e, events[i + 1] if i + 1 < len(events) else None):
                continue
            fate = e.get("args", {}).get("fate", "delivered")
            lost = fate in ("dropped", "link_down")
            packets[(dev(e["pid"]), packet_kind(e["name"]))].append((e["ts"], lost))
        elif ph == "i":
            name = e["name"]
            if e.get("cat") == "completion" and name == "SUCCESS":
                continue
            instants[dev(e["pid"])].append((e["ts"], name))

    if not steps and not packets:
        sys.exit("plot-timeline: %s has no work requests or packets" % a.timeline)
    if a.rows:
        for key in sorted(packets):
            shown = [lost for t, lost in packets[key]
                     if (a.start is None or t >= a.start) and (a.end is None or t <= a.end)]
            print("%s\t%s\t%d\t%d" % (key[0], key[1], len(shown), sum(shown)))
    if a.out is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lo = a.start if a.start is not None else 0.0
    hi = a.end if a.end is not None else max(
        [t for s in steps.values() for t, _ in s] + [t for p in packets.values() for t, _ in p])

    fig, axes = plt.subplots(3, 1, figsize=(11, 8), sharex=True,
                             gridspec_kw={"height_ratios": [3, 3, 2]})
    ax = axes[0]
    for key in sorted(steps):
        level = 0
        xs, ys = [lo], [0]
        for ts, d in sorted(steps[key], key=lambda s: (s[0], -s[1])):
            level += d
            if ts < lo:
                ys[0] = level
                continue
            xs.append(ts)
            ys.append(level)
        xs.append(hi)
        ys.append(level)
        ax.step(xs, ys, where="post", label=key)
    ax.set_ylabel("WRs outstanding")
    ax.legend(loc="upper right", fontsize="small", ncol=2)
    ax.grid(True, alpha=0.3)

    ax = axes[1]
    rows = sorted(packets)
    for y, key in enumerate(rows):
        shown = [(t, dropped) for t, dropped in packets[key] if lo <= t <= hi]
        solid = [t for t, dropped in shown if not dropped]
        hollow = [t for t, dropped in shown if dropped]
        color = "C3" if key[1].startswith("NAK") else "C0" if key[1] == "ACK" else "C2"
        ax.plot(solid, [y] * len(solid), "|", color=color, markersize=12)
        ax.plot(hollow, [y] * len(hollow), "o", color=color, fillstyle="none", markersize=5)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["%s %s" % k for k in rows], fontsize="small")
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_ylabel("packets sent")
    ax.grid(True, axis="x", alpha=0.3)

    ax = axes[2]
    devices = sorted(instants)
    kinds = {}
    for y, d in enumerate(devices):
        for ts, text in instants[d]:
            if not lo <= ts <= hi:
                continue
            kind = text.split(" (")[0]
            if kind not in kinds:
                kinds[kind] = "C%d" % (len(kinds) % 10)
            ax.plot([ts], [y], "v", color=kinds[kind], markersize=8,
                    label=kind if kind not in ax.get_legend_handles_labels()[1] else None)
    ax.set_yticks(range(len(devices)))
    ax.set_yticklabels(devices, fontsize="small")
    ax.set_ylim(-0.7, max(len(devices), 1) - 0.3)
    ax.set_ylabel("instants")
    if kinds:
        ax.legend(loc="upper left", fontsize="small")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlabel("virtual time (µs)")
    ax.set_xlim(lo, hi)

    fig.suptitle(a.title or a.timeline)
    fig.tight_layout()
    fig.savefig(a.out, dpi=90)
    print("plot-timeline: wrote %s" % a.out)


if __name__ == "__main__":
    main()
