#include "runtime/host_function.hpp"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/error.hpp"
#include "runtime/kernel_table.hpp"

namespace rlx {

namespace {

struct Entry {
  std::string name;
  std::shared_ptr<const HostFn> fn;
};

void identity(std::span<const Tensor> in, Tensor& out) {
  if (in.size() != 1 || in[0].dtype() != out.dtype() || in[0].shape() != out.shape())
    throw InputError("host function 0 (identity) takes one input of the result's type (" +
                     TensorType{out.dtype(), out.shape()}.str() + ")");
  if (out.nbytes()) std::memcpy(out.raw(), in[0].raw(), out.nbytes());
}

// The live functions by id. Ids are never reused in a process, so a program that outlives
// its function fails by name instead of calling whatever took the id next.
struct Registry {
  std::mutex mu;
  std::map<int64_t, Entry> live;
  int64_t next = 1;
  Registry() { live[0] = {"identity", std::make_shared<const HostFn>(identity)}; }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: functions may unregister during exit
  return *r;
}

}  // namespace

HostFunction::HostFunction(std::string name, HostFn fn) : name_(std::move(name)) {
  if (!fn) throw InputError("host function '" + name_ + "': no callable");
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  id_ = r.next++;
  r.live[id_] = {name_, std::make_shared<const HostFn>(std::move(fn))};
}

HostFunction::~HostFunction() {
  if (id_ < 1) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.live.erase(id_);
}

HostFunction::HostFunction(HostFunction&& o) noexcept : id_(o.id_), name_(std::move(o.name_)) { o.id_ = -1; }

HostFunction& HostFunction::operator=(HostFunction&& o) noexcept {
  if (this != &o) {
    HostFunction gone(std::move(*this));  // unregisters this one's function
    id_ = o.id_;
    name_ = std::move(o.name_);
    o.id_ = -1;
  }
  return *this;
}

void call_host_function(int64_t id, std::span<const Tensor> in, Tensor& out) {
  std::shared_ptr<const HostFn> fn;
  std::string name;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    auto it = r.live.find(id);
    if (it == r.live.end())
      throw InputError("host function " + std::to_string(id) + " is not registered in this process (its HostFunction "
                       "was destroyed, or the program came from elsewhere)");
    fn = it->second.fn;
    name = it->second.name;
  }
  // The callable runs outside the lock: it may register or call other host functions.
  std::vector<Tensor> args;
  args.reserve(in.size());
  for (const Tensor& t : in) args.push_back(t.is_contiguous() ? t : t.contiguous());
  try {
    (*fn)(args, out);
  } catch (const InputError& e) {
    throw InputError("host function " + std::to_string(id) + " '" + name + "': " + e.what());
  }
}

void add_host_call_kernel(KernelTable& t) {
  t.add({"host_call", kAllButI4, -1,
         [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
           call_host_function(n.attrs.get_int("fn"), in, out[0]);
         },
         {}});
}

}  // namespace rlx
