#include "models/planner.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "models/deepspeed_schedule.hpp"
#include "models/dp_shares.hpp"
#include "models/layer_steps.hpp"
#include "models/layout_rules.hpp"
#include "models/memory_model.hpp"
#include "models/moe.hpp"
#include "models/mpmd.hpp"
#include "models/pipedream.hpp"
#include "models/schedule.hpp"
#include "models/v_schedules.hpp"
#include "models/zero_bubble.hpp"
#include "sim/check.hpp"

namespace trainsim {

int rank_gpu(const ParallelSpec& par, int stage, int dp, int cp, int tp) {
  return tp + par.tp * (cp + par.cp * (dp + par.dp * stage));
}

namespace {

constexpr double kActBytes = 2;

// Megatron-LM DDP default bucket: max(40M, 1M * dp) parameters.
double default_bucket_elements(int dp_group) { return std::max(40e6, 1e6 * dp_group); }

// What a communicator slot of a stage program stands for; the planner resolves
// it per rank into members through the placement.
// EP, ETP, EDP: the expert-parallel, expert tensor-parallel and expert
// data-parallel groups of MoE layers (models/moe.hpp). CPUlysses, CPRing: the
// two sub-groups of a CP group under hybrid context parallelism (cp_ulysses
// consecutive CP ranks, and the ranks at the same place of each such block).
enum class SlotRole : std::uint8_t {
  TP,
  CP,
  DP,
  PipelineForward,
  PipelineBackward,
  EP,
  ETP,
  EDP,
  CPUlysses,
  CPRing,
  TiedEmbedding
};
struct SlotUse {
  SlotRole role = SlotRole::TP;
  int from = -1, to = -1;  // pipeline: sending and receiving stage (one of them is this stage); tied: first, last
  int peer = 0;            // per-stage layouts: which of the rank's messages on this link (DP and TP resharding)
};

// Per-stage layouts (models/mpmd.hpp, boundary_shape): on the pipeline link
// from stage `from` to `to`, the messages each sending rank posts, each
// receiving rank takes, and the bytes of one message (the replicas' shared
// samples, cut into max(x, y) pieces between TP sizes x and y).
struct LinkShape {
  int sends = 1, recvs = 1;
  std::uint64_t bytes = 0;
};
using LinkShapes = std::map<std::pair<int, int>, LinkShape>;

struct Streams {
  std::uint8_t compute, tp, cp, dp, send_next, send_prev, recv_prev, recv_next, ep, offload, reload, tied;
};

// Which parts of a layer's backward a unit emits: all (B and W in issue order),
// the input-gradient part (B) or the weight-gradient part (W).
enum class PassFilter : std::uint8_t { All, InputOnly, WeightOnly };
// Which part of a W unit to emit: all of it, the LM head's weight gradients, or the layers'.
enum class WeightPart : std::uint8_t { All, Head, Layers };

bool emitted(const Step& s, PassFilter f) {
  if (f == PassFilter::All) return true;
  return (s.pass == Pass::BackwardWeight) == (f == PassFilter::WeightOnly);
}

// The label prefix of a step list's tasks: its pass letter, and the layer for a
// layer's steps ("F L3 "; "F " without a layer). Kept as two fields so that the
// planner looks label ids up without formatting the text per unit.
struct StepPrefix {
  char pass = 'F';
  int layer = -1;
  bool operator==(const StepPrefix&) const = default;
  std::string text() const {
    return layer < 0 ? std::string{pass, ' '} : std::string(1, pass) + " L" + std::to_string(layer) + " ";
  }
};

// Builds the program of one pipeline rank from its schedule units.
class StageProgramBuilder {
 public:
  StageProgramBuilder(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                      const ModelSteps& steps, const PipelineSchedule& schedule, int stage)
      : model_(model),
        par_(par),
        train_(train),
        steps_(steps),
        sched_(schedule),
        stage_(stage),
        b_("stage " + std::to_string(stage)) {
    s_.compute = b_.add_stream("compute");
    s_.tp = b_.add_stream("tp");
    s_.cp = b_.add_stream("cp");
    s_.dp = b_.add_stream("dp");
    s_.send_next = b_.add_stream("pp.send.next");
    s_.send_prev = b_.add_stream("pp.send.prev");
    s_.recv_prev = b_.add_stream("pp.recv.prev");
    s_.recv_next = b_.add_stream("pp.recv.next");
    slot_tp_ = add_slot("tp", SlotUse{SlotRole::TP});
    slot_cp_ = add_slot("cp", SlotUse{SlotRole::CP});
    slot_dp_ = add_slot("dp", SlotUse{SlotRole::DP});
    if (par.cp_ulysses > 1 && par.cp_ring() > 1) {
      slot_cp_ulysses_ = add_slot("cp.ulysses", SlotUse{SlotRole::CPUlysses});
      slot_cp_ring_ = add_slot("cp.ring", SlotUse{SlotRole::CPRing});
    }
    if (model.moe.enabled()) {
      s_.ep = b_.add_stream("ep");
      slot_ep_ = add_slot("ep", SlotUse{SlotRole::EP});
      slot_etp_ = add_slot("etp", SlotUse{SlotRole::ETP});
      slot_edp_ = add_slot("edp", SlotUse{SlotRole::EDP});
      edp_group_ = expert_dp(par);
    }
    chunks_ = sched_.chunks_on(stage);
    V_ = sched_.chunks();
    for (int c = 0; c < chunks_; ++c) {
      const int v = sched_.virtual_stage(stage, c);
      vstage_.push_back(v);
      layers_.push_back(par.layers_of_virtual_stage(sched_.part_of(v), model.layers));
      first_layer_.push_back(par.first_layer_of_virtual_stage(sched_.part_of(v), model.layers));
    }
    if (par.offload_layers > 0) {
      // Activation offload: device-to-host and host-to-device copies on their own copy
      // engines; one copy is one layer's saved activations (models/memory_model.hpp).
      s_.offload = b_.add_stream("offload.d2h");
      s_.reload = b_.add_stream("offload.h2d");
      const double bytes = layer_activation_bytes(model, par, train);
      offload_op_ = b_.add_op(ComputeOp{"offload.d2h", OpKind::HostCopy, Dtype::BF16, 0, bytes, 0, 0, 0, 1});
      reload_op_ = b_.add_op(ComputeOp{"offload.h2d", OpKind::HostCopy, Dtype::BF16, 0, bytes, 0, 0, 0, 1});
    }
    fp8_weight_cast_ = fp8_weight_cast(train);
    dp_group_ = par.dp * par.cp;
    const double bucket_elems =
        par.dp_bucket_bytes > 0 ? par.dp_bucket_bytes / train.grad_reduce_bytes : default_bucket_elements(dp_group_);
    bucket_bytes_ = bucket_elems * train.grad_reduce_bytes;
    const std::size_t m = static_cast<std::size_t>(sched_.microbatches);
    megatron_interleaved_p2p_ = par.pp_overlap && par.schedule == ScheduleKind::Interleaved1F1B;
    megatron_batched_p2p_ = !par.pp_overlap && par.schedule == ScheduleKind::Interleaved1F1B;
    if (is_deepspeed_schedule(par.schedule)) {
      ds_steps_ = deepspeed_train_steps(par.schedule, sched_.stages, stage, sched_.microbatches);
    }
    fwd_out_.assign(m * V_, kNone);
    bwd_out_.assign(m * V_, kNone);
  }

  ProgramTemplate build(double* hardware_flops, double* model_flops) {
    const auto& order = sched_.units[stage_];
    int max_layers = 0;
    for (int l : layers_) max_layers = std::max(max_layers, l);
    const std::size_t per_unit =
        max_layers * (dense().forward.size() + dense().backward.size() + dense().recompute.size()) / 2 + 8;
    // About one marked pass per layer and unit (forward, backward, recomputation).
    b_.reserve(order.size() * per_unit, 2 * order.size() * per_unit, order.size() * (max_layers + 1));
    // The last unit of each chunk that finishes its weight gradients carries the gradient reduction.
    std::vector<int> last_weights(chunks_, -1), first_forward(chunks_, -1);
    for (int i = 0; i < static_cast<int>(order.size()); ++i) {
      const ScheduleUnit& u = order[i];
      if (u.kind == UnitKind::Backward || u.kind == UnitKind::BackwardWeight) last_weights[u.chunk] = i;
      if (u.kind == UnitKind::Forward && first_forward[u.chunk] < 0) first_forward[u.chunk] = i;
    }
    if (zero_sharded_optimizer() && par_.dp_overlap && !deepspeed_bf16_optimizer()) prefetch_params_ = true;
    unit_end_.assign(order.size(), kNone);
    if (megatron_interleaved_p2p_) megatron_receive_posts(order);
    if (megatron_batched_p2p_) megatron_batched_setup(order);
    auto emit_unit = [&](int i) {
      const ScheduleUnit& u = order[i];
      cur_unit_ = i;
      if (seq_steps_ != nullptr) cur_ = &(*seq_steps_)[u.microbatch % seq_steps_->size()];
      switch (u.kind) {
        case UnitKind::Forward:
          forward_unit(u, i == first_forward[u.chunk]);
          break;
        case UnitKind::Backward:
          backward_unit(u, PassFilter::All, i == last_weights[u.chunk]);
          break;
        case UnitKind::BackwardInput:
          backward_unit(u, PassFilter::InputOnly, false);
          break;
        case UnitKind::BackwardWeight:
          weight_unit(u, i == last_weights[u.chunk]);
          break;
      }
    };
    const int trailing = first_trailing_weight_unit(order);
    for (int i = 0; i < static_cast<int>(order.size()); ++i) {
      if (i == trailing) {
        trailing_weight_units(order, i, last_weights);
        break;
      }
      const auto first = static_cast<TaskId>(b_.size());
      if (deepspeed()) deepspeed_commands_until(&order[i]);
      const int first_unit = i;
      emit_unit(i);
      if (i + 1 < static_cast<int>(order.size()) && order[i + 1].overlapped) {
        const auto middle = static_cast<TaskId>(b_.size());
        emit_unit(++i);
        interleave(first, middle, static_cast<TaskId>(b_.size()));
      }
      for (int k = first_unit; k <= i; ++k) unit_end_[k] = last_compute_since(first);
      for (int k = first_unit; k <= i && megatron_interleaved_p2p_; ++k) megatron_post_receives(order, k);
      for (int k = first_unit; k <= i && megatron_batched_p2p_; ++k) megatron_batched_exchange(k);
    }
    if (deepspeed()) {
      // The sends of the idle steps after the rank's last pass come before
      // the step's ReduceTiedGrads, ReduceGrads and OptimizerStep.
      deepspeed_commands_until(nullptr);
      if (ds_chain_ != kNone) last_compute_ = ds_chain_;
    }
    drain_deferred_head_wgrads();
    finish_iteration();
    *hardware_flops = hw_flops_;
    *model_flops = model_flops_;
    return std::move(b_).finish();
  }

  const std::vector<SlotUse>& slots() const { return slots_; }
  // The Zero Bubble runtime's receive placement (receive_posts): per unit of
  // this rank, the unit after which its input receive is posted.
  void set_receive_posts(const std::vector<int>* posts) { receive_posts_ = posts; }
  // Off: every step list emitted step by step, without pass templates (the
  // reference the templates are compared with).
  void set_pass_templates(bool on) { use_templates_ = on; }
  // Off: stamped passes are not marked in the program (PassMark), so the
  // executor simulates every pass task by task.
  void set_pass_marks(bool on) { mark_passes_ = on; }
  // Where this stage's traffic matrices (ModelSteps::traffic) start in the run's table.
  void set_matrix_base(std::uint32_t base) { matrix_base_ = base; }

  // Per-stage layouts: the shape of each pipeline link, and the first stage of
  // this stage's sub-model (it runs the sub-model's embedding).
  void set_sequence_chunks(const std::vector<ModelSteps>* chunks) { seq_steps_ = chunks; }
  void set_stage_layouts(const LinkShapes* links, int model_first_stage) {
    links_ = links;
    model_first_v_ = model_first_stage;
  }

  // Tied embeddings over pipeline stages (docs/frameworks.md, "Tied embeddings"):
  // the stages holding the embedding and the LM head all-reduce the shared
  // weight's gradient; nothing when one rank holds both.
  void set_tied_embedding_stages(int first, int last) {
    if (first == last || (stage_ != first && stage_ != last) || train_.tied_grad_sync == TiedGradSync::None) return;
    tied_sync_ = true;
    tied_embedding_rank_ = stage_ == first;
    s_.tied = b_.add_stream("pp.tied");
    slot_tied_ = add_slot("pp.tied", SlotUse{SlotRole::TiedEmbedding, first, last});
  }

  // Distributed optimizer with overlap: the parameter all-gather of the
  // previous step overlaps this step's first forward (steady state), bucket by bucket.
  void plan_param_prefetch() {
    if (!(zero_sharded_optimizer() && par_.dp_overlap) || deepspeed_bf16_optimizer()) return;
    param_bucket_of_layer_.assign(model_.layers, kNone);
    param_bucket_of_chunk_.assign(static_cast<std::size_t>(chunks_), kNone);
    double elems = 0, expert_elems = 0, fp8_elems = 0;
    std::vector<int> layers;
    // Parameters left after a chunk's last bucket (the LM head, added after the
    // layers, when the last layer closed a bucket; the embedding or head of a chunk
    // without layers, `stage_layers` entry 0) are gathered in a bucket of their own,
    // as Megatron-Core's buffer closes a bucket once it reaches the bucket size: the
    // chunk's embedding or head forward waits for it, as a layer waits for its bucket.
    auto flush = [&](int chunk) {
      if (layers.empty() && elems <= 0 && expert_elems <= 0) return;
      TaskId t = b_.collective(s_.dp, slot_dp_, CollectiveKind::AllGather, CommClass::DP,
                               task_bytes(gather_bytes(elems, fp8_elems)), label("dp.ag.params"), -1, {});
      if (expert_elems > 0 && edp_group_ > 1) {
        t = b_.collective(s_.dp, slot_edp_, CollectiveKind::AllGather, CommClass::DP,
                          task_bytes(expert_elems * kActBytes), label("edp.ag.params"), -1, {});
      }
      for (int l : layers) param_bucket_of_layer_[l] = t;
      if (layers.empty()) param_bucket_of_chunk_[static_cast<std::size_t>(chunk)] = t;
      layers.clear();
      elems = expert_elems = fp8_elems = 0;
    };
    if (layer_buckets()) {
      // NeMo's apex buckets: the first layer's holds every parameter outside the layers
      // (the optimizer step starts its gather), then one bucket per layer.
      for (int c = 0; c < chunks_; ++c) {
        if (first_vstage(c)) elems += cur_->embedding_grad_elements;
        if (last_vstage(c)) elems += head_grad_elements(vstage_[c]);
        for (int l = 0; l < layers_[c]; ++l) {
          elems += layer_steps(first_layer_[c] + l).grad_elements;
          expert_elems += layer_steps(first_layer_[c] + l).expert_grad_elements;
          fp8_elems += layer_fp8_weights();
          layers.push_back(first_layer_[c] + l);
          flush(c);
        }
      }
      return;
    }
    for (int c = 0; c < chunks_; ++c) {
      if (first_vstage(c)) elems += cur_->embedding_grad_elements;
      for (int l = 0; l < layers_[c]; ++l) {
        elems += layer_steps(first_layer_[c] + l).grad_elements;
        expert_elems += layer_steps(first_layer_[c] + l).expert_grad_elements;
        fp8_elems += layer_fp8_weights();
        layers.push_back(first_layer_[c] + l);
        if (elems * kActBytes >= bucket_bytes_ / train_.grad_reduce_bytes * kActBytes) flush(c);
      }
      if (last_vstage(c)) {
        elems += head_grad_elements(vstage_[c]);
        expert_elems += cur_->head_expert_grad_elements;
      }
      flush(c);
    }
  }

 private:
  static constexpr TaskId kNone = ~TaskId{0};

  const LayerSteps& layer_steps(int layer) const { return cur_->of(model_.layer_kind(layer)); }
  // The steps a micro-batch runs (a MoE layer's token counts may differ per micro-batch).
  const LayerSteps& layer_steps(int layer, int mb) const { return cur_->of(model_.layer_kind(layer), mb); }
  const LayerSteps& dense() const { return cur_->of(LayerKind::Dense); }
  bool zero_sharded_optimizer() const { return par_.zero >= 1 && par_.zero <= 2 && dp_group_ > 1; }
  bool zero3() const { return par_.zero == 3 && dp_group_ > 1; }
  // DeepSpeed's BF16_Optimizer (bf16 with ZeRO stage 0 or 1; deepspeed/runtime/
  // bf16_optimizer.py): after every micro-batch's backward it adds the bf16
  // gradients into an fp32 buffer of the whole model (update_hp_grads), and
  // all-reduces that fp32 buffer over data parallelism (the engine's
  // allreduce_gradients) before each rank steps its 1/dp partition and
  // all-gathers the bf16 weights.
  bool deepspeed_bf16_optimizer() const {
    return train_.framework == Framework::DeepSpeed && train_.precision == Dtype::BF16 && par_.zero <= 1;
  }
  bool first_vstage(int chunk) const { return embedding_of(vstage_[chunk]); }
  bool last_vstage(int chunk) const { return head_of(vstage_[chunk]); }
  // Chunk v runs the embedding / the LM head (DualPipe: either copy's).
  bool embedding_of(int v) const { return sched_.part_of(v) == model_first_v_; }
  bool head_of(int v) const { return sched_.next_chunk(v) < 0; }
  std::size_t unit_key(int mb, int v) const { return static_cast<std::size_t>(mb) * V_ + v; }

  std::uint32_t add_slot(const std::string& name, SlotUse use) {
    slots_.push_back(use);
    return b_.add_comm_slot(name);
  }
  // The slot of the pipeline link carrying `role` traffic from stage `from` to
  // `to`, and the stream its sends (or receives) run on here. Each link has a
  // stream of its own, so messages to or from one peer never wait behind
  // another peer's (links are FIFO, check_schedule checks their order); the
  // first link of each kind uses the named stream (pp.send.next, ...).
  struct PipelineLink {
    std::uint32_t slot;
    std::uint8_t stream;
  };
  PipelineLink pipeline_link(SlotRole role, int from, int to, int peer = 0) {
    const auto key = std::make_tuple(static_cast<int>(role), from, to, peer);
    auto it = pipeline_slots_.find(key);
    if (it != pipeline_slots_.end()) return it->second;
    const bool forward = role == SlotRole::PipelineForward;
    const bool sending = from == stage_;
    const std::string name = std::string(forward ? "pp.fwd " : "pp.bwd ") + std::to_string(from) + "->" +
                             std::to_string(to) + (peer > 0 ? " #" + std::to_string(peer) : "");
    const std::uint32_t slot = add_slot(name, SlotUse{role, from, to, peer});
    // Kinds: 0 send forward, 1 send backward, 2 receive forward, 3 receive backward.
    const int kind = (sending ? 0 : 2) + (forward ? 0 : 1);
    const std::uint8_t named[] = {s_.send_next, s_.send_prev, s_.recv_prev, s_.recv_next};
    std::uint8_t stream = named[kind];
    if (megatron_interleaved_p2p_) {
      stream = peer_stream(sending ? to : from, peer, sending);
    } else if (link_kind_used_[kind]) {
      TRAINSIM_CHECK(b_.num_streams() < 250, "too many pipeline links on stage " + std::to_string(stage_));
      stream = b_.add_stream(std::string(sending ? "pp.send." : "pp.recv.") + (forward == sending ? "next " : "prev ") +
                             std::to_string(sending ? to : from));
    }
    if (!megatron_interleaved_p2p_) link_kind_used_[kind] = true;
    const PipelineLink link{slot, stream};
    pipeline_slots_.emplace(key, link);
    return link;
  }

  // Megatron-LM's overlapped exchange posts each send and receive on its own
  // (torch.distributed.isend/irecv, no batch), and PyTorch's ProcessGroupNCCL
  // runs an unbatched send/recv on the stream of the two-rank communicator of
  // its pair of ranks (pointToPoint, key getKeySendRecv): a rank's sends to and
  // receives from one peer, both directions, run in the order posted. With two
  // stages Megatron-LM's _p2p_ops puts one direction on the world group, whose
  // communicator has streams of its own: sends and receives queue apart.
  std::uint8_t peer_stream(int peer_stage, int peer, bool sending) {
    const auto key = std::make_tuple(peer_stage, peer, par_.pp == 2 && sending);
    auto it = peer_streams_.find(key);
    if (it != peer_streams_.end()) return it->second;
    TRAINSIM_CHECK(b_.num_streams() < 250, "too many pipeline links on stage " + std::to_string(stage_));
    const std::uint8_t stream =
        b_.add_stream("pp.p2p " + std::to_string(peer_stage) + (peer > 0 ? " #" + std::to_string(peer) : "") +
                      (std::get<2>(key) ? " send" : ""));
    peer_streams_.emplace(key, stream);
    return stream;
  }

