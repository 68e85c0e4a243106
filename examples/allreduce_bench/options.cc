#include "options.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace allreduce_bench {
namespace {

using hvd::DataType;
using hvd::ReduceOp;

constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                                  DataType::kInt64,   DataType::kInt8,    DataType::kUInt8,
                                  DataType::kFloat16, DataType::kBFloat16};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kAverage};

std::vector<DataType> parse_types(const std::string& flag, const std::string& v) {
  if (v == "all") return {std::begin(kAllTypes), std::end(kAllTypes)};
  if (v == "float32") return {DataType::kFloat32};
  if (v == "float64") return {DataType::kFloat64};
  if (v == "float16") return {DataType::kFloat16};
  for (DataType t : kAllTypes) {
    if (v == type_name(t)) return {t};
  }
  throw std::invalid_argument(flag + " '" + v +
                              "' is not a datatype: use float, double, int32, int64, int8, uint8, "
                              "half, bfloat16 or all");
}

std::vector<ReduceOp> parse_ops(const std::string& flag, const std::string& v) {
  if (v == "all") return {std::begin(kAllOps), std::end(kAllOps)};
  for (ReduceOp op : kAllOps) {
    if (v == op_name(op)) return {op};
  }
  throw std::invalid_argument(flag + " '" + v +
                              "' is not a reduce op: use sum, prod, min, max, avg or all");
}

int64_t parse_int(const std::string& flag, const std::string& v, int64_t min, int64_t max) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < min || x > max) {
    throw std::invalid_argument(flag + " needs an integer in [" + std::to_string(min) + ", " +
                                std::to_string(max) + "], got '" + v + "'");
  }
  return x;
}

}  // namespace

double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5)];
}

int64_t parse_size(const std::string& flag, const std::string& text) {
  std::string digits = text;
  int shift = 0;
  if (!digits.empty()) {
    switch (std::toupper(static_cast<unsigned char>(digits.back()))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      default:
        break;
    }
    if (shift != 0) digits.pop_back();
  }
  const int64_t n = parse_int(flag, digits, 0, std::numeric_limits<int64_t>::max() >> 31);
  if (digits.empty()) {
    throw std::invalid_argument(flag + " needs a size such as 1024, 4K, 64M or 1G, got '" + text +
                                "'");
  }
  return n << shift;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "-h" || flag == "--help") {
      o.help = true;
      return o;
    }
    if (flag == "--inject-wrong") {
      o.inject_wrong = true;
      continue;
    }
    if (flag == "--grouped") {
      o.grouped = true;
      continue;
    }
    if (flag == "--interleaved") {
      o.interleaved = true;
      continue;
    }
    if (const auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw std::invalid_argument(flag + " needs a value (see --help)");
    }
    if (flag == "-b" || flag == "--minbytes") {
      o.min_bytes = parse_size(flag, value);
    } else if (flag == "-e" || flag == "--maxbytes") {
      o.max_bytes = parse_size(flag, value);
    } else if (flag == "-f" || flag == "--stepfactor") {
      o.step_factor = parse_int(flag, value, 2, 1 << 20);
    } else if (flag == "-d" || flag == "--datatype") {
      o.dtypes = parse_types(flag, value);
    } else if (flag == "-o" || flag == "--op") {
      o.ops = parse_ops(flag, value);
    } else if (flag == "-n" || flag == "--iters") {
      o.iters = static_cast<int>(parse_int(flag, value, 1, 1 << 30));
    } else if (flag == "-w" || flag == "--warmup_iters") {
      o.warmup = static_cast<int>(parse_int(flag, value, 0, 1 << 30));
    } else if (flag == "--compression") {
      o.compressions.clear();
      std::string rest = value;
      while (true) {
        const auto comma = rest.find(',');
        const std::string c = rest.substr(0, comma);
        if (c != "none" && c != "fp16" && c != "bf16")
          throw std::invalid_argument(flag + " '" + value +
                                      "' is not a list of compressions: use none, fp16 or bf16, "
                                      "comma-separated (none,fp16,bf16)");
        o.compressions.push_back(c);
        if (comma == std::string::npos) break;
        rest = rest.substr(comma + 1);
      }
    } else if (flag == "--placement") {
      if (value != "out" && value != "in" && value != "both")
        throw std::invalid_argument(flag + " '" + value +
                                    "' is not a placement: use out (in -> out), in (in place, "
                                    "input == output) or both");
      o.out_of_place = value != "in";
      o.in_place = value != "out";
    } else if (flag == "--gap-us") {
      o.gap_us = parse_int(flag, value, 0, 10'000'000);
      o.interleaved = o.interleaved || o.gap_us > 0;
    } else if (flag == "--tensors") {
      o.tensors = static_cast<int>(parse_int(flag, value, 1, 1 << 20));
    } else {
      throw std::invalid_argument("unknown flag '" + flag + "' (see --help)");
    }
  }
  if (o.interleaved && o.tensors < 2 && o.gap_us == 0)
    throw std::invalid_argument(
        "--interleaved compares hvd with the hand-fused call, which needs --tensors K > 1");
  if (o.min_bytes > o.max_bytes) {
    throw std::invalid_argument("-b/--minbytes " + std::to_string(o.min_bytes) +
                                " is larger than -e/--maxbytes " + std::to_string(o.max_bytes));
  }
  return o;
}

