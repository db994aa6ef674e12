// libFuzzer target: the fault-plan and budget parsers (VERBSIM_FAULTS, VERBSIM_BUDGET) on any
// text. A plan either parses or is refused with std::invalid_argument naming the rule; what
// parses prints a text that parses to the same plan.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "verbsim/sim/faults.hpp"
#include "verbsim/sim/world.hpp"

namespace {

[[noreturn]] void fail(const char* what, std::string_view text, const std::string& detail) {
  std::fprintf(stderr, "fuzz_fault_plan: %s\n  input: '%.*s'\n  %s\n", what,
               static_cast<int>(text.size()), text.data(), detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using verbsim::sim::Budget;
  using verbsim::sim::FaultPlan;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const FaultPlan plan = FaultPlan::parse(text);
    const std::string printed = plan.to_string();
    std::string again;
    try {
      again = FaultPlan::parse(printed).to_string();
    } catch (const std::invalid_argument& e) {
      fail("a parsed plan prints a text the parser refuses", text, printed + ": " + e.what());
    }
    if (again != printed) fail("a plan does not survive printing", text, printed + " -> " + again);
  } catch (const std::invalid_argument& e) {
    if (!std::string_view(e.what()).starts_with("fault plan: ")) {
      fail("a refusal that does not say it is the fault plan's", text, e.what());
    }
  }
  try {
    const Budget b = Budget::parse(text);
    if (Budget::parse(b.to_string()).to_string() != b.to_string()) {
      fail("a budget does not survive printing", text, b.to_string());
    }
  } catch (const std::invalid_argument& e) {
    if (!std::string_view(e.what()).starts_with("budget: ")) {
      fail("a refusal that does not say it is the budget's", text, e.what());
    }
  }
  return 0;
}
