#!/usr/bin/env python3
"""Merges the files the processes of one shared simulated fabric wrote (VERBSIM_FABRIC, with
VERBSIM_PCAP or VERBSIM_TIMELINE: one file per process, run.<pid>.pcapng) into one, ordered by
virtual time, which every process of a fabric shares (docs/MULTIPROCESS.md).

  verbsim-merge-fabric --pcap OUT.pcapng IN.pcapng...     (Wireshark's mergecap)
  verbsim-merge-fabric --timeline OUT.json IN.json...

(in the source tree: scripts/merge-fabric.py)

A merged timeline keeps each process's devices apart: the tracks of process file k become
"sim0 [run.4711.json]", and flow ids are renumbered per file so that they do not collide.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys


def merge_pcaps(out, inputs):
    mergecap = shutil.which("mergecap")
    if mergecap is None:
        sys.exit("merge-fabric.py: mergecap is not installed (Debian: wireshark-common, which "
                 "scripts/setup.sh installs with tshark)")
    # Chronological merge (mergecap's default): frames carry the fabric's virtual time.
    subprocess.run([mergecap, "-w", out, *inputs], check=True)


def merge_timelines(out, inputs):
    merged = []
    unit = "ns"
    for k, path in enumerate(inputs):
        with open(path) as f:
            doc = json.load(f)
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        if isinstance(doc, dict):
            unit = doc.get("displayTimeUnit", unit)
        label = os.path.basename(path)
        for e in events:
            e = dict(e)
            if "pid" in e:
                e["pid"] = (k + 1) * 1000 + int(e["pid"])
            if "id" in e and e.get("ph") in ("s", "t", "f"):
                e["id"] = (k + 1) * 1_000_000_000 + int(e["id"])
            if e.get("ph") == "M" and e.get("name") == "process_name":
                args = dict(e.get("args", {}))
                args["name"] = f"{args.get('name', '')} [{label}]"
                e["args"] = args
            merged.append(e)
    # Metadata first, then by time: viewers need neither, but a reader of the file does.
    merged.sort(key=lambda e: (e.get("ph") != "M", float(e.get("ts", 0))))
    with open(out, "w") as f:
        f.write('{"displayTimeUnit":%s,"traceEvents":[\n' % json.dumps(unit))
        f.write(",\n".join(json.dumps(e, separators=(",", ":")) for e in merged))
        f.write("\n]}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--pcap", metavar="OUT", help="merge pcapng captures into OUT")
    kind.add_argument("--timeline", metavar="OUT", help="merge Trace Event JSON files into OUT")
    p.add_argument("inputs", nargs="+", help="the files of the fabric's processes")
    a = p.parse_args()
    if a.pcap:
        merge_pcaps(a.pcap, a.inputs)
    else:
        merge_timelines(a.timeline, a.inputs)


if __name__ == "__main__":
    main()
