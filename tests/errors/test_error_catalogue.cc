// docs/errors.md is the specification of hvd's messages (tests/support/error_catalogue.h reads it).
// Here, without MPI: every row's template is well formed and unique, none repeats a prefix, and the
// GPU device messages (cluster/gpu_assignment.cc), which a CPU machine can reach only in part,
// match their rows as the runtime composes them. tests/errors/test_validation.cc matches every
// argument error that the runtime emits against the same rows.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "cluster/env_resolver.h"
#include "cluster/gpu_assignment.h"
#include "cluster/hostfile.h"
#include "hvd/error.h"
#include "tests/support/error_catalogue_gtest.h"
#include "tests/support/test_util.h"

namespace hvdtest {
namespace {

using hvd::Device;

// How the runtime reports a rank's own bad argument: rank 0 prefixes the reason (api.cc puts it in
// the request's error field; runtime/controller.cc, build_response()).
std::string as_reported(const std::string& op, const std::string& name, int rank,
                        const std::string& reason) {
  return op + " of '" + name + "' failed: rank " + std::to_string(rank) + ": " + reason;
}

hvd::cluster::GpuAssignment assign(int local_rank, int local_size, int visible,
                                   std::map<std::string, std::string> env = {}) {
  return hvd::cluster::assign_gpu({local_rank, local_size, visible},
                                  [env](const std::string& k) -> std::optional<std::string> {
                                    auto it = env.find(k);
                                    if (it == env.end()) return std::nullopt;
                                    return it->second;
                                  });
}

TEST(ErrorCatalogue, EveryRowIsAWellFormedTemplate) {
  const auto& rows = catalogue();
  ASSERT_GT(rows.size(), 40u) << "docs/errors.md lost its rows?";
  for (const auto& r : rows) {
    EXPECT_FALSE(r.templ.empty()) << "line " << r.line;
    // A '<' that does not open a placeholder would be taken literally: keep templates unambiguous.
    for (size_t i = r.templ.find('<'); i != std::string::npos; i = r.templ.find('<', i + 1)) {
      const size_t end = r.templ.find('>', i);
      EXPECT_NE(end, std::string::npos)
          << "line " << r.line << ": unclosed '<' in `" << r.templ << "`";
    }
  }
}

TEST(ErrorCatalogue, NoTwoRowsHaveTheSameTemplate) {
  std::map<std::string, int> seen;
  for (const auto& r : catalogue()) {
    auto [it, inserted] = seen.emplace(r.templ, r.line);
    EXPECT_TRUE(inserted) << "lines " << it->second << " and " << r.line
                          << " have the same template `" << r.templ << "`";
  }
}

TEST(ErrorCatalogue, NoRowRepeatsAPrefix) {
  for (const auto& r : catalogue())
    EXPECT_EQ(repeated_prefix(r.templ), "") << "line " << r.line << ": `" << r.templ << "`";
}

// The detector itself: the message of issue 9 (6b) repeated its own prefix.
TEST(ErrorCatalogue, RepeatedPrefixIsDetected) {
  EXPECT_EQ(
      repeated_prefix(
          "allreduce of 'x' failed: rank 0: allreduce of 'x' failed: the tensor is on cuda:0 but "
          "this process has no CUDA device: ..."),
      "allreduce of 'x' failed:");
  EXPECT_EQ(repeated_prefix(
                "hvd: rank 1: allreduce of 'x' failed: rank 0: the input has 4 elements but a null "
                "data pointer."),
            "rank 1:");
  EXPECT_EQ(
      repeated_prefix(
          "allreduce of 'x' failed: rank 1 sent shape [3], rank 0 sent [4]. Every rank must pass "
          "the same shape for 'x'."),
      "");
}

TEST(ErrorCatalogue, TemplatesMatchTheirOwnExamples) {
  // A few messages written out in full, as the runtime emits them: each matches exactly one row.
  for (const std::string& m : {
           std::string("allreduce of 'fc1.weight' failed: rank 2 sent shape [128,64], rank 0 sent "
                       "[128,32]. Every "
                       "rank must pass the same shape for 'fc1.weight'."),
           std::string("allgather of 'x' failed: rank 1 sent shape [3,5], rank 0 sent [3,4]. Only "
                       "the first "
                       "dimension may differ between ranks for allgather."),
           std::string("allreduce of 'x' failed: rank 1 called allgather, rank 0 called allreduce. "
                       "Every rank must "
                       "call the same collective for 'x'."),
           std::string("allreduce of 'g.0' failed: rank 0: output 0 has 4 elements but a null data "
                       "pointer."),
           std::string("broadcast of 'x' failed: rank 0: root 5 is out of range for 3 ranks: pass "
                       "a root from 0 to "
                       "2."),
           std::string("hvd::rank() called before hvd::init(): call hvd::init() first."),
           std::string("this hvd::Handle is empty: it was default-constructed, not returned by a "
                       "collective."),
       })
    EXPECT_EQ(catalogue_mismatch(catalogue(), m), "");
}

// Issue 9 (6b): a CUDA tensor on the wrong device, as every rank reports it.
TEST(ErrorCatalogue, CudaTensorOnAProcessWithoutAGpu) {
  const auto a = assign(0, 2, 0, {{"CUDA_VISIBLE_DEVICES", ""}});
  ASSERT_EQ(a.device, -1);
  const std::string reason = hvd::cluster::cuda_tensor_problem(a, Device::cuda(0));
  ASSERT_FALSE(reason.empty());
  EXPECT_EQ(reason.rfind("the tensor is on cuda:0 but this process has no CUDA device: ", 0), 0u)
      << reason;
  const std::string m = as_reported("allreduce", "x", 0, reason);
  EXPECT_EQ(repeated_prefix(m), "") << m;
  EXPECT_EQ(catalogue_mismatch(catalogue(), m), "");
  EXPECT_EQ(hvd::cluster::cuda_tensor_problem(a, Device::cpu()), "");
}

TEST(ErrorCatalogue, CudaTensorOnAnotherRanksGpu) {
  const auto a = assign(1, 4, 4, {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}});
  ASSERT_EQ(a.device, 1);
  EXPECT_EQ(hvd::cluster::cuda_tensor_problem(a, Device::cuda(1)), "");
  const std::string reason = hvd::cluster::cuda_tensor_problem(a, Device::cuda(3));
  EXPECT_EQ(reason.rfind("the tensor is on cuda:3 but this process was given cuda:1 ", 0), 0u)
      << reason;
  const std::string m = as_reported("broadcast", "w", 1, reason);
  EXPECT_EQ(repeated_prefix(m), "") << m;
  EXPECT_EQ(catalogue_mismatch(catalogue(), m), "");
}

// check_cuda_tensor() (the throwing form, for callers outside the runtime) says it once too.
TEST(ErrorCatalogue, CheckCudaTensorSaysItsPrefixOnce) {
  const auto a = assign(0, 1, 0);
  try {
    hvd::cluster::check_cuda_tensor(a, Device::cuda(0), "allreduce of 'w'");
    ADD_FAILURE() << "a CUDA tensor without a device must fail";
  } catch (const hvd::InvalidArgumentError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("allreduce of 'w' failed: the tensor is on cuda:0 but this process has no "
                      "CUDA device: ",
                      0),
              0u)
        << m;
    EXPECT_EQ(repeated_prefix(m), "") << m;
  }
}

