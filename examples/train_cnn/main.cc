// train_cnn: data-parallel training of a CNN on Fashion-MNIST with hvd.
//
//   mpirun -np 4 train_cnn                       # 5 epochs, 4 replicas x batch 64, lr x4
//   mpirun -np 2 train_cnn --epochs 1 --checkpoint-dir ckpt
//   mpirun -np 2 train_cnn --checkpoint-dir ckpt             # again: resumes where it stopped
//   mpirun -np 2 train_cnn --benchmark --synthetic
//
// docs/train_cnn.md describes the flags, the output, the metrics file and measured results.
// Exit status: 0 done, 1 a failure during the run, 2 a bad command line, 75 (hvd::kExitRequeue)
// stopped on a signal (--stop-signals) and saved: run the same command again to continue, 70 a
// rank was lost (hvd's peer-loss exit). Errors print one line per rank on stderr
// ("train_cnn: error on rank R: ...").

#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <string>

#include "flags.h"
#include "hvd/hvd.h"
#include "trainer.h"

namespace {

// The rank the launcher gave this process, known before hvd::init() (only to print --help once).
int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return 0;
}

void report(const std::string& where, const std::exception& e) {
  std::fflush(stdout);
  std::fprintf(stderr, "train_cnn: error%s: %s\n", where.c_str(), e.what());
  std::fflush(stderr);
}

}  // namespace

int main(int argc, char** argv) {
  train_cnn::ParsedFlags parsed;
  try {
    parsed = train_cnn::parse_flags(argc, argv);
  } catch (const std::exception& e) {
    // Every rank parses the same argv, so every rank stops here alike, before any communication.
    report("", e);
    return 2;
  }
  if (parsed.help) {
    if (launcher_rank() == 0) std::printf("%s", parsed.help_text.c_str());
    return 0;
  }

  // The GPU step queues everything on the model's stream (trainer.cc), so the gradients'
  // all-reduces may complete once queued: the host goes on queueing the optimizer step and the next
  // batch while the GPU reduces, instead of waiting for it (docs/gpu.md, "Async completion"). A
  // value the user set, 0 or 1, in either spelling, is kept. CPU tensors are not affected.
  if (parsed.flags.device != "cpu" && !std::getenv("HVD_ENABLE_ASYNC_COMPLETION") &&
      !std::getenv("HOROVOD_ENABLE_ASYNC_COMPLETION"))
    setenv("HVD_ENABLE_ASYNC_COMPLETION", "1", 0);
  try {
    hvd::init();
  } catch (const std::exception& e) {
    report(" (hvd::init)", e);
    return 1;
  }
  const std::string where = " on rank " + std::to_string(hvd::rank());
  int status = 0;
  try {
    train_cnn::Trainer trainer(parsed.flags);
    const train_cnn::TrainSummary sum = trainer.run();
    // Stopped on a signal at an agreed step: saved, please requeue (hvd/stop.h); without a
    // --checkpoint-dir nothing was saved, a failure.
    if (sum.stopped) status = parsed.flags.checkpoint_dir.empty() ? 1 : hvd::kExitRequeue;
  } catch (const train_cnn::AllRanksError& e) {
    // Every rank raised it at the same point: hvd can still be shut down together.
    report(where, e);
    status = 1;
  } catch (const std::exception& e) {
    // Possibly this rank alone: a collective shutdown could wait for ranks that never come.
    // Exit at once; mpirun then stops the other ranks.
    report(where, e);
    std::_Exit(1);
  }
  // Stopped and saved: a stop signal that comes now (the launcher's second SIGTERM, another rank's
  // own signal a moment later) asks for what is already happening. Ignored until exit, so that it
  // cannot turn the saved, requeueable exit 75 into a kill while the ranks shut down together (the
  // trainer's handlers went with it).
  if (status == hvd::kExitRequeue)
    for (int sig : parsed.flags.stop_signals) std::signal(sig, SIG_IGN);
  try {
    hvd::shutdown();
  } catch (const std::exception& e) {
    report(where + " (hvd::shutdown)", e);
    status = 1;
  }
  return status;
}
