// A failure's signature: a line that names what failed, the same for every seed that fails the
// same way, so a campaign's failures group by it (docs/CAMPAIGNS.md, "Signatures").
#pragma once

#include <string>
#include <string_view>

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

// Every word holding a digit made of hex digits only (17, 0x7f, beaee9718ad2ba2a) becomes '#',
// and every run of digits inside other words too (sim0 -> sim#, wr_id=5 -> wr_id=#).
std::string normalised(std::string_view text);

}  // namespace verbsim::swarm
