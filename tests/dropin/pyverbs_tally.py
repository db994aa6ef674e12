#!/usr/bin/env python3
# Tally of pyverbs runs: per module and in total, how many tests passed, failed, errored and
# were skipped. Input files hold lines "<outcome> <test id>" (pyverbs_run.py's output without
# its "PYVERBS-RESULT " prefix).
#
#   pyverbs_tally.py RESULTS                       # table for one run
#   pyverbs_tally.py RESULTS --rxe RXE_RESULTS     # markdown table: this run next to rxe
#   pyverbs_tally.py --table NAME=RESULTS...       # markdown: per module, one column per run,
#                                                  # modules skipped whole everywhere grouped
#   pyverbs_tally.py RESULTS --must-pass LIST      # exit 1 if a test in LIST did not pass
#   pyverbs_tally.py RESULTS --min-pass N          # exit 1 if fewer than N tests passed
import argparse
import collections
import sys

OUTCOMES = ('pass', 'fail', 'error', 'skip')


def load(path):
    res = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 2:
                continue
            outcome, test = parts
            outcome = {'xfail': 'pass', 'upass': 'fail'}.get(outcome, outcome)
            res[test] = outcome
    return res


def module(test):
    parts = test.split('.')
    return parts[1] if len(parts) > 2 else parts[0]


def tally(res):
    per = collections.defaultdict(collections.Counter)
    for test, outcome in res.items():
        per[module(test)][outcome] += 1
        per['TOTAL'][outcome] += 1
    return per


def cell(c):
    return '/'.join(str(c[o]) for o in OUTCOMES)


def table(specs):
    runs = []
    for spec in specs:
        name, path = spec.split('=', 1)
        runs.append((name, load(path)))
    pers = [tally(r) for _, r in runs]
    mods = sorted({m for p in pers for m in p} - {'TOTAL'})
    shown, grouped = [], []
    for m in mods:
        if all(p[m]['skip'] == sum(p[m].values()) for p in pers):
            grouped.append(m)
        else:
            shown.append(m)
    print('| module | ' + ' | '.join(n for n, _ in runs) + ' |')
    print('| --- |' + ' --- |' * len(runs))
    for m in shown:
        print(f'| {m.removeprefix("test_")} | ' + ' | '.join(cell(p[m]) for p in pers) + ' |')
    if grouped:
        names = ', '.join(m.removeprefix('test_') for m in grouped)
        print(f'| {len(grouped)} modules skipped whole everywhere ({names}) | ' +
              ' | '.join(cell(sum((p[m] for m in grouped), collections.Counter())) for p in pers) + ' |')
    print('| **total** | ' + ' | '.join(f'**{cell(p["TOTAL"])}**' for p in pers) + ' |')
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('results', nargs='?')
    ap.add_argument('--table', nargs='+', metavar='NAME=RESULTS')
    ap.add_argument('--rxe', help='results of the same suite on rxe: print both side by side')
    ap.add_argument('--must-pass', help='file of test ids (one per line) that must pass: a '
                    'failure, an error, a skip or a missing test fails the run')
    ap.add_argument('--min-pass', type=int, help='fewest passes accepted')
    args = ap.parse_args()
    if args.table:
        return table(args.table)
    if not args.results:
        ap.error('a results file or --table')
    res = load(args.results)
    per = tally(res)
    mods = sorted(m for m in per if m != 'TOTAL') + ['TOTAL']
    if args.rxe:
        rxe = load(args.rxe)
        rper = tally(rxe)
        mods = sorted(set(mods) | set(rper) - {'TOTAL'}) + ['TOTAL']
        print('| module | sim pass/fail/error/skip | rxe pass/fail/error/skip |')
        print('| --- | --- | --- |')
        for m in mods:
            s = '/'.join(str(per[m][o]) for o in OUTCOMES)
            r = '/'.join(str(rper[m][o]) for o in OUTCOMES)
            name = f'**{m}**' if m == 'TOTAL' else m
            print(f'| {name} | {s} | {r} |')
        print()
        diff = [(t, rxe.get(t, '-'), res.get(t, '-')) for t in sorted(set(res) | set(rxe))
                if rxe.get(t) != res.get(t)]
        if diff:
            print('| test | rxe | sim |')
            print('| --- | --- | --- |')
            for t, r, s in diff:
                print(f'| {t.removeprefix("tests.")} | {r} | {s} |')
    else:
        print(f'{"module":<28} {"pass":>5} {"fail":>5} {"error":>5} {"skip":>5} {"total":>5}')
        for m in mods:
            c = per[m]
            print(f'{m:<28} ' + ' '.join(f'{c[o]:>5}' for o in OUTCOMES) +
                  f' {sum(c.values()):>5}')
    status = 0
    if args.must_pass:
        with open(args.must_pass) as f:
            wanted = [l.split('#')[0].strip() for l in f]
        # A skip counts: a verb that starts answering EOPNOTSUPP makes pyverbs skip its tests.
        bad = [(t, res.get(t, 'missing')) for t in wanted if t and res.get(t, 'missing') != 'pass']
        for t, outcome in bad:
            print(f'{outcome.upper()}: {t} (passes on rxe)', file=sys.stderr)
        if bad:
            print(f'{len(bad)} of the tests that pass on rxe did not pass here', file=sys.stderr)
            status = 1
    if args.min_pass is not None and per['TOTAL']['pass'] < args.min_pass:
        print(f'{per["TOTAL"]["pass"]} tests passed, fewer than {args.min_pass}', file=sys.stderr)
        status = 1
    return status


if __name__ == '__main__':
    sys.exit(main())
