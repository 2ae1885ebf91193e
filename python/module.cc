// The Python module `shardplan`: the CLI's commands in-process. Each function takes one
// dict (the request: python/requests.h) and returns the object `shardplan <command>
// --json` prints, as dicts and lists. Bad input raises shardplan.Error (a ValueError) with
// the CLI's message and the InputError's file, field and reason; any other C++ exception
// raises RuntimeError("shardplan internal error: ...").
//
// Both directions go through JSON text (Python's json module on one side, nlohmann on the
// other), so the values are exactly those the CLI reads and prints. The C++ work runs
// with the GIL released.
#include <pybind11/pybind11.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli/commands.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "python/requests.h"

namespace py = pybind11;

namespace shardplan {
namespace {

// A command on a request already read into JSON: what it prints with --json.
using Command = std::function<std::string(const nlohmann::json& request)>;

template <typename Params>
Command command(Params (*read)(const nlohmann::json&), int (*run)(const Params&, std::ostream&)) {
  return [read, run](const nlohmann::json& request) {
    const Params params = read(request);
    std::ostringstream out;
    if (const int code = run(params, out); code != 0)
      throw std::runtime_error("the command exited with status " + std::to_string(code));
    return out.str();
  };
}

std::string sweep_command(const nlohmann::json& request) {
  const SweepParams params = sweep_request(request);
  std::ostringstream out, progress;  // progress is drawn only on a terminal's stderr
  if (const int code = run_sweep(params, out, progress); code != 0)
    throw std::runtime_error("the command exited with status " + std::to_string(code));
  return out.str();
}

std::string type_name(const py::handle& object) {
  return py::str(py::type::of(object).attr("__name__")).cast<std::string>();
}

[[noreturn]] void raise_input_error(const InputError& error) {
  const py::object error_type = py::module_::import("shardplan").attr("Error");
  py::object instance = error_type(error.what());
  instance.attr("file") = error.file();
  instance.attr("field") = error.field();
  instance.attr("reason") = error.reason();
  PyErr_SetObject(error_type.ptr(), instance.ptr());
  throw py::error_already_set();
}

// Python's json.dumps `default`: paths (os.PathLike) become str, anything else that JSON
// cannot hold is a TypeError.
py::cpp_function path_to_text() {
  const py::module_ os = py::module_::import("os");
  return py::cpp_function([os](const py::object& object) -> py::object {
    if (py::isinstance(object, os.attr("PathLike"))) return os.attr("fspath")(object);
    throw py::type_error("Object of type " + type_name(object) + " is not JSON serializable");
  });
}

// One request value as JSON text; NaN, infinities, objects JSON cannot hold, text that is
// not Unicode (a lone surrogate) and nesting past Python's recursion limit are an error
// naming the key.
nlohmann::json value_to_json(const std::string& label, const std::string& key,
                             const py::handle& value, const py::cpp_function& path_text) {
  std::string text;
  try {
    text = py::module_::import("json")
               .attr("dumps")(value, py::arg("allow_nan") = false, py::arg("default") = path_text)
               .cast<std::string>();
  } catch (py::error_already_set& error) {
    if (error.matches(PyExc_RecursionError)) {
      throw InputError(label, key, "is nested too deeply to be a request value");
    }
    if (!error.matches(PyExc_TypeError) && !error.matches(PyExc_ValueError)) throw;
    throw InputError(label, key,
                     "cannot be read as JSON (" + py::str(error.value()).cast<std::string>() + ")");
  }
  try {
    return parse_json_text(text, label);
  } catch (const InputError& error) {
    // json.dumps writes a lone surrogate as "\ud800", which is no Unicode character.
    throw InputError(label, key, "cannot be read as JSON (" + error.reason() + ")");
  }
}

// A request key as UTF-8; a str holding a lone surrogate has none.
std::string key_text(const std::string& label, const py::handle& key) {
  if (!py::isinstance<py::str>(key)) {
    throw InputError(label, "", "request keys are str, got " + py::repr(key).cast<std::string>());
  }
  try {
    return key.cast<std::string>();
  } catch (const py::cast_error&) {
    // pybind11 cannot encode a str holding a lone surrogate as UTF-8.
    PyErr_Clear();
    throw InputError(label, "",
                     "a request key is not valid Unicode: " + py::repr(key).cast<std::string>());
  }
}

nlohmann::json request_to_json(const std::string& label, const py::handle& request) {
  if (!py::isinstance<py::dict>(request)) {
    throw InputError(label, "", "expected a dict of request keys, got " + type_name(request));
  }
  const py::cpp_function path_text = path_to_text();
  nlohmann::json result = nlohmann::json::object();
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(request)) {
    const std::string name = key_text(label, key);
    result[name] = value_to_json(label, name, value, path_text);
  }
  return result;
}

// Runs `run` on the request with the GIL released and returns its JSON output as Python
// objects; errors become Python exceptions.
py::object call(const std::string& name, const py::handle& request, const Command& run) {
  try {
    const nlohmann::json json_request = request_to_json(request_label(name), request);
    std::string output;
    {
      py::gil_scoped_release release;
      output = run(json_request);
    }
    // Under mpirun a sweep's ranks but 0 share the work and report nothing.
    if (output.empty()) return py::none();
    return py::module_::import("json").attr("loads")(output);
  } catch (const InputError& error) {
    raise_input_error(error);
  } catch (const std::filesystem::filesystem_error& error) {
    // A path in the request the file system refuses (too long, a loop of links).
    raise_input_error(InputError(error.path1().string(), "", error.code().message()));
  } catch (const py::error_already_set&) {
    throw;
  } catch (const py::builtin_exception&) {
    throw;
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError,
                    (std::string("shardplan internal error: ") + error.what()).c_str());
    throw py::error_already_set();
  }
}

