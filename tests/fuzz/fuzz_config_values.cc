// libFuzzer target: the HVD_* value parsers (common/config.h: parse_bool, parse_int,
// parse_double, parse_enum) with fuzzed values, bounds and choices.
//
// Properties checked:
//  - a rejection is hvd::Error whose message names the variable;
//  - parse_int: the result lies in [min, max] and its decimal form parses to itself;
//  - parse_double: the result is finite, lies in [min, max] and its %.17g form parses to itself;
//  - parse_bool: the result does not depend on case or surrounding blanks;
//  - parse_enum: the result is one of the choices, equal to the value ignoring case and blanks.

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <string>
#include <vector>

#include "common/config.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

const std::string kWhat = "HVD_FUZZ_VARIABLE";

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// Runs body; an hvd::Error must name the variable (and then counts as a rejection).
template <class F>
void named(F&& body) {
  hvd::fuzz::guarded([&] {
    try {
      body();
    } catch (const hvd::Error& e) {
      HVD_FUZZ_CHECK(std::string(e.what()).find(kWhat) != std::string::npos,
                     std::string("message does not name the variable: ") + e.what());
      throw;
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: {
      std::string value = in.ConsumeRemainingBytesAsString();
      named([&] {
        bool b = hvd::parse_bool(kWhat, value);
        std::string upper = value;
        for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        HVD_FUZZ_CHECK(hvd::parse_bool(kWhat, " " + upper + "\t") == b, "'" + value + "'");
      });
      break;
    }
    case 1: {
      int64_t a = in.ConsumeIntegral<int64_t>(), b = in.ConsumeIntegral<int64_t>();
      int64_t lo = std::min(a, b), hi = std::max(a, b);
      if (in.ConsumeBool()) lo = 0;  // the registry's usual lower bound
      std::string value = in.ConsumeRemainingBytesAsString();
      if (lo > hi) break;
      named([&] {
        int64_t x = hvd::parse_int(kWhat, value, lo, hi);
        HVD_FUZZ_CHECK(x >= lo && x <= hi, std::to_string(x));
        HVD_FUZZ_CHECK(hvd::parse_int(kWhat, std::to_string(x), lo, hi) == x, std::to_string(x));
      });
      break;
    }
    case 2: {
      double a = in.ConsumeFloatingPoint<double>(), b = in.ConsumeFloatingPoint<double>();
      double lo = std::min(a, b), hi = std::max(a, b);
      if (in.ConsumeBool()) lo = 0;
      std::string value = in.ConsumeRemainingBytesAsString();
      if (!(lo <= hi)) break;
      named([&] {
        double x = hvd::parse_double(kWhat, value, lo, hi);
        HVD_FUZZ_CHECK(std::isfinite(x) && x >= lo && x <= hi, std::to_string(x));
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", x);
        HVD_FUZZ_CHECK(hvd::parse_double(kWhat, buf, lo, hi) == x, buf);
      });
      break;
    }
    default: {
      std::vector<std::string> choices(in.ConsumeIntegralInRange<int>(0, 5));
      for (auto& c : choices) c = in.ConsumeRandomLengthString(12);
      std::string value = in.ConsumeRemainingBytesAsString();
      named([&] {
        std::string r = hvd::parse_enum(kWhat, value, choices);
        HVD_FUZZ_CHECK(std::find(choices.begin(), choices.end(), r) != choices.end(), r);
        HVD_FUZZ_CHECK(lower(r) == lower(trim(value)), "'" + r + "' for '" + value + "'");
      });
      break;
    }
  }
  return 0;
}
