#include "models/planner.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>

#include "models/layer_steps.hpp"
#include "models/schedule.hpp"

namespace trainsim {

int rank_gpu(const ParallelSpec& par, int stage, int dp, int cp, int tp) {
  return tp + par.tp * (cp + par.cp * (dp + par.dp * stage));
}

namespace {

constexpr double kActBytes = 2;

// Megatron-LM DDP default bucket: max(40M, 1M * dp) parameters.
double default_bucket_elements(int dp_group) { return std::max(40e6, 1e6 * dp_group); }

enum Slot : std::uint32_t { kSlotTp, kSlotCp, kSlotDp, kSlotNext, kSlotPrev, kNumSlots };

struct Streams {
  std::uint8_t compute, tp, cp, dp, send_next, send_prev, recv_prev, recv_next;
};

// Builds the program of one pipeline rank.
class StageProgramBuilder {
 public:
  StageProgramBuilder(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                      const ModelSteps& steps, int stage)
      : model_(model), par_(par), train_(train), steps_(steps), stage_(stage), b_("stage " + std::to_string(stage)) {
    s_.compute = b_.add_stream("compute");
    s_.tp = b_.add_stream("tp");
    s_.cp = b_.add_stream("cp");
    s_.dp = b_.add_stream("dp");
    s_.send_next = b_.add_stream("pp.send.next");
    s_.send_prev = b_.add_stream("pp.send.prev");
    s_.recv_prev = b_.add_stream("pp.recv.prev");
    s_.recv_next = b_.add_stream("pp.recv.next");
    for (const char* name : {"tp", "cp", "dp", "pp.next", "pp.prev"}) b_.add_comm_slot(name);
    layers_per_chunk_ = par.chunk_layers(stage, model.layers);
    dp_group_ = par.dp * par.cp;
    const double bucket_elems =
        par.dp_bucket_bytes > 0 ? par.dp_bucket_bytes / train.grad_reduce_bytes : default_bucket_elements(dp_group_);
    bucket_bytes_ = bucket_elems * train.grad_reduce_bytes;
  }

  ProgramTemplate build(double* hardware_flops, double* model_flops) {
    const int m = par_.micro_batches();
    const auto order = pipeline_order(par_.schedule, stage_, par_.pp, m, par_.vpp);
    const std::size_t per_unit =
        layers_per_chunk_ *
            (steps_.layer.forward.size() + steps_.layer.backward.size() + steps_.layer.recompute.size()) / 2 +
        8;
    b_.reserve(order.size() * per_unit, 2 * order.size() * per_unit);
    // The last backward unit of each chunk carries the gradient reduction.
    std::vector<int> last_backward(par_.vpp, -1);
    for (int i = 0; i < static_cast<int>(order.size()); ++i) {
      if (!order[i].forward) last_backward[order[i].chunk] = i;
    }
    std::vector<int> first_forward(par_.vpp, -1);
    for (int i = static_cast<int>(order.size()) - 1; i >= 0; --i) {
      if (order[i].forward) first_forward[order[i].chunk] = i;
    }
    if (zero_sharded_optimizer() && par_.dp_overlap) prefetch_params_ = true;
    for (int i = 0; i < static_cast<int>(order.size()); ++i) {
      const WorkUnit& u = order[i];
      if (u.forward) {
        forward_unit(u, i == first_forward[u.chunk]);
      } else {
        backward_unit(u, i == last_backward[u.chunk]);
      }
    }
    finish_iteration();
    *hardware_flops = hw_flops_;
    *model_flops = model_flops_;
    return std::move(b_).finish();
  }

 private:
  bool zero_sharded_optimizer() const { return par_.zero >= 1 && par_.zero <= 2 && dp_group_ > 1; }
  bool zero3() const { return par_.zero == 3 && dp_group_ > 1; }
  int vstage(int chunk) const { return chunk * par_.pp + stage_; }
  bool first_vstage(int chunk) const { return vstage(chunk) == 0; }
  bool last_vstage(int chunk) const { return vstage(chunk) == par_.pp * par_.vpp - 1; }
  int first_layer(int chunk) const { return par_.first_layer(stage_, chunk, model_.layers); }

