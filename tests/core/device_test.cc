#include "tower/core/device.h"

#include <gtest/gtest.h>

#include "tower/core/error.h"

namespace tower {

TEST(DeviceTest, ParsePrintRoundTrip) {
  for (const char* text : {"cpu:0", "cpu:7", "cuda:0", "cuda:12"})
    EXPECT_EQ(Device::parse(text).to_string(), text);
  EXPECT_EQ(Device::parse("cpu"), (Device{DeviceKind::cpu, 0}));
  EXPECT_EQ(Device::parse("gpu:1"), (Device{DeviceKind::cuda, 1}));
}

TEST(DeviceTest, BadStringsAreClearErrors) {
  for (const char* text : {"tpu:0", "cpu:", "cpu:x", "cpu:-1", "cpu:1x", ""}) {
    try {
      Device::parse(text);
      FAIL() << "expected an error for '" << text << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + text + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(DeviceTest, DeviceList) {
  auto devices = parse_device_list("cpu:0,cpu:1");
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1].to_string(), "cpu:1");
  EXPECT_THROW(parse_device_list("cpu:0,,cpu:1"), Error);
  EXPECT_THROW(parse_device_list("cpu:0,cpu:0"), Error);
}

TEST(DeviceTest, SplitCores) {
  EXPECT_EQ(split_cores(2, 1), (std::vector<int>{2}));
  EXPECT_EQ(split_cores(2, 2), (std::vector<int>{1, 1}));
  EXPECT_EQ(split_cores(5, 2), (std::vector<int>{3, 2}));
  EXPECT_EQ(split_cores(2, 4), (std::vector<int>{1, 1, 1, 1}));  // oversubscribed: one each
  EXPECT_THROW(split_cores(2, 0), Error);
}

TEST(DeviceTest, CpuInfoAndCudaDiscoveryNeverFail) {
  EXPECT_GE(cpu_info().num_cores, 1);
  auto gpus = cuda_devices();  // empty without a driver; must not throw
  for (auto& g : gpus) EXPECT_FALSE(g.name.empty());
}

}  // namespace tower
