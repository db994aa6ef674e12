// A failure's signature: a line that names what failed, the same for every seed that fails the
// same way, so a campaign's failures group by it (docs/CAMPAIGNS.md, "Signatures").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace verbsim::swarm {

// From a failed run's whole output and how it ended (SeedResult::why):
//  - the failing check: the first GoogleTest failure ("file.cpp:123: Failure", named by the
//    file's base name and line, with up to three lines of its message), a broken simulator
//    invariant ("verbsim: invariant broken at ..."), or a sanitizer's report line;
//  - then, if the output holds verbsim's flight recorder ("last N records of the run:"), the
//    last record before the failure, after " | last: ";
//  - with no check found: how the run ended ("exit status 3", "killed by signal Aborted") and
//    its last line of output.
// Numbers are normalised (see normalised()) so that seeds, QP numbers, times and digests do not
// split a group.
std::string signature(std::string_view output, std::string_view why);

// One failure of a run: the GoogleTest test that failed, and its signature (of the test's own
// output, as signature() makes it). `test` is empty for a program that is not a GoogleTest
// binary, or a failure outside every test (a leak found at exit).
struct Failure {
  std::string test;       // "Suite.Name", as GoogleTest names it in "[  FAILED  ] Suite.Name"
  std::string signature;  // "x_test.cpp:42: message | last: record"

  // The group it belongs to: the test and its first failure site ("Suite.Name at
  // x_test.cpp:42"; see site()), or the signature when there is no test.
  std::string group() const;
  bool operator==(const Failure&) const = default;
};

// The failures of a failed run: GoogleTest output ("[ RUN      ] Suite.Name" ... "[  FAILED  ]
// Suite.Name (3 ms)") gives one per failed test, in the order they ran, and one for a test the
// run never finished (a crash, a sanitizer's abort, a timeout); other output, or GoogleTest
// output in which no test failed, gives one, signature(output, why), with no test.
std::vector<Failure> failures(std::string_view output, std::string_view why);

// Where a signature says the failure is: for a GoogleTest failure the check's file and line
// ("x_test.cpp:42"), else the signature without the last record.
std::string site(std::string_view signature);

// Every word holding a digit made of hex digits only (17, 0x7f, beaee9718ad2ba2a) becomes '#',
// and every run of digits inside other words too (sim0 -> sim#, wr_id=5 -> wr_id=#).
std::string normalised(std::string_view text);

}  // namespace verbsim::swarm
