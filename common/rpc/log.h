// Log: one line per significant event, "<UTC time> <component>: <message>", written to stderr
// with a single write so lines from different threads do not interleave. Thread-safe.
#pragma once

#include <string>

namespace rlmesh::rpc {

// printf-style; a trailing newline in the message is not needed (one is added).
void Log(const char* component, const char* format, ...) __attribute__((format(printf, 2, 3)));

// The line Log() would write, without writing it (for tests and for other sinks).
std::string FormatLogLine(const char* component, const std::string& message);

}  // namespace rlmesh::rpc
