#pragma once
// Low-communication training across sites (DiLoCo, Douillard et al. 2023,
// arXiv:2311.08105, and Streaming DiLoCo, arXiv:2501.18512): every site trains
// its own replica for H inner steps, then the pseudo-gradients are all-reduced
// across sites and an outer optimiser step is taken. Here: the spec, and the
// time of one outer step from the simulated inner step and outer sync.
#include <string>

#include "models/training_spec.hpp"

namespace trainsim {

struct DilocoSpec {
  int inner_steps = 100;           // H: inner optimiser steps between outer synchronisations
  double outer_bytes = 4;          // bytes per pseudo-gradient element on the WAN (fp32 4 ... int4 0.5)
  std::string outer_precision;     // its name as written ("fp32", "bf16", "int8", "int4")
  int fragments = 1;               // Streaming DiLoCo: parameter fragments synchronised on a staggered schedule
  int overlap_steps = 0;           // tau: inner steps the outer communication of a fragment may overlap with
  bool outer_state_on_gpu = true;  // outer parameters and momentum in GPU memory (else host memory)
  // The outer all-reduce as one collective per stage ("fused"), or one blocking
  // collective per layer group, one after another ("per_layer": each pays the
  // ring's WAN latencies; PRIME's diloco.py as used for INTELLECT-1).
  bool outer_allreduce_per_layer = false;
};

// One outer step (H inner steps and the synchronisation of every fragment).
struct DilocoTiming {
  double outer_step_s = 0;         // wall time of one outer step
  double exposed_sync_s = 0;       // outer communication not hidden behind inner steps, whole outer step
  double outer_compute_s = 0;      // outer optimiser and quantisation, whole outer step
  double compute_utilization = 0;  // H * inner_step_s / outer_step_s
};

// Each fragment's all-reduce (`fragment_sync_s`) starts when its H inner steps
// end and may run beside the next `overlap_steps` inner steps; the rest is
// exposed, as is the outer optimiser (`fragment_outer_compute_s`). The WAN
// carries one fragment after another, so an outer step is never shorter than
// all fragments' communication.
DilocoTiming diloco_timing(const DilocoSpec& spec, double inner_step_s, double fragment_sync_s,
                           double fragment_outer_compute_s);

// What a DiLoCo job reports per outer step (result field "diloco").
struct DilocoReport {
  int sites = 0;
  DilocoSpec spec;
  double inner_step_s = 0;     // one inner step of one site (all sites alike)
  double fragment_sync_s = 0;  // one fragment's all-reduce across sites, alone on the network
  DilocoTiming timing;
  double wan_bytes_per_outer_step = 0;  // all sites together
  double wan_bytes_per_token = 0;
  double dp_wan_bytes_per_token = 0;  // data parallelism across the sites (gradients every step), for comparison
  double outer_state_gib = 0;         // outer parameters and momentum per GPU
};

// HBM bytes the outer step moves per parameter (pseudo-gradient, quantisation
// round trip and the Nesterov momentum update), for its compute cost.
double diloco_outer_step_bytes_per_param(const DilocoSpec& spec);

// Bytes all sites together send over the WAN when `params` are all-reduced
// across `sites` site-hierarchically at `bytes_per_element` (ring over the
// sites: each site sends 2 (sites-1)/sites of the buffer).
double wan_allreduce_bytes(double params, int sites, double bytes_per_element);

}  // namespace trainsim
