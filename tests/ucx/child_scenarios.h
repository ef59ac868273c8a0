// Rank programs that the UCX tests start as separate processes (the test binary re-executes
// itself with "--child NAME"). Each returns the process's exit status: 0 when every check on
// this rank passed; failures are printed to stderr with the rank.
#pragma once

#include <string>

namespace ucxtest {

int run_child(const std::string& name);

// A peer's last message, hidden from its receiver when the peer ends (last_message_scenario.cpp).
int last_message();

// Environment variable through which the parent passes a scenario's parameter.
inline constexpr const char* kParamVar = "FERRY_UCX_TEST_PARAM";

}  // namespace ucxtest
