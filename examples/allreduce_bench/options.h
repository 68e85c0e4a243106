#pragma once

// Command-line options of allreduce_bench, in the manner of nccl-tests:
//   -b/--minbytes SIZE  -e/--maxbytes SIZE  -f/--stepfactor N   sizes min, min*N, ... up to max
//   -d/--datatype T     float double int32 int64 int8 uint8 half bfloat16, or all
//   -o/--op OP          sum prod min max avg, or all
//   -n/--iters N        timed iterations per size      -w/--warmup_iters N   untimed ones before
//   --tensors K         K tensors of the size per iteration (async, then waited on)
//   --grouped           hvd submits the K tensors in one grouped_allreduce_async call
//   --inject-wrong      corrupt one value of hvd's result on rank 0 (tests the checker)
//   --compression LIST  run hvd once per HVD_COMPRESSION value (none,fp16,bf16) in this process
//   --placement P       out (in -> out), in (in place: input == output) or both
//   --interleaved       also times hvd and the hand-fused call in alternating iterations
//   --gap-us G          the same pairs, each side after a "compute" gap of up to G us (K = 1:
//                       against one raw MPI_Allreduce)
// SIZE is a byte count with an optional K, M or G suffix (powers of 1024).

#include <cstdint>
#include <string>
#include <vector>

#include <hvd/tensor.h>

namespace allreduce_bench {

struct Options {
  int64_t min_bytes = 32ll << 20;
  int64_t max_bytes = 32ll << 20;
  int64_t step_factor = 2;
  std::vector<hvd::DataType> dtypes{hvd::DataType::kFloat32};
  std::vector<hvd::ReduceOp> ops{hvd::ReduceOp::kSum};
  int iters = 20;
  int warmup = 5;
  int tensors = 1;
  bool grouped = false;  // --grouped: one grouped_allreduce_async of the K tensors per iteration
  // --placement: each row out of place (allreduce_async(in, out), MPI_Allreduce(in, out)) and/or
  // in place (allreduce_async(buf, buf), MPI_Allreduce(MPI_IN_PLACE, buf)); at least one is true.
  bool out_of_place = true;
  bool in_place = false;
  bool inject_wrong = false;
  // --interleaved: after the table's runs, pairs of iterations (one of hvd, one of the hand-fused
  // call, a barrier before each), and per row the median of the pairs' ratios: a machine whose
  // speed drifts between the table's separate runs drifts less within a pair. Needs --tensors > 1.
  bool interleaved = false;
  // --gap-us: the pairs (--interleaved, implied) with a sleep after each barrier, as a trainer's
  // compute between two steps: the same U[0, G] us on every rank, plus U[0, G/16] us of its own
  // (ranks never arrive together). The background thread's timed cycles then run between steps,
  // as in training. With --tensors 1 the pair's other side is one raw MPI_Allreduce. 0: no gap.
  int64_t gap_us = 0;
  // --compression: HVD_COMPRESSION values, hvd measured once per value (init/shutdown in between);
  // empty: once, with the environment as it is.
  std::vector<std::string> compressions;
  bool help = false;  // --help was given: print usage() and exit 0
};

// Parses argv. Throws std::invalid_argument naming the flag, the value and what is accepted.
Options parse_options(int argc, char** argv);
std::string usage(const char* program);

// The value at fraction q of the sorted v (nearest rank); 0 for an empty v.
double quantile(const std::vector<double>& sorted, double q);

// "64M" -> 67108864. Throws std::invalid_argument on anything but digits and one K/M/G suffix.
int64_t parse_size(const std::string& flag, const std::string& text);

// The message sizes of the sweep: min, min*f, min*f^2, ... while <= max (0 is followed by 1).
std::vector<int64_t> sweep_sizes(const Options& o);

// nccl-tests spellings: "float", "double", "int32", "int64", "int8", "uint8", "half", "bfloat16".
const char* type_name(hvd::DataType dtype);
// "sum", "prod", "min", "max", "avg".
const char* op_name(hvd::ReduceOp op);

}  // namespace allreduce_bench
