// trainsim-mpi-sweep: the points of one sweep spread over MPI ranks.
// Rank r runs shard r+1 of N (the same split as `trainsim sweep --shard`),
// rank 0 gathers every rank's rows and writes one result file, identical to
// a single-process `trainsim sweep` run of the whole sweep.
#include <mpi.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "tools/frontend/catalog.hpp"
#include "tools/frontend/cli.hpp"
#include "tools/frontend/sweep.hpp"

namespace {

int run(int rank, int size, const std::string& sweep_path, const std::string& out_path, int threads) {
  using namespace trainsim;
  std::string rows_text;
  int ok = 1;
  try {
    const Catalog catalog = load_builtin_catalog();
    const SweepSpec spec = load_sweep_file(sweep_path, catalog);
    if (spec.verify) {
      throw InputError({Diagnostic{sweep_path, "/verify",
                                   "verification re-ranks the best points of the whole sweep; run it with "
                                   "`trainsim sweep` (the MPI sweep runs shards)"}});
    }
    const SweepPlan plan = expand_sweep(spec, catalog);
    if (rank == 0) std::cerr << sweep_summary(spec, plan);
    const Shard shard = parse_shard(std::to_string(rank + 1) + "/" + std::to_string(size));
    const auto rows = run_sweep(shard_points(plan.points, shard), threads, spec, catalog);
    rows_text = format_sweep_rows(sweep_rows_json(rows, plan), SweepFormat::Jsonl);
  } catch (const InputError& e) {
    if (rank == 0) std::cerr << e.what() << "\n";
    ok = 0;
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all_ok == 0) return 2;

  // Gather the JSONL text of every rank on rank 0.
  int length = static_cast<int>(rows_text.size());
  std::vector<int> lengths(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < size; ++r) {
      offsets[static_cast<std::size_t>(r)] = total;
      total += lengths[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(rows_text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  if (rank != 0) return 0;
  try {
    std::vector<std::pair<std::string, std::string>> parts;
    for (int r = 0; r < size; ++r) {
      parts.emplace_back("rank " + std::to_string(r),
                         all.substr(static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]),
                                    static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])));
    }
    const SweepMerge merged = merge_sweep_texts(parts);
    write_sweep_rows(out_path, merged.rows);
    std::cout << "gathered " << merged.rows.size() << " of " << merged.points << " points from " << size
              << " ranks into " << out_path << "\n";
    std::cout << top_k_table(merged.rows, 10, "tokens_per_s");
  } catch (const InputError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  trainsim::keep_freed_memory();
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int code = 2;
  if (argc < 4 || std::string(argv[2]) != "--out") {
    if (rank == 0)
      std::cerr << "usage: mpirun -n N trainsim-mpi-sweep SWEEP.json --out RESULTS.(csv|jsonl) [-j THREADS]\n";
  } else {
    const int threads = argc >= 6 && std::string(argv[4]) == "-j" ? std::max(1, std::atoi(argv[5])) : 1;
    code = run(rank, size, argv[1], argv[3], threads);
  }
  MPI_Finalize();
  return code;
}
