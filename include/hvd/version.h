#pragma once

// hvd's version. HVD_VERSION is MAJOR*10000 + MINOR*100 + PATCH so it compares as a number.
#define HVD_VERSION_MAJOR 0
#define HVD_VERSION_MINOR 1
#define HVD_VERSION_PATCH 0
#define HVD_VERSION (HVD_VERSION_MAJOR * 10000 + HVD_VERSION_MINOR * 100 + HVD_VERSION_PATCH)

namespace hvd {
// "0.1.0"
const char* version_string();
}  // namespace hvd
