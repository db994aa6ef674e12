// A campaign as JUnit XML, the format CI systems read: one <testsuite> per file, a <testcase>
// per seed, a failed seed's reproducer and output in its <failure>. The structure is the one of
// the Ant/Jenkins JUnit format; tests/swarm/junit.xsd states it and the tests validate against
// it. `verbsim-swarm merge` reads the files back.
#pragma once

#include <string>

#include "campaign.hpp"

namespace verbsim::swarm {

// Writes the file; throws std::runtime_error naming it if it cannot.
void write_junit(const std::string& path, const Campaign& campaign);

// Reads a file write_junit wrote; throws std::runtime_error naming the file and what is wrong.
Campaign read_junit(const std::string& path);

}  // namespace verbsim::swarm