std::string usage(const char* program) {
  return std::string("usage: mpirun -np N ") + program +
         " [-b minbytes] [-e maxbytes] [-f stepfactor] [-d datatype] [-o op]\n"
         "          [-n iters] [-w warmup_iters] [--tensors K] [--grouped] [--inject-wrong]\n"
         "          [--compression none,fp16,bf16] [--placement out|in|both] [--interleaved]\n"
         "          [--gap-us G]\n"
         "  -b, --minbytes SIZE      smallest message per tensor (default 32M; K/M/G suffixes)\n"
         "  -e, --maxbytes SIZE      largest message per tensor (default 32M)\n"
         "  -f, --stepfactor N       multiply the size by N between rows (default 2)\n"
         "  -d, --datatype T         float double int32 int64 int8 uint8 half bfloat16 all\n"
         "                           (default float)\n"
         "  -o, --op OP              sum prod min max avg all (default sum)\n"
         "  -n, --iters N            timed iterations per row (default 20)\n"
         "  -w, --warmup_iters N     untimed iterations before them (default 5)\n"
         "      --tensors K          K tensors of the size per iteration, submitted with\n"
         "                           allreduce_async and then waited on (default 1)\n"
         "      --grouped            hvd submits the K tensors in one grouped_allreduce_async\n"
         "                           call per iteration instead of K allreduce_async calls\n"
         "      --inject-wrong       corrupt one value of hvd's result on rank 0: the run must\n"
         "                           then report #wrong > 0 and exit 1 (tests the checker)\n"
         "      --compression LIST   measure hvd once per HVD_COMPRESSION value in LIST (none,\n"
         "                           fp16, bf16, comma-separated), in this process; adds a table\n"
         "                           of times and bytes written to sockets, relative to the first\n"
         "                           (default: once, HVD_COMPRESSION as in the environment)\n"
         "      --placement P        out: in -> out, the inputs stay (default); in: in place, the\n"
         "                           result overwrites the input (hvd with input == output, MPI\n"
         "                           with MPI_IN_PLACE); both: each row both ways\n"
         "      --interleaved        then -n pairs of one hvd iteration and one hand-fused one\n"
         "                           (a barrier before each; needs --tensors K > 1), and a table\n"
         "                           of the median of the pairs' hvd/hand-fused ratios: steadier\n"
         "                           than the table's ratio where the machine's speed drifts\n"
         "      --gap-us G           the --interleaved pairs, each side after a sleep of up to G\n"
         "                           us (as a trainer's compute between steps: the same U[0,G] on\n"
         "                           every rank plus U[0,G/16] of its own), with p99 columns; "
         "with\n"
         "                           --tensors 1 against one raw MPI_Allreduce (default 0: none)\n"
         "Exit status: 0 all values right, 1 some value wrong, 2 bad usage, 3 hvd or MPI error.\n";
}

std::vector<int64_t> sweep_sizes(const Options& o) {
  std::vector<int64_t> sizes;
  for (int64_t s = o.min_bytes; s <= o.max_bytes;) {
    sizes.push_back(s);
    if (s == 0) {
      s = 1;
    } else if (s > o.max_bytes / o.step_factor) {
      break;
    } else {
      s *= o.step_factor;
    }
  }
  return sizes;
}

const char* type_name(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return "float";
    case DataType::kFloat64:
      return "double";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kInt8:
      return "int8";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kFloat16:
      return "half";
    case DataType::kBFloat16:
      return "bfloat16";
  }
  return "?";
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProduct:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAverage:
      return "avg";
  }
  return "?";
}

}  // namespace allreduce_bench