  std::uint32_t label(const std::string& text) {
    auto it = labels_.find(text);
    if (it != labels_.end()) return it->second;
    const std::uint32_t id = b_.add_label(text);
    labels_.emplace(text, id);
    return id;
  }
  std::uint32_t op_id(const Step& s) {
    auto it = ops_.find(&s);
    if (it != ops_.end()) return it->second;
    const std::uint32_t id = b_.add_op(s.op);
    ops_.emplace(&s, id);
    return id;
  }
  std::uint8_t comm_stream(CommClass c) const { return c == CommClass::CP ? s_.cp : s_.tp; }
  std::uint32_t comm_slot(CommClass c) const { return c == CommClass::CP ? kSlotCp : kSlotTp; }

  // Emits a step list; `entry` are extra deps of the first step. Returns the last compute task.
  TaskId emit(const std::vector<Step>& steps, const std::string& prefix, int mb, std::vector<TaskId> entry,
              bool recomputed, TaskId* first_compute = nullptr) {
    std::vector<TaskId> ids(steps.size());
    // Label ids of this step list under this prefix, looked up once per list.
    auto [cached, fresh] =
        step_labels_.try_emplace(prefix + '\x1f' + std::to_string(reinterpret_cast<std::uintptr_t>(&steps)));
    if (fresh) {
      for (const Step& st : steps) cached->second.push_back(label(prefix + st.name));
    }
    const std::vector<std::uint32_t>& step_label = cached->second;
    TaskId last_compute = entry.empty() ? kNone : entry.back();
    TaskId before_last = last_compute;
    bool first = true;
    for (std::size_t j = 0; j < steps.size(); ++j) {
      const Step& s = steps[j];
      std::vector<TaskId> deps;
      if (first) deps = entry;
      for (int w : s.waits) deps.push_back(ids[w]);
      const std::uint32_t lbl = step_label[j];
      if (s.is_comm) {
        const TaskId after = s.overlap_previous ? before_last : last_compute;
        if (after != kNone) deps.push_back(after);
        ids[j] = b_.collective(comm_stream(s.comm_class), comm_slot(s.comm_class), s.collective, s.comm_class,
                               static_cast<std::uint64_t>(s.bytes), lbl, mb, dedupe(deps));
      } else {
        ids[j] = b_.compute(s_.compute, op_id(s), lbl, mb, dedupe(deps));
        before_last = last_compute;
        last_compute = ids[j];
        hw_flops_ += s.model_flops;
        if (!recomputed) model_flops_ += s.model_flops;
        if (first_compute != nullptr && *first_compute == kNone) *first_compute = ids[j];
      }
      first = false;
    }
    return last_compute;
  }
  static std::vector<TaskId> dedupe(std::vector<TaskId> v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    v.erase(std::remove(v.begin(), v.end(), kNone), v.end());
    return v;
  }

  std::string layer_prefix(char pass, int layer) const {
    return std::string(1, pass) + " L" + std::to_string(layer) + " ";
  }

  // Without p2p overlap (Megatron-LM 2021, DeepSpeed pipelines) a rank waits for
  // its sends to finish before computing on, so every transfer sits on the
  // sender's critical path. Receives are posted ahead in both modes (Megatron
  // pairs each blocking send with the next receive, which never deadlocks).
  std::vector<TaskId> unit_entry() {
    std::vector<TaskId> entry;
    if (!par_.pp_overlap) {
      entry = std::move(blocking_sends_);
      blocking_sends_.clear();
    }
    return entry;
  }
  TaskId post_recv(std::uint8_t stream, std::uint32_t slot, const char* what, int mb) {
    return b_.recv(stream, slot, CommClass::PP, activation_message_bytes(), label(what), mb, {});
  }
  void post_send(std::uint8_t stream, std::uint32_t slot, const char* what, int mb, TaskId after) {
    const TaskId d[] = {after};
    const TaskId t = b_.send(stream, slot, CommClass::PP, activation_message_bytes(), label(what), mb, d);
    if (!par_.pp_overlap) blocking_sends_.push_back(t);
  }

