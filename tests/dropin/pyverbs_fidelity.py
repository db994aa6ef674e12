#!/usr/bin/env python3
# Writes the "## pyverbs suite" section of docs/FIDELITY.md: the per-module tally of rdma-core's
# pyverbs suite on real rxe next to the simulator through the drop-in, and every test whose
# outcome differs, with why. Replaces the section (from its heading to the next "## " heading or
# the end of the file) and keeps everything else; creates the file when there is none.
#
#   pyverbs_fidelity.py DOC RXE_RESULTS SIM_RXE_RESULTS SIM_STRICT_RESULTS
import contextlib
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pyverbs_tally as t  # noqa: E402

HEADING = '## pyverbs suite'

# Why a test's outcome differs, by test id without the "tests." prefix.
WHY = {
    'test_qpex.QpExTestCase.test_qp_ex_rc_atomic_write':
        'rxe accepts IBV_QP_EX_WITH_ATOMIC_WRITE and then fails the WR (LOC_QP_OP_ERR); the '
        'simulator has no RDMA atomic write, so QP creation says EOPNOTSUPP and the suite skips',
    'test_mr.MRTest.test_mr_rereg_access':
        'rxe has no ibv_rereg_mr (EOPNOTSUPP), and neither has the rxe profile; the strict '
        'profile re-registers in place, as mlx5 does',
    'test_mr.MRTest.test_mr_rereg_access_bad_flow':
        'as test_mr_rereg_access',
    'test_mr.MRTest.test_mr_rereg_addr':
        'as test_mr_rereg_access',
    'test_mr.MRTest.test_mr_rereg_pd':
        'as test_mr_rereg_access',
    'test_parent_domain.ParentDomainTrafficTest.test_default_allocators_rc_traffic':
        'rxe has no parent domains (EOPNOTSUPP), and neither has the rxe profile; the strict '
        'profile has them (without calling the allocators)',
    'test_parent_domain.ParentDomainTrafficTest.test_mem_align_rc_traffic':
        'as test_default_allocators_rc_traffic',
    'test_parent_domain.ParentDomainTrafficTest.test_mem_align_srq_excq_rc_traffic':
        'as test_default_allocators_rc_traffic',
    'test_parent_domain.ParentDomainTrafficTest.test_mem_align_ud_traffic':
        'as test_default_allocators_rc_traffic',
    'test_parent_domain.ParentDomainTrafficTest.test_without_allocators_rc_traffic':
        'as test_default_allocators_rc_traffic',
    'test_shared_pd.SharedPDTestCase.test_imported_rc_ex_rdma_write':
        'rxe cannot import a device (EOPNOTSUPP), nor can the rxe profile; the strict profile '
        'imports within the process',
    'test_device.DeviceTest.test_query_gid_ex_bad_flow':
        'the strict profile\'s GID table has two entries, both in use, so the test finds no '
        'empty index and skips; rxe (1024 entries) and the rxe profile have empty ones',
}


def render(rxe_path, sim_rxe_path, sim_strict_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        t.table([f'rxe (VM)={rxe_path}', f'sim, rxe profile={sim_rxe_path}',
                 f'sim, strict profile={sim_strict_path}'])
    runs = {'rxe': t.load(rxe_path), 'sim rxe': t.load(sim_rxe_path),
            'sim strict': t.load(sim_strict_path)}
    tot = {k: t.tally(v)['TOTAL'] for k, v in runs.items()}
    rxe_pass = [n for n, o in runs['rxe'].items() if o == 'pass']
    broken = sorted(n for n in rxe_pass
                    if any(runs[k].get(n) in ('fail', 'error', None) for k in ('sim rxe', 'sim strict')))
    verdict = ('No test that passes on rxe fails or errors on the simulator.' if not broken else
               f'{len(broken)} tests that pass on rxe fail or error on the simulator: '
               + ', '.join(b.removeprefix('tests.') for b in broken) + '.')
    lines = [
        HEADING,
        '',
        'rdma-core\'s pyverbs test suite as Debian 12 ships it (python3-pyverbs 44.0, 273 tests in',
        '`/usr/share/doc/rdma-core/tests`), unmodified, loaded as its `run_tests.py` loads it, with',
        '`--dev <device>`: on real rxe (kernel 6.1 in the project\'s VM, `rxe0`;',
        '`tests/dropin/pyverbs-rxe.sh`) and on the simulator through the libibverbs drop-in',
        '(`--dev sim0`; `tests/dropin/pyverbs.sh`) in its rxe and strict profiles. Cells are',
        'pass/fail/error/skip. ctest `dropin_pyverbs` runs the rxe profile and fails when a test',
        'that passes on rxe fails or errors, or fewer tests pass than the rxe profile\'s count here',
        '(its `--min-pass`).',
        '',
        out.getvalue().rstrip('\n'),
        '',
        f'Totals: rxe {t.cell(tot["rxe"])}, simulator {t.cell(tot["sim rxe"])} (rxe profile), '
        f'{t.cell(tot["sim strict"])} (strict). {verdict} Every test whose outcome differs, and why:',
        '',
        '| test | rxe | sim, rxe profile | sim, strict profile | why |',
        '| --- | --- | --- | --- | --- |',
    ]
    names = sorted(set().union(*runs.values()))
    for name in names:
        o = [runs[k].get(name, '-') for k in ('rxe', 'sim rxe', 'sim strict')]
        if len(set(o)) == 1:
            continue
        short = name.removeprefix('tests.')
        lines.append(f'| {short} | {o[0]} | {o[1]} | {o[2]} | {WHY.get(short, "(not analysed)")} |')
    lines += [
        '',
        '### The conformance suite through the drop-in',
        '',
        'ctest `dropin_conformance_strict` and `dropin_conformance_rxe` (`tests/dropin/conformance.sh`)',
        'run the conformance suite\'s Ibverbs instantiation through the drop-in (C++ API -> ibverbs',
        'backend -> libibverbs.so.1 = drop-in -> simulator) and compare what each case observed with the',
        'simulator instantiation of the same profile (C++ API -> sim backend). Strict: all 160 cases',
        'agree, and pass. rxe: 148 agree; the other 12 run a different test flow, because the fixture',
        'picks the Ibverbs instantiation\'s expectations by device name (`sim0` gets the strict table)',
        'while the world runs the rxe profile (`tests/dropin/conformance-rxe-known.txt`). With the table',
        'chosen by the profile (the drop-in\'s `fw_ver` reads `verbsim-0.1 (rxe)`) all 160 agree: the',
        'drop-in adds no difference of its own.',
        '',
    ]
    return '\n'.join(lines)


def main():
    if len(sys.argv) != 5:
        sys.exit('usage: pyverbs_fidelity.py DOC RXE_RESULTS SIM_RXE_RESULTS SIM_STRICT_RESULTS')
    doc = sys.argv[1]
    section = render(*sys.argv[2:])
    before = '# Fidelity\n\n'
    after = ''
    if os.path.exists(doc):
        with open(doc) as f:
            text = f.read()
        at = text.find('\n' + HEADING + '\n')
        before = text[:at + 1] if at >= 0 else text.rstrip('\n') + '\n\n'
        # Keep any later "## " section (the conformance suite's, which ends the document with
        # its agreement line; tests/conformance/fidelity.sh writes it).
        nxt = text.find('\n## ', at + 1) if at >= 0 else -1
        after = text[nxt + 1:] if nxt >= 0 else ''
    with open(doc, 'w') as f:
        f.write(before + section + ('\n' + after if after else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
