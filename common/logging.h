#pragma once

// Logging: one line per message, "[2026-11-22 04:41:07.123] [hvd rank 3] WARNING file.cc:42: text",
// warnings and errors to stderr, the rest to stdout. The level (HVD_LOG_LEVEL) and the rank are
// process-wide settings, set once by the runtime at init(); they are atomics, so logging from any
// thread is safe. This is the one piece of process-wide state besides the Runtime itself.

#include <sstream>
#include <string>

namespace hvd {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarning, kError };

LogLevel parse_log_level(const std::string& name);  // "trace".."error"; throws on others
const char* log_level_name(LogLevel level);         // "trace".."error" (HVD_LOG_LEVEL's spelling)
void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_rank(int rank);
bool log_enabled(LogLevel level);

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

}  // namespace hvd

namespace hvd {
// Turns `stream << ...` into void, so HVD_LOG can sit in a ?: expression (no dangling else).
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace hvd

#define HVD_LOG(level)                           \
  !::hvd::log_enabled(::hvd::LogLevel::k##level) \
      ? (void)0                                  \
      : ::hvd::LogVoidify() &                    \
            ::hvd::LogMessage(::hvd::LogLevel::k##level, __FILE__, __LINE__).stream()