  void forward_unit(const WorkUnit& u, bool first_of_chunk) {
    std::vector<TaskId> entry = unit_entry();
    if (!first_vstage(u.chunk)) entry.push_back(post_recv(s_.recv_prev, kSlotPrev, "F recv activations", u.microbatch));
    TaskId last = kNone;
    if (first_vstage(u.chunk)) last = emit(steps_.embedding_forward, "F ", u.microbatch, entry, false);
    if (last != kNone) entry = {last};
    TaskId prev_layer_first = kNone;
    for (int l = 0; l < layers_per_chunk_; ++l) {
      const int layer = first_layer(u.chunk) + l;
      std::vector<TaskId> deps = entry;
      if (zero3()) deps.push_back(param_gather(layer, prev_layer_first, u.microbatch));
      if (prefetch_params_ && first_of_chunk) deps.push_back(param_bucket_of_layer_[layer]);
      TaskId first = kNone;
      last = emit(steps_.layer.forward, layer_prefix('F', layer), u.microbatch, dedupe(deps), false, &first);
      prev_layer_first = first;
      entry = {last};
    }
    if (last_vstage(u.chunk)) last = emit(steps_.head_forward, "F ", u.microbatch, entry, false);
    if (!last_vstage(u.chunk)) post_send(s_.send_next, kSlotNext, "F send activations", u.microbatch, last);
  }

  void backward_unit(const WorkUnit& u, bool reduce_grads) {
    std::vector<TaskId> entry = unit_entry();
    if (!last_vstage(u.chunk)) entry.push_back(post_recv(s_.recv_next, kSlotNext, "B recv gradients", u.microbatch));
    TaskId last = kNone;
    if (last_vstage(u.chunk)) {
      last = emit(steps_.head_backward, "B ", u.microbatch, entry, false);
      entry = {last};
      if (reduce_grads) add_grads(steps_.head_grad_elements, last, u.microbatch);
    }
    TaskId prev_layer_first = kNone;
    for (int l = layers_per_chunk_ - 1; l >= 0; --l) {
      const int layer = first_layer(u.chunk) + l;
      std::vector<TaskId> deps = entry;
      if (zero3()) deps.push_back(param_gather(layer, prev_layer_first, u.microbatch));
      TaskId first = kNone;
      if (!steps_.layer.recompute.empty()) {
        last = emit(steps_.layer.recompute, layer_prefix('R', layer), u.microbatch, dedupe(deps), true, &first);
        deps = {last};
      }
      last = emit(steps_.layer.backward, layer_prefix('B', layer), u.microbatch, dedupe(deps), false, &first);
      prev_layer_first = first;
      entry = {last};
      if (zero3()) {
        const TaskId d[] = {last};
        b_.collective(s_.dp, kSlotDp, CollectiveKind::ReduceScatter, CommClass::DP,
                      static_cast<std::uint64_t>(steps_.layer_grad_elements * train_.grad_reduce_bytes),
                      label("B L" + std::to_string(layer) + " dp.rs.grads"), u.microbatch, d);
        dp_tasks_.push_back(b_.size() - 1);
      } else if (reduce_grads) {
        add_grads(steps_.layer_grad_elements, last, u.microbatch);
      }
    }
    if (first_vstage(u.chunk)) {
      last = emit(steps_.embedding_backward, "B ", u.microbatch, entry, false);
      if (reduce_grads && !zero3()) add_grads(steps_.embedding_grad_elements, last, u.microbatch);
    }
    if (reduce_grads && !zero3()) flush_bucket(last, u.microbatch);
    last_compute_ = last;
    if (!first_vstage(u.chunk)) post_send(s_.send_prev, kSlotPrev, "B send gradients", u.microbatch, last);
  }

