#!/usr/bin/env python3
"""Compares the verb log's kernel-crossing estimate with what strace saw (kernel-crossings.sh).

Reads the guest's output: per program, "== kernel-crossings run: CMD", "== exit N", "== strace",
strace -f -yy lines, "== end". The verb log wrote each record to stderr after its call returned,
so the RDMA syscalls a thread made since its previous record are that call's. RDMA syscalls are those on the
uverbs device, the completion channels' and rdma_cm's fds, sysfs's infiniband files and RDMA
netlink sockets; the program's own epoll or poll on a channel's fd is no verb's; the rest (the loader, the log's own writes and clock reads) is counted apart.

Exits 1 when, for some verb, the number of calls the model says enter the kernel differs from
the number of calls that made an RDMA syscall.
"""
import re
import sys
from collections import Counter, defaultdict

LINE = re.compile(r'^(?:(?P<tid>\d+)\s+)?(?P<name>[a-z_0-9]+)\((?P<args>.*)$')
RECORD = re.compile(r'^write\(2<[^>]*>, "(?P<text>[^"]*)')
VERB = re.compile(r'^t=\S+ (?:wall=\S+ )?(?:control|data|event) (?P<verb>\S+)')
SUMMARY = re.compile(r'^summary verb=(?P<verb>\S+) class=\S+ calls=(?P<calls>\d+) kernel=(?P<kernel>\S+)')
TOTAL = re.compile(r'^summary total .*kernel_crossings=(?P<k>\d+) uverbs=(?P<u>\d+)')
RDMA_FD = re.compile(r'infiniband|NETLINK')  # the program opens no other netlink socket
WAITS = ('epoll_ctl', 'epoll_wait', 'epoll_pwait', 'poll', 'ppoll', 'select', 'pselect6')
UVERBS_FD = re.compile(r'^\d+</dev/infiniband/uverbs\d+')


def kind(name, args):
    """What an RDMA syscall is, for the table: a uverbs command or something else."""
    if name in ('ioctl', 'write') and UVERBS_FD.match(args):
        return 'cmd'
    return 'other'


class Run:
    def __init__(self, cmd):
        self.cmd = cmd
        self.exit = None
        self.calls = Counter()           # records per verb
        self.crossed = Counter()         # records whose call made an RDMA syscall
        self.cmds = Counter()            # uverbs commands (ioctl/write on the device) per verb
        self.other = Counter()           # other RDMA syscalls per verb
        self.names = defaultdict(Counter)  # verb -> syscall names
        self.model = {}                  # verb -> (calls, kernel) from the summary
        self.total = None
        self.outside = Counter()         # RDMA syscalls after the last record
        self.non_rdma = Counter()
        self.waits = Counter()


def parse(lines):
    runs = []
    run = None
    pending = defaultdict(list)  # thread -> its RDMA syscalls since its last record
    in_trace = False
    for raw in lines:
        line = raw.rstrip('\n')
        if line.startswith('== kernel-crossings run: '):
            run = Run(line[len('== kernel-crossings run: '):])
            runs.append(run)
            pending = defaultdict(list)
            continue
        if run is None:
            continue
        if line.startswith('== exit '):
            run.exit = int(line.split()[2])
            continue
        if line == '== strace':
            in_trace = True
            continue
        if line == '== end':
            in_trace = False
            for calls in pending.values():
                for n, _ in calls:
                    run.outside[n] += 1
            pending = defaultdict(list)
            continue
        if not in_trace:
            continue
        m = LINE.match(line.strip())
        if not m:
            continue  # "+++ exited", resumed calls
        name, args, tid = m.group('name'), m.group('args'), m.group('tid')
        rec = RECORD.match(f'{name}({args}')
        if rec:
            text = rec.group('text').replace('\\"', '"')
            v = VERB.match(text)
            if v:
                verb = v.group('verb')
                run.calls[verb] += 1
                mine = pending.pop(tid, [])
                if mine:
                    run.crossed[verb] += 1
                for n, k in mine:
                    run.names[verb][n] += 1
                    (run.cmds if k == 'cmd' else run.other)[verb] += 1
                continue
            s = SUMMARY.match(text)
            if s:
                run.model[s.group('verb')] = (int(s.group('calls')), s.group('kernel'))
                continue
            t = TOTAL.match(text)
            if t:
                run.total = (int(t.group('k')), int(t.group('u')))
            continue
        if name == 'write' and args.startswith('2<'):
            continue  # the newline after a record
        if name in WAITS:
            run.waits[name] += 1  # the program's own waits on a channel's fd, not a verb's
        elif RDMA_FD.search(args):
            pending[tid].append((name, kind(name, args)))
        else:
            run.non_rdma[name] += 1
    return runs


def report(run):
    print(f'kernel-crossings: {run.cmd}')
    print(f'  exit status {run.exit}')
    hdr = f'  {"verb":<24}{"calls":>6}  {"model":<8}{"est.":>6}{"crossed":>8}{"uverbs cmds":>12}{"other":>7}  syscalls seen'
    print(hdr)
    bad = []
    est_total = seen_total = cmds_total = other_total = 0
    for verb in run.calls:  # in the order they were first called
        calls = run.calls[verb]
        model_calls, kernel = run.model.get(verb, (None, '?'))
        est = calls if kernel in ('uverbs', 'syscall') else 0
        seen = run.crossed[verb]
        est_total += est
        seen_total += seen
        cmds_total += run.cmds[verb]
        other_total += run.other[verb]
        names = ' '.join(f'{n}={c}' for n, c in sorted(run.names[verb].items()))
        flag = ''
        if est != seen or model_calls != calls:
            flag = '  <-- differs'
            bad.append(verb)
        print(f'  {verb:<24}{calls:>6}  {kernel:<8}{est:>6}{seen:>8}{run.cmds[verb]:>12}'
              f'{run.other[verb]:>7}  {names or "-"}{flag}')
    print(f'  {"all verbs":<24}{sum(run.calls.values()):>6}  {"":<8}{est_total:>6}{seen_total:>8}'
          f'{cmds_total:>12}{other_total:>7}')
    if run.total:
        print(f'  the log\'s summary: kernel_crossings={run.total[0]} uverbs={run.total[1]}')
    if run.outside:
        print('  RDMA syscalls after the last record (exit): ' +
              ' '.join(f'{n}={c}' for n, c in sorted(run.outside.items())))
    if run.waits:
        print('  the program\'s own waits (not verbs): ' +
              ' '.join(f'{n}={c}' for n, c in sorted(run.waits.items())))
    top = ' '.join(f'{n}={c}' for n, c in run.non_rdma.most_common(6))
    print(f'  not RDMA (loader, program, the log itself): {sum(run.non_rdma.values())} ({top})')
    return bad


def main():
    runs = parse(open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin)
    if not runs:
        print('kernel-crossings: no run in the guest output', file=sys.stderr)
        return 2
    status = 0
    for run in runs:
        if run.exit != 0 or not run.calls:
            print(f'kernel-crossings: {run.cmd}: exit status {run.exit}, {sum(run.calls.values())} records',
                  file=sys.stderr)
            status = 2
            continue
        bad = report(run)
        if bad:
            print(f'kernel-crossings: the estimate differs from strace for: {" ".join(bad)}')
            status = max(status, 1)
    if status == 0:
        print('kernel-crossings: the estimate agrees with strace, verb by verb')
    return status


if __name__ == '__main__':
    sys.exit(main())
