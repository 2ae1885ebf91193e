#include "models/parallel.h"

#include "models/name_table.h"

namespace shardplan {
namespace {

constexpr NameTable<CpComm, 3> kCpComms = {{
    {CpComm::p2p, "p2p"},
    {CpComm::all_gather, "all_gather"},
    {CpComm::a2a, "a2a"},
}};
constexpr NameTable<MeshAxis, 5> kAxes = {{{MeshAxis::tp, "tp"},
                                           {MeshAxis::cp, "cp"},
                                           {MeshAxis::ep, "ep"},
                                           {MeshAxis::etp, "etp"},
                                           {MeshAxis::ep_etp, "ep_etp"}}};
constexpr NameTable<MoeDispatcher, 4> kDispatchers = {{{MoeDispatcher::alltoall, "alltoall"},
                                                       {MoeDispatcher::allgather, "allgather"},
                                                       {MoeDispatcher::deepep, "deepep"},
                                                       {MoeDispatcher::hybridep, "hybridep"}}};

}  // namespace

std::string_view cp_comm_name(CpComm c) {
  return name_of(kCpComms, c);
}
std::optional<CpComm> parse_cp_comm(std::string_view text) {
  return value_of(kCpComms, text);
}
std::vector<std::string> cp_comm_names() {
  return names_of(kCpComms);
}
std::string_view moe_dispatcher_name(MoeDispatcher d) {
  return name_of(kDispatchers, d);
}
std::optional<MoeDispatcher> parse_moe_dispatcher(std::string_view text) {
  return value_of(kDispatchers, text);
}
std::vector<std::string> moe_dispatcher_names() {
  return names_of(kDispatchers);
}
std::string_view mesh_axis_name(MeshAxis a) {
  return name_of(kAxes, a);
}

}  // namespace shardplan
