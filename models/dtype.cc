#include "models/dtype.h"

#include <array>
#include <utility>
#include <vector>

#include "models/error.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

struct DTypeName {
  std::string_view name;
  DType dtype;
};

constexpr std::array<DTypeName, 11> kNames = {{
    {"fp32", DType::fp32},
    {"bf16", DType::bf16},
    {"fp16", DType::fp16},
    {"fp8_e4m3", DType::fp8_e4m3},
    {"fp8_e5m2", DType::fp8_e5m2},
    {"fp8", DType::fp8_e4m3},
    {"float32", DType::fp32},
    {"bfloat16", DType::bf16},
    {"float16", DType::fp16},
    {"float8_e4m3fn", DType::fp8_e4m3},
    {"float8_e5m2", DType::fp8_e5m2},
}};

}  // namespace

int64_t dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::fp32:
      return 4;
    case DType::bf16:
    case DType::fp16:
      return 2;
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  for (const DTypeName& entry : kNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "?";
}

DType parse_dtype(std::string_view text, const std::string& file, const std::string& field) {
  for (const DTypeName& entry : kNames) {
    if (entry.name == text) return entry.dtype;
  }
  std::vector<std::string> valid;
  for (std::size_t i = 0; i < 5; ++i) valid.emplace_back(kNames[i].name);
  throw InputError(file, field, unknown_name_message("dtype", text, valid));
}

}  // namespace shardplan
