#pragma once
// A data file (catalog preset, calibration profile, default scenario) compiled
// into the binary, so that trainsim never depends on the working directory.
#include <string_view>

namespace trainsim {

struct EmbeddedFile {
  std::string_view path;  // path relative to the source tree, e.g. "topologies/catalog/gpus.json"
  std::string_view text;  // the file's content
};

}  // namespace trainsim
