#pragma once

// A double as messages show it: printf's %g (6 significant digits, no trailing zeros: 0.5, 30,
// 1e-05). One spelling for every setting and factor an error message or a log line quotes.

#include <cstdio>
#include <string>

namespace hvd {

inline std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace hvd
