#!/usr/bin/env python3
"""Checks a timeline the simulator wrote (VERBSIM_TIMELINE, Trace Event Format JSON).
Installed as verbsim-check-timeline; in the source tree tests/observe/check-timeline.py.

- it parses, and every event has the fields its phase needs;
- timestamps never run backwards on a track (a process and thread), in file order;
- flows pair up: every flow start ("s") has exactly one finish ("f") with its id, not earlier;
- every completion (an instant on a CQ track) has exactly one work-request slice that ends at
  it, on the track of its QP and side ("QP <n> send" or "QP <n> recv", any lane), with the
  same wr_id and status;
- CM messages: every CM slice is on a "CM" track; every CM flow starts at a slice where a
  message leaves and finishes at one where the same message (name and args) arrives; every
  slice is one end of a flow, or a message lost on its way (named so, with its fate).

Usage:
  verbsim-check-timeline FILE...   exits 1 naming what is wrong, 0 printing a summary per file
  verbsim-check-timeline --help
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
    flow_ends = collections.defaultdict(dict)  # cm flow id -> phase -> (pid, tid, ns)
    cm_slices = collections.defaultdict(list)  # (pid, tid, ns) -> (name, args)
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
            if e.get("cat") == "cm":
                flow_ends[e["id"]][ph] = (e["pid"], e["tid"], t)
        elif ph == "X" and e.get("cat") == "cm":
            if names.get(track) != "CM":
                errors.append(f"event {i}: a CM slice on track '{names.get(track, track)}'")
            cm_slices[(e["pid"], e["tid"], t)].append((e["name"], e["args"]))
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
    lost = 0
    for where, slices_there in cm_slices.items():
        for name, args in slices_there:
            fate = args.get("fate")
            if name.endswith(")"):
                lost += 1
                if fate in (None, "delivered") or not name.endswith(f" ({fate})"):
                    errors.append(f"CM slice {name} at {where}: lost, but its fate is {fate}")
    n_cm = sum(len(v) for v in cm_slices.values())
    used = set()  # (where, index) of CM slices already paired with a flow
    for fid in sorted(flow_ends):
        ends = flow_ends[fid]
        if "s" not in ends or "f" not in ends:
            continue  # reported with the other flows
        pair = None
        for i, m in enumerate(cm_slices.get(ends["s"], [])):
            if m[0].endswith(")") or (ends["s"], i) in used:
                continue
            for j, a in enumerate(cm_slices.get(ends["f"], [])):
                if a == m and (ends["f"], j) not in used and (ends["s"], i) != (ends["f"], j):
                    pair = ((ends["s"], i), (ends["f"], j))
                    break
            if pair:
                break
        if pair is None:
            errors.append(f"CM flow {fid}: no message leaves where it starts {ends['s']} and "
                          f"arrives, the same, where it finishes {ends['f']}")
        else:
            used.update(pair)
    if n_cm != lost + 2 * len(flow_ends):
        errors.append(f"{n_cm} CM slices, but {len(flow_ends)} CM flows and {lost} lost messages")
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
              f"{len(flows)} flows ({len(flow_ends)} of CM messages, {lost} CM messages lost), "
              f"{len(names)} tracks: ok")
    return not errors


def main():
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(sys.argv) < 2 or any(a.startswith("-") for a in sys.argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    ok = all([check(p) for p in sys.argv[1:]])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