  // ZeRO-3: gather a layer's parameters, prefetched one layer ahead.
  TaskId param_gather(int layer, TaskId after, int mb) {
    std::vector<TaskId> deps;
    if (after != kNone) deps.push_back(after);
    return b_.collective(s_.dp, kSlotDp, CollectiveKind::AllGather, CommClass::DP,
                         static_cast<std::uint64_t>(steps_.layer_grad_elements * kActBytes),
                         label("L" + std::to_string(layer) + " dp.ag.params"), mb, deps);
  }

  void add_grads(double elements, TaskId ready, int mb) {
    if (dp_group_ <= 1) return;
    bucket_elems_ += elements;
    if (bucket_elems_ * train_.grad_reduce_bytes >= bucket_bytes_) flush_bucket(ready, mb);
  }

  void flush_bucket(TaskId ready, int mb) {
    if (dp_group_ <= 1 || bucket_elems_ <= 0) return;
    std::vector<TaskId> deps;
    if (par_.dp_overlap) {
      deps.push_back(ready);
    } else {
      pending_buckets_.push_back(bucket_elems_);
      bucket_elems_ = 0;
      return;
    }
    emit_grad_reduce(bucket_elems_, deps, mb);
    bucket_elems_ = 0;
  }

  void emit_grad_reduce(double elements, const std::vector<TaskId>& deps, int mb) {
    const auto kind = zero_sharded_optimizer() ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
    b_.collective(s_.dp, kSlotDp, kind, CommClass::DP, static_cast<std::uint64_t>(elements * train_.grad_reduce_bytes),
                  label(zero_sharded_optimizer() ? "dp.rs.grads" : "dp.ar.grads"), mb, deps);
    dp_tasks_.push_back(b_.size() - 1);
  }

  double local_params() const {
    double p = 0;
    for (int c = 0; c < par_.vpp; ++c) {
      p += layers_per_chunk_ * steps_.layer_grad_elements;
      if (first_vstage(c)) p += steps_.embedding_grad_elements;
      if (last_vstage(c)) p += steps_.head_grad_elements;
    }
    return p;
  }

  void finish_iteration() {
    const int mb = par_.micro_batches() - 1;
    if (!par_.dp_overlap) {
      for (double e : pending_buckets_) emit_grad_reduce(e, {last_compute_}, mb);
    }
    std::vector<TaskId> deps = dp_tasks_;
    deps.push_back(last_compute_);
    const double shard = (par_.zero >= 1 ? dp_group_ : 1);
    const double params = local_params() / shard;
    // Optimizer: gradient-norm pass (fp32 grads), then the update's passes over the
    // local parameters as mixed-precision optimizers run them (Megatron-LM's
    // Float16Optimizer and distributed optimizer, FSDP): 16-bit reduced gradients
    // copied into fp32 main gradients (read 2 B, write 4 B); with fp16 loss scaling,
    // unscale and inf check (read 4, write 4); the update (Adam: read grad, master,
    // m, v, write master, m, v = 28 B; SGD with momentum 20 B); the fp32 master
    // copied to the 16-bit weights (read 4, write 2) unless FSDP all-gathers the
    // fp32 shard itself.
    const bool mixed = train_.precision != Dtype::FP32 && train_.precision != Dtype::TF32;
    double update_bytes = train_.optimizer == "sgd" ? 20.0 : 28.0;
    if (mixed && train_.grad_reduce_bytes == 2) update_bytes += 6;
    if (train_.precision == Dtype::FP16) update_bytes += 8;
    if (mixed && par_.zero < 3) update_bytes += 6;
    ComputeOp norm{"optimizer.grad_norm", OpKind::MemoryBound, Dtype::FP32, 0, params * 4, 0, 0, 0, 1};
    ComputeOp step{"optimizer.step", OpKind::MemoryBound, Dtype::FP32, 0, params * update_bytes, 0, 0, 0, 1};
    const TaskId n = b_.compute(s_.compute, b_.add_op(norm), label("optimizer.grad_norm"), -1, dedupe(deps));
    const TaskId d[] = {n};
    const TaskId st = b_.compute(s_.compute, b_.add_op(step), label("optimizer.step"), -1, d);
    if (zero_sharded_optimizer() && !prefetch_params_) {
      const TaskId sd[] = {st};
      b_.collective(s_.dp, kSlotDp, CollectiveKind::AllGather, CommClass::DP,
                    static_cast<std::uint64_t>(local_params() * kActBytes), label("dp.ag.params"), -1, sd);
    }
  }

