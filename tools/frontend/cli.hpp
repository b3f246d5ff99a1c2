#pragma once
// The trainsim command line (DESIGN.md §5) as a function, so tests can run it
// in-process. Exit codes: 0 ok, 1 the simulated job is infeasible, 2 bad input,
// 3 internal error (a bug in trainsim: a failed check or an unexpected exception).
#include <functional>
#include <ostream>

namespace trainsim {

inline constexpr int kExitOk = 0, kExitInfeasible = 1, kExitBadInput = 2, kExitInternal = 3;

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// Runs `body` and turns what escapes it into an exit code: InputError -> 2
// (each diagnostic printed), any other exception -> 3 ("error: internal: ...").
// run_cli runs every command through it.
int run_guarded(const std::function<int()>& body, std::ostream& err);

// For an executable's main, before any work: keeps freed memory in the
// process (glibc otherwise unmaps blocks and trims the heap as soon as they
// are freed), so that the configurations of a sweep, planned and simulated
// one after another with arrays of similar sizes, do not fault their pages in
// afresh each time (docs/performance.md, "Freed memory kept for the next
// configuration"). Nothing elsewhere.
void keep_freed_memory();

}  // namespace trainsim
