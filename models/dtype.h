#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shardplan {

// Element types of parameters, gradients and activations.
enum class DType { fp32, bf16, fp16, fp8_e4m3, fp8_e5m2 };

int64_t dtype_bytes(DType dtype);
std::string_view dtype_name(DType dtype);  // "fp32", "bf16", ...

// Parses a dtype name; accepts the canonical names and the PyTorch spellings
// ("float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2") and "fp8" (= e4m3).
// Throws InputError naming `file` and `field` on anything else.
DType parse_dtype(std::string_view text, const std::string& file, const std::string& field);

}  // namespace shardplan
