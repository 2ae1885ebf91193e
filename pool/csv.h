#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pool/pool.h"

namespace shardplan {

// A buffer table in MiniMalloc's CSV format (src/converter.cc): header `id,lower,upper,size`
// with optional `alignment` and `offset` columns; `lower`/`upper` is the half-open live
// range [lower, upper). Aliases: `buffer`/`buffer_id` for id, `start`/`begin` for lower,
// `end` for an inclusive last step (upper = end + 1). Reading stops at the first empty
// line, as MiniMalloc's does, but only blank lines may follow it: rows after it would be
// silently dropped there, so here they are an error naming them. An input `offset`
// column is read as a previous placement and replaced on output.
struct PoolTable {
  std::vector<std::string> header;             // as read (offset column dropped)
  std::vector<std::vector<std::string>> rows;  // fields as read, same columns as header
  std::vector<PoolRequest> requests;
};

// Every error names `label`, the line and the column: a missing or unknown column, a
// field that is not an integer, size ≤ 0, lower ≥ upper, alignment ≤ 0, a duplicate id,
// the wrong number of fields, rows after an empty line.
PoolTable parse_pool_csv(std::string_view text, const std::string& label);
PoolTable read_pool_csv(const std::string& path);

// The table with an `offset` column appended.
std::string format_pool_csv(const PoolTable& table, const std::vector<int64_t>& offsets);

// The table as read: header and rows, no offsets.
std::string format_pool_csv(const PoolTable& table);

// A table for requests made in code (ids 0..n-1; an alignment column when any request
// has its own alignment).
PoolTable make_pool_table(const std::vector<PoolRequest>& requests);

}  // namespace shardplan
