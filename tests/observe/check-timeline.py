#!/usr/bin/env python3
"""Checks a timeline the simulator wrote (VERBSIM_TIMELINE, Trace Event Format JSON):

- it parses, and every event has the fields its phase needs;
- timestamps never run backwards on a track (a process and thread), in file order;
- flows pair up: every flow start ("s") has exactly one finish ("f") with its id, not earlier;
- every completion (an instant on a CQ track) has exactly one work-request slice that ends at
  it, on the track of its QP and side ("QP <n> send" or "QP <n> recv", any lane), with the
  same wr_id and status.

  check-timeline.py FILE...      exits 1 naming what is wrong, 0 printing a summary per file
"""
import collections
import json
import sys


def ns(ts):
    return round(float(ts) * 1000)


def check(path):
    errors = []
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    names = {}  # (pid, tid) -> track name
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    last = {}
    flows = collections.defaultdict(lambda: {"s": [], "f": []})
    slices = collections.defaultdict(list)  # (pid, qp, side, wr_id, end ns) -> statuses
    completions = []
    for i, e in enumerate(events):
        ph = e.get("ph")
        if ph == "M":
            continue
        for field in ("ts", "pid", "tid", "name"):
            if field not in e:
                errors.append(f"event {i} ({ph}) has no {field}")
        track = (e["pid"], e["tid"])
        t = ns(e["ts"])
        if t < last.get(track, 0):
            errors.append(f"event {i}: time runs backwards on {names.get(track, track)}")
        last[track] = t
        if ph in ("s", "f"):
            flows[e["id"]][ph].append(t)
        elif ph == "X" and e.get("cat") == "wr":
            name = names.get(track, "")
            parts = name.split()
            if len(parts) < 3 or parts[0] != "QP" or parts[2] not in ("send", "recv"):
                errors.append(f"event {i}: a WR slice on track '{name}'")
                continue
            key = (e["pid"], int(parts[1]), parts[2], e["args"]["wr_id"], t + ns(e["dur"]))
            slices[key].append(e["args"]["status"])
        elif ph == "i" and e.get("cat") == "completion":
            a = e["args"]
            side = "send" if a["send"] else "recv"
            completions.append(((e["pid"], a["qp"], side, a["wr_id"], t), e["name"]))
    for fid, ends in flows.items():
        if len(ends["s"]) != 1 or len(ends["f"]) != 1:
            errors.append(f"flow {fid}: {len(ends['s'])} starts, {len(ends['f'])} finishes")
        elif ends["f"][0] < ends["s"][0]:
            errors.append(f"flow {fid} finishes before it starts")
    seen = collections.Counter()
    for key, status in completions:
        got = slices.get(key, [])
        matching = [s for s in got if s == status]
        if not matching:
            errors.append(f"completion {key} ({status}): no slice ends there (found {got})")
        seen[key] += 1
    for key, n in seen.items():
        statuses = [s for s in slices.get(key, []) if s not in ("unsignaled", "outstanding")]
        if len(statuses) != n:
            errors.append(f"completion {key}: {n} completions but {len(statuses)} slices")
    for e in errors[:20]:
        print(f"{path}: {e}", file=sys.stderr)
    if not errors:
        n_slices = sum(len(v) for v in slices.values())
        print(f"{path}: {len(completions)} completions, {n_slices} WR slices, "
              f"{len(flows)} flows, {len(names)} tracks: ok")
    return not errors


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    ok = all([check(p) for p in sys.argv[1:]])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
