#!/usr/bin/env python3
# Compares two conformance logs (VERBSIM_CONFORMANCE_LOG) case by case: the observations of the
# Ibverbs instantiation run through the drop-in against those of a simulator instantiation
# (SimRxe). Pass/fail is not compared: the Ibverbs instantiation judges against the table of
# the device's name, which for sim0 is not the profile the drop-in ran.
#
#   conformance-compare.py IBVERBS_LOG SIM_LOG [--markdown]
#
# Prints each case whose observations differ (key by key) and a count; exit 1 when any does.
import sys


def load(path):
    cases = {}
    with open(path) as f:
        for line in f:
            parts = line.rstrip('\n').split('\t')
            if len(parts) < 2:
                continue
            name = parts[0].split('/', 1)[-1]
            obs = {}
            for word in (parts[2].split(' ') if len(parts) > 2 else []):
                if '=' in word:
                    k, v = word.split('=', 1)
                    obs[k] = v
            cases[name] = (parts[1], obs)
    return cases


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    markdown = '--markdown' in sys.argv
    if len(args) != 2:
        sys.exit('usage: conformance-compare.py IBVERBS_LOG SIM_LOG [--markdown]')
    ibv, sim = load(args[0]), load(args[1])
    differ = 0
    if markdown:
        print('| case | observation | through the drop-in | simulator |')
        print('| --- | --- | --- | --- |')
    for name in sorted(set(ibv) | set(sim)):
        if name not in ibv or name not in sim:
            where = 'drop-in' if name not in ibv else 'simulator'
            print(f'| {name} | (missing in the {where} run) | | |' if markdown
                  else f'{name}: missing in the {where} run')
            differ += 1
            continue
        a, b = ibv[name][1], sim[name][1]
        if ibv[name][0] == 'skip' or sim[name][0] == 'skip':
            if ibv[name][0] != sim[name][0]:
                print(f'| {name} | skipped | {ibv[name][0]} | {sim[name][0]} |' if markdown
                      else f'{name}: {ibv[name][0]} through the drop-in, {sim[name][0]} on the simulator')
                differ += 1
            continue
        keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        if keys:
            differ += 1
            for k in keys:
                if markdown:
                    print(f'| {name} | {k} | {a.get(k, "-")} | {b.get(k, "-")} |')
                else:
                    print(f'{name}: {k}: {a.get(k, "-")} through the drop-in, {b.get(k, "-")} on the simulator')
    total = len(set(ibv) | set(sim))
    print(f'\n{total - differ} of {total} cases agree, {differ} differ')
    return 1 if differ else 0


if __name__ == '__main__':
    sys.exit(main())
