#include "models/dtype.h"

#include <array>
#include <utility>
#include <vector>

#include "models/error.h"
#include "models/name_table.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

// The canonical name of each dtype first; after them, the aliases a file may use
// (PyTorch's names).
constexpr std::size_t kCanonical = 5;
constexpr NameTable<DType, 11> kNames = {{
    {DType::fp32, "fp32"},
    {DType::bf16, "bf16"},
    {DType::fp16, "fp16"},
    {DType::fp8_e4m3, "fp8_e4m3"},
    {DType::fp8_e5m2, "fp8_e5m2"},
    {DType::fp8_e4m3, "fp8"},
    {DType::fp32, "float32"},
    {DType::bf16, "bfloat16"},
    {DType::fp16, "float16"},
    {DType::fp8_e4m3, "float8_e4m3fn"},
    {DType::fp8_e5m2, "float8_e5m2"},
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
  return name_of(kNames, dtype);
}

DType parse_dtype(std::string_view text, const std::string& file, const std::string& field) {
  if (auto dtype = value_of(kNames, text)) return *dtype;
  std::vector<std::string> valid;
  for (std::size_t i = 0; i < kCanonical; ++i) valid.emplace_back(kNames[i].second);
  throw InputError(file, field, unknown_name_message("dtype", text, valid));
}

}  // namespace shardplan
