// The numbers of the environment a world is made from (VERBSIM_SEED, VERBSIM_SIM_DEVICES,
// VERBSIM_SIM_PORTS): one past a variable's range is an error naming the variable and the
// value, never another value (a count cast to int, a seed that wrapped or saturated).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "verbsim/sim/world.hpp"

namespace verbsim::sim {
namespace {

// Sets an environment variable for the scope, and restores what it was.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string from_env_error(const char* name, const char* value) {
  const ScopedEnv env(name, value);
  try {
    const Config c = Config::from_env();
    return "(accepted: seed " + std::to_string(c.seed) + ", " + std::to_string(c.devices) +
           " devices, " + std::to_string(c.ports_per_device) + " ports)";
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
}

TEST(Environment, NumbersPastTheirRangeAreRefusedNamingTheVariable) {
  // Cast to int, 2^32 + 1 devices were 1 and 2^32 + 2 ports were 2.
  EXPECT_EQ(from_env_error("VERBSIM_SIM_DEVICES", "4294967297"),
            "VERBSIM_SIM_DEVICES='4294967297' is not a number from 1 to 64");
  EXPECT_EQ(from_env_error("VERBSIM_SIM_PORTS", "4294967298"),
            "VERBSIM_SIM_PORTS='4294967298' is not a number from 1 to 16");
  EXPECT_EQ(from_env_error("VERBSIM_SIM_DEVICES", "0"),
            "VERBSIM_SIM_DEVICES='0' is not a number from 1 to 64");
  // strtoull took 2^64 as 2^64 - 1, and "-1" as 2^64 - 1 too.
  EXPECT_EQ(from_env_error("VERBSIM_SEED", "18446744073709551616"),
            "VERBSIM_SEED='18446744073709551616' is not a number from 0 to 18446744073709551615");
  EXPECT_EQ(from_env_error("VERBSIM_SEED", "-1"),
            "VERBSIM_SEED='-1' is not a number from 0 to 18446744073709551615");
  EXPECT_EQ(from_env_error("VERBSIM_SEED", " 7"),
            "VERBSIM_SEED=' 7' is not a number from 0 to 18446744073709551615");
  // A world made from a config of its own reads VERBSIM_SEED too.
  {
    const ScopedEnv env("VERBSIM_SEED", "99999999999999999999");
    EXPECT_THROW(World{Config{}}, std::invalid_argument);
  }
  // The edges, and the spellings strtoull's base 0 took before (hexadecimal).
  {
    const ScopedEnv seed("VERBSIM_SEED", "18446744073709551615");
    const ScopedEnv devices("VERBSIM_SIM_DEVICES", "64");
    const ScopedEnv ports("VERBSIM_SIM_PORTS", "0x10");
    const Config c = Config::from_env();
    EXPECT_EQ(c.seed, UINT64_MAX);
    EXPECT_EQ(c.devices, 64);
    EXPECT_EQ(c.ports_per_device, 16);
  }
}

}  // namespace
}  // namespace verbsim::sim
