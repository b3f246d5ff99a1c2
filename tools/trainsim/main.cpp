// trainsim executable: a thin wrapper around the in-process CLI.
#include <iostream>

#include "tools/frontend/cli.hpp"

int main(int argc, char** argv) {
  trainsim::keep_freed_memory();
  return trainsim::run_cli(argc, argv, std::cout, std::cerr);
}
