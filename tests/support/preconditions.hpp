// Boost.Test preconditions for cases that need something this build or machine may lack:
// such a case is reported as skipped, with the reason, instead of passing without checks.
#pragma once
#include <boost/test/unit_test.hpp>
#include <string>

#include "io/hdf5.hpp"
#include "runtime/device.hpp"

namespace rlx::test {

// The cuda device is built and a usable GPU is present.
struct GpuPresent {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    const std::string why = DeviceRegistry::get().at("cuda").unavailable();
    boost::test_tools::assertion_result r(why.empty());
    r.message() << "no usable GPU here: " << why;
    return r;
  }
};

// rlx was built with HDF5.
struct Hdf5Present {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    boost::test_tools::assertion_result r(io::hdf5_available());
    r.message() << "built without HDF5";
    return r;
  }
};

}  // namespace rlx::test
