// Built against the installed package: hvd::init() initialises MPI itself here.
#include <hvd/hvd.h>

#include <cstdio>
#include <vector>

int main() {
  hvd::init();
  std::vector<double> v(5, hvd::rank() + 1.0);
  hvd::allreduce(v, "consumer.v", hvd::ReduceOp::kSum);
  const double want = hvd::size() * (hvd::size() + 1) / 2.0;
  int bad = 0;
  for (double x : v) bad += x != want;
  std::vector<int> all = hvd::allgather(std::vector<int>{bad}, "consumer.bad");
  int total = 0;
  for (int b : all) total += b;
  if (hvd::rank() == 0)
    std::printf("consumer: %d ranks %s (hvd %s)\n", hvd::size(), total == 0 ? "OK" : "WRONG",
                hvd::version_string());
  int size = hvd::size();
  hvd::shutdown();
  return total == 0 && size > 0 ? 0 : 1;
}
