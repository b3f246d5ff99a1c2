#pragma once
// The scenario's per-stage layouts (MPMD) and sub-models, read and checked here
// at the edge (docs/heterogeneous.md): `parallel.stages` (each stage's node
// group, tp, layers and recomputation) and `model.encoder` (a sub-model in front
// of the model, with the tokens it hands on per sample).
#include "models/training_spec.hpp"
#include "tools/frontend/catalog.hpp"
#include "topologies/json_reader.hpp"

namespace trainsim {

// Reads `stages` of the parallel section `r` into par.stages (tp and recompute
// default to the section's own).
void read_stage_layouts(ObjectReader& r, ParallelSpec& par);

// Reads `encoder` of the model section `r` ({"model": preset or inline, "tokens": N}).
void read_model_encoder(ObjectReader& r, const Catalog& cat, TransformerSpec& model);

}  // namespace trainsim