std::string zoo_list(int (*run)(const ZooParams&, std::ostream&)) {
  std::ostringstream out;
  run(ZooParams{.json = true}, out);
  return out.str();
}

std::string docstring(const std::string& name, const std::string& summary) {
  std::string keys;
  for (const std::string& key : request_keys(name)) keys += (keys.empty() ? "" : ", ") + key;
  return summary + "\n\nrequest: a dict of the flags of `shardplan " + name +
         "` (long names, '-' as '_'):\n  " + keys + "\nReturns the object `shardplan " + name +
         " --json` prints. Bad input raises shardplan.Error.";
}

void add_command(py::module_& m, const char* name, const std::string& summary, Command run) {
  m.def(
      name,
      [name = std::string(name), run = std::move(run)](const py::object& request) {
        return call(name, request, run);
      },
      py::arg("request"), docstring(name, summary).c_str());
}

}  // namespace
}  // namespace shardplan

PYBIND11_MODULE(shardplan, m) {
  using namespace shardplan;
  m.doc() =
      "shardplan: plan, simulate and sweep FSDP training memory and communication.\n\n"
      "Each command takes one dict, the CLI's flags by their long names with '-' as '_', and "
      "returns what `shardplan <command> --json` prints:\n\n"
      "    import shardplan\n"
      "    shardplan.plan({\"model\": \"llama3-8b\", \"cluster\": \"dgx-h100\", \"gpus\": 8,\n"
      "                    \"set\": {\"recompute\": \"full\"}})\n\n"
      "\"model\" may also be a model dict (a model JSON file's content) and \"config\" a dict "
      "of config fields.";
  m.attr("__version__") = SHARDPLAN_VERSION;

  const py::object error =
      py::exception<InputError>(m, "Error", PyExc_ValueError);  // bad input: the CLI's exit 1
  error.attr("__doc__") =
      "Bad input: str() is the message `shardplan` prints after 'shardplan: error: '; file, "
      "field and reason are its parts (file: a path or a label such as 'shardplan.plan' or "
      "'--set'; field: a JSON path or a request key).";
  error.attr("file") = "";
  error.attr("field") = "";
  error.attr("reason") = "";

  add_command(m, "describe",
              "Parameters, FLOPs and activations of a model, and its memory per GPU.",
              command(&describe_request, &run_describe));
  add_command(m, "plan", "FSDP units, buffers, op schedule and pooled memory per GPU.",
              command(&plan_request, &run_plan));
  add_command(m, "simulate", "Predict one step: step time, MFU, exposed communication, memory.",
              command(&simulate_request, &run_simulate));
  add_command(m, "sweep",
              "Search sharding, prefetch, recompute and micro-batch for the fastest plan that "
              "fits.",
              sweep_command);
  add_command(m, "pack", "Place buffers at pool offsets (MiniMalloc CSV or plan.json).",
              command(&pack_request, &run_pack));
  add_command(m, "collective", "Predicted time, algbw and busbw of one NCCL collective.",
              command(&collective_request, &run_collective));

  m.def(
      "models", [] { return py::module_::import("json").attr("loads")(zoo_list(&run_models)); },
      "The built-in models: what `shardplan models --json` prints.");
  m.def(
      "clusters", [] { return py::module_::import("json").attr("loads")(zoo_list(&run_clusters)); },
      "The built-in clusters: what `shardplan clusters --json` prints.");
}
