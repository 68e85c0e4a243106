#pragma once

// What happens to an hvd::Error that nobody catches.
//
// Without help, an uncaught exception ends the process through std::terminate -> abort(): exit 134
// and, under Open MPI, a signal report with a backtrace per rank that buries the one line that
// matters. hvd::init() therefore installs a terminate handler with this policy: when the exception
// that is ending the process is an hvd::Error, print "hvd: rank R: <what()>" once on stderr, wait
// half a second (so that the other ranks, which usually fail with the same error in the same
// cycle, can print theirs before mpirun ends the job) and exit with status 1. Any other reason to
// terminate goes to the handler that was installed before (by default: abort()).
//
// The policy is the program's to change: a program that installs its own handler with
// std::set_terminate() after hvd::init() replaces hvd's, and HVD_TERMINATE_HANDLER=0 keeps hvd from
// installing one (hvd::init() does not call this then). Installing is idempotent; the handler lives
// for the whole process.

namespace hvd::detail {

void install_terminate_handler(int rank);

}  // namespace hvd::detail
