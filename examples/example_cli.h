#pragma once
// What the example programs share: the --devices flag and the exit codes (2 for a bad command line, with a
// one-line reason; 1 for a tandem::Error, with its message), and a compact way to print small tensors.

#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <tandem/tandem.h>

namespace tandem::examples {

// Parses the command line with `app` (to which it adds --devices; at least `min_devices` of them) and runs `body`
// on the chosen devices. Returns the process exit status.
inline int run_example(CLI::App& app, int argc, char** argv,
                       const std::function<void(const std::vector<Device>&)>& body, size_t min_devices = 1) {
  const std::string program = app.get_name();
  std::string device_list = "all";
  app.add_option("--devices", device_list, "cuda:0,cuda:1 or cpu:0,cpu:1,cpu:2 or all (every GPU, else cpu:0,cpu:1)")
      ->capture_default_str();
  std::vector<Device> devices;
  try {
    app.parse(argc, argv);
    devices = parse_devices(device_list);
    if (devices.size() < min_devices) {
      std::cerr << program << ": --devices: needs at least " << min_devices << " devices, got " << to_string(devices)
                << '\n';
      return 2;
    }
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << program << ": " << e.what() << " (see --help)\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << program << ": --devices: " << e.what() << '\n';
    return 2;
  }
  try {
    body(devices);
  } catch (const Error& e) {
    std::cerr << program << ": " << e.what() << '\n';
    return 1;
  }
  return 0;
}

// "[[0.1235, -1.0000], [2.5000, 0.0000]]": values with four decimals, rows of a 2-D tensor in brackets.
inline std::string format_values(const Tensor& tensor) {
  const std::vector<float> values = tensor.to_vector();
  const int64_t columns = tensor.dim() == 2 ? tensor.size(1) : static_cast<int64_t>(values.size());
  std::string text = tensor.dim() == 2 ? "[" : "";
  for (size_t i = 0; i < values.size(); ++i) {
    const bool row_start = i % static_cast<size_t>(columns) == 0;
    if (row_start && i > 0) text += "], ";
    if (row_start) text += "[";
    if (!row_start) text += ", ";
    char number[32];
    std::snprintf(number, sizeof(number), "%.4f", static_cast<double>(values[i]));
    text += number;
  }
  text += tensor.dim() == 2 ? "]]" : "]";
  return text;
}

}  // namespace tandem::examples
