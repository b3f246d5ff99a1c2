// seq1F1B (Sun et al., arXiv:2406.03488): 1F1B over the sequence chunks of each
// micro-batch, backwards of a micro-batch from its last chunk to its first.
// Bubble and activations in flight on the unit-level model by hand, and the
// chunks' attention work against the whole micro-batch's.
#include <doctest/doctest.h>

#include "model_fixtures.hpp"
#include "models/layer_steps.hpp"
#include "models/schedule.hpp"
#include "models/schedule_timing.hpp"

using namespace trainsim;
using namespace trainsim::testing;

TEST_CASE("seq1f1b: valid, backwards of a micro-batch from its last chunk, and 1F1B at one chunk") {
  for (int pp : {1, 2, 4, 8}) {
    for (int k : {1, 2, 4}) {
      for (int m : {1, 3, 8}) {
        CAPTURE(pp);
        CAPTURE(k);
        CAPTURE(m);
        const PipelineSchedule s = seq1f1b_schedule(pp, m, k);
        CHECK(check_schedule(s).empty());
        CHECK(s.microbatches == m * k);
        // The first backward of every rank is micro-batch 0's last chunk.
        for (const auto& units : s.units) {
          for (const ScheduleUnit& u : units) {
            if (u.kind != UnitKind::Backward) continue;
            CHECK(u.microbatch == k - 1);
            break;
          }
        }
      }
    }
  }
  CHECK(seq1f1b_schedule(4, 8, 1).units == builtin_schedule(ScheduleKind::OneFOneB, 4, 8, 1).units);
}

TEST_CASE("seq1f1b: the bubble shrinks k-fold, (p-1)(T_F+T_B)/k, and rank 0 holds (p+k-1)/k micro-batches") {
  // Uniform passes: a chunk of a micro-batch takes 1/k of its forward and backward.
  const double TF = 1, TB = 2;
  for (int pp : {2, 4, 8}) {
    for (int k : {1, 2, 4}) {
      const int m = 16;
      CAPTURE(pp);
      CAPTURE(k);
      PassTimes t;
      t.forward = TF / k;
      t.backward_input = TB / k;
      t.backward_weight = 0;
      const ScheduleTiming timing = time_schedule(seq1f1b_schedule(pp, m, k), t);
      CHECK(timing.makespan == doctest::Approx(m * (TF + TB) + (pp - 1) * (TF + TB) / k));
      // Activations: one unit holds 1/k of a micro-batch's.
      const double peak = peak_activation_bytes(seq1f1b_schedule(pp, m, k), 0, [k](int) {
        return ChunkActivation{1.0 / k, 0.0};
      });
      CHECK(peak == doctest::Approx(static_cast<double>(pp + k - 1) / k));
    }
  }
}

TEST_CASE("seq1f1b: the chunks' attention adds up to the micro-batch's, later chunks costing more") {
  const TransformerSpec m = fixture_model("llama3-8b");
  ParallelSpec par;
  par.pp = 2;
  par.schedule = ScheduleKind::Seq1F1B;
  par.seq_chunks = 4;
  TrainingSpec train;
  train.seq_len = 32768;
  auto core = [&](const ModelSteps& s) {
    for (const Step& st : s.of(LayerKind::Dense).forward) {
      if (st.name == "attn.core") return st;
    }
    FAIL("no attention step");
    return Step{};
  };
  const Step whole = core(build_model_steps(m, par, train));
  double exec = 0, model = 0, previous = 0;
  for (int j = 0; j < par.seq_chunks; ++j) {
    const Step c = core(build_model_steps(m, par, train, {}, SequenceChunk{j, par.seq_chunks}));
    CHECK(c.op.flops > previous);  // chunk j attends to j+1 chunks of keys
    previous = c.op.flops;
    exec += c.op.flops;
    model += c.model_flops;
  }
  CHECK(exec == doctest::Approx(whole.op.flops));
  CHECK(model == doctest::Approx(whole.model_flops));
}
