#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shardplan {

// A torchtitan model flavour (torchtitan/models/<name>/__init__.py @238fa99) and the zoo
// model with its shape.
struct TorchtitanFlavour {
  std::string_view name;    // [model] name
  std::string_view flavor;  // [model] flavor
  std::string_view zoo;     // shardplan's model
};

std::optional<TorchtitanFlavour> torchtitan_flavour(std::string_view name, std::string_view flavor);
// The flavour torchtitan calls a zoo model (the first, for emit).
std::optional<TorchtitanFlavour> torchtitan_flavour_of(std::string_view zoo);
std::string torchtitan_flavour_list();

}  // namespace shardplan
