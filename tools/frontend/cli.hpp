#pragma once
// The trainsim command line (DESIGN.md §5) as a function, so tests can run it
// in-process. Exit codes: 0 ok, 1 the simulated job is infeasible, 2 bad input.
#include <ostream>

namespace trainsim {

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace trainsim