  // A label given as a string literal: looked up by its address first (the
  // same literal recurs once per unit), by its text the first time.
  std::uint32_t label(const char* text) {
    auto [it, fresh] = literal_labels_.try_emplace(text, 0);
    if (fresh) it->second = label(std::string_view(text));
    return it->second;
  }
  // A label by its text (`head` then `tail`): the program's label of that
  // text, or a new one. The text is written into the program's labels first
  // and taken back if it is there already; the index holds ids and hashes
  // only, so a label costs one hash and no allocation of its own.
  std::uint32_t label(std::string_view head, std::string_view tail = {}) {
    LabelTable& table = b_.labels();
    const std::uint32_t id = table.add(head, tail);
    const std::string_view text = table[id];
    const std::size_t hash = std::hash<std::string_view>{}(text);
    if (2 * (labels_indexed_ + 1) > label_slots_.size()) {
      // Twice as many slots, each label moved to its slot there.
      std::vector<LabelSlot> slots(std::max<std::size_t>(64, 2 * label_slots_.size()));
      for (const LabelSlot& e : label_slots_) {
        if (e.id == kNoLabel) continue;
        std::size_t i = e.hash & (slots.size() - 1);
        while (slots[i].id != kNoLabel) i = (i + 1) & (slots.size() - 1);
        slots[i] = e;
      }
      label_slots_ = std::move(slots);
    }
    std::size_t i = hash & (label_slots_.size() - 1);
    for (; label_slots_[i].id != kNoLabel; i = (i + 1) & (label_slots_.size() - 1)) {
      if (label_slots_[i].hash == hash && table[label_slots_[i].id] == text) {
        table.remove_last();
        return label_slots_[i].id;
      }
    }
    label_slots_[i] = LabelSlot{hash, id};
    ++labels_indexed_;
    return id;
  }
  std::uint8_t comm_stream(CommClass c) const {
    return c == CommClass::CP ? s_.cp : c == CommClass::EP ? s_.ep : s_.tp;
  }
  std::uint32_t comm_slot(const Step& s) const {
    if (s.comm_class == CommClass::EP) return s.expert_tp_group ? slot_etp_ : slot_ep_;
    if (s.comm_class != CommClass::CP) return slot_tp_;
    return s.cp_group == Step::CpGroup::Ulysses ? slot_cp_ulysses_
           : s.cp_group == Step::CpGroup::Ring  ? slot_cp_ring_
                                                : slot_cp_;
  }