// Issue 39 (6): a bad host name, as each path that reads host names reports it, matches its row
// (hvdrun prints it after "hvdrun: error: "); so do hvdrun's --output-filename messages
// (tests/launcher/test_launcher_cli.cc checks that hvdrun says exactly these).
TEST(ErrorCatalogue, HostNameErrorsOfEveryPath) {
  using hvd::cluster::parse_host_spec;
  std::vector<std::string> messages;
  for (const std::string bad : {"node1;id", "-n1", "a..b", "10.0.0.256", "[1:::2]"}) {
    messages.push_back(error_of([&] { parse_host_spec("ok," + bad + ":2"); }));
    messages.push_back(
        error_of([&] { hvd::cluster::parse_hostfile(bad + " slots=2\n", "h.txt"); }));
    if (bad[0] == '[') continue;  // brackets are SLURM's ranges
    messages.push_back(error_of([&] {
      hvd::cluster::slurm_allocation(fake_env({{"SLURM_JOB_ID", "1"},
                                               {"SLURM_JOB_NODELIST", "n1," + bad},
                                               {"SLURM_TASKS_PER_NODE", "1(x2)"}}));
    }));
  }
  messages.push_back("--output-filename needs a directory, e.g. --output-filename logs.");
  messages.push_back(
      "hvdrun: error: cannot create the --output-filename directory '/x/y': Permission denied.");
  for (const std::string& m : messages) {
    ASSERT_FALSE(m.empty());
    EXPECT_EQ(catalogue_mismatch(catalogue(), m), "");
  }
}

}  // namespace
}  // namespace hvdtest