 public:
  // Distributed optimizer with overlap: the parameter all-gather of the
  // previous step overlaps this step's first forward (steady state), bucket by bucket.
  void plan_param_prefetch() {
    if (!(zero_sharded_optimizer() && par_.dp_overlap)) return;
    param_bucket_of_layer_.assign(model_.layers, kNone);
    double elems = 0;
    std::vector<int> layers;
    auto flush = [&]() {
      if (layers.empty()) return;
      const TaskId t = b_.collective(s_.dp, kSlotDp, CollectiveKind::AllGather, CommClass::DP,
                                     static_cast<std::uint64_t>(elems * kActBytes), label("dp.ag.params"), -1, {});
      for (int l : layers) param_bucket_of_layer_[l] = t;
      layers.clear();
      elems = 0;
    };
    for (int c = 0; c < par_.vpp; ++c) {
      if (first_vstage(c)) elems += steps_.embedding_grad_elements;
      for (int l = 0; l < layers_per_chunk_; ++l) {
        elems += steps_.layer_grad_elements;
        layers.push_back(first_layer(c) + l);
        if (elems * kActBytes >= bucket_bytes_ / train_.grad_reduce_bytes * kActBytes) flush();
      }
      if (last_vstage(c)) elems += steps_.head_grad_elements;
      flush();
    }
  }

 private:
  std::uint64_t activation_message_bytes() const {
    // Megatron-LM's scatter/gather optimisation: each TP rank sends 1/tp of the
    // activation (with SP it only holds that much); without it every TP rank sends it whole.
    const double tokens = static_cast<double>(par_.micro_batch) * train_.seq_len / par_.cp;
    const bool split = par_.pp_scatter_gather || (par_.sequence_parallel && par_.tp > 1);
    return static_cast<std::uint64_t>(tokens * model_.hidden * kActBytes / (split ? par_.tp : 1));
  }

