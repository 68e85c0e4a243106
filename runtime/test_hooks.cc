#include "runtime/test_hooks.h"

#include <cstdio>

namespace hvd {

TestHooks test_hooks_from_config(const Config& config) {
  TestHooks h;
  {
    int r = -1;
    double seconds = 0;
    long at = 0;
    const std::string& v = config.test_pause_background;
    if (!v.empty() && std::sscanf(v.c_str(), "%d:%lf:%ld", &r, &seconds, &at) == 3 && seconds > 0) {
      h.pause_rank = r;
      h.pause_seconds = seconds;
      h.pause_cycle = at;
    }
  }
  {
    int r = -1;
    long n = -1;
    const std::string& v = config.test_stop_in_op;
    if (!v.empty() && std::sscanf(v.c_str(), "%d:%ld", &r, &n) == 2 && n > 0) {
      h.stop_rank = r;
      h.stop_batch = n;
    }
  }
  h.fake_local_size = static_cast<int>(config.test_fake_local_size);
  h.op_delay_us = config.test_op_delay_us;
  return h;
}

}  // namespace hvd
