// The dispatch report: for every node, how it runs on the device, and why.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/shape.hpp"

namespace rlx {

enum class Route { Native, CommonIR, Rewritten, HostStaged, Unsupported };
const char* route_name(Route r);  // "native", "common-ir", "rewritten", "host-staged", "unsupported"

enum class Policy { PreferNative, ForceCommonIR, Strict, AllowHost };
const char* policy_name(Policy p);  // "prefer-native", "force-common-ir", "strict", "allow-host"
Policy policy_from_name(const std::string& s);  // throws InputError naming the valid ones

struct NodeReport {
  int32_t id = -1;
  std::string op;
  std::string level;  // "L1", "L2", "Lib"
  std::vector<std::string> dtypes;
  Shape shape;
  std::string location;
  Route route = Route::Unsupported;
  std::string rule;  // for rewritten
  int64_t bytes_staged = 0;
  int64_t bytes_comm = 0;  // a collective's bytes moved between processes per call (this rank's)
  std::string why;
};

// Nodes the schedule merged into one device kernel beyond elementwise fusion (a matmul
// with its bias epilogue), so the report says where a node's work went.
struct KernelReport {
  std::string kind;  // "matmul_epilogue"
  std::string what;  // "bias", "bias+relu"
  std::vector<int32_t> nodes;  // L2 node ids (the program's graph)
  std::vector<std::string> ops;
  std::string location;  // the first node's
};

struct DispatchReport {
  std::string device;
  std::string policy;
  bool compile_ready = false;
  std::vector<NodeReport> nodes;
  std::vector<KernelReport> kernels;  // filled by compile() after scheduling
  int64_t count(Route r) const;
  std::string table() const;
  std::string json() const;
};

class LegalizeError : public Error {
 public:
  explicit LegalizeError(DispatchReport r);
  const DispatchReport& report() const { return report_; }

 private:
  DispatchReport report_;
};

}  // namespace rlx
