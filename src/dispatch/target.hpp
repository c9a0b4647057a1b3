// What the dispatch contract asks of a device: its name and a capability predicate over
// op, dtypes, shapes and attributes. runtime/device.hpp's Device is one (it adds
// allocation and running); legalization and the coverage matrix need no more than this.
#pragma once
#include <string>
#include <utility>

#include "ir/graph.hpp"

namespace rlx {

struct Capability {
  bool ok = false;
  std::string why;  // when !ok: what the device lacks ("no c64 matmul kernel")
  static Capability yes() { return {true, {}}; }
  static Capability no(std::string why) { return {false, std::move(why)}; }
};

class Target {
 public:
  virtual ~Target() = default;
  virtual std::string name() const = 0;
  // May this device run node n natively? Called only for compute ops (not param,
  // constant, reshape, while, if).
  virtual Capability supports(const ir::Node& n, const ir::Graph& g) const = 0;
};

}  // namespace rlx
