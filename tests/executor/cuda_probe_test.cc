#include "executor/cuda_probe.h"

#include <gtest/gtest.h>

#include "models/error.h"

namespace shardplan {
namespace {

TEST(CudaProbe, ReportsWhatItWasBuiltWith) {
  const CudaProbe probe = probe_cuda();
  if (!probe.compiled) {
    EXPECT_EQ(probe.device_count, 0);
    EXPECT_NE(probe.device_error.find("without the CUDA backend"), std::string::npos);
    return;
  }
  EXPECT_GE(probe.runtime_version, 11000) << "CUDA runtime version as major*1000 + minor*10";
  EXPECT_GE(probe.nccl_version, 21000) << "NCCL version code";
  EXPECT_GE(probe.cublas_version, 110000);
}

TEST(CudaProbe, NoDeviceIsAClearError) {
  const CudaProbe probe = probe_cuda();
  if (probe.device_count > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(probe.device_error.empty());
  try {
    require_cuda_device();
    FAIL() << "expected an error without a device";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "--backend cuda");
    EXPECT_EQ(e.reason().rfind("no CUDA device: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace shardplan
