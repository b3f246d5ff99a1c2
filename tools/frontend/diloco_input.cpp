#include "tools/frontend/diloco_input.hpp"

#include <string>

#include "models/layout_rules.hpp"
#include "models/placement.hpp"
#include "topologies/graph.hpp"

namespace trainsim {

namespace {
// Bytes per pseudo-gradient element on the WAN. int8 is INTELLECT-1's custom
// all-reduce (arXiv:2412.01152); 4-bit is Streaming DiLoCo's E3M0 (arXiv:2501.18512).
double outer_bytes_of(const std::string& p) {
  if (p == "fp32") return 4;
  if (p == "bf16" || p == "fp16") return 2;
  if (p == "int8" || p == "fp8") return 1;
  return 0.5;  // int4, fp4
}
}  // namespace

ParallelSpec site_parallel(const ParallelSpec& parallel, int sites) {
  ParallelSpec p = parallel;
  p.dp = parallel.dp / sites;
  p.global_batch = parallel.global_batch / sites;
  p.custom_schedule.microbatches = p.micro_batches();
  return p;
}

ClusterSpec site_cluster(const ClusterSpec& cluster) {
  ClusterSpec c = cluster;
  const int sites = cluster.datacenters.count;
  for (NodeGroup& g : c.groups) g.count /= sites;
  c.datacenters = DatacenterSpec{};
  c.name = cluster.name + " (one datacenter)";
  return c;
}

std::optional<DilocoSpec> read_diloco(ObjectReader& top, const TransformerSpec& model, ParallelSpec& parallel,
                                      const TrainingSpec& training, const ClusterSpec& cluster) {
  const nlohmann::json* v = top.raw("diloco");
  // null: no DiLoCo (a sweep axis can switch it off).
  if (v == nullptr || v->is_null()) return std::nullopt;
  ObjectReader r(*v, top.at("diloco"), top.diagnostics());
  if (!r.valid()) return std::nullopt;
  DilocoSpec d;
  d.inner_steps = static_cast<int>(r.integer("inner_steps", d.inner_steps, 1, kMaxDilocoInnerSteps, true));
  d.outer_precision = r.choice("outer_precision", "fp32", {"fp32", "bf16", "fp16", "fp8", "int8", "fp4", "int4"});
  d.outer_bytes = outer_bytes_of(d.outer_precision);
  d.fragments = static_cast<int>(r.integer("fragments", 1, 1, std::max(1, model.layers), false));
  d.overlap_steps = static_cast<int>(r.integer("overlap_steps", 0, 0, d.inner_steps, false));
  d.outer_state_on_gpu = r.choice("outer_state", "gpu", {"gpu", "host"}) == "gpu";
  d.outer_allreduce_per_layer = r.choice("outer_allreduce", "fused", {"fused", "per_layer"}) == "per_layer";
  r.finish();

  Diagnostics& diags = top.diagnostics();
  const std::string at = top.at("diloco");
  const int sites = cluster.datacenters.count;
  if (sites < 2) {
    diags.error(at,
                "DiLoCo synchronises replicas across datacenters: the cluster needs datacenters.count >= 2 "
                "(it has " +
                    std::to_string(sites) + ")");
    return std::nullopt;
  }
  bool ok = true;
  if (parallel.dp % sites != 0) {
    diags.error("/parallel/dp", "with \"diloco\", dp (" + std::to_string(parallel.dp) +
                                    ") must be a multiple of the datacenters (" + std::to_string(sites) +
                                    "): each datacenter trains dp / datacenters replicas");
    ok = false;
  }
  if (parallel.global_batch % sites != 0) {
    diags.error("/parallel/global_batch", "with \"diloco\", global_batch must be a multiple of the datacenters (" +
                                              std::to_string(sites) + "): every site trains its share");
    ok = false;
  }
  if (parallel.cp > 1 || parallel.ep > 1) {
    diags.error(parallel.cp > 1 ? "/parallel/cp" : "/parallel/ep",
                "\"diloco\" with context or expert parallelism is not modelled by this version");
    ok = false;
  }
  if (!parallel.placement_gpus.empty()) {
    diags.error("/parallel/placement",
                "\"diloco\" needs a placement order (each datacenter holds whole replicas), "
                "not an explicit GPU list");
    ok = false;
  }
  if (cluster.groups.size() != 1 || top.has("perturbations")) {
    diags.error(at, "\"diloco\" needs identical sites: one node type and no perturbations (not modelled)");
    ok = false;
  }
  if (top.has("reliability")) {
    diags.error(at, "\"diloco\" together with \"reliability\" is not modelled by this version");
    ok = false;
  }
  // The checks below build the cluster: only once everything read so far is valid.
  if (!ok || !diags.ok()) return std::nullopt;

  // Each datacenter must hold whole replicas: DP outermost unless the scenario says otherwise.
  const nlohmann::json* par_json = top.raw("parallel");
  if (par_json == nullptr || !par_json->is_object() || !par_json->contains("placement")) {
    parallel.placement_order = "tp-cp-ep-pp-dp";
  }
  if (parallel.gpus() == cluster.total_gpus() &&
      Placement::check(parallel, parallel.placement_order, {}, cluster.total_gpus()).empty()) {
    const Placement placement(parallel, parallel.placement_order);
    const Cluster c(cluster);
    const FabricFacts facts = fabric_facts(cluster);
    for (int dp = 0; dp < parallel.dp && ok; ++dp) {
      const int site = facts.datacenter_of(c.node_of(placement.gpu(RankCoord{0, 0, 0, dp, 0})));
      for (int pp = 0; pp < parallel.pp && ok; ++pp) {
        for (int tp = 0; tp < parallel.tp && ok; ++tp) {
          if (facts.datacenter_of(c.node_of(placement.gpu(RankCoord{tp, 0, 0, dp, pp}))) != site) {
            diags.error("/parallel/placement",
                        "with \"diloco\" every replica must sit in one datacenter, but "
                        "placement \"" +
                            parallel.placement_order + "\" spreads replica " + std::to_string(dp) +
                            " over several; put dp outermost "
                            "(\"tp-cp-ep-pp-dp\")");
            ok = false;
          }
        }
      }
    }
  }
  // The layout each site trains must itself be plannable.
  if (ok) {
    for (const LayoutProblem& p :
         check_layout(model, site_parallel(parallel, sites), training, site_cluster(cluster))) {
      diags.error(p.path, "in the layout of one datacenter (dp and global_batch / " + std::to_string(sites) +
                              " with \"diloco\"): " + p.message);
    }
  }
  return d;
}

}  // namespace trainsim
