#!/usr/bin/python3
# Runs rdma-core's pyverbs test suite the way its run_tests.py does (same loader, same
# arguments: --dev <device> ...) and records each test's outcome, one line per test on stdout:
#   PYVERBS-RESULT <outcome> <test id>
# where outcome is pass, fail, error, skip, xfail or upass. The suite itself is not modified.
#
#   /usr/bin/python3 pyverbs_run.py <tests dir> --dev sim0 [-v]
import os
import sys
import unittest
from importlib.machinery import SourceFileLoader


class RecordingResult(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = []

    def _record(self, test, outcome):
        self.outcomes.append((outcome, test.id()))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, 'pass')

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, 'fail')

    def addError(self, test, err):
        super().addError(test, err)
        # A class-level setUpClass error has no test id of its own.
        self._record(test, 'error')

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, 'skip')

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, 'xfail')

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, 'upass')


def main():
    if len(sys.argv) < 2 or not os.path.isdir(sys.argv[1]):
        sys.exit('usage: pyverbs_run.py <tests dir> --dev <device> [unittest args]')
    tests_dir = os.path.abspath(sys.argv[1])
    sys.argv = [os.path.join(tests_dir, 'run_tests.py')] + sys.argv[2:]
    sys.path.insert(0, tests_dir)
    # What run_tests.py does.
    from args_parser import parser
    tests = SourceFileLoader('tests', os.path.join(tests_dir, '__init__.py')).load_module()
    parser.parse_args()
    verbosity = 2 if '--verbose' in sys.argv or '-v' in sys.argv else 1
    suite = unittest.defaultTestLoader.loadTestsFromModule(tests)
    runner = unittest.TextTestRunner(verbosity=verbosity, resultclass=RecordingResult)
    result = runner.run(suite)
    sys.stderr.flush()
    for outcome, test_id in result.outcomes:
        print(f'PYVERBS-RESULT {outcome} {test_id}')
    sys.stdout.flush()
    return 0


if __name__ == '__main__':
    sys.exit(main())