  // Emits the steps of a list that pass `filter`; `entry` are extra deps of the
  // first emitted step. `ids` holds the task of each step (kNone if not
  // emitted); a W pass starts from the ids its B pass left. Returns the last
  // compute task.
  TaskId emit(const std::vector<Step>& steps, StepPrefix prefix, int mb, std::span<const TaskId> entry, bool recomputed,
              TaskId* first_compute = nullptr, PassFilter filter = PassFilter::All,
              std::vector<TaskId>* ids_io = nullptr) {
    std::vector<TaskId>& ids = ids_io != nullptr ? *ids_io : emit_ids_;
    // A template gives every step its id under All (stamp), which only a
    // caller asking for them reads.
    const bool stamp_all = filter == PassFilter::All && use_templates_;
    if (stamp_all) {
      ids.resize(ids_io != nullptr ? steps.size() : 0);
    } else if (filter != PassFilter::WeightOnly) {
      ids.assign(steps.size(), kNone);
    }
    TRAINSIM_CHECK(stamp_all || ids.size() == steps.size(), "a W pass needs the task ids of its B pass");
    // Label and op ids of this step list under this prefix, looked up once per list.
    auto [cached, fresh] = step_ids_.try_emplace(StepListKey{prefix, &steps});
    StepListIds& list_ids = cached->second;
    if (fresh) {
      const std::string text = prefix.text();
      list_ids.labels.reserve(steps.size());
      // Each (prefix, list) is labelled once (this cache), so its texts are
      // added without the index: a text another list repeats (steps of one
      // name) is kept twice rather than looked up for every step.
      LabelTable& table = b_.labels();
      for (const Step& st : steps) list_ids.labels.push_back(table.add(text, st.name));
      auto [ops, first_use] = list_ops_.try_emplace(&steps);
      if (first_use) ops->second.assign(steps.size(), kNone);
      list_ids.ops = &ops->second;
    }
    if (filter != PassFilter::WeightOnly && use_templates_) {
      const int which = filter == PassFilter::All ? 0 : 1;
      const PassTemplate*& t = list_ids.templates[which];
      if (t == nullptr) t = &pass_template(steps, filter);
      return stamp(*t, steps, list_ids.labels, *list_ids.ops, list_ids.stamped[which], mb, entry, recomputed,
                   first_compute, ids);
    }
    const std::vector<std::uint32_t>& step_label = list_ids.labels;
    TaskId last_compute = entry.empty() ? kNone : entry.back();
    TaskId before_last = last_compute;
    bool first = true;
    std::vector<TaskId>& deps = emit_deps_;  // reused: a step's dependencies, deduplicated in place
    for (std::size_t j = 0; j < steps.size(); ++j) {
      const Step& s = steps[j];
      if (!emitted(s, filter)) continue;
      deps.clear();
      if (first) deps.assign(entry.begin(), entry.end());
      for (int w : s.waits) deps.push_back(ids[w]);
      const std::uint32_t lbl = step_label[j];
      if (s.is_comm) {
        const TaskId after = s.overlap_previous ? before_last : last_compute;
        if (after != kNone) deps.push_back(after);
        const std::uint32_t matrix = s.matrix >= 0 ? matrix_base_ + static_cast<std::uint32_t>(s.matrix) : kNoMatrix;
        dedupe_in_place(deps);
        ids[j] = b_.collective(comm_stream(s.comm_class), comm_slot(s), s.collective, s.comm_class, task_bytes(s.bytes),
                               lbl, mb, deps, matrix);
      } else {
        dedupe_in_place(deps);
        std::uint32_t& op = (*list_ids.ops)[j];
        if (op == kNone) op = b_.add_op(s.op);  // in first-use order
        ids[j] = b_.compute(s_.compute, op, lbl, mb, deps);
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
  // The emission of a step list under a filter that starts from no earlier
  // ids (All, InputOnly) depends on the entry and the micro-batch only through
  // a few places, so it is worked out once per list and filter (a layer pass's
  // template) and stamped per layer and micro-batch: per emitted step its
  // task's fields, its dependencies inside the pass (positions among the
  // emitted steps, sorted: they follow every task before the pass), and
  // whether it also waits for the whole entry (the first step) or for the
  // entry's last task (a collective issued before any computation of the
  // pass). The tasks, their order and their sorted dependencies are those the
  // step-by-step emission gives (tests/test_pass_templates.cpp compares the two).
  struct PassItem {
    Task proto;  // label and micro-batch set per emission; a computation's op per prefix
    std::uint32_t step = 0;
    std::uint32_t deps_begin = 0, deps_end = 0;  // into PassTemplate::deps
    std::uint8_t entry = 0;                      // 0: none, 1: the whole entry, 2: the entry's last task
  };
  struct PassTemplate {
    std::vector<PassItem> items;
    std::vector<std::uint32_t> deps;    // positions among the items
    std::vector<double> compute_flops;  // the computations' nonzero model FLOPs, in item order
    int first_compute = -1, last_compute = -1;
    std::uint32_t entry_last_items = 0;   // items with entry == 2
    std::uint32_t entry_whole_items = 0;  // items with entry == 1
    std::uint32_t id = 0;                 // in creation order: the key of the passes it stamps (PassMark)
    // For stamping: the items with entry == 2, in order, and tasks per stream.
    std::vector<std::uint32_t> entry_last_at;
    std::vector<ProgramBuilder::StreamCount> per_stream;
  };
  const PassTemplate& pass_template(const std::vector<Step>& steps, PassFilter filter) {
    auto [it, fresh] = templates_.try_emplace({&steps, filter == PassFilter::All ? 0 : 1});
    PassTemplate& t = it->second;
    if (!fresh) return t;  // made under another prefix
    t.id = static_cast<std::uint32_t>(templates_.size() - 1);
    t.items.reserve(steps.size());
    t.deps.reserve(2 * steps.size());
    std::vector<int> pos(steps.size(), -1);
    int last = -1, before_last = -1;  // positions; -1: the entry's last task
    for (std::size_t j = 0; j < steps.size(); ++j) {
      const Step& s = steps[j];
      if (!emitted(s, filter)) continue;
      const int p = static_cast<int>(t.items.size());
      PassItem item;
      item.step = static_cast<std::uint32_t>(j);
      item.entry = p == 0 ? 1 : 0;
      item.deps_begin = static_cast<std::uint32_t>(t.deps.size());
      for (int w : s.waits) {
        if (pos[w] >= 0) t.deps.push_back(static_cast<std::uint32_t>(pos[w]));
      }
      Task& proto = item.proto;
      if (s.is_comm) {
        const int after = s.overlap_previous ? before_last : last;
        if (after >= 0) {
          t.deps.push_back(static_cast<std::uint32_t>(after));
        } else if (p > 0) {
          item.entry = 2;
          ++t.entry_last_items;
        }
        proto.kind = TaskKind::Collective;
        proto.stream = comm_stream(s.comm_class);
        proto.collective = s.collective;
        proto.comm_class = s.comm_class;
        proto.ref = comm_slot(s);
        proto.bytes = task_bytes(s.bytes);
        proto.matrix = s.matrix >= 0 ? matrix_base_ + static_cast<std::uint32_t>(s.matrix) : kNoMatrix;
      } else {
        proto.kind = TaskKind::Compute;
        proto.stream = s_.compute;
        t.compute_flops.push_back(s.model_flops);
        before_last = last;
        last = p;
        if (t.first_compute < 0) t.first_compute = p;
      }
      const auto begin = t.deps.begin() + item.deps_begin;
      std::sort(begin, t.deps.end());
      t.deps.erase(std::unique(begin, t.deps.end()), t.deps.end());
      item.deps_end = static_cast<std::uint32_t>(t.deps.size());
      pos[j] = p;
      t.entry_whole_items += item.entry == 1 ? 1 : 0;
      t.items.push_back(item);
    }
    t.last_compute = last;
    // Adding a zero leaves a sum of non-negative FLOPs as it is (stamp).
    std::erase(t.compute_flops, 0.0);
    std::vector<std::uint32_t> on_stream;
    for (std::size_t i = 0; i < t.items.size(); ++i) {
      const PassItem& item = t.items[i];
      if (item.entry == 2) t.entry_last_at.push_back(static_cast<std::uint32_t>(i));
      if (item.proto.stream >= on_stream.size()) on_stream.resize(item.proto.stream + 1, 0);
      ++on_stream[item.proto.stream];
    }
    for (std::size_t k = 0; k < on_stream.size(); ++k) {
      if (on_stream[k] > 0) t.per_stream.push_back({static_cast<std::uint8_t>(k), on_stream[k]});
    }
    return t;
  }
  // `labels`, `ops`: the list's label ids under this prefix and its op ids (StepListIds);
  // `stamped`: the tasks of the first stamp under it (empty before), which
  // later stamps copy and give their micro-batch.
  TaskId stamp(const PassTemplate& t, const std::vector<Step>& steps, const std::vector<std::uint32_t>& labels,
               std::vector<std::uint32_t>& ops, std::vector<Task>& stamped, int mb, std::span<const TaskId> entry,
               bool recomputed, TaskId* first_compute, std::vector<TaskId>& ids) {
    const TaskId entry_last = entry.empty() ? kNone : entry.back();
    // The first item waits for the whole entry (deduplicated), an item with
    // entry == 2 for its last task; every item for its template dependencies.
    std::vector<TaskId>& whole = emit_deps_;
    whole.assign(entry.begin(), entry.end());
    dedupe_in_place(whole);
    const std::size_t n = t.items.size();
    if (stamped.empty()) {
      stamped.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        const PassItem& item = t.items[i];
        Task& task = stamped[i];
        task = item.proto;
        task.label = labels[item.step];
        if (task.kind == TaskKind::Compute) {
          std::uint32_t& op = ops[item.step];
          if (op == kNone) op = b_.add_op(steps[item.step].op);  // in first-use order, as step by step
          task.ref = op;
        }
      }
    }
    const bool to_last = entry_last != kNone && t.entry_last_items > 0;
    std::size_t deps = t.deps.size() + (to_last ? t.entry_last_items : 0);
    deps += t.entry_whole_items * whole.size();
    const ProgramBuilder::TaskRun run = b_.extend(stamped, deps, t.per_stream);
    const TaskId base = run.first;
    TRAINSIM_CHECK(whole.empty() || whole.back() < base, "a pass's entry holds a task after its start");
    TRAINSIM_CHECK(n == 0 || (t.entry_whole_items == 1 && t.items.front().entry == 1),
                   "a pass template's entry goes to its first item only");
    // Summed in item order, as step by step (the zeros left out add nothing).
    for (const double f : t.compute_flops) hw_flops_ += f;
    if (!recomputed) {
      for (const double f : t.compute_flops) model_flops_ += f;
    }
    for (std::size_t i = 0; i < n; ++i) run.tasks[i].microbatch = mb;
    if (!ids.empty()) {  // empty: no caller reads them (emit)
      for (std::size_t i = 0; i < n; ++i) ids[t.items[i].step] = base + static_cast<TaskId>(i);
    }
    // The first item waits for the whole entry (and has no template
    // dependencies: nothing of the pass comes before it), then come the
    // template dependencies item by item, each item with entry == 2 first
    // waiting for the entry's last task where there is one.
    TaskId* out = n == 0 ? run.deps : std::copy(whole.begin(), whole.end(), run.deps);
    const std::uint32_t* tdeps = t.deps.data();
    const std::uint32_t ends_base = run.deps_base + static_cast<std::uint32_t>(whole.size());
    if (!to_last) {
      const std::size_t nd = t.deps.size();
      for (std::size_t k = 0; k < nd; ++k) out[k] = base + tdeps[k];
      for (std::size_t i = 0; i < n; ++i) run.dep_ends[i] = ends_base + t.items[i].deps_end;
    } else {
      std::uint32_t k = 0, extra = 0;
      std::size_t i = 0;
      for (const std::uint32_t at : t.entry_last_at) {
        for (; i < at; ++i) run.dep_ends[i] = ends_base + extra + t.items[i].deps_end;
        for (const std::uint32_t begin = t.items[at].deps_begin; k < begin; ++k) *out++ = base + tdeps[k];
        *out++ = entry_last;
        ++extra;
      }
      for (; i < n; ++i) run.dep_ends[i] = ends_base + extra + t.items[i].deps_end;
      for (; k < t.deps.size(); ++k) *out++ = base + tdeps[k];
    }
    if (first_compute != nullptr && *first_compute == kNone && t.first_compute >= 0) {
      *first_compute = base + static_cast<TaskId>(t.first_compute);
    }
    if (mark_passes_ && t.items.size() >= 2) {
      b_.mark_pass(base, static_cast<std::uint32_t>(t.items.size()), t.id);
    }
    return t.last_compute >= 0 ? base + static_cast<TaskId>(t.last_compute) : entry_last;
  }
  // What waits for `t`: nothing when there is no such task.
  static std::vector<TaskId> after_task(TaskId t) {
    return t == kNone ? std::vector<TaskId>{} : std::vector<TaskId>{t};
  }
  static void dedupe_in_place(std::vector<TaskId>& v) {
    if (v.size() == 2) {  // the usual case, without a call to sort
      if (v[1] < v[0]) std::swap(v[0], v[1]);
      if (v[1] == v[0]) v.pop_back();
    } else if (v.size() > 2) {
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
    if (!v.empty() && v.back() == kNone) v.pop_back();  // kNone sorts last, once after unique
  }
  static std::vector<TaskId> dedupe(std::vector<TaskId> v) {
    dedupe_in_place(v);
    return v;
  }

  // Runs two units side by side (an overlapped pair): each unit's tasks are
  // cut into segments after each of its TP, CP and EP collectives, and the
  // streams take the segments alternately (segment k of the first unit, then
  // of the second, then k+1), so that the collective of one unit runs while
  // the other computes. Every task still follows its dependencies: the order
  // (segment, unit, id) extends the order in which the tasks were added.
  void interleave(TaskId first, TaskId middle, TaskId end) {
    std::vector<std::tuple<int, int, TaskId>> keys;
    keys.reserve(end - first);
    for (int unit = 0; unit < 2; ++unit) {
      int segment = 0;
      for (TaskId t = unit == 0 ? first : middle; t < (unit == 0 ? middle : end); ++t) {
        keys.emplace_back(segment, unit, t);
        const Task& task = b_.task(t);
        const bool cuts =
            task.kind == TaskKind::Collective &&
            (task.comm_class == CommClass::TP || task.comm_class == CommClass::CP || task.comm_class == CommClass::EP);
        if (cuts) ++segment;
      }
    }
    // Each unit's keys are already in order: merging them sorts them all.
    std::inplace_merge(keys.begin(), keys.begin() + (middle - first), keys.end());
    std::vector<TaskId> order;
    order.reserve(keys.size());
    for (const auto& key : keys) order.push_back(std::get<2>(key));
    b_.reorder(first, order);
  }

  static StepPrefix layer_prefix(char pass, int layer) { return StepPrefix{pass, layer}; }

  // Without p2p overlap (Megatron-LM 2021, DeepSpeed pipelines) a rank waits for
  // its sends to finish before computing on, so every transfer sits on the
  // sender's critical path. Receives are posted ahead in both modes (Megatron
  // pairs each blocking send with the next receive, which never deadlocks);
  // interleaved 1F1B without overlap waits for its batched exchanges instead
  // (megatron_batched_setup).
  std::vector<TaskId> unit_entry() {
    std::vector<TaskId> entry;
    if (deepspeed()) {
      if (ds_chain_ != kNone) entry.push_back(ds_chain_);
      return entry;
    }
    if (megatron_batched_p2p_) {
      entry = std::move(exchange_wait_);
      exchange_wait_.clear();
    } else if (!par_.pp_overlap) {
      entry = std::move(blocking_sends_);
      blocking_sends_.clear();
    }
    return entry;
  }
  // Receives on every message of the link from `from` (one without per-stage layouts),
  // posted once `posted_after` has run (kNone: ahead, at the start).
  void post_recvs(SlotRole role, int from, const char* what, int mb, std::vector<TaskId>& entry,
                  TaskId posted_after = kNone) {
    const LinkShape shape = link_shape(from, stage_);
    for (int j = 0; j < shape.recvs; ++j) {
      const PipelineLink link = pipeline_link(role, from, stage_, j);
      const TaskId d[] = {posted_after};
      const std::span<const TaskId> deps(d, posted_after == kNone ? 0 : 1);
      entry.push_back(b_.recv(link.stream, link.slot, CommClass::PP, shape.bytes, label(what), mb, deps));
    }
  }
  void post_sends(SlotRole role, int to, const char* what, int mb, TaskId after) {
    const LinkShape shape = link_shape(stage_, to);
    for (int j = 0; j < shape.sends; ++j) {
      const PipelineLink link = pipeline_link(role, stage_, to, j);
      const TaskId d[] = {after};
      const TaskId t = b_.send(link.stream, link.slot, CommClass::PP, shape.bytes, label(what), mb, d);
      if (!par_.pp_overlap) blocking_sends_.push_back(t);
      if (megatron_interleaved_p2p_) (role == SlotRole::PipelineForward ? fwd_sends_ : bwd_sends_).push_back(t);
    }
  }
  // Megatron-LM's interleaved 1F1B with overlap_p2p_comm
  // (forward_backward_pipelining_with_interleaving in megatron/core/pipeline_parallel/schedules.py)
  // posts the receive of a unit's input with the send of the rank's previous unit of
  // the same direction, right after that unit (so the receive starts when it ends),
  // and waits on both requests, its send included, before the next unit of that
  // direction: a send holds the sender's next forward (backward) until the receiver
  // has posted the matching receive. The first backward's receive goes with the
  // last warm-up forward (all forwards when m = pp, the schedule's all-warm-up case).
  // The receives are emitted where they are posted, in post order, since a
  // rank's messages with one peer share a stream (peer_stream): per unit, the
  // unit after which its receive is posted (-1: ahead, at the start).
  void megatron_receive_posts(const std::vector<ScheduleUnit>& order) {
    const int n = static_cast<int>(order.size());
    megatron_posted_after_.assign(static_cast<std::size_t>(n), -1);
    megatron_recvs_.assign(static_cast<std::size_t>(n), {});
    int last_fwd = -1, before_last_fwd = -1, last_bwd = -1;
    const auto all_forwards_first = [&](int first_bwd) {
      return std::none_of(order.begin() + first_bwd, order.end(),
                          [](const ScheduleUnit& u) { return u.kind == UnitKind::Forward; });
    };
    for (int i = 0; i < n; ++i) {
      if (order[i].kind == UnitKind::Forward) {
        megatron_posted_after_[i] = last_fwd;
        before_last_fwd = last_fwd;
        last_fwd = i;
      } else {
        // The first backward's receive goes with the last warm-up forward (the last
        // forward of all when every forward comes first).
        megatron_posted_after_[i] = last_bwd >= 0 ? last_bwd : all_forwards_first(i) ? last_fwd : before_last_fwd;
        last_bwd = i;
      }
    }
  }
  // After unit `done`: the receives posted with its send (a forward's for the
  // next forward, then a backward's), on the links their units read.
  void megatron_post_receives(const std::vector<ScheduleUnit>& order, int done) {
    for (const bool forward : {true, false}) {
      for (int j = done + 1; j < static_cast<int>(order.size()); ++j) {
        if (megatron_posted_after_[j] != done || (order[j].kind == UnitKind::Forward) != forward) continue;
        megatron_recvs_[j] =
            megatron_unit_receives(order[j], order[done].kind == UnitKind::Forward ? fwd_end_ : bwd_end_);
      }
    }
  }
  // The receives of unit `u`'s input (none when it comes from this rank or it has none).
  std::vector<TaskId> megatron_unit_receives(const ScheduleUnit& u, TaskId posted_after) {
    std::vector<TaskId> recvs;
    const int v = vstage_[u.chunk];
    if (u.kind == UnitKind::Forward) {
      if (sched_.prev_chunk(v) < 0) return recvs;
      const int from = sched_.chunk_stage[sched_.prev_chunk(v)];
      if (from != stage_)
        post_recvs(SlotRole::PipelineForward, from, "F recv activations", u.microbatch, recvs, posted_after);
    } else if (!head_of(v)) {
      const int from = sched_.chunk_stage[sched_.next_chunk(v)];
      if (from != stage_)
        post_recvs(SlotRole::PipelineBackward, from, "B recv gradients", u.microbatch, recvs, posted_after);
    }
    return recvs;
  }
  // The current unit's receives under the overlapped exchange: those posted
  // after an earlier unit, else posted now (ahead, for the rank's first unit
  // of a direction).
  void megatron_take_receives(const ScheduleUnit& u, std::vector<TaskId>& entry) {
    const auto i = static_cast<std::size_t>(cur_unit_);
    if (megatron_posted_after_[i] < 0) megatron_recvs_[i] = megatron_unit_receives(u, kNone);
    entry.insert(entry.end(), megatron_recvs_[i].begin(), megatron_recvs_[i].end());
  }
  // The current unit's receive under the Zero Bubble runtime's placement: after
  // the unit receive_posts names (kNone: ahead, or no placement given).
  TaskId runtime_recv_posted_after() const {
    if (receive_posts_ == nullptr) return kNone;
    const int after = (*receive_posts_)[static_cast<std::size_t>(cur_unit_)];
    return after < 0 ? kNone : unit_end_[static_cast<std::size_t>(after)];
  }
  // The last computation on the compute stream among the tasks from `first` on.
  TaskId last_compute_since(TaskId first) const {
    for (auto t = static_cast<TaskId>(b_.size()); t > first; --t) {
      const Task& task = b_.task(t - 1);
      if (task.kind == TaskKind::Compute && task.stream == s_.compute) return t - 1;
    }
    return kNone;
  }
  // Megatron-LM's interleaved schedule without overlap_p2p_comm (megatron_batched_exchanges
  // in models/schedule.hpp): the receives of the rank's units are posted in their
  // order, each link's messages matching in post order, at the exchanges that ask
  // for one; every rank but the first receives its first forward's input ahead.
  void megatron_batched_setup(const std::vector<ScheduleUnit>& order) {
    const int n = static_cast<int>(order.size());
    exchanges_ = megatron_batched_exchanges(par_.pp, stage_, chunks_, sched_.microbatches);
    TRAINSIM_CHECK(exchanges_.size() == order.size(),
                   "stage " + std::to_string(stage_) + ": the unit count differs from Megatron-LM's interleaved order");
    batched_recvs_.assign(static_cast<std::size_t>(n), {});
    batched_received_.assign(static_cast<std::size_t>(n), 0);
    fwd_recv_queue_.clear();
    bwd_recv_queue_.clear();
    for (int i = 0; i < n; ++i) {
      const int v = vstage_[order[i].chunk];
      if (order[i].kind == UnitKind::Forward) {
        if (sched_.prev_chunk(v) >= 0 && sched_.chunk_stage[sched_.prev_chunk(v)] != stage_)
          fwd_recv_queue_.push_back(i);
      } else if (!head_of(v) && sched_.chunk_stage[sched_.next_chunk(v)] != stage_) {
        bwd_recv_queue_.push_back(i);
      }
    }
    fwd_recv_next_ = bwd_recv_next_ = 0;
    if (stage_ != 0) megatron_batched_receive(order, true, kNone);
    order_ = &order;
  }
  // Posts the receive of the next unit in `forward`'s queue after `after` (kNone: ahead).
  void megatron_batched_receive(const std::vector<ScheduleUnit>& order, bool forward, TaskId after) {
    std::vector<int>& queue = forward ? fwd_recv_queue_ : bwd_recv_queue_;
    std::size_t& next = forward ? fwd_recv_next_ : bwd_recv_next_;
    if (next >= queue.size()) return;
    const int i = queue[next++];
    const ScheduleUnit& u = order[static_cast<std::size_t>(i)];
    const int v = vstage_[u.chunk];
    std::vector<TaskId>& recvs = batched_recvs_[static_cast<std::size_t>(i)];
    if (forward) {
      post_recvs(SlotRole::PipelineForward, sched_.chunk_stage[sched_.prev_chunk(v)], "F recv activations",
                 u.microbatch, recvs, after);
    } else {
      post_recvs(SlotRole::PipelineBackward, sched_.chunk_stage[sched_.next_chunk(v)], "B recv gradients", u.microbatch,
                 recvs, after);
    }
    batched_received_[static_cast<std::size_t>(i)] = 1;
    exchange_wait_.insert(exchange_wait_.end(), recvs.begin(), recvs.end());
  }
  // The exchange after unit `done`, if there is one: its pending sends and the
  // receives it asks for, all posted when the unit ends; the next unit waits for all of them.
  void megatron_batched_exchange(int done) {
    const BatchedExchange& e = exchanges_[static_cast<std::size_t>(done)];
    if (!e.after) return;
    const TaskId after = unit_end_[static_cast<std::size_t>(done)];
    for (const PendingSend& p : pending_sends_) post_sends(p.role, p.to, p.what, p.mb, after);
    pending_sends_.clear();
    exchange_wait_.insert(exchange_wait_.end(), blocking_sends_.begin(), blocking_sends_.end());
    blocking_sends_.clear();
    if (e.recv_forward) megatron_batched_receive(*order_, true, after);
    if (e.recv_backward) megatron_batched_receive(*order_, false, after);
  }
  // The current unit's input receives: posted by an exchange, else (an order
  // Megatron-LM's exchanges do not cover) now, after the rank's previous unit.
  void megatron_batched_take_receives(std::vector<TaskId>& entry) {
    const auto i = static_cast<std::size_t>(cur_unit_);
    if (!batched_received_[i]) {
      const bool forward = (*order_)[i].kind == UnitKind::Forward;
      megatron_batched_receive(*order_, forward, cur_unit_ > 0 ? unit_end_[i - 1] : kNone);
      TRAINSIM_CHECK(batched_received_[i], "stage " + std::to_string(stage_) + ": unit " + to_string((*order_)[i]) +
                                               " is not next in its link's receive order");
    }
    entry.insert(entry.end(), batched_recvs_[i].begin(), batched_recvs_[i].end());
  }
  void megatron_wait_previous_sends(bool forward, std::vector<TaskId>& entry) {
    std::vector<TaskId>& sends = forward ? fwd_sends_ : bwd_sends_;
    entry.insert(entry.end(), sends.begin(), sends.end());
    sends.clear();
  }
  // DeepSpeed's engine (models/deepspeed_schedule.hpp) runs the rank's commands
  // one after the other, each send and receive blocking: emits the transfers of
  // the rank's steps up to the pass of `unit` (all the remaining ones when
  // null), each message waiting for the command before it. The passes then
  // wait for the last of them (unit_entry) and send nothing themselves.
  bool deepspeed() const { return !ds_steps_.empty(); }
  void deepspeed_commands_until(const ScheduleUnit* unit) {
    for (; ds_step_ < ds_steps_.size(); ++ds_step_, ds_cmd_ = 0) {
      const std::vector<DeepSpeedCommand>& step = ds_steps_[ds_step_];
      while (ds_cmd_ < step.size()) {
        const DeepSpeedCommand& c = step[ds_cmd_++];
        switch (c.op) {
          case DeepSpeedOp::ForwardPass:
          case DeepSpeedOp::BackwardPass: {
            const UnitKind kind = c.op == DeepSpeedOp::ForwardPass ? UnitKind::Forward : UnitKind::Backward;
            TRAINSIM_CHECK(unit != nullptr && unit->kind == kind && unit->microbatch == c.microbatch,
                           "stage " + std::to_string(stage_) + ": the units differ from DeepSpeed's TrainSchedule");
            return;
          }
          case DeepSpeedOp::SendActivation:
            deepspeed_transfer(SlotRole::PipelineForward, stage_, stage_ + 1, "F send activations", c.microbatch);
            break;
          case DeepSpeedOp::RecvActivation:
            deepspeed_transfer(SlotRole::PipelineForward, stage_ - 1, stage_, "F recv activations", c.microbatch);
            break;
          case DeepSpeedOp::SendGrad:
            deepspeed_transfer(SlotRole::PipelineBackward, stage_, stage_ - 1, "B send gradients", c.microbatch);
            break;
          case DeepSpeedOp::RecvGrad:
            deepspeed_transfer(SlotRole::PipelineBackward, stage_ + 1, stage_, "B recv gradients", c.microbatch);
            break;
          default:  // LoadMicroBatch (a host copy, not charged) and the step's end (finish_iteration)
            break;
        }
      }
    }
    TRAINSIM_CHECK(unit == nullptr, "stage " + std::to_string(stage_) + ": a unit after DeepSpeed's TrainSchedule");
  }
  void deepspeed_transfer(SlotRole role, int from, int to, const char* what, int mb) {
    const bool sending = from == stage_;
    const LinkShape shape = link_shape(from, to);
    const bool partitioned = deepspeed_partitioned();
    const int messages = sending ? shape.sends : shape.recvs;
    if (partitioned || train_.launch_blocking) {
      ds_chain_ = deepspeed_message_host_work(role, sending, partitioned, messages, mb);
    }
    for (int j = 0; j < messages; ++j) {
      const PipelineLink link = pipeline_link(role, from, to, j);
      auto transfer = [&](std::uint64_t bytes, const std::string& name) {
        const TaskId d[] = {ds_chain_};
        const std::span<const TaskId> deps(d, ds_chain_ == kNone ? 0 : 1);
        ds_chain_ = sending ? b_.send(link.stream, link.slot, CommClass::PP, bytes, label(name), mb, deps)
                            : b_.recv(link.stream, link.slot, CommClass::PP, bytes, label(name), mb, deps);
      };
      // A partitioned message goes as two blocking p2p calls: its PartitionedTensor's
      // metadata (to_meta()), then the rank's part.
      if (partitioned) transfer(deepspeed_meta_bytes(), std::string(what) + " meta");
      transfer(shape.bytes, what);
    }
  }
  // The metadata of a PartitionedTensor (to_meta(), deepspeed/runtime/utils.py, 2022): an
  // int64 list of the tensor's rank, its 3 dimensions ([s, b, h] in Megatron-DeepSpeed's
  // pipeline), the part count, this rank's index and the tp + 1 part bounds.
  std::uint64_t deepspeed_meta_bytes() const {
    return static_cast<std::uint64_t>(1 + 3 + 2 + par_.tp + 1) * sizeof(std::int64_t);
  }
  // The host's share of a DeepSpeed pipeline message (deepspeed/runtime/pipe/engine.py and
  // p2p.py, 2022), before its transfers: each p2p call is an NCCL launch that blocks under
  // blocking launches (one per message, two when partitioned: metadata and part). A partitioned
  // message adds the metadata's copies: the sender builds it on the host and copies it to the
  // GPU (torch.LongTensor(...).to(device)); the receiver of an activation clones the received
  // metadata (_exec_recv_activations), and every receiver reads it back to the host to rebuild
  // the tensor (PartitionedTensor.from_meta: meta.tolist()).
  TaskId deepspeed_message_host_work(SlotRole role, bool sending, bool partitioned, int messages, int mb) {
    int copies = 0;
    if (partitioned) copies = sending ? 1 : (role == SlotRole::PipelineForward ? 2 : 1);
    const char* name = sending ? "pp.send.host" : "pp.recv.host";
    ComputeOp op{name,
                 OpKind::MemoryBound,
                 Dtype::BF16,
                 0,
                 static_cast<double>(copies * messages) * 2 * static_cast<double>(deepspeed_meta_bytes()),
                 0,
                 0,
                 0,
                 copies * messages};
    op.host_dispatch_seconds = issue_host_seconds(train_);
    op.launch_blocking = train_.launch_blocking;
    op.comm_launches = (partitioned ? 2 : 1) * messages;
    const TaskId d[] = {ds_chain_};
    return b_.compute(s_.compute, b_.add_op(op), label(name), mb,
                      std::span<const TaskId>(d, ds_chain_ == kNone ? 0 : 1));
  }
  // DeepSpeed's PipelineEngine with TP > 1 keeps and sends 1/tp of each activation and
  // input gradient (PartitionedTensor, deepspeed/runtime/utils.py, 2022) and rebuilds the
  // whole tensor with PartitionedTensor.full(): a zero fill of the full buffer, the copy of
  // the rank's part into it, an all-gather over the TP group into a list of the parts (which
  // PyTorch's ProcessGroupNCCL::allgather runs into a flat buffer of its own and copies back
  // part by part), then a clone of the result: 5 full sizes plus 2 parts of memory traffic
  // in 3 + tp kernels, beside the all-gather. `part_copies` more clones of one part (read +
  // write) come with it (the received part's clone in _exec_recv_activations and the
  // input's clone in _exec_forward_pass). docs/frameworks.md, "DeepSpeed's engine".
  // The engine audited is DeepSpeed's of 2022, before v0.8.3 (its TrainSchedule is
  // `deepspeed-1f1b-legacy`); later releases rebuild with all_gather_into_tensor into the
  // flat buffer (no part copy, no copy-back), which is not modelled.
  bool deepspeed_partitioned() const {
    return train_.framework == Framework::DeepSpeed && par_.schedule == ScheduleKind::DeepSpeed1F1BLegacy &&
           par_.pp > 1 && par_.pp_scatter_gather && par_.tp > 1;
  }
  double deepspeed_full_bytes() const {
    return par_.micro_batch * par_.cp_local_tokens(train_.seq_len) / par_.seq_chunks * model_.hidden *
           activation_element_bytes(train_);
  }
  TaskId deepspeed_pass_copies(const char* name, double bytes, int kernels, int mb, std::vector<TaskId> deps) {
    ComputeOp copy{name, OpKind::MemoryBound, Dtype::BF16, 0, bytes, 0, 0, 0, kernels};
    copy.host_dispatch_seconds = issue_host_seconds(train_);
    copy.launch_blocking = train_.launch_blocking;
    return b_.compute(s_.compute, b_.add_op(copy), label(name), mb, dedupe(deps));
  }
  TaskId deepspeed_full(const char* gather, const char* copies, int part_copies, int mb,
                        const std::vector<TaskId>& deps) {
    const double full = deepspeed_full_bytes(), part = full / par_.tp;
    const TaskId g = b_.collective(s_.tp, slot_tp_, CollectiveKind::AllGather, CommClass::TP, task_bytes(full),
                                   label(gather), mb, dedupe(deps));
    return deepspeed_pass_copies(copies, 5 * full + 2 * part + part_copies * 2 * part, 3 + par_.tp + part_copies, mb,
                                 {g});
  }
  // A message's part cloned before its send (_partition_tensor): a read and a write of 1/tp.
  TaskId deepspeed_partition_clone(const char* name, TaskId last, int mb) {
    return deepspeed_pass_copies(name, 2 * deepspeed_full_bytes() / par_.tp, 1, mb, after_task(last));
  }

  LinkShape link_shape(int from, int to) const {
    if (links_ == nullptr) return LinkShape{1, 1, activation_message_bytes()};
    const auto it = links_->find({from, to});
    TRAINSIM_CHECK(it != links_->end(), "no link shape for stages " + std::to_string(from) + "->" + std::to_string(to));
    return it->second;
  }

  void forward_unit(const ScheduleUnit& u, bool first_of_chunk) {
    const int v = vstage_[u.chunk];
    std::vector<TaskId> entry = unit_entry();
    const TaskId recv_after = runtime_recv_posted_after();
    if (megatron_interleaved_p2p_) {
      megatron_wait_previous_sends(true, entry);
      megatron_take_receives(u, entry);
    }
    if (sched_.prev_chunk(v) >= 0) {
      const int from = sched_.chunk_stage[sched_.prev_chunk(v)];
      if (from == stage_) {
        entry.push_back(fwd_out_[unit_key(u.microbatch, sched_.prev_chunk(v))]);
      } else if (megatron_batched_p2p_) {
        megatron_batched_take_receives(entry);
      } else if (!deepspeed() && !megatron_interleaved_p2p_) {
        post_recvs(SlotRole::PipelineForward, from, "F recv activations", u.microbatch, entry, recv_after);
      }
      // The received part cloned twice, then rebuilt whole (deepspeed_full).
      if (deepspeed_partitioned() && from != stage_) {
        entry = {deepspeed_full("F pp.full.allgather activations", "F pp.full activations", 2, u.microbatch, entry)};
      }
    }
    TaskId last = kNone;
    TaskId outer = kNone;
    if (zero3() && outer_elements(v) > 0) {
      // FSDP's root unit (embedding, final norm, LM head): gathered once per
      // micro-batch before its forward and kept until its backward.
      outer = b_.collective(s_.dp, slot_dp_, CollectiveKind::AllGather, CommClass::DP,
                            task_bytes(outer_elements(v) * kActBytes), label("dp.ag.params outer"), u.microbatch,
                            dedupe(entry));
    }
    // The gather of a chunk without layers: its embedding or head parameters.
    const TaskId own_params =
        prefetch_params_ && first_of_chunk ? param_bucket_of_chunk_[static_cast<std::size_t>(u.chunk)] : kNone;
    if (embedding_of(v)) {
      std::vector<TaskId> deps = entry;
      if (outer != kNone) deps.push_back(outer);
      if (own_params != kNone) deps.push_back(own_params);
      last = emit(cur_->embedding_forward, StepPrefix{'F'}, u.microbatch, deps, false);
    }
    if (last != kNone) entry = {last};
    TaskId prev_layer_first = kNone;
    std::vector<TaskId> deps;  // a layer's entry, reused layer to layer
    for (int l = 0; l < layers_[u.chunk]; ++l) {
      const int layer = first_layer_[u.chunk] + l;
      deps.assign(entry.begin(), entry.end());
      if (zero3()) deps.push_back(param_gather(layer, prev_layer_first, u.microbatch));
      if (prefetch_params_ && first_of_chunk) deps.push_back(param_bucket_of_layer_[layer]);
      TaskId first = kNone;
      dedupe_in_place(deps);
      if (first_of_chunk && fp8_weight_cast_.kernels_per_layer > 0) {
        // Transformer Engine's once-per-step FP8 weight cast (fp8_weight_cast), in the
        // layer's first forward of the step, after its parameters are gathered.
        ComputeOp cast{"fp8.weight.cast",
                       OpKind::MemoryBound,
                       Dtype::BF16,
                       0,
                       (layer_steps(layer).grad_elements + layer_steps(layer).expert_grad_elements) *
                           fp8_weight_cast_.bytes_per_element,
                       0,
                       0,
                       0,
                       fp8_weight_cast_.kernels_per_layer};
        cast.memory_kernel = fp8_weight_cast_.kernel;
        const TaskId c = b_.compute(s_.compute, b_.add_op(cast),
                                    label(layer_prefix('F', layer).text() + "fp8.weight.cast"), u.microbatch, deps);
        deps.assign(1, c);
      }
      last =
          emit(layer_steps(layer, u.microbatch).forward, layer_prefix('F', layer), u.microbatch, deps, false, &first);
      prev_layer_first = first;
      entry = {last};
      if (l < par_.offload_layers) {
        const TaskId after[] = {last};
        offloaded_[{u.microbatch, u.chunk, l}] =
            b_.compute(s_.offload, offload_op_, label("offload.d2h"), u.microbatch, after);
      }
    }
    if (head_of(v)) {
      deps.assign(entry.begin(), entry.end());
      if (outer != kNone) deps.push_back(outer);
      if (own_params != kNone) deps.push_back(own_params);
      last = emit(cur_->head_forward, StepPrefix{'F'}, u.microbatch, dedupe(deps), false);
    }
    if (last == kNone && !entry.empty()) last = entry.back();
    // _exec_forward_pass partitions the output before it is sent: a clone of the rank's part.
    if (deepspeed_partitioned() && !head_of(v) && sched_.chunk_stage[sched_.next_chunk(v)] != stage_) {
      last = deepspeed_partition_clone("F pp.partition activations", last, u.microbatch);
    }
    fwd_end_ = last;
    if (deepspeed()) ds_chain_ = last;
    if (!head_of(v)) {
      const int to = sched_.chunk_stage[sched_.next_chunk(v)];
      if (to == stage_) {
        fwd_out_[unit_key(u.microbatch, v)] = last;
      } else if (megatron_batched_p2p_) {
        pending_sends_.push_back({SlotRole::PipelineForward, to, "F send activations", u.microbatch});
      } else if (!deepspeed()) {
        post_sends(SlotRole::PipelineForward, to, "F send activations", u.microbatch, last);
      }
    }
  }

  // The backward of a chunk's micro-batch: whole (B and W in issue order), or
  // its input-gradient part only (B; the W unit follows later).
  void backward_unit(const ScheduleUnit& u, PassFilter filter, bool reduce_grads) {
    const int v = vstage_[u.chunk];
    const bool whole = filter == PassFilter::All;
    std::vector<std::vector<TaskId>>* saved = nullptr;
    if (!whole) {
      saved = &b_ids_[unit_key(u.microbatch, v)];
      saved->assign(static_cast<std::size_t>(layers_[u.chunk]) + 1, {});  // layers, then the head
    }
    std::vector<TaskId> entry = unit_entry();
    const TaskId recv_after = runtime_recv_posted_after();
    if (megatron_interleaved_p2p_) {
      megatron_wait_previous_sends(false, entry);
      megatron_take_receives(u, entry);
    }
    if (!head_of(v)) {
      const int from = sched_.chunk_stage[sched_.next_chunk(v)];
      if (from == stage_) {
        entry.push_back(bwd_out_[unit_key(u.microbatch, sched_.next_chunk(v))]);
      } else if (megatron_batched_p2p_) {
        megatron_batched_take_receives(entry);
      } else if (!deepspeed() && !megatron_interleaved_p2p_) {
        post_recvs(SlotRole::PipelineBackward, from, "B recv gradients", u.microbatch, entry, recv_after);
      }
      // _exec_backward_pass rebuilds the stage's own output, kept as 1/tp since its send
      // (part_output.full()), then the received gradient (part_grad.full()).
      if (deepspeed_partitioned() && from != stage_) {
        const TaskId out = deepspeed_full("B pp.full.allgather outputs", "B pp.full outputs", 0, u.microbatch, entry);
        entry = {deepspeed_full("B pp.full.allgather gradients", "B pp.full gradients", 0, u.microbatch, {out})};
      }
    }
    TaskId last = kNone;
    if (head_of(v)) {
      // Megatron-Core's deferral keeps the first wgrad_deferral_limit micro-batches' logit
      // gradients (0: every one) for the pipeline flush (drain_deferred_head_wgrads).
      const int limit = train_.wgrad_deferral_limit;
      const bool defer =
          train_.defer_embedding_wgrad && (limit == 0 || static_cast<int>(deferred_head_mbs_.size()) < limit);
      last = emit(defer ? cur_->head_backward_deferred : cur_->head_backward, StepPrefix{'B'}, u.microbatch, entry,
                  false, nullptr, filter, whole ? nullptr : &saved->back());
      if (defer) deferred_head_mbs_.push_back(u.microbatch);
      entry = {last};
      if (reduce_grads && !zero3()) {
        if (train_.defer_embedding_wgrad) {
          deferred_head_v_ = v;  // its gradient is whole after the flush's GEMMs
        } else {
          head_grads_done(v, last, u.microbatch);
        }
      }
    }
    // ZeRO-3 / FSDP: the next layer's parameters are gathered when this layer's
    // backward starts, and that all-gather is issued before this layer's
    // gradient reduce-scatter (FSDP's default backward_prefetch=BACKWARD_PRE;
    // DeepSpeed's ZeRO-3 prefetches ahead of its reduce stream), so a backward
    // layer waits for its own gather only, never behind the previous layer's
    // reduce-scatter.
    TaskId gathered = kNone;
    if (zero3() && layers_[u.chunk] > 0) {
      gathered = param_gather(first_layer_[u.chunk] + layers_[u.chunk] - 1, kNone, u.microbatch);
    }
    TaskId next_first = kNone;  // the first task of the layer after this one (its backward ran first)
    std::vector<TaskId> deps;   // a layer's entry, reused layer to layer
    for (int l = layers_[u.chunk] - 1; l >= 0; --l) {
      const int layer = first_layer_[u.chunk] + l;
      deps.assign(entry.begin(), entry.end());
      if (zero3()) deps.push_back(gathered);
      if (l < par_.offload_layers && (whole || filter == PassFilter::InputOnly)) {
        // Reloaded one layer ahead: issued when the next layer's backward starts.
        const auto it = offloaded_.find({u.microbatch, u.chunk, l});
        TRAINSIM_CHECK(it != offloaded_.end(), "activation reload before its offload");
        std::vector<TaskId> after{it->second};
        if (next_first != kNone) after.push_back(next_first);
        deps.push_back(b_.compute(s_.reload, reload_op_, label("offload.h2d"), u.microbatch, dedupe(after)));
      }
      TaskId first = kNone;
      const LayerSteps& ls = layer_steps(layer, u.microbatch);
      if (!ls.recompute.empty()) {
        dedupe_in_place(deps);
        last = emit(ls.recompute, layer_prefix('R', layer), u.microbatch, deps, true, &first);
        deps = {last};
      }
      dedupe_in_place(deps);
      last = emit(ls.backward, layer_prefix('B', layer), u.microbatch, deps, false, &first, filter,
                  whole ? nullptr : &(*saved)[l]);
      if (zero3() && l > 0) gathered = param_gather(layer - 1, par_.backward_prefetch_pre ? first : last, u.microbatch);
      next_first = first;
      entry = {last};
      if (whole) layer_grads_done(layer, last, u.microbatch, reduce_grads);
    }
    if (last == kNone && !entry.empty()) last = entry.back();  // a chunk without layers passes its input on
    if (whole) last = finish_weight_gradients(v, last, u.microbatch, reduce_grads, "B ");
    if (head_of(v) && !cur_->head_after_backward.empty()) {
      // The trainer's training metrics, issued once the micro-batch's backward has been.
      last = emit(cur_->head_after_backward, StepPrefix{'B'}, u.microbatch, after_task(last), false);
    }
    // _exec_send_grads partitions the input gradient before it is sent: a clone of the part.
    if (deepspeed_partitioned() && sched_.prev_chunk(v) >= 0 && sched_.chunk_stage[sched_.prev_chunk(v)] != stage_) {
      last = deepspeed_partition_clone("B pp.partition gradients", last, u.microbatch);
    }
    last_compute_ = last;
    bwd_end_ = last;
    if (deepspeed()) ds_chain_ = last;
    if (sched_.prev_chunk(v) >= 0) {
      const int to = sched_.chunk_stage[sched_.prev_chunk(v)];
      if (to == stage_) {
        bwd_out_[unit_key(u.microbatch, v)] = last;
      } else if (megatron_batched_p2p_) {
        pending_sends_.push_back({SlotRole::PipelineBackward, to, "B send gradients", u.microbatch});
      } else if (!deepspeed()) {
        post_sends(SlotRole::PipelineBackward, to, "B send gradients", u.microbatch, last);
      }
    }
  }

  // The Zero Bubble runtime pops a W unit while a unit of another kind follows it
  // on the rank (schedule_w in megatron/core/pipeline_parallel/zb_schedules.py of
  // the paper's code) and leaves the ones after the rank's last B to
  // WeightGradStore.clear, which on the last stage runs their LM-head weight
  // gradients first, then issues the tied embedding's all-reduce, then the
  // layers' (megatron/core/weight_grad_store.py). With that all-reduce
  // (tied_grad_sync "overlapped") the LM head's rank emits its trailing W units
  // so: the index of the first, or -1.
  int first_trailing_weight_unit(const std::vector<ScheduleUnit>& order) const {
    if (!tied_sync_ || tied_embedding_rank_ || train_.tied_grad_sync != TiedGradSync::Overlapped) return -1;
    int first = static_cast<int>(order.size());
    while (first > 0 && order[first - 1].kind == UnitKind::BackwardWeight) --first;
    return first < static_cast<int>(order.size()) ? first : -1;
  }
  void trailing_weight_units(const std::vector<ScheduleUnit>& order, int first, const std::vector<int>& last_weights) {
    const int n = static_cast<int>(order.size());
    for (const WeightPart part : {WeightPart::Head, WeightPart::Layers}) {
      for (int i = first; i < n; ++i) {
        const ScheduleUnit& u = order[i];
        cur_unit_ = i;
        if (seq_steps_ != nullptr) cur_ = &(*seq_steps_)[u.microbatch % seq_steps_->size()];
        const auto begin = static_cast<TaskId>(b_.size());
        weight_unit(u, i == last_weights[u.chunk], part);
        if (part == WeightPart::Layers) unit_end_[i] = last_compute_since(begin);
      }
    }
  }

  // Megatron-Core's pipeline flush on the last stage (finish_embedding_wgrad_compute, after
  // the schedule's last backward, before finalize_model_grads): drain_embedding_wgrad_compute
  // gathers the first kept input synchronously, then per kept micro-batch issues the next
  // input's gather (double-buffered: the NCCL stream waits for the work issued before it,
  // the GEMM two back included) and runs the weight-gradient GEMM into main_grad. The LM
  // head's gradient is reduced once the last GEMM is done.
  void drain_deferred_head_wgrads() {
    if (deferred_head_mbs_.empty() && deferred_head_v_ < 0) return;
    std::vector<TaskId> ids;
    auto gather = [&](int mb, std::initializer_list<TaskId> after) -> TaskId {
      if (cur_->head_wgrad_gather.empty()) return kNone;
      std::vector<TaskId> deps;
      for (const TaskId t : after) {
        if (t != kNone) deps.push_back(t);
      }
      dedupe_in_place(deps);
      emit(cur_->head_wgrad_gather, StepPrefix{'W'}, mb, deps, false, nullptr, PassFilter::All, &ids);
      return ids.front();
    };
    const std::size_t n = deferred_head_mbs_.size();
    TaskId gathered = n > 0 ? gather(deferred_head_mbs_[0], {last_compute_}) : kNone;
    TaskId last = last_compute_;  // at the top of step i: GEMM i - 1
    for (std::size_t i = 0; i < n; ++i) {
      const TaskId next = i + 1 < n ? gather(deferred_head_mbs_[i + 1], {last, gathered}) : kNone;
      std::vector<TaskId> deps;
      if (last != kNone) deps.push_back(last);
      if (gathered != kNone) deps.push_back(gathered);
      dedupe_in_place(deps);
      last = emit(cur_->head_wgrad_gemm, StepPrefix{'W'}, deferred_head_mbs_[i], deps, false);
      gathered = next;
    }
    last_compute_ = last;
    if (deferred_head_v_ >= 0) {
      const int mb = sched_.microbatches - 1;
      head_grads_done(deferred_head_v_, last, mb, true);
      flush_bucket(last, mb);
    }
  }

  // The LM head's weight gradients of a W unit (`b_ids`: its B unit's head tasks), and
  // their reduction when the unit is the chunk's last.
  TaskId head_weight_gradients(const ScheduleUnit& u, const std::vector<TaskId>& entry, std::vector<TaskId>* b_ids,
                               bool reduce_grads) {
    const TaskId last =
        emit(cur_->head_backward, StepPrefix{'W'}, u.microbatch, entry, false, nullptr, PassFilter::WeightOnly, b_ids);
    if (reduce_grads && !zero3()) head_grads_done(vstage_[u.chunk], last, u.microbatch);
    return last;
  }

  // The weight-gradient part (W) of a chunk's micro-batch, after its B unit
  // (`part`: all of it, or its LM head's share and then its layers' share).
  void weight_unit(const ScheduleUnit& u, bool reduce_grads, WeightPart part = WeightPart::All) {
    const int v = vstage_[u.chunk];
    auto it = b_ids_.find(unit_key(u.microbatch, v));
    TRAINSIM_CHECK(it != b_ids_.end(), "W unit " + to_string(u) + " before its B unit");
    if (part == WeightPart::Head) {
      if (head_of(v)) {
        const TaskId last = head_weight_gradients(u, unit_entry(), &it->second.back(), reduce_grads);
        if (last != kNone) last_compute_ = head_w_end_[unit_key(u.microbatch, v)] = last;
      }
      return;
    }
    std::vector<std::vector<TaskId>> ids = std::move(it->second);
    b_ids_.erase(it);
    std::vector<TaskId> entry = unit_entry();
    if (part == WeightPart::Layers) {  // after the unit's LM-head share, if it has one
      const auto head = head_w_end_.find(unit_key(u.microbatch, v));
      if (head != head_w_end_.end()) entry.push_back(head->second);
    }
    TaskId last = kNone;
    if (head_of(v) && part == WeightPart::All) {
      last = head_weight_gradients(u, entry, &ids.back(), reduce_grads);
      if (last != kNone) entry = {last};
    }
    for (int l = layers_[u.chunk] - 1; l >= 0; --l) {
      const int layer = first_layer_[u.chunk] + l;
      last = emit(layer_steps(layer, u.microbatch).backward, layer_prefix('W', layer), u.microbatch, entry, false,
                  nullptr, PassFilter::WeightOnly, &ids[l]);
      entry = {last};
      layer_grads_done(layer, last, u.microbatch, reduce_grads);
    }
    if (last == kNone && !entry.empty()) last = entry.back();
    last_compute_ = finish_weight_gradients(v, last, u.microbatch, reduce_grads, "W ");
  }

  // Ends a chunk's weight gradients after `last`: the embedding's (first chunk),
  // and on the chunk's last micro-batch the flush of the gradient bucket.
  TaskId finish_weight_gradients(int v, TaskId last, int mb, bool reduce_grads, const char* prefix) {
    if (embedding_of(v)) {
      std::vector<TaskId> entry;
      if (last != kNone) entry.push_back(last);
      last = emit(cur_->embedding_backward, StepPrefix{prefix[0]}, mb, entry, false);
      if (reduce_grads && !zero3()) {
        last = ddp_copy_in(cur_->embedding_grad_elements, 1 + (model_.rope || model_.alibi ? 0 : 1), last, mb,
                           std::string(prefix) + "embed ddp.grad.copy_in");
        add_grads(cur_->embedding_grad_elements, last, mb);
      }
    }
    if (deepspeed_bf16_optimizer()) {
      // update_hp_grads: hp.add_(lp.grad.to(fp32)) per parameter: the cast reads
      // 2 B and writes 4 B, the add reads 4 + 4 B and writes 4 B. It loops over the
      // parameter tensors in Python, two kernels each (the cast and the add), issued by
      // the host like the layers' kernels (bf16_optimizer.py, June 2022).
      last = accumulate_grads(v, "grad.accumulate.fp32", Dtype::FP32, 18.0, last, mb, prefix,
                              2 * chunk_param_tensors(chunk_of_vstage(v)));
    } else if (train_.grad_accumulation == GradAccumulation::Autograd && mb > 0) {
      // AccumulateGrad's in-place add on every micro-batch after the first (the
      // first one's gradient becomes .grad as it is): reads both 16-bit gradients,
      // writes one (16-bit in mixed precision, fp32 in FP32 training).
      const double b = activation_element_bytes(train_);
      last = accumulate_grads(v, "grad.accumulate", b == 4 ? Dtype::FP32 : Dtype::BF16, 3 * b, last, mb, prefix);
    }
    if (zero3() && outer_elements(v) > 0) {
      // The root unit's gradients (embedding, LM head) are reduce-scattered
      // like every layer's once its backward is done.
      last = fsdp_gradient_prep(outer_elements(v), last, mb, std::string(prefix) + "fsdp.grad.passes outer");
      const TaskId d[] = {last};
      b_.collective(s_.dp, slot_dp_, CollectiveKind::ReduceScatter, CommClass::DP,
                    task_bytes(outer_elements(v) * train_.grad_reduce_bytes), label("dp.rs.grads outer"), mb, d);
      dp_tasks_.push_back(b_.size() - 1);
    }
    if (reduce_grads && !zero3()) flush_bucket(last, mb);
    return last;
  }

  // PyTorch FSDP's passes over a unit's unsharded gradient before its reduce-scatter
  // (fsdp_gradient_passes: the flat gradient's cat, the cast to the reduction dtype, the
  // divisions), after `last` on the compute stream; `last` itself where FSDP is not FSDP1.
  // The cast and the divisions run on FSDP's post-backward stream in PyTorch, beside the
  // next unit's backward kernels, whose SMs and memory bandwidth they share: their time is
  // charged in the compute stream's order, as the pre-unshard casts are.
  TaskId fsdp_gradient_prep(double elements, TaskId last, int mb, const std::string& name) {
    const FsdpGradientPasses g = fsdp_gradient_passes(train_, par_);
    if (g.kernels == 0 || elements <= 0) return last;
    ComputeOp op{"fsdp.grad.passes", OpKind::MemoryBound, Dtype::BF16, 0, elements * g.bytes_per_element, 0, 0, 0,
                 g.kernels};
    std::vector<TaskId> deps;
    if (last != kNone) deps.push_back(last);
    return b_.compute(s_.compute, b_.add_op(op), label(name), mb, deps);
  }

  // One memory-bound pass over the gradients of chunk v's parameters after `last`.
  // With `issued_kernels` > 0 the pass is that many kernels issued by the framework's host
  // code (docs/frameworks.md, "Host dispatch"); else one kernel, not host-bound.
  TaskId accumulate_grads(int v, const char* name, Dtype dtype, double bytes_per_param, TaskId last, int mb,
                          const char* prefix, int issued_kernels = 0) {
    ComputeOp acc{name, OpKind::MemoryBound,        dtype, 0, chunk_params(chunk_of_vstage(v)) * bytes_per_param, 0, 0,
                  0,    std::max(issued_kernels, 1)};
    if (issued_kernels > 0) {
      acc.host_dispatch_seconds = issue_host_seconds(train_);
      acc.launch_blocking = train_.launch_blocking;
    }
    std::vector<TaskId> deps;
    if (last != kNone) deps.push_back(last);
    return b_.compute(s_.compute, b_.add_op(acc), label(std::string(prefix) + name), mb, deps);
  }

  // The LM head's (and multi-token prediction modules') weight gradients on virtual stage v
  // are done at `last`.
  // `own_bucket`: reduced in a bucket of its own (after the pipeline flush's deferred
  // GEMMs), not with the layers' buckets.
  void head_grads_done(int v, TaskId last, int mb, bool own_bucket = false) {
    tied_ready_ = last;
    if (edp_group_ > 1) expert_bucket_elems_ += cur_->head_expert_grad_elements;
    const double elements = head_grad_elements(v);
    if (layer_buckets() && !own_bucket) {
      held_elems_ += elements;  // reduced with the first layer's bucket
      return;
    }
    last = ddp_copy_in(elements, (model_.rmsnorm ? 1 : 2) + (shares_embedding(v) ? 0 : 1), last, mb,
                       "B head ddp.grad.copy_in");
    add_grads(elements, last, mb);
  }

  // A layer's weight gradients of this micro-batch are done at `last`.
  void layer_grads_done(int layer, TaskId last, int mb, bool reduce_grads) {
    const double expert = layer_steps(layer).expert_grad_elements;
    if (zero3()) {
      last = fsdp_gradient_prep(layer_steps(layer).grad_elements + expert, last, mb,
                                "B L" + std::to_string(layer) + " fsdp.grad.passes");
      const TaskId d[] = {last};
      b_.collective(s_.dp, slot_dp_, CollectiveKind::ReduceScatter, CommClass::DP,
                    task_bytes(layer_steps(layer).grad_elements * train_.grad_reduce_bytes),
                    label("B L" + std::to_string(layer) + " dp.rs.grads"), mb, d);
      dp_tasks_.push_back(b_.size() - 1);
      if (expert > 0 && edp_group_ > 1) {
        b_.collective(s_.dp, slot_edp_, CollectiveKind::ReduceScatter, CommClass::DP,
                      task_bytes(expert * train_.grad_reduce_bytes),
                      label("B L" + std::to_string(layer) + " edp.rs.grads"), mb, d);
        dp_tasks_.push_back(b_.size() - 1);
      }
    } else if (reduce_grads) {
      if (edp_group_ > 1) expert_bucket_elems_ += expert;
      if (layer_buckets()) {
        // One bucket per layer; the first layer's waits for the embedding's gradient
        // (finish_weight_gradients) with the held parameters outside the layers.
        bucket_elems_ += layer_steps(layer).grad_elements;
        if (layer != first_layer_[0]) {
          flush_bucket(last, mb);
        } else {
          bucket_elems_ += held_elems_;
          held_elems_ = 0;
        }
        return;
      }
      last = ddp_copy_in(layer_steps(layer).grad_elements, layer_param_tensors(), last, mb,
                         "B L" + std::to_string(layer) + " ddp.grad.copy_in");
      add_grads(layer_steps(layer).grad_elements, last, mb);
    }
  }

  // PyTorch DistributedDataParallel (parallel.ddp_impl "torch", docs/frameworks.md): on the
  // backward that syncs, the reducer's autograd hook copies each parameter's gradient into
  // its bucket, dividing by the world size as it copies (Reducer::mark_variable_ready_dense,
  // copy_grad_to_bucket's mul_out): one kernel per parameter tensor, read 2 + write 2 B per
  // 16-bit element, issued from C++ (no Python per tensor). `last` where it does not apply.
  TaskId ddp_copy_in(double elements, int tensors, TaskId last, int mb, const std::string& name) {
    if (!par_.torch_ddp || dp_group_ <= 1 || (elements <= 0 && tensors <= 0)) return last;
    ComputeOp op{
        "ddp.grad.copy_in",  OpKind::MemoryBound, Dtype::BF16, 0, elements * 2 * train_.grad_reduce_bytes, 0, 0, 0,
        std::max(tensors, 1)};
    std::vector<TaskId> deps;
    if (last != kNone) deps.push_back(last);
    return b_.compute(s_.compute, b_.add_op(op), label(name), mb, deps);
  }

  // Parameter tensors of one dense layer (chunk_param_tensors).
  int layer_param_tensors() const { return 2 * (model_.rmsnorm ? 1 : 2) + 4 + (model_.bias ? 4 : 0); }

  // NeMo's apex DistributedFusedAdam (training.apex_distributed_adam, docs/frameworks.md):
  // one bucket per transformer layer, with every parameter outside the layers (embedding,
  // LM head, final norm) in the first layer's bucket (configure_optimizers in NeMo's
  // megatron_gpt_model.py: buckets.reverse(); buckets[-1].extend(the rest)).
  bool layer_buckets() const {
    return train_.apex_distributed_adam && zero_sharded_optimizer() && par_.dp_overlap && chunks_ == 1;
  }

  // Parameters outside the layers on virtual stage v: the embedding (first)
  // and the LM head (last; the embedding itself when tied on the same stage).
  double outer_elements(int v) const {
    double e = 0;
    if (embedding_of(v)) e += cur_->embedding_grad_elements;
    if (head_of(v)) e += head_grad_elements(v);
    return e;
  }
  // The LM head's output weight is the word embedding's own parameter when the embeddings
  // are tied and both sit on virtual stage v (no pipeline split between them). Two chunks
  // of one rank (V schedules) hold two copies, as Megatron-LM's model chunks do.
  bool shares_embedding(int v) const { return model_.tied_embeddings && embedding_of(v) && head_of(v); }
  // Gradient elements of the LM head on its virtual stage v: without the output weight
  // where it is the embedding (shares_embedding), so it is reduced and stepped once.
  double head_grad_elements(int v) const {
    return cur_->head_grad_elements - (shares_embedding(v) ? cur_->head_weight_elements : 0);
  }

  // ZeRO-3: gather a layer's parameters after `after` (prefetch one layer ahead).
  TaskId param_gather(int layer, TaskId after, int mb) {
    std::vector<TaskId> deps;
    if (after != kNone) deps.push_back(after);
    TaskId t = b_.collective(s_.dp, slot_dp_, CollectiveKind::AllGather, CommClass::DP,
                             task_bytes(layer_steps(layer).grad_elements * kActBytes),
                             label("L" + std::to_string(layer) + " dp.ag.params"), mb, deps);
    const double expert = layer_steps(layer).expert_grad_elements;
    if (expert > 0 && edp_group_ > 1) {
      t = b_.collective(s_.dp, slot_edp_, CollectiveKind::AllGather, CommClass::DP, task_bytes(expert * kActBytes),
                        label("L" + std::to_string(layer) + " edp.ag.params"), mb, deps);
    }
    return t;
  }

  // Dense gradients fill buckets reduced over dp*cp; routed-expert gradients
  // (MoE) fill their own buckets, flushed with them, reduced over edp.
  void add_grads(double elements, TaskId ready, int mb) {
    if (dp_group_ <= 1 && expert_bucket_elems_ <= 0) return;
    bucket_elems_ += elements;
    if ((bucket_elems_ + expert_bucket_elems_) * train_.grad_reduce_bytes >= bucket_bytes_) flush_bucket(ready, mb);
  }

  void flush_bucket(TaskId ready, int mb) {
    if (dp_group_ <= 1) bucket_elems_ = 0;
    if (bucket_elems_ <= 0 && expert_bucket_elems_ <= 0) return;
    std::vector<TaskId> deps;
    if (par_.dp_overlap) {
      deps.push_back(ready);
    } else {
      pending_buckets_.push_back(bucket_elems_);
      pending_expert_buckets_.push_back(expert_bucket_elems_);
      bucket_elems_ = expert_bucket_elems_ = 0;
      return;
    }
    emit_grad_reduce(bucket_elems_, expert_bucket_elems_, deps, mb);
    bucket_elems_ = expert_bucket_elems_ = 0;
  }

  void emit_grad_reduce(double elements, double expert_elements, const std::vector<TaskId>& deps, int mb) {
    const bool scatter = zero_sharded_optimizer() && !deepspeed_bf16_optimizer();
    const auto kind = scatter ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
    if (elements > 0) {
      b_.collective(s_.dp, slot_dp_, kind, CommClass::DP, task_bytes(elements * train_.grad_reduce_bytes),
                    label(scatter ? "dp.rs.grads" : "dp.ar.grads"), mb, dedupe(deps));
      dp_tasks_.push_back(b_.size() - 1);
    }
    if (expert_elements > 0) {
      const auto ekind = par_.zero >= 1 ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
      b_.collective(s_.dp, slot_edp_, ekind, CommClass::DP, task_bytes(expert_elements * train_.grad_reduce_bytes),
                    label(par_.zero >= 1 ? "edp.rs.grads" : "edp.ar.grads"), mb, dedupe(deps));
      dp_tasks_.push_back(b_.size() - 1);
    }
  }

  double local_expert_params() const {
    double p = 0;
    for (int c = 0; c < chunks_; ++c) {
      for (int l = 0; l < layers_[c]; ++l) p += layer_steps(first_layer_[c] + l).expert_grad_elements;
      if (last_vstage(c)) p += steps_.head_expert_grad_elements;
    }
    return p;
  }

  // Parameter tensors of local chunk c in Megatron's GPT model code: per dense layer its two
  // norms' weights (and biases for LayerNorm), the QKV, attention output and two MLP weight
  // matrices (Megatron fuses an MLP's gate and up projections) and, with linear biases, their
  // four biases; the word embedding (and a learned position table) on the embedding's chunk;
  // the final norm and the output weight (DeepSpeed's tied copy, or the untied head) on the
  // head's. Mixture-of-experts layers count as dense ones (not modelled apart).
  int chunk_param_tensors(int c) const {
    const int norm = model_.rmsnorm ? 1 : 2;
    int n = layers_[c] * (2 * norm + 4 + (model_.bias ? 4 : 0));
    if (embedding_of(vstage_[c])) n += 1 + (model_.rope || model_.alibi ? 0 : 1);
    if (head_of(vstage_[c])) n += norm + (shares_embedding(vstage_[c]) ? 0 : 1);
    return n;
  }

  // Parameters of local chunk c (its layers, and the embedding or LM head it holds).
  double chunk_params(int c) const {
    double p = 0;
    for (int l = 0; l < layers_[c]; ++l) {
      p += layer_steps(first_layer_[c] + l).grad_elements + layer_steps(first_layer_[c] + l).expert_grad_elements;
    }
    p += outer_elements(vstage_[c]);
    return p;
  }
  int chunk_of_vstage(int v) const {
    for (int c = 0; c < chunks_; ++c) {
      if (vstage_[c] == v) return c;
    }
    TRAINSIM_CHECK(false, "virtual stage " + std::to_string(v) + " is not on stage " + std::to_string(stage_));
    return 0;
  }

  double local_params() const { return local_layer_params() + local_embedding_head_params(); }
  // FP8 primary weights (TrainingSpec::fp8_params): a layer's linear weights on this rank,
  // held and all-gathered in 1 B (NeMo's distributed Adam syncs them as uint8); 0 without.
  double layer_fp8_weights() const {
    return train_.fp8_params ? model_.linear_weights_per_layer_per_tp_rank(par_.tp) : 0.0;
  }
  double local_fp8_weights() const { return layer_fp8_weights() * std::accumulate(layers_.begin(), layers_.end(), 0); }
  // Bytes of a parameter all-gather of `elements`, `fp8` of them FP8 weights.
  static double gather_bytes(double elements, double fp8) { return elements * kActBytes - fp8 * (kActBytes - 1); }
  double local_layer_params() const {
    double p = 0;
    for (int c = 0; c < chunks_; ++c) {
      for (int l = 0; l < layers_[c]; ++l) p += layer_steps(first_layer_[c] + l).grad_elements;
    }
    return p;
  }
  double local_embedding_head_params() const {
    double p = 0;
    for (int c = 0; c < chunks_; ++c) {
      if (first_vstage(c)) p += cur_->embedding_grad_elements;
      if (last_vstage(c)) p += head_grad_elements(vstage_[c]);
    }
    return p;
  }
  int local_layers() const {
    int n = 0;
    for (int c = 0; c < chunks_; ++c) n += layers_[c];
    return n;
  }

  // Muon (docs/frameworks.md, "Optimizers"): the momentum of every weight matrix of
  // the rank's layers orthogonalised by Newton-Schulz iterations, each three GEMMs,
  // after Distributed Muon's gather of the DP-sharded gradients (Moonlight).
  void emit_muon_orthogonalisation(std::vector<TaskId>& deps) {
    if (par_.zero >= 1 && dp_group_ > 1) {
      const TaskId g =
          b_.collective(s_.dp, slot_dp_, CollectiveKind::AllGather, CommClass::DP,
                        task_bytes(local_layer_params() * kActBytes), label("optimizer.muon.gather"), -1, dedupe(deps));
      deps = {g};
    }
    const int layers = local_layers();
    if (layers == 0) return;
    for (const MuonMatrix& w : muon_matrices(model_, par_)) {
      const TaskId t =
          b_.compute(s_.compute, b_.add_op(muon_newton_schulz_op(w, layers)), label(w.name), -1, dedupe(deps));
      deps = {t};
    }
  }

  // The all-reduce of the tied embedding's gradient between the first and last
  // stage (set_tied_embedding_stages), in the gradient-reduction dtype.
  TaskId emit_tied_grad_sync(std::vector<TaskId> deps) {
    const double elements = static_cast<double>(model_.vocab) * model_.hidden / par_.tp;
    return b_.collective(s_.tied, slot_tied_, CollectiveKind::AllReduce, CommClass::PP,
                         task_bytes(elements * train_.grad_reduce_bytes), label("pp.ar.tied_grads"), -1, dedupe(deps));
  }

  void finish_iteration() {
    const int mb = sched_.microbatches - 1;
    TaskId tied = kNone;
    if (tied_sync_ && train_.tied_grad_sync == TiedGradSync::BeforeDp) tied = emit_tied_grad_sync({last_compute_});
    if (!par_.dp_overlap) {
      const std::vector<TaskId> after{tied != kNone ? tied : last_compute_};
      for (std::size_t i = 0; i < pending_buckets_.size(); ++i)
        emit_grad_reduce(pending_buckets_[i], pending_expert_buckets_[i], after, mb);
    }
    std::vector<TaskId> deps = dp_tasks_;
    deps.push_back(last_compute_);
    deps.insert(deps.end(), exchange_wait_.begin(), exchange_wait_.end());  // the last batched exchange
    if (par_.torch_ddp && dp_group_ > 1 && !dp_tasks_.empty()) {
      // PyTorch DDP's finalize_backward waits for every bucket's all-reduce and copies each
      // reduced bucket view back into its parameter's .grad (finalize_bucket_dense,
      // copy_bucket_to_grad: grad.copy_(bucket_view)), one kernel per parameter tensor,
      // read 2 + write 2 B per 16-bit element, before the optimizer reads .grad.
      int tensors = 0;
      for (int c = 0; c < chunks_; ++c) tensors += chunk_param_tensors(c);
      ComputeOp back{"ddp.grad.copy_out",
                     OpKind::MemoryBound,
                     Dtype::BF16,
                     0,
                     local_params() * 2 * train_.grad_reduce_bytes,
                     0,
                     0,
                     0,
                     std::max(tensors, 1)};
      deps.assign(1, b_.compute(s_.compute, b_.add_op(back), label("ddp.grad.copy_out"), mb, dedupe(deps)));
    }
    if (tied_sync_ && train_.tied_grad_sync == TiedGradSync::AfterDp) tied = emit_tied_grad_sync(deps);
    if (tied_sync_ && train_.tied_grad_sync == TiedGradSync::Overlapped) {
      // The Zero Bubble runtime (WeightGradStore.clear) issues it after the rank's
      // last backward-input unit (the embedding's gradient is made there) and, on
      // the last stage, after the output layer's remaining weight gradients.
      const TaskId ready = tied_embedding_rank_ ? bwd_end_ : tied_ready_;
      tied = emit_tied_grad_sync({ready != kNone ? ready : last_compute_});
    }
    if (tied != kNone) deps.push_back(tied);
    const double shard = (par_.zero >= 1 ? dp_group_ : 1);
    const double params = local_params() / shard + local_expert_params() / (par_.zero >= 1 ? edp_group_ : 1);
    // Optimizer: gradient-norm pass (fp32 grads), then the update's passes over the
    // local parameters as mixed-precision optimizers run them (Megatron-LM's
    // Float16Optimizer and distributed optimizer, FSDP): 16-bit reduced gradients
    // copied into fp32 main gradients (read 2 B, write 4 B); with fp16 loss scaling,
    // unscale and inf check (read 4, write 4); the update (Adam: read grad, master,
    // m, v, write master, m, v = 28 B; SGD with momentum 20 B); the fp32 master
    // copied to the 16-bit weights (read 4, write 2) unless FSDP all-gathers the
    // fp32 shard itself.
    const bool mixed = train_.precision != Dtype::FP32 && train_.precision != Dtype::TF32;
    // LAMB as apex's FusedLAMB runs it: stage 1 reads grad, master, m, v and
    // writes m, v and the update (28 B), the norms of master and update (8 B),
    // stage 2 reads master and update and writes the master (12 B): 48 B.
    // Adafactor as Hugging Face transformers' Adafactor.step (factored, no
    // first moment), op by op: RMS of the parameter 4, grad**2 + eps 16, row
    // and column means 8, the outer product 4, update * grad 12, its RMS and
    // the clip 12, * lr 8, p.add_(-update) 20: 84 B.
    // Muon: momentum (read grad, momentum, write momentum: 12 B), the bf16 Newton-Schulz
    // input and output (2 + 2 B), the update of the master (read 4 + 2, write 4 B): 26 B
    // per matrix parameter; the embedding and the head take AdamW's 28 B.
    // Unfused AdamW, op by op (Composer's DecoupledAdamW, weight decay 0): exp_avg.mul_ 8,
    // .add_(grad) 12, exp_avg_sq.mul_ 8, .addcmul_(grad, grad) 16, sqrt 8, / sqrt(bc2) 8,
    // .add_(eps) 8, param.addcdiv_(exp_avg, denom) 16: 84 B.
    const bool muon = train_.optimizer == "muon";
    double update_bytes = train_.optimizer == "sgd"            ? 20.0
                          : train_.optimizer == "lamb"         ? 48.0
                          : train_.optimizer == "adafactor"    ? 84.0
                          : train_.optimizer == "adam-unfused" ? 84.0
                                                               : 28.0;
    double extra_bytes = 0;
    if (mixed && train_.grad_reduce_bytes == 2) extra_bytes += 6;
    if (train_.precision == Dtype::FP16) extra_bytes += 8;
    if (mixed && par_.zero < 3) extra_bytes += 6;
    // bf16 Adam state (training.optimizer_dtype, NeMo's optim.dtype bf16 with apex's
    // DistributedFusedAdam, store_params false): the fused update reads the reduced gradient
    // shard, the 16-bit parameter, m and v and writes the parameter, m and v (2 B each, the
    // gradient in its reduction dtype); no fp32 main-gradient copy and no master-to-16-bit
    // copy, and the gradient norm reads the reduced gradients themselves.
    const bool bf16_state = train_.bf16_optimizer_state;
    if (bf16_state) {
      update_bytes = train_.grad_reduce_bytes + 12.0;
      extra_bytes = 0;
    }
    const double norm_bytes = bf16_state ? train_.grad_reduce_bytes : 4.0;
    const double muon_params = muon ? local_layer_params() / shard : 0.0;
    double step_bytes = params * (update_bytes + extra_bytes) - muon_params * (update_bytes - 26.0);
    // FP8 primary weights: the shard's FP8 weights are cast from the optimizer's master
    // copy (NeMo's MegatronDistributedFusedAdam._check_params_shard_dtypes: cast_to_fp8 into
    // the uint8 sync buffer): from a bf16 master read 2 B and write 1 B on top of the update,
    // from an fp32 master read 4 B and write 1 B instead of the 16-bit copy's 4 + 2 B.
    if (train_.fp8_params) step_bytes += local_fp8_weights() / shard * (bf16_state ? 3.0 : -1.0);
    // PipeDream steps after every micro-batch (models/pipedream.hpp): its steps, together.
    const double steps = optimizer_steps_per_iteration(par_.schedule, sched_.microbatches);
    ComputeOp norm{"optimizer.grad_norm", OpKind::MemoryBound, Dtype::FP32, 0, steps * params * norm_bytes, 0, 0, 0, 1};
    ComputeOp step{"optimizer.step", OpKind::MemoryBound, Dtype::FP32, 0, steps * step_bytes, 0, 0, 0, 1};
    const TaskId n = b_.compute(s_.compute, b_.add_op(norm), label("optimizer.grad_norm"), -1, dedupe(deps));
    std::vector<TaskId> before_step{n};
    if (train_.framework == Framework::Eager) {
      // PyTorch's clipping multiplies every gradient by the clamped coefficient whatever
      // its value (no host check): FullyShardedDataParallel.clip_grad_norm_ each local
      // flat-parameter shard (`grad.detach().mul_(clip_coef_clamped)`, one launch per FSDP
      // unit: the layers and the root), torch.nn.utils.clip_grad_norm_ every gradient in
      // a foreach launch; read and write 4 B (docs/frameworks.md, "Gradient clipping").
      const int launches = par_.zero >= 3 ? std::accumulate(layers_.begin(), layers_.end(), 1) : 1;
      ComputeOp clip{"optimizer.grad_clip", OpKind::MemoryBound, Dtype::FP32, 0, steps * params * 8, 0, 0, 0, launches};
      before_step.assign(1, b_.compute(s_.compute, b_.add_op(clip), label("optimizer.grad_clip"), -1, before_step));
    }
    if (muon) emit_muon_orthogonalisation(before_step);
    const TaskId st = b_.compute(s_.compute, b_.add_op(step), label("optimizer.step"), -1, dedupe(before_step));
    if (zero_sharded_optimizer() && !prefetch_params_) {
      const TaskId sd[] = {st};
      b_.collective(s_.dp, slot_dp_, CollectiveKind::AllGather, CommClass::DP,
                    task_bytes(gather_bytes(local_params(), local_fp8_weights())), label("dp.ag.params"), -1, sd);
      if (edp_group_ > 1 && local_expert_params() > 0) {
        b_.collective(s_.dp, slot_edp_, CollectiveKind::AllGather, CommClass::DP,
                      task_bytes(local_expert_params() * kActBytes), label("edp.ag.params"), -1, sd);
      }
    }
  }

  std::uint64_t activation_message_bytes() const {
    // Megatron-LM's scatter/gather optimisation: each TP rank sends 1/tp of the
    // activation (with SP it only holds that much); without it every TP rank sends it whole.
    const double tokens = par_.micro_batch * par_.cp_local_tokens(train_.seq_len) / par_.seq_chunks;
    const bool split = par_.pp_scatter_gather || (par_.sequence_parallel && par_.tp > 1);
    return task_bytes(tokens * model_.hidden * activation_element_bytes(train_) / (split ? par_.tp : 1));
  }

  const TransformerSpec& model_;
  const ParallelSpec& par_;
  const TrainingSpec& train_;
  const ModelSteps& steps_;
  // seq1F1B: the steps of each sequence chunk (unit micro-batch n runs chunk n % k);
  // cur_: the steps of the unit being emitted.
  const std::vector<ModelSteps>* seq_steps_ = nullptr;
  const ModelSteps* cur_ = &steps_;
  const PipelineSchedule& sched_;
  int stage_;
  ProgramBuilder b_;
  Streams s_{};
  std::vector<SlotUse> slots_;
  std::uint32_t slot_tp_ = 0, slot_cp_ = 0, slot_dp_ = 0, slot_ep_ = 0, slot_etp_ = 0, slot_edp_ = 0;
  std::uint32_t slot_cp_ulysses_ = 0, slot_cp_ring_ = 0;
  // Tied embeddings (set_tied_embedding_stages): this rank all-reduces the
  // shared weight's gradient (this rank holds the embedding, else the LM head);
  // the task that ends the head's weight gradients.
  bool tied_sync_ = false, tied_embedding_rank_ = false;
  std::uint32_t slot_tied_ = 0;
  TaskId tied_ready_ = kNone;
  // Megatron-Core's deferred output-layer weight gradients (TrainingSpec::defer_embedding_wgrad):
  // the micro-batches whose GEMMs the flush runs, and the head's virtual stage once its last
  // backward ran (-1: none on this rank, or not yet).
  std::vector<int> deferred_head_mbs_;
  int deferred_head_v_ = -1;
  std::map<std::tuple<int, int, int, int>, PipelineLink> pipeline_slots_;
  std::map<std::tuple<int, int, bool>, std::uint8_t> peer_streams_;  // megatron_interleaved_p2p_: per peer rank
  const LinkShapes* links_ = nullptr;                                // per-stage layouts only
  int model_first_v_ = 0;                                            // the virtual stage that runs the embedding
  bool link_kind_used_[4] = {false, false, false, false};
  int chunks_ = 1, V_ = 1;
  std::vector<int> vstage_, layers_, first_layer_;  // per local chunk
  // Per (micro-batch, virtual stage): the task that ends a unit whose consumer is on this same rank.
  std::vector<TaskId> fwd_out_, bwd_out_;
  // B units whose W has not run yet: task ids of each layer's (and the head's) backward steps.
  std::unordered_map<std::size_t, std::vector<std::vector<TaskId>>> b_ids_;
  // Trailing W units of the LM head's rank (trailing_weight_units): the end of each one's head share.
  std::unordered_map<std::size_t, TaskId> head_w_end_;
  int dp_group_ = 1;
  int edp_group_ = 1;              // expert data-parallel group (MoE)
  std::uint32_t matrix_base_ = 0;  // this stage's first traffic matrix in SimulationSetup::traffic
  double expert_bucket_elems_ = 0;
  std::vector<double> pending_expert_buckets_;
  double bucket_bytes_ = 0;
  double bucket_elems_ = 0;
  std::vector<double> pending_buckets_;
  std::vector<TaskId> dp_tasks_;
  std::vector<TaskId> param_bucket_of_layer_;
  // Per chunk: the gather of the parameters left after its last layer bucket (kNone if none).
  std::vector<TaskId> param_bucket_of_chunk_;
  bool prefetch_params_ = false;
  TaskId last_compute_ = kNone;
  std::vector<TaskId> blocking_sends_;  // sends the next unit waits for (no p2p overlap)
  // Megatron-LM's interleaved schedule without overlap (megatron_batched_setup): the
  // exchange after each unit, the sends waiting for the next one, the units whose
  // input arrives from another rank in post order, their receives, and what the
  // unit after an exchange waits for.
  struct PendingSend {
    SlotRole role;
    int to;
    const char* what;
    int mb;
  };
  bool megatron_batched_p2p_ = false;
  const std::vector<ScheduleUnit>* order_ = nullptr;
  std::vector<BatchedExchange> exchanges_;
  std::vector<PendingSend> pending_sends_;
  std::vector<int> fwd_recv_queue_, bwd_recv_queue_;
  std::size_t fwd_recv_next_ = 0, bwd_recv_next_ = 0;
  std::vector<std::vector<TaskId>> batched_recvs_;
  std::vector<char> batched_received_;
  std::vector<TaskId> exchange_wait_;
  // DeepSpeed's TrainSchedule: the rank's steps, the next command to run, and
  // the last command emitted (every command waits for the one before).
  std::vector<std::vector<DeepSpeedCommand>> ds_steps_;
  std::size_t ds_step_ = 0, ds_cmd_ = 0;
  TaskId ds_chain_ = kNone;
  // Megatron-LM's interleaved schedule with overlapped send/recv (megatron_interleaved_p2p):
  // the last tasks of the rank's last two forward units and of its last backward unit,
  // and the sends of its last forward and last backward unit.
  bool megatron_interleaved_p2p_ = false;
  TaskId fwd_end_ = kNone;
  std::vector<int> megatron_posted_after_;
  std::vector<std::vector<TaskId>> megatron_recvs_;
  TaskId bwd_end_ = kNone;
  // Zero Bubble runtime receive placement: per unit the unit its receive follows,
  // the unit being emitted, and the last computation of each emitted unit.
  const std::vector<int>* receive_posts_ = nullptr;
  int cur_unit_ = 0;
  std::vector<TaskId> unit_end_;
  std::vector<TaskId> fwd_sends_, bwd_sends_;
  // Activation offload: the copy of (micro-batch, chunk, layer)'s activations to the host.
  std::map<std::tuple<int, int, int>, TaskId> offloaded_;
  std::uint32_t offload_op_ = 0, reload_op_ = 0;
  Fp8WeightCast fp8_weight_cast_;
  double held_elems_ = 0;  // parameters outside the layers held for the first layer's bucket
  struct LabelSlot {
    std::size_t hash = 0;
    std::uint32_t id = kNoLabel;
  };
  static constexpr std::uint32_t kNoLabel = std::numeric_limits<std::uint32_t>::max();
  std::vector<LabelSlot> label_slots_;  // open addressing, a power of two long, at most half full
  std::size_t labels_indexed_ = 0;
  std::unordered_map<const char*, std::uint32_t> literal_labels_;
  // Per step list, each step's op id once first emitted (kNone before): one
  // op per step, whatever the prefix (layer) it is emitted under.
  std::unordered_map<const std::vector<Step>*, std::vector<std::uint32_t>> list_ops_;
  // Label and op ids of a step list under a prefix (emit), keyed without building the prefix's text.
  struct StepListKey {
    StepPrefix prefix;
    const std::vector<Step>* steps = nullptr;
    bool operator==(const StepListKey&) const = default;
  };
  struct StepListKeyHash {
    std::size_t operator()(const StepListKey& k) const {
      const auto layer = static_cast<std::size_t>(static_cast<std::uint32_t>(k.prefix.layer));
      return std::hash<const void*>()(k.steps) * 31 ^ (layer << 8 | static_cast<unsigned char>(k.prefix.pass));
    }
  };
  // Per step: its label id, and its op id (the list's entry of list_ops_);
  // the list's pass templates under the filters All and InputOnly once made.
  struct StepListIds {
    std::vector<std::uint32_t> labels;
    std::vector<std::uint32_t>* ops = nullptr;
    const PassTemplate* templates[2] = {nullptr, nullptr};
    std::vector<Task> stamped[2];  // the first stamp's tasks of each template (stamp)
  };
  std::map<std::pair<const std::vector<Step>*, int>, PassTemplate> templates_;
  bool use_templates_ = true;
  bool mark_passes_ = true;
  std::unordered_map<StepListKey, StepListIds, StepListKeyHash> step_ids_;
  std::vector<TaskId> emit_deps_, emit_ids_;  // emit's scratch
  double hw_flops_ = 0, model_flops_ = 0;
};

// Communicators by role and members, created on first use.
class CommunicatorRegistry {
 public:
  explicit CommunicatorRegistry(std::vector<Communicator>* out) : out_(out) {}
  std::uint32_t get(const std::string& role, std::vector<int> members, const std::string& name) {
    auto key = std::make_pair(role, std::move(members));
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
    out_->push_back(Communicator{name, key.second, 0});
    const auto id = static_cast<std::uint32_t>(out_->size() - 1);
    ids_.emplace(std::move(key), id);
    return id;
  }

 private:
  std::vector<Communicator>* out_;
  std::map<std::pair<std::string, std::vector<int>>, std::uint32_t> ids_;
};

// What a slot of a program carries: (kind, bytes) of each distinct transfer;
// kind = collective kind, or kP2p for a send/recv.
constexpr int kP2p = 100;
using TransferKinds = std::vector<std::pair<int, std::uint64_t>>;  // ascending, distinct
using SlotTransfers = std::vector<TransferKinds>;
SlotTransfers transfers_by_slot(const ProgramTemplate& p) {
  // A slot carries a handful of distinct transfers, repeated by every layer and
  // micro-batch: a look through the slot's short list skips the repeats, and
  // one pass of each key stands for the others (visit_by_pass_key).
  SlotTransfers out(p.comm_slots.size());
  auto visit = [&](std::uint32_t from, std::uint32_t to) {
    for (std::uint32_t i = from; i < to; ++i) {
      const Task& t = p.tasks[i];
      if (t.kind == TaskKind::Compute) continue;
      const std::pair<int, std::uint64_t> transfer{
          t.kind == TaskKind::Collective ? static_cast<int>(t.collective) : kP2p, t.bytes};
      TransferKinds& kinds = out[t.ref];
      if (std::find(kinds.begin(), kinds.end(), transfer) == kinds.end()) kinds.push_back(transfer);
    }
  };
  visit_by_pass_key(
      p, [](std::uint32_t, std::uint32_t) { return KeyVisit::First; }, visit);
  for (TransferKinds& kinds : out) std::sort(kinds.begin(), kinds.end());
  return out;
}

// How the analytical model times a communicator: the members' GPU types
// (exact) and the time of each transfer it carries. Communicators with close
// signatures (same_timing) are interchangeable for a rank.
struct TimingSignature {
  std::vector<int> exact;
  std::vector<double> seconds;
};

// The signature of `size` members of base GPU types `exact` whose shape is `shape`.
TimingSignature timing_signature_of_shape(const AnalyticalNetwork& net, std::vector<int> exact, const CommShape& shape,
                                          const TransferKinds& transfers) {
  TimingSignature sig;
  sig.exact = std::move(exact);
  if (sig.exact.size() < 2) return sig;
  for (const auto& [kind, bytes] : transfers) {
    const double b = static_cast<double>(bytes);
    sig.seconds.push_back(kind == kP2p ? net.p2p_seconds(shape, b)
                                       : net.collective_seconds(shape, static_cast<CollectiveKind>(kind), b));
  }
  return sig;
}

std::vector<int> base_types_of(const Cluster& cluster, const std::vector<int>& members) {
  std::vector<int> types;
  types.reserve(members.size() + 1);  // and the slot's role, appended by the caller
  for (int g : members) types.push_back(cluster.base_gpu_type(cluster.gpu_type_of(g)));
  return types;
}

// `shape`: the members' shape when already known.
TimingSignature timing_signature(const AnalyticalNetwork& net, const Cluster& cluster, const std::vector<int>& members,
                                 const TransferKinds& transfers, const CommShape* known_shape = nullptr) {
  if (members.size() < 2) return TimingSignature{base_types_of(cluster, members), {}};
  return timing_signature_of_shape(net, base_types_of(cluster, members),
                                   known_shape != nullptr ? *known_shape : net.shape(members), transfers);
}

// Equal exact parts, and every time within `tolerance` (relative) of the other's.
bool same_timing(const TimingSignature& a, const TimingSignature& b, double tolerance) {
  if (a.exact != b.exact || a.seconds.size() != b.seconds.size()) return false;
  for (std::size_t i = 0; i < a.seconds.size(); ++i) {
    const double x = a.seconds[i], y = b.seconds[i];
    if (x != y && std::abs(x - y) > tolerance * std::max(std::abs(x), std::abs(y))) return false;
  }
  return true;
}

void append(TimingSignature& to, const TimingSignature& from) {
  to.exact.insert(to.exact.end(), from.exact.begin(), from.exact.end());
  to.seconds.insert(to.seconds.end(), from.seconds.begin(), from.seconds.end());
}

// Per-pass times of one chunk for the Zero Bubble scheduler: the compute
// steps of the model's transformer layers on the cost model (the GPU of the
// first rank; recomputation counts in B), as the runtime takes them: each rank
// averages its passes over its chunks (two under ZB-V) and the scheduler takes
// the median over the ranks of each of T_F, T_B and T_W (`update_schedule` in
// megatron/core/pipeline_parallel/zb_schedules.py of the paper's code, the
// element at index n/2 of the sorted values; the embedding and the output
// layer, on the end ranks, are left out); and one activation message on the
// analytical network, averaged over the
// pp - 1 stage boundaries as the Zero Bubble runtime measures T_comm (its
// bootstrap_and_profile_p2p_communication times messages along the whole
// pipeline and divides by the hops, so a slower hop between nodes counts
// once in pp - 1).
PassTimes stage_pass_times(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                           const ModelSteps& steps, const Platform& platform, const Placement& placement) {
  const int first = placement.gpu(RankCoord{0, 0, 0, 0, 0});
  const int type = platform.cluster().gpu_type_of(first);
  auto seconds = [&](const std::vector<Step>& list, Pass pass) {
    double t = 0;
    for (const Step& st : list)
      if (!st.is_comm && st.pass == pass) t += platform.costs().seconds(st.op, type);
    return t;
  };
  PassTimes t;
  const bool v_shape = par.schedule == ScheduleKind::ZeroBubbleV;
  const int chunks = v_shape ? 2 : 1;
  std::vector<double> fw(par.pp, 0), bi(par.pp, 0), bw(par.pp, 0);
  for (int v = 0; v < chunks * par.pp; ++v) {
    const int rank = v < par.pp ? v : 2 * par.pp - 1 - v;  // the V places chunk v >= p on rank 2p-1-v
    const int from = par.first_layer_of_virtual_stage(v, model.layers);
    for (int l = from; l < from + par.layers_of_virtual_stage(v, model.layers); ++l) {
      const LayerSteps& ls = steps.of(model.layer_kind(l));
      fw[rank] += seconds(ls.forward, Pass::Forward) / chunks;
      bi[rank] += (seconds(ls.backward, Pass::BackwardInput) + seconds(ls.recompute, Pass::Forward)) / chunks;
      bw[rank] += seconds(ls.backward, Pass::BackwardWeight) / chunks;
    }
  }
  auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  t.forward = median(fw);
  t.backward_input = median(bi);
  t.backward_weight = median(bw);
  if (par.pp > 1) {
    const AnalyticalNetwork& net = platform.analytical_network();
    const double tokens = static_cast<double>(par.micro_batch) * train.seq_len / par.cp;
    const bool split = par.pp_scatter_gather || (par.sequence_parallel && par.tp > 1);
    const double bytes = tokens * model.hidden * activation_element_bytes(train) / (split ? par.tp : 1);
    double hops = 0;
    for (int s = 0; s + 1 < par.pp; ++s)
      hops += net.p2p_seconds(
          net.shape({placement.gpu(RankCoord{0, 0, 0, 0, s}), placement.gpu(RankCoord{0, 0, 0, 0, s + 1})}), bytes);
    t.transfer = hops / (par.pp - 1);
  }
  return t;
}

// The schedule the planner runs: the automatic Zero Bubble schedules are
// searched with this platform's pass times, every other one is schedule_of.
PipelineSchedule planned_schedule(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                                  const ModelSteps& steps, const Platform& platform, const Placement& placement) {
  const bool zb_auto = par.schedule == ScheduleKind::ZeroBubble1p || par.schedule == ScheduleKind::ZeroBubble2p;
  if (!zb_auto && par.schedule != ScheduleKind::ZeroBubbleV) return schedule_of(par);
  const double activation = layer_activation_bytes(model, par, train);
  const double fraction = activation > 0 ? layer_weight_input_bytes(model, par, train) / activation : 1.0;
  if (par.schedule == ScheduleKind::ZeroBubbleV) {
    // The limit is 1F1B's peak, p micro-batches of a stage = 2p of a chunk.
    return zero_bubble_v_schedule(par.pp, par.micro_batches(),
                                  stage_pass_times(model, par, train, steps, platform, placement), 2.0 * par.pp,
                                  fraction);
  }
  const int limit = par.schedule == ScheduleKind::ZeroBubble1p ? par.pp : 2 * par.pp;
  const PassTimes times = stage_pass_times(model, par, train, steps, platform, placement);
  // The runtime's own heuristic where it uses it; below, the family search
  // stands in for its ILP.
  PipelineSchedule s = zero_bubble_runtime_uses_heuristic(par.pp, par.micro_batches())
                           ? zero_bubble_runtime_schedule(par.pp, par.micro_batches(), times, limit)
                           : zero_bubble_auto_schedule(par.pp, par.micro_batches(), times, limit, fraction);
  s.name = to_string(par.schedule);
  return s;
}

// Where the Zero Bubble runtime posts the receives of the schedules it runs
// (ZB-H1, ZB-H2, ZB-1p, ZB-2p, ZB-V): receive_posts from the pass times the
// automatic ones are searched with (per chunk). Empty for every other schedule,
// whose receives the planner posts ahead or where their framework posts them.
std::vector<std::vector<int>> runtime_receive_posts(const TransformerSpec& model, const ParallelSpec& par,
                                                    const TrainingSpec& train, const ModelSteps& steps,
                                                    const Platform& platform, const Placement& placement,
                                                    const PipelineSchedule& sched) {
  if (!is_zero_bubble_schedule(par.schedule) || par.pp < 2) return {};
  const PassTimes t = stage_pass_times(model, par, train, steps, platform, placement);
  return receive_posts(sched, t, train.zb_receives_sorted);
}

// Compute seconds of one micro-batch through the whole model (every layer's
// forward, backward and recomputation kernels) on GPU type `type`.
double model_compute_seconds(const TransformerSpec& model, const ModelSteps& steps, const Platform& platform,
                             int type) {
  double t = 0;
  for (int l = 0; l < model.layers; ++l) {
    const LayerSteps& ls = steps.of(model.layer_kind(l));
    for (const auto* list : {&ls.forward, &ls.backward, &ls.recompute}) {
      for (const Step& st : *list)
        if (!st.is_comm) t += platform.costs().seconds(st.op, type);
    }
  }
  return t;
}

// Compute seconds of one micro-batch on CP rank c's slowest GPU, over every
// stage, replica and TP rank at that CP index (its steps: its own share).
double cp_rank_compute_seconds(const TransformerSpec& model, const ParallelSpec& par, const ModelSteps& steps,
                               const Platform& platform, const Placement& placement, int c) {
  std::set<int> types;
  for (int s = 0; s < par.pp; ++s) {
    for (int d = 0; d < par.dp; ++d) {
      for (int t = 0; t < par.tp; ++t)
        types.insert(platform.cluster().gpu_type_of(placement.gpu(RankCoord{t, c, 0, d, s})));
    }
  }
  double slowest = 0;
  for (int type : types) slowest = std::max(slowest, model_compute_seconds(model, steps, platform, type));
  return slowest;
}

// Compute per micro-batch of CP rank c under Ulysses as fixed + h x per_head in its
// query heads h (its attention core grows with its heads, the rest of its layers runs
// on its tokens), on its slowest GPU, from its compute at two neighbouring head counts
// (`cp_shares`: the token shares, or empty for even ones).
struct UlyssesRankCompute {
  double fixed = 0, per_head = 0;
};
UlyssesRankCompute ulysses_rank_compute(const TransformerSpec& model, const ParallelSpec& par,
                                        const TrainingSpec& train, const Platform& platform, const Placement& placement,
                                        const std::vector<int>& cp_shares, int c) {
  const int u = par.cp_ulysses, heads = model.heads / par.tp;
  const int lo = std::max(1, heads / u), hi = lo + 1;  // hi <= heads: the layout rules ask heads >= u >= 2
  ParallelSpec one = par;
  one.cp_shares = cp_shares;
  one.cp_shares_auto = false;
  one.head_shares_auto = false;
  one.cp_rank = c;
  one.head_shares.assign(u, 0);  // only this rank's own heads and tokens enter its compute
  one.head_shares[c % u] = lo;
  const double t_lo = cp_rank_compute_seconds(model, par, build_model_steps(model, one, train), platform, placement, c);
  one.head_shares[c % u] = hi;
  const double t_hi = cp_rank_compute_seconds(model, par, build_model_steps(model, one, train), platform, placement, c);
  return {t_lo - lo * (t_hi - t_lo), t_hi - t_lo};
}

// Tokens of each CP rank (parallel.cp_shares): the explicit ones, or "auto":
// proportional to each CP rank's speed (one over its compute at an even share;
// under Ulysses over the part that runs on its tokens, the attention between the
// all-to-alls being shared by heads), in pairs of tokens (the ring's causal
// load-balancing split halves each share).
std::vector<int> resolved_cp_shares(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                                    const Platform& platform, const Placement& placement) {
  if (!par.cp_shares_auto) return par.cp_shares;
  ParallelSpec even = par;
  even.cp_shares.clear();
  even.cp_shares_auto = false;
  const ModelSteps steps = build_model_steps(model, even, train);
  std::vector<double> speed(par.cp, 1.0);
  for (int c = 0; c < par.cp; ++c) {
    const double t = par.cp_ulysses > 1 ? ulysses_rank_compute(model, par, train, platform, placement, {}, c).fixed
                                        : cp_rank_compute_seconds(model, par, steps, platform, placement, c);
    if (t > 0) speed[c] = 1.0 / t;
  }
  std::vector<int> pairs = balanced_shares(train.seq_len / 2, speed, ShareRule{});
  for (int& p : pairs) p *= 2;
  return pairs;
}

// Query heads of each Ulysses rank (parallel.head_shares): the explicit ones, or
// "auto": in proportion to each Ulysses rank's attention speed (one over its
// compute per head, on the slowest CP rank at that Ulysses index), in whole heads,
// rounded by the rule of dp_shares "balanced". The all-to-alls before and after the
// attention make every member wait for the slowest, so the attention between them
// is balanced on its own. `cp_shares`: the resolved token shares (or empty).
std::vector<int> resolved_head_shares(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                                      const Platform& platform, const Placement& placement,
                                      const std::vector<int>& cp_shares) {
  if (!par.head_shares_auto) return par.head_shares;
  const int u = par.cp_ulysses;
  std::vector<double> per_head(u, 0);
  for (int c = 0; c < par.cp; ++c) {
    const double a = ulysses_rank_compute(model, par, train, platform, placement, cp_shares, c).per_head;
    per_head[c % u] = std::max(per_head[c % u], a);
  }
  std::vector<double> speed(u, 1.0);
  if (std::all_of(per_head.begin(), per_head.end(), [](double a) { return a > 0; })) {
    for (int j = 0; j < u; ++j) speed[j] = 1 / per_head[j];
  }
  return balanced_shares(model.heads / par.tp, speed, ShareRule{});
}

}  // namespace

TransformerWorkload::TransformerWorkload(TransformerSpec model, ParallelSpec par, TrainingSpec train)
    : model_(std::move(model)), par_(std::move(par)), train_(std::move(train)) {}

WorkloadPlan TransformerWorkload::plan(const Platform& platform, const Placement& placement,
                                       const PlanOptions& options) const {
  const TransformerSpec& model = model_;
  const ParallelSpec& par = par_;
  const Cluster& cluster = platform.cluster();
  WorkloadPlan plan;
  {
    // The loader and the auto-search only let valid layouts through (models/layout_rules.hpp).
    const std::vector<LayoutProblem> problems = check_layout(model, par, train_, cluster.spec());
    TRAINSIM_CHECK(problems.empty(),
                   "the planner was given an invalid layout: " +
                       (problems.empty() ? "" : problems.front().path + ": " + problems.front().message));
  }
  // Per-stage layouts (MPMD, models/mpmd.hpp): each stage its sub-model, TP,
  // layers and recomputation, its ranks from its group's first GPU.
  const bool mpmd = !par.stages.empty();
  // The node of each EP rank of stage s's first expert-parallel group (the
  // hierarchical dispatcher forwards inside nodes); every group has the same
  // shape under the placement's regular layout.
  auto ep_nodes = [&](const ParallelSpec& sp, int s) {
    std::vector<int> nodes;
    if (!model.moe.enabled() || mpmd) return nodes;
    for (int x = 0; x < sp.ep; ++x) {
      const DenseCoord dc = dense_coord(sp, ExpertCoord{0, x, 0});
      nodes.push_back(cluster.node_of(placement.gpu(RankCoord{dc.tp, dc.cp, 0, dc.dp, s})));
    }
    return nodes;
  };
  std::vector<StageProgramSpec> stage_specs;
  std::vector<ModelSteps> stage_steps;
  std::vector<int> first_gpu;
  LinkShapes links;
  if (mpmd) {
    for (int s = 0; s < par.pp; ++s) {
      stage_specs.push_back(stage_program_spec(model, par, train_, s));
      const StageProgramSpec& sp = stage_specs.back();
      stage_steps.push_back(build_model_steps(sp.model, sp.par, sp.train, ep_nodes(sp.par, s)));
    }
    first_gpu = stage_first_gpus(par, cluster.spec());
    TRAINSIM_CHECK(static_cast<int>(first_gpu.size()) == par.pp, "per-stage layouts do not fit the cluster");
    for (int s = 0; s + 1 < par.pp; ++s) {
      for (const auto& [from, to] : {std::pair{s, s + 1}, std::pair{s + 1, s}}) {
        const BoundaryShape shape = boundary_shape(model, par, train_, from, to);
        links[{from, to}] = LinkShape{shape.sends, shape.recvs, task_bytes(shape.bytes)};
      }
    }
  }
  const ModelSteps steps = mpmd ? stage_steps.front() : build_model_steps(model, par, train_, ep_nodes(par, 0));
  // seq1F1B: each sequence chunk its own steps (its tokens, and the keys before it).
  std::vector<ModelSteps> seq_steps;
  for (int j = 0; par.seq_chunks > 1 && j < par.seq_chunks; ++j)
    seq_steps.push_back(build_model_steps(model, par, train_, ep_nodes(par, 0), SequenceChunk{j, par.seq_chunks}));
  // Micro-batches of each data-parallel replica (models/dp_shares.hpp) and the
  // distinct counts: each count its own schedule and stage programs.
  std::vector<int> share(par.dp, par.micro_batches());
  if (!par.dp_shares.empty()) share = par.dp_shares;
  if (par.dp_shares_balanced) {
    // A replica's speed: one over the compute time of a micro-batch through the
    // whole model on its slowest GPU (its GPU type and static slowdown).
    // Per-stage layouts: the replica's slowest stage (its layers on its slowest GPU).
    std::map<int, double> seconds_of_type;
    auto mb_seconds = [&](int type) {
      auto it = seconds_of_type.find(type);
      if (it != seconds_of_type.end()) return it->second;
      const double t = model_compute_seconds(model, steps, platform, type);
      seconds_of_type[type] = t;
      return t;
    };
    auto stage_seconds = [&](int st, int type) {
      const StageProgramSpec& sp = stage_specs[static_cast<std::size_t>(st)];
      return model_compute_seconds(sp.model, stage_steps[static_cast<std::size_t>(st)], platform, type) *
             sp.par.stage_layers[static_cast<std::size_t>(st)] / sp.model.layers;
    };
    std::vector<double> speed(par.dp, 1.0);
    for (int d = 0; d < par.dp; ++d) {
      double slowest = 0;
      for (int st = 0; st < par.pp; ++st) {
        for (int c = 0; c < stage_cp(par, st); ++c) {
          for (int t = 0; t < stage_tp(par, st); ++t) {
            const int type =
                cluster.gpu_type_of(mpmd ? first_gpu[st] + t + stage_tp(par, st) * (c + stage_cp(par, st) * d)
                                         : placement.gpu(RankCoord{t, c, 0, d, st}));
            slowest = std::max(slowest, mpmd ? stage_seconds(st, type) : mb_seconds(type));
          }
        }
      }
      if (slowest > 0) speed[d] = 1.0 / slowest;
    }
    share = balanced_shares(par.global_batch / par.micro_batch, speed, share_rule(par));
  }
  // Uneven CP or Ulysses head shares: each CP rank its own steps and programs on
  // its tokens and heads.
  const int ncp = par.per_cp_rank_programs() ? par.cp : 1;
  std::vector<ParallelSpec> cp_par;  // one CP rank's layout (its share), with the share fixed
  std::vector<ModelSteps> cp_steps;
  if (par.per_cp_rank_programs()) {
    if (par.uneven_cp()) plan.cp_shares = resolved_cp_shares(model, par, train_, platform, placement);
    if (par.uneven_heads())
      plan.head_shares = resolved_head_shares(model, par, train_, platform, placement, plan.cp_shares);
    std::vector<double> compute;  // seconds of a micro-batch's compute per CP rank, on its slowest GPU
    for (int c = 0; c < par.cp; ++c) {
      ParallelSpec one = par;
      one.cp_shares = plan.cp_shares;
      one.cp_shares_auto = false;
      one.head_shares = plan.head_shares;
      one.head_shares_auto = false;
      one.cp_rank = c;
      cp_steps.push_back(build_model_steps(model, one, train_, ep_nodes(one, 0)));
      cp_par.push_back(one);
      compute.push_back(cp_rank_compute_seconds(model, par, cp_steps.back(), platform, placement, c));
    }
    plan.cp_pace_rank = static_cast<int>(std::max_element(compute.begin(), compute.end()) - compute.begin());
  }
  // The CP rank with the largest share: its layout sets the schedule's and the memory check's figures.
  const auto largest_cp =
      static_cast<std::size_t>(std::max_element(plan.cp_shares.begin(), plan.cp_shares.end()) - plan.cp_shares.begin());
  std::vector<int> counts = share;
  if (!std::is_sorted(counts.begin(), counts.end()))
    std::sort(counts.begin(), counts.end());  // even shares come sorted
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  std::vector<int> count_of_replica(par.dp, 0);  // index into counts
  std::vector<int> replicas_of_count(counts.size(), 0);
  for (int d = 0; d < par.dp; ++d) {
    count_of_replica[d] = static_cast<int>(std::lower_bound(counts.begin(), counts.end(), share[d]) - counts.begin());
    ++replicas_of_count[count_of_replica[d]];
  }
  if (par.uneven_shares()) plan.dp_shares = share;
  std::vector<ParallelSpec> count_par;
  std::vector<PipelineSchedule> count_sched;
  std::vector<std::vector<std::vector<int>>> count_receive_posts;
  for (int k : counts) {
    count_par.push_back(par.uneven_shares() ? replica_layout(par, k) : par);
    if (par.uneven_cp()) count_par.back() = cp_par[largest_cp];
    count_sched.push_back(planned_schedule(model, count_par.back(), train_, steps, platform, placement));
    const PipelineSchedule& sched = count_sched.back();
    count_receive_posts.push_back(
        mpmd || ncp > 1 ? std::vector<std::vector<int>>{}
                        : runtime_receive_posts(model, count_par.back(), train_, steps, platform, placement, sched));
    const std::vector<std::string> problems = check_schedule(sched);
    TRAINSIM_CHECK(problems.empty(), "invalid pipeline schedule: " + (problems.empty() ? "" : problems.front()));
    TRAINSIM_CHECK(sched.stages == par.pp,
                   "the schedule has " + std::to_string(sched.stages) + " ranks for pp " + std::to_string(par.pp));
  }
  // The stage facts (layers, memory) come from the largest share's schedule.
  const PipelineSchedule& sched = count_sched.back();
  const int num_counts = static_cast<int>(counts.size());
  plan.flop_convention = "Megatron-LM (Narayanan et al. 2021, eq. 3)";
  plan.throughput_unit = "tokens";
  plan.samples_per_iteration = par.global_batch;
  plan.units_per_iteration = static_cast<double>(par.global_batch) * train_.seq_len;
  plan.checkpoint_bytes = checkpoint_bytes(model, train_);
  plan.peak_dtype = train_.precision;
  if (model.moe.enabled()) {
    const RoutedTokens rt = routed_tokens(model, par, train_);
    plan.expert_rank_tokens = rt.rank_tokens;
    plan.expert_dropped_fraction = rt.dropped_fraction;
  }

  auto tp_of = [&](int s) { return stage_tp(par, s); };
  auto dp_of = [&](int s) { return stage_dp(par, s); };
  auto cp_of = [&](int s) { return stage_cp(par, s); };
  // Traffic matrices of the all-to-all-v steps: the shared steps' first, then each per-stage layout's.
  std::vector<std::uint32_t> matrix_base(par.pp, 0);
  auto add_traffic = [&](const ModelSteps& ms) {
    const auto base = static_cast<std::uint32_t>(plan.setup.traffic.size());
    plan.setup.traffic.insert(plan.setup.traffic.end(), ms.traffic.begin(), ms.traffic.end());
    return base;
  };
  if (mpmd) {
    for (int s = 0; s < par.pp; ++s) matrix_base[s] = add_traffic(stage_steps[s]);
  } else if (ncp > 1) {
    // Every CP rank's steps name the same matrices (its Ulysses group's shares).
    for (const ModelSteps& ms : cp_steps)
      TRAINSIM_CHECK(ms.traffic == cp_steps.front().traffic, "CP ranks disagree on their all-to-all-v bytes");
    add_traffic(cp_steps.front());
  } else {
    add_traffic(steps);
  }
  // Programs: count k's stage s is program k * pp + s (one count without uneven
  // shares); with uneven CP shares, CP rank c's is (k * cp + c) * pp + s.
  std::vector<std::vector<SlotUse>> slots_of_program;
  // Tied embeddings: the ranks of the embedding's chunk and of the (first) LM head's.
  // Per-stage layouts (sub-models, stages of different TP) are not paired: docs/frameworks.md.
  int tied_first = 0, tied_last = 0;
  if (!sched.chunk_stage.empty()) {
    tied_first = sched.chunk_stage.front();
    int head = 0;
    while (sched.next_chunk(head) >= 0) ++head;
    tied_last = sched.chunk_stage[static_cast<std::size_t>(head)];
  }
  for (int kc = 0; kc < num_counts * ncp; ++kc) {
    const int k = kc / ncp, c = kc % ncp;
    for (int s = 0; s < par.pp; ++s) {
      const TransformerSpec& sm = mpmd ? stage_specs[s].model : model;
      // Uneven DP shares with per-stage layouts: the stage's layout at this count.
      const ParallelSpec stage_par =
          mpmd && par.uneven_shares() ? replica_layout(stage_specs[s].par, counts[k]) : ParallelSpec{};
      const ParallelSpec& sp_par = mpmd      ? (par.uneven_shares() ? stage_par : stage_specs[s].par)
                                   : ncp > 1 ? cp_par[c]
                                             : count_par[k];
      const TrainingSpec& st = mpmd ? stage_specs[s].train : train_;
      StageProgramBuilder builder(sm, sp_par, st,
                                  mpmd      ? stage_steps[s]
                                  : ncp > 1 ? cp_steps[c]
                                            : steps,
                                  count_sched[k], s);
      if (mpmd) builder.set_stage_layouts(&links, stage_specs[s].first_stage);
      if (!mpmd && model.tied_embeddings) builder.set_tied_embedding_stages(tied_first, tied_last);
      builder.set_matrix_base(matrix_base[s]);
      if (!seq_steps.empty()) builder.set_sequence_chunks(&seq_steps);
      if (!count_receive_posts[k].empty()) builder.set_receive_posts(&count_receive_posts[k][s]);
      builder.set_pass_templates(options.pass_templates);
      builder.set_pass_marks(options.pass_memo);
      builder.plan_param_prefetch();
      double hw = 0, mf = 0;
      plan.setup.programs.push_back(builder.build(&hw, &mf));
      slots_of_program.push_back(builder.slots());
      const int ranks =
          tp_of(s) * (mpmd && !par.uneven_shares() ? dp_of(s) : replicas_of_count[k]) * (stage_cp(par, s) / ncp);
      plan.hardware_flops += hw * ranks;
      plan.model_flops += mf * ranks;
    }
  }
  const std::vector<std::vector<SlotUse>> slots_of_stage(slots_of_program.begin(), slots_of_program.begin() + par.pp);
  for (int s = 0; s < par.pp; ++s) {
    const TransformerSpec& sm = mpmd ? stage_specs[s].model : model;
    const ParallelSpec& sp_par = mpmd ? stage_specs[s].par : count_par.back();
    const TrainingSpec& st = mpmd ? stage_specs[s].train : train_;
    StagePlan sp;
    for (int c = 0; c < sched.chunks_on(s); ++c)
      sp.layers += sp_par.layers_of_virtual_stage(sched.part_of(sched.virtual_stage(s, c)), sm.layers);
    sp.memory = stage_memory(sm, sp_par, st, sched, s, mpmd ? stage_specs[s].first_stage : 0);
    plan.stages.push_back(sp);
  }

  auto gpu = [&](int s, int d, int c, int t) {
    if (mpmd) return first_gpu[s] + t + tp_of(s) * (c + cp_of(s) * d);
    return placement.gpu(RankCoord{t, c, 0, d, s});
  };
  // gpu() is affine in each coordinate unless the placement lists its GPUs
  // (Placement::rank_index is a sum of coordinate times stride).
  const bool affine_gpus = mpmd || !placement.explicit_gpus();
  // Where it is, a stage's ids are its first GPU plus a step per replica, CP
  // and TP rank: gpu(s, d, c, t) without a call per rank in the scans below.
  struct StageGpus {
    int first = 0, per_replica = 0, per_cp = 0, per_tp = 0;
    int at(int d, int c, int t) const { return first + d * per_replica + c * per_cp + t * per_tp; }
  };
  auto stage_gpus = [&](int s) {
    StageGpus g;
    g.first = gpu(s, 0, 0, 0);
    g.per_replica = gpu(s, 1, 0, 0) - g.first;
    g.per_cp = gpu(s, 0, 1, 0) - g.first;
    g.per_tp = gpu(s, 0, 0, 1) - g.first;
    return g;
  };
  // Per-stage layouts: the replica and TP index of the peer of the rank at
  // replica `d`, CP index `c`, TP index `t` on pipeline link `use` (the rank
  // sits on stage `s`, one end of the link). The rank's messages on the link run
  // over the peer replicas, within each over the peer CP ranks, and within each
  // over the peer TP ranks.
  auto pipeline_peer = [&](const SlotUse& use, int s, int d, int c, int t) {
    const int o = s == use.from ? use.to : use.from;
    const int mine = tp_of(s), other = tp_of(o);
    const int mine_dp = dp_of(s), other_dp = dp_of(o);
    const int mine_cp = cp_of(s), other_cp = cp_of(o);
    const int tp_fan = other >= mine ? other / mine : 1;
    const int cp_fan = other_cp >= mine_cp ? other_cp / mine_cp : 1;
    const int peer_d =
        other_dp >= mine_dp ? d * (other_dp / mine_dp) + use.peer / (tp_fan * cp_fan) : d / (mine_dp / other_dp);
    const int peer_c =
        other_cp >= mine_cp ? c * (other_cp / mine_cp) + use.peer / tp_fan % cp_fan : c / (mine_cp / other_cp);
    const int peer_t = other >= mine ? t * (other / mine) + use.peer % tp_fan : t / (mine / other);
    return std::array<int, 3>{peer_d, peer_c, peer_t};
  };
  // Members of a slot's communicator for the rank at (s, d, c, t), into `m`.
  auto members_into = [&](const SlotUse& use, int s, int d, int c, int t, std::vector<int>& m) {
    m.clear();
    switch (use.role) {
      case SlotRole::TP:
        for (int x = 0; x < tp_of(s); ++x) m.push_back(gpu(s, d, c, x));
        break;
      case SlotRole::CP:
        for (int x = 0; x < cp_of(s); ++x) m.push_back(gpu(s, d, x, t));
        break;
      case SlotRole::CPUlysses:
        for (int x = 0; x < par.cp_ulysses; ++x) m.push_back(gpu(s, d, c / par.cp_ulysses * par.cp_ulysses + x, t));
        break;
      case SlotRole::CPRing:
        for (int x = 0; x < par.cp_ring(); ++x) m.push_back(gpu(s, d, c % par.cp_ulysses + x * par.cp_ulysses, t));
        break;
      case SlotRole::DP: {
        const int n = dp_of(s), ncs = cp_of(s);
        m.reserve(static_cast<std::size_t>(n) * ncs);
        if (affine_gpus) {
          // The same ids as gpu(s, x, y, t), a step per replica and per CP rank
          // (thousands of members at 1M GPUs).
          const int base = gpu(s, 0, 0, t);
          const int step_x = n > 1 ? gpu(s, 1, 0, t) - base : 0, step_y = ncs > 1 ? gpu(s, 0, 1, t) - base : 0;
          m.resize(static_cast<std::size_t>(n) * ncs);
          int* out = m.data();
          if (ncs == 1) {
            for (int x = 0; x < n; ++x) out[x] = base + x * step_x;  // one loop the compiler vectorises
          } else {
            for (int x = 0; x < n; ++x) {
              for (int y = 0; y < ncs; ++y) *out++ = base + x * step_x + y * step_y;
            }
          }
          break;
        }
        for (int x = 0; x < n; ++x) {
          for (int y = 0; y < ncs; ++y) m.push_back(gpu(s, x, y, t));
        }
        break;
      }
      case SlotRole::TiedEmbedding:
        m = {gpu(use.from, d, c, t), gpu(use.to, d, c, t)};
        break;
      case SlotRole::PipelineForward:
      case SlotRole::PipelineBackward:
        if (mpmd) {
          const std::array<int, 3> peer = pipeline_peer(use, s, d, c, t);
          m = s == use.from ? std::vector<int>{gpu(s, d, c, t), gpu(use.to, peer[0], peer[1], peer[2])}
                            : std::vector<int>{gpu(use.from, peer[0], peer[1], peer[2]), gpu(s, d, c, t)};
        } else {
          m = {gpu(use.from, d, c, t), gpu(use.to, d, c, t)};
        }
        break;
      case SlotRole::EP:
      case SlotRole::ETP:
      case SlotRole::EDP: {
        const ExpertCoord e = expert_coord(par, t, c, d);
        const int n = use.role == SlotRole::EP ? par.ep : use.role == SlotRole::ETP ? expert_tp(par) : expert_dp(par);
        for (int x = 0; x < n; ++x) {
          ExpertCoord o = e;
          (use.role == SlotRole::EP ? o.ep : use.role == SlotRole::ETP ? o.etp : o.edp) = x;
          const DenseCoord dc = dense_coord(par, o);
          m.push_back(gpu(s, dc.dp, dc.cp, dc.tp));
        }
        break;
      }
    }
  };
  auto members_of = [&](const SlotUse& use, int s, int d, int c, int t) {
    std::vector<int> m;
    members_into(use, s, d, c, t, m);
    return m;
  };

  // Equivalence classes. A data-parallel replica is "compact" when, on every
  // stage, its ranks share a GPU type and their TP, CP and pipeline
  // communicators time alike (and each stage's DP communicators do): one rank
  // then stands for the replica. Replicas with equal signatures stand for each
  // other. A replica that is not compact (mixed GPU kinds, an irregular
  // group) runs every rank; the compact ones still run one. GPUs that differ
  // only by a slowdown (perturbations) keep a replica compact: its rank on a
  // stage then runs at the pace of the slowest GPU of its TP/CP group, which
  // the group's collectives after every layer impose on all its members.
  // Per-stage layouts: every replica of every stage (stages may differ in dp).
  int max_dp = par.dp;
  for (int s = 0; mpmd && s < par.pp; ++s) max_dp = std::max(max_dp, dp_of(s));
  std::vector<char> replica_simulated(max_dp, 1);
  std::vector<char> replica_compact(max_dp, 0);
  // The slowest GPU type of each (stage, replica) group, for compact ranks.
  std::vector<int> slowest_type(static_cast<std::size_t>(par.pp) * par.dp, -1);
  // Per-stage layouts simulate every rank (their stages differ in TP and sub-model).
  if ((options.representatives || options.group_representatives) && !mpmd) {
    const AnalyticalNetwork& net = platform.analytical_network();
    const double tol = options.equivalence_tolerance;
    std::vector<SlotTransfers> transfers;
    for (const ProgramTemplate& p : plan.setup.programs) transfers.push_back(transfers_by_slot(p));
    // Shifts that leave every shape alone (AnalyticalNetwork::shift_period):
    // with the placement's GPU ids affine in each coordinate, replicas
    // `replica_period` apart have translated communicators, so equal
    // signatures, and so have the DP communicators of stages `stage_period`
    // apart (their transfers may differ: only the shape is shared). Not with
    // expert groups, which span replicas. 0: no shift known, all are computed.
    int replica_period = 0, stage_period = 0;
    if (const int shift = net.shift_period();
        shift > 0 && !placement.explicit_gpus() && !model.moe.enabled() && !par.uneven_shares()) {
      auto period = [shift](long stride) { return shift / std::gcd(shift, static_cast<int>(stride % shift)); };
      if (par.dp > 1) replica_period = period(gpu(0, 1, 0, 0) - gpu(0, 0, 0, 0));
      if (par.pp > 1) stage_period = period(gpu(1, 0, 0, 0) - gpu(0, 0, 0, 0));
    }
    // Shapes of the DP communicators already taken, by (stage % stage_period, t).
    std::map<std::pair<int, int>, CommShape> dp_shapes;
    std::set<std::pair<int, int>> dp_shape_of_first;  // keys whose shape is (s % stage_period, 0)'s, by their nodes
    auto sig = [&](int s, std::size_t slot, int d, int c, int t) {
      const SlotUse& use = slots_of_stage[s][slot];
      TimingSignature timing;
      if (use.role == SlotRole::DP && stage_period > 0) {
        auto [it, fresh] = dp_shapes.try_emplace({s % stage_period, t});
        if (!fresh && cluster.num_gpu_types() == 1) {
          // Shape known and one GPU type (a shift period implies it): the
          // signature needs only the member count, not the 8,192-member list.
          const std::size_t size = static_cast<std::size_t>(dp_of(s)) * par.cp;
          std::vector<int> types;
          types.reserve(size + 1);  // and the slot's role, appended below
          types.assign(size, cluster.base_gpu_type(0));
          timing = timing_signature_of_shape(net, std::move(types), it->second, transfers[s][slot]);
        } else {
          const std::vector<int> members = members_of(use, s, d, c, t);
          if (fresh) it->second = net.shape(members);
          timing = timing_signature(net, cluster, members, transfers[s][slot], &it->second);
        }
      } else {
        timing = timing_signature(net, cluster, members_of(use, s, d, c, t), transfers[s][slot]);
      }
      timing.exact.push_back(static_cast<int>(use.role));
      return timing;
    };
    // A signature reads the members' shape, GPU types and the slot's transfers:
    // with one GPU type and shapes that read members' nodes only, members on
    // the same nodes have the same signature (AnalyticalNetwork::shape_reads_nodes_only).
    const bool nodes_only = net.shape_reads_nodes_only() && cluster.num_gpu_types() == 1;
    // The nodes of the members of the slot's communicator at (s, d, c, t), in member order.
    auto nodes_into = [&](int s, std::size_t slot, int d, int c, int t, std::vector<int>& nodes) {
      members_into(slots_of_stage[s][slot], s, d, c, t, nodes);
      for (int& g : nodes) g = cluster.node_of(g);
    };
    std::vector<int> first_nodes, other_nodes;
    bool dp_uniform = true;
    std::vector<char> uniform(par.dp, 1);
    // Replicas whose signature is computed: beyond the period each equals that
    // of d % replica_period exactly.
    const int computed_replicas = replica_period > 0 ? std::min(par.dp, replica_period) : par.dp;
    // A replica's signature: per stage, its ranks' GPU types and the signature
    // of each of their communicators (each computed once: TP per (d, c), CP per
    // (d, t), pipeline links per rank; DP is shared by all replicas).
    std::vector<TimingSignature> replica_sig(computed_replicas);
    // Replicas that are images of replica 0: where shapes read members' nodes
    // only, a shape reads of its members just which of them share a node and
    // which share a leaf group (AnalyticalNetwork::shape_reads_nodes_only). If
    // a one-to-one map of nodes that maps leaf groups one to one takes every
    // GPU of replica d (all stages, CP and TP ranks) to the GPU of the same
    // rank of replica 0, each TP, CP and pipeline communicator of replica d
    // has the shape of replica 0's, so replica d has replica 0's signature and
    // uniformity, taken without computing them again. (With one GPU type the
    // types in the signature are equal; the DP communicators are shared.)
    std::vector<char> image_of_first(computed_replicas, 0);
    if (nodes_only && !model.moe.enabled() && !par.uneven_shares()) {
      // A set of (from, to) pairs is a one-to-one map.
      auto one_to_one = [](std::vector<std::pair<int, int>>& pairs) {
        std::sort(pairs.begin(), pairs.end());
        pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
        for (std::size_t i = 1; i < pairs.size(); ++i)
          if (pairs[i].first == pairs[i - 1].first) return false;
        std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
        for (std::size_t i = 1; i < pairs.size(); ++i)
          if (pairs[i].second == pairs[i - 1].second) return false;
        return true;
      };
      std::vector<std::pair<int, int>> node_pairs, leaf_pairs;
      for (int d = 1; d < computed_replicas; ++d) {
        node_pairs.clear();
        leaf_pairs.clear();
        for (int s = 0; s < par.pp; ++s) {
          const StageGpus ids = affine_gpus ? stage_gpus(s) : StageGpus{};
          for (int c = 0; c < par.cp; ++c) {
            for (int t = 0; t < par.tp; ++t) {
              const int from = cluster.node_of(affine_gpus ? ids.at(d, c, t) : gpu(s, d, c, t));
              const int to = cluster.node_of(affine_gpus ? ids.at(0, c, t) : gpu(s, 0, c, t));
              // The ranks of a node come one after another: a pair just listed is left out.
              if (!node_pairs.empty() && node_pairs.back() == std::pair{from, to}) continue;
              node_pairs.emplace_back(from, to);
              leaf_pairs.emplace_back(net.leaf_group_of_node(from), net.leaf_group_of_node(to));
            }
          }
        }
        image_of_first[d] = one_to_one(node_pairs) && one_to_one(leaf_pairs) ? 1 : 0;
      }
    }
    for (int s = 0; s < par.pp; ++s) {
      const auto& slots = slots_of_stage[s];
      for (std::size_t k = 0; k < slots.size(); ++k) {
        if (slots[k].role != SlotRole::DP) continue;
        const TimingSignature first = sig(s, k, 0, 0, 0);
        bool first_dp_nodes = false;
        for (int t = 1; t < par.tp && dp_uniform; ++t) {
          // The DP communicator of another TP rank on the nodes of the first
          // one's (each node holds whole TP groups): its shape is the first
          // one's, taken without a pass over its members.
          if (nodes_only && stage_period > 0 && !dp_shapes.contains({s % stage_period, t})) {
            if (!first_dp_nodes) nodes_into(s, k, 0, 0, 0, first_nodes);
            first_dp_nodes = true;
            nodes_into(s, k, 0, 0, t, other_nodes);
            if (other_nodes == first_nodes) {
              dp_shapes[{s % stage_period, t}] = dp_shapes.at({s % stage_period, 0});
              dp_shape_of_first.insert({s % stage_period, t});
            }
          }
          // With the first one's shape (and one GPU type, which nodes_only
          // implies) its signature is the first one's: the same member count,
          // types, shape and transfers; not built again from 8,192 members.
          if (nodes_only && stage_period > 0 && dp_shape_of_first.contains({s % stage_period, t})) continue;
          dp_uniform = same_timing(sig(s, k, 0, 0, t), first, tol);
        }
      }
      const StageGpus ids = affine_gpus ? stage_gpus(s) : StageGpus{};
      for (int d = 0; d < computed_replicas; ++d) {
        TimingSignature& rs = replica_sig[d];
        if (par.uneven_shares() && s == 0) rs.exact.push_back(share[d]);  // its own programs
        const int type0 = cluster.gpu_type_of(affine_gpus ? ids.at(d, 0, 0) : gpu(s, d, 0, 0));
        for (int c = 0; c < par.cp; ++c) {
          for (int t = 0; t < par.tp; ++t) {
            const int type = cluster.gpu_type_of(affine_gpus ? ids.at(d, c, t) : gpu(s, d, c, t));
            // Slowdown windows change a GPU's pace within the iteration, so a
            // group mixing them with other GPUs runs every member.
            const bool windowed =
                !cluster.gpu_type(type).slowdown_windows.empty() || !cluster.gpu_type(type0).slowdown_windows.empty();
            uniform[d] = uniform[d] && cluster.base_gpu_type(type) == cluster.base_gpu_type(type0) &&
                         (!windowed || type == type0);
            int& slow = slowest_type[static_cast<std::size_t>(s) * par.dp + d];
            if (slow < 0 || cluster.gpu_type(type).slowdown > cluster.gpu_type(slow).slowdown) slow = type;
            rs.exact.push_back(type);
          }
        }
        if (image_of_first[d]) continue;  // its communicators' signatures: replica 0's, below
        for (std::size_t k = 0; k < slots.size(); ++k) {
          const SlotRole role = slots[k].role;
          if (role == SlotRole::DP) continue;
          const int nc = role == SlotRole::CP ? 1 : par.cp;  // a CP group spans c, a TP group spans t
          const int nt = role == SlotRole::TP ? 1 : par.tp;
          TimingSignature first;
          for (int c = 0; c < nc; ++c) {
            for (int t = 0; t < nt; ++t) {
              if (c == 0 && t == 0) {
                first = sig(s, k, d, c, t);
                if (nodes_only) nodes_into(s, k, d, c, t, first_nodes);
                append(rs, first);
                continue;
              }
              if (nodes_only) {
                // Another rail on the same nodes (a pipeline link's TP ranks): the first signature again.
                nodes_into(s, k, d, c, t, other_nodes);
                if (other_nodes == first_nodes) {
                  append(rs, first);
                  continue;
                }
              }
              const TimingSignature g = sig(s, k, d, c, t);
              uniform[d] = uniform[d] && same_timing(g, first, tol);
              append(rs, g);
            }
          }
        }
      }
    }
    for (int d = 1; d < computed_replicas; ++d) {
      if (!image_of_first[d]) continue;
      replica_sig[d] = replica_sig[0];
      uniform[d] = uniform[d] && uniform[0];
    }
    for (int s = 0; s < par.pp; ++s) {
      // Replica d takes replica d % computed_replicas's, period by period.
      int* row = slowest_type.data() + static_cast<std::size_t>(s) * par.dp;
      for (int d = computed_replicas; d < par.dp; d += computed_replicas) {
        std::copy_n(row, std::min(computed_replicas, par.dp - d), row + d);
      }
    }
    // A replica is simulated unless an earlier simulated one times alike. One
    // beyond the period has the signature of d % replica_period, an earlier
    // replica that is a representative or times like one: it is covered.
    std::vector<int> representatives;
    for (int d = 0; d < par.dp; ++d) {
      bool covered = d >= computed_replicas;
      if (covered) uniform[d] = uniform[d % computed_replicas];
      for (std::size_t i = 0; i < representatives.size() && !covered; ++i) {
        covered = same_timing(replica_sig[d], replica_sig[representatives[i]], tol);
      }
      replica_simulated[d] = covered && options.representatives ? 0 : 1;
      if (!covered) representatives.push_back(d);
      replica_compact[d] = dp_uniform && uniform[d] && ncp == 1 ? 1 : 0;  // uneven CP: each CP rank its program
    }
  }

  CommunicatorRegistry registry(&plan.setup.comms);
  std::vector<char> gpu_simulated(cluster.num_gpus(), 0);
  plan.recorded_rank_of_stage.assign(par.pp, -1);
  // The simulated replicas, in order (a few of thousands at scale).
  std::vector<int> simulated_replicas;
  for (int d = 0; d < max_dp; ++d) {
    if (replica_simulated[d] && (options.simulated_replicas <= 0 || d < options.simulated_replicas))
      simulated_replicas.push_back(d);
  }
  for (int s = 0; s < par.pp; ++s) {
    const std::string where = "[stage " + std::to_string(s) + "]";
    const int dps = dp_of(s);
    for (const int d : simulated_replicas) {
      if (d >= dps) break;
      const int cps = replica_compact[d] ? 1 : cp_of(s);
      const int tps = replica_compact[d] || options.first_tp_rank_only ? 1 : tp_of(s);
      for (int c = 0; c < cps; ++c) {
        for (int t = 0; t < tps; ++t) {
          RankProgram rp;
          const int program =
              ((mpmd && !par.uneven_shares() ? 0 : count_of_replica[d]) * ncp + (ncp > 1 ? c : 0)) * par.pp + s;
          rp.program = static_cast<std::uint32_t>(program);
          rp.gpu = gpu(s, d, c, t);
          if (replica_compact[d]) rp.gpu_type = slowest_type[static_cast<std::size_t>(s) * par.dp + d];
          rp.name = "stage " + std::to_string(s) + " (dp " + std::to_string(d) + ", cp " + std::to_string(c) + ", tp " +
                    std::to_string(t) + ", gpu " + std::to_string(rp.gpu) + ")";
          rp.record = plan.recorded_rank_of_stage[s] < 0;
          for (const SlotUse& use : slots_of_program[program]) {
            std::string role, name;
            switch (use.role) {
              case SlotRole::TP:
                role = "tp", name = "tp group " + where;
                break;
              case SlotRole::CP:
                role = "cp", name = "cp group " + where;
                break;
              case SlotRole::CPUlysses:
                role = "cp.ulysses", name = "cp ulysses group " + where;
                break;
              case SlotRole::CPRing:
                role = "cp.ring", name = "cp ring group " + where;
                break;
              case SlotRole::DP:
                role = "dp", name = "dp group " + where;
                break;
              case SlotRole::PipelineForward:
                role = "pp.fwd";
                name = "pipeline link stage " + std::to_string(use.from) + "->" + std::to_string(use.to);
                break;
              case SlotRole::PipelineBackward:
                role = "pp.bwd";
                name =
                    "pipeline link stage " + std::to_string(use.from) + "->" + std::to_string(use.to) + " (gradients)";
                break;
              case SlotRole::EP:
                role = "ep", name = "ep group " + where;
                break;
              case SlotRole::ETP:
                role = "etp", name = "expert tp group " + where;
                break;
              case SlotRole::EDP:
                role = "edp", name = "expert dp group " + where;
                break;
              case SlotRole::TiedEmbedding:
                role = "pp.tied";
                name = "tied embedding group stages " + std::to_string(use.from) + "," + std::to_string(use.to);
                break;
            }
            rp.comm_of_slot.push_back(registry.get(role, members_of(use, s, d, c, t), name));
          }
          if (rp.record) plan.recorded_rank_of_stage[s] = static_cast<int>(plan.setup.ranks.size());
          gpu_simulated[rp.gpu] = 1;
          plan.stage_of_rank.push_back(s);
          plan.setup.ranks.push_back(std::move(rp));
        }
      }
    }
  }
  for (Communicator& cm : plan.setup.comms) {
    for (int g : cm.members) cm.simulated_members += gpu_simulated[g];
  }
  // The GPU types of every rank of each stage, simulated or not (mixed fleets: the report names them).
  for (int s = 0; s < par.pp; ++s) {
    if (cluster.num_gpu_types() == 1) {  // no need to visit every GPU
      plan.stages[s].gpu_types = {0};
      continue;
    }
    std::set<int> types;
    for (int d = 0; d < dp_of(s); ++d) {
      for (int c = 0; c < cp_of(s); ++c) {
        for (int t = 0; t < tp_of(s); ++t) types.insert(cluster.gpu_type_of(gpu(s, d, c, t)));
      }
    }
    plan.stages[s].gpu_types.assign(types.begin(), types.end());
  }
  return plan;
}

TrainingPlan plan_training(const TransformerSpec& model, const ParallelSpec& par, const TrainingSpec& train,
                           const Cluster& cluster, const PlanOptions& options,
                           const std::vector<CalibrationProfile>& profiles) {
  std::vector<CalibrationProfile> by_type = profiles;
  if (by_type.empty()) {
    for (int t = 0; t < cluster.num_gpu_types(); ++t) {
      CalibrationProfile p;
      p.gpu = cluster.gpu_type(t).name;
      p.scaleup.busbw_efficiency.value = p.network.busbw_efficiency.value = 1.0;
      by_type.push_back(std::move(p));
    }
  }
  const Platform platform(cluster.spec(), by_type);
  return TransformerWorkload(model, par, train).plan(platform, Placement::of(par), options);
}

}  // namespace trainsim
