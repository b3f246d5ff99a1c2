#pragma once
// Reads the mixture-of-experts keys of a scenario or catalog model
// ("model.moe") and of a run ("training.routing"), with the strict reader's
// errors (JSON path, what was expected). docs/moe.md lists every key.
#include "models/moe_spec.hpp"
#include "tools/frontend/json_reader.hpp"

namespace trainsim {

// The "moe" object of a model reader (absent: `base` unchanged); `layers` is
// the model's layer count, for the dense-layer check.
MoeSpec read_moe(ObjectReader& model, const MoeSpec& base, int layers);

// The "mla" object of a model reader (absent: `base` unchanged).
MlaSpec read_mla(ObjectReader& model, const MlaSpec& base);

// The "routing" object of a training reader (absent: uniform routing).
RoutingSpec read_routing(ObjectReader& training);

}  // namespace trainsim
