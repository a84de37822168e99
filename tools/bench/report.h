// What flashattn-bench prints: the table on stdout, the JSON file, and the machine it ran on.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "runner.h"

namespace flashattn::bench {

struct RunInfo {
  std::string device;               // GPU name, or "cpu: <model>" when only the host ran
  std::optional<int> sm_clock_mhz;  // peak SM clock; none for the host backend
  std::string host;                 // CPU model
  std::string date;                 // ISO-8601 UTC
  std::string command;
  uint64_t seed = 0;
};

std::string cpu_model();      // "model name" from /proc/cpuinfo
std::string utc_timestamp();  // 2025-01-31T12:34:56Z
std::string gpu_name(int device);
std::optional<int> gpu_sm_clock_mhz(int device);

std::string format_tflops(double tflops);
void print_table_header(std::FILE* out);
// The row, then indented lines for the check result and any error.
void print_table_row(std::FILE* out, const Record& rec);

// Writes the whole file (called after every record, so that a cut-off sweep keeps its results).
bool write_json(const std::string& path, const RunInfo& info, const std::vector<Record>& records);

}  // namespace flashattn::bench