  static constexpr TaskId kNone = ~TaskId{0};
  const TransformerSpec& model_;
  const ParallelSpec& par_;
  const TrainingSpec& train_;
  const ModelSteps& steps_;
  int stage_;
  ProgramBuilder b_;
  Streams s_{};
  int layers_per_chunk_ = 0;
  int dp_group_ = 1;
  double bucket_bytes_ = 0;
  double bucket_elems_ = 0;
  std::vector<double> pending_buckets_;
  std::vector<TaskId> dp_tasks_;
  std::vector<TaskId> param_bucket_of_layer_;
  bool prefetch_params_ = false;
  TaskId last_compute_ = kNone;
  std::vector<TaskId> blocking_sends_;  // sends the next unit waits for (no p2p overlap)
  std::unordered_map<std::string, std::uint32_t> labels_;
  std::unordered_map<const Step*, std::uint32_t> ops_;
  std::unordered_map<std::string, std::vector<std::uint32_t>> step_labels_;
  double hw_flops_ = 0, model_flops_ = 0;
};

}  // namespace

TrainingPlan plan_training(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                           const Cluster& cluster, const PlanOptions& options) {
  TrainingPlan plan;
  const ModelSteps steps = build_model_steps(model, par, train);
  const int ranks_per_stage = par.tp * par.dp * par.cp;
  for (int s = 0; s < par.pp; ++s) {
    StageProgramBuilder builder(model, par, train, steps, s);
    builder.plan_param_prefetch();
    double hw = 0, mf = 0;
    plan.setup.programs.push_back(builder.build(&hw, &mf));
    plan.hardware_flops += hw * ranks_per_stage;
    plan.model_flops += mf * ranks_per_stage;
  }

  // Communicators, created on first use and keyed by their role and coordinates.
  std::map<std::tuple<int, int, int, int, int>, std::uint32_t> comm_ids;
  auto comm = [&](int role, int a, int b, int c, int d, auto&& members_fn, const std::string& name) {
    const auto key = std::make_tuple(role, a, b, c, d);
    auto it = comm_ids.find(key);
    if (it != comm_ids.end()) return it->second;
    Communicator cm;
    cm.name = name;
    cm.members = members_fn();
    cm.simulated_members = options.representatives && role != 3 ? 1 : static_cast<int>(cm.members.size());
    plan.setup.comms.push_back(std::move(cm));
    const auto id = static_cast<std::uint32_t>(plan.setup.comms.size() - 1);
    comm_ids.emplace(key, id);
    return id;
  };
  const bool ring = par.vpp > 1;
  auto next_stage = [&](int s) { return s + 1 < par.pp ? s + 1 : (ring ? 0 : -1); };
  auto prev_stage = [&](int s) { return s > 0 ? s - 1 : (ring ? par.pp - 1 : -1); };

  const int dps = options.representatives ? 1 : par.dp;
  const int cps = options.representatives ? 1 : par.cp;
  const int tps = options.representatives ? 1 : par.tp;
  plan.recorded_rank_of_stage.assign(par.pp, -1);
  for (int s = 0; s < par.pp; ++s) {
    for (int d = 0; d < dps; ++d) {
      for (int c = 0; c < cps; ++c) {
        for (int t = 0; t < tps; ++t) {
          RankProgram rp;
          rp.program = static_cast<std::uint32_t>(s);
          rp.gpu = rank_gpu(par, s, d, c, t);
          rp.name = "stage " + std::to_string(s) + " (dp " + std::to_string(d) + ", cp " + std::to_string(c) + ", tp " +
                    std::to_string(t) + ", gpu " + std::to_string(rp.gpu) + ")";
          rp.record = d == 0 && c == 0 && t == 0;
          rp.comm_of_slot.resize(kNumSlots);
          const std::string where = "[stage " + std::to_string(s) + "]";
          rp.comm_of_slot[kSlotTp] = comm(
              0, s, d, c, 0,
              [&] {
                std::vector<int> m;
                for (int x = 0; x < par.tp; ++x) m.push_back(rank_gpu(par, s, d, c, x));
                return m;
              },
              "tp group " + where);
          rp.comm_of_slot[kSlotCp] = comm(
              1, s, d, t, 0,
              [&] {
                std::vector<int> m;
                for (int x = 0; x < par.cp; ++x) m.push_back(rank_gpu(par, s, d, x, t));
                return m;
              },
              "cp group " + where);
          rp.comm_of_slot[kSlotDp] = comm(
              2, s, t, 0, 0,
              [&] {
                std::vector<int> m;
                for (int x = 0; x < par.dp; ++x) {
                  for (int y = 0; y < par.cp; ++y) m.push_back(rank_gpu(par, s, x, y, t));
                }
                return m;
              },
              "dp group " + where);
          auto link = [&](int from) -> std::uint32_t {
            const int to = next_stage(from);
            if (to < 0)
              return comm(
                  4, -1, 0, 0, 0, [] { return std::vector<int>{}; }, "no pipeline link");
            return comm(
                3, from, d, c, t,
                [&] {
                  return std::vector<int>{rank_gpu(par, from, d, c, t), rank_gpu(par, to, d, c, t)};
                },
                "pipeline link stage " + std::to_string(from) + "->" + std::to_string(to));
          };
          rp.comm_of_slot[kSlotNext] = link(s);
          const int ps = prev_stage(s);
          rp.comm_of_slot[kSlotPrev] = link(ps >= 0 ? ps : par.pp - 1);  // pp-1 has no next: the unused link
          if (rp.record) plan.recorded_rank_of_stage[s] = static_cast<int>(plan.setup.ranks.size());
          plan.stage_of_rank.push_back(s);
          plan.setup.ranks.push_back(std::move(rp));
        }
      }
    }
  }
  (void)cluster;
  return plan;
}

}  // namespace trainsim
