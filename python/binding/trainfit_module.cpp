// trainfit's library for Python (the package in python/trainfit/): one entry point, the web API's
// handle() without a socket. trainfit.plan(...) posts its keyword arguments as /api/plan's body, so
// the Python package, the page, the API and `trainfit plan --format json` answer from one code path
// and take one vocabulary (the settings table, `trainfit schema`).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "trainfit/serve.hpp"

namespace py = pybind11;

namespace {

// The API's bounds are a server's, against clients it does not know; a Python caller is the user
// on their own machine, pasting their own config.json, so only the body bound is raised.
trainfit::serve::Limits local_limits() {
  trainfit::serve::Limits limits;
  limits.max_body_bytes = limits.max_snapshot_bytes;
  return limits;
}

py::tuple request(const std::string& method, const std::string& path,
                  const std::vector<std::pair<std::string, std::string>>& query, const py::bytes& body) {
  trainfit::serve::Request r{method, path, query, std::string(body)};
  trainfit::serve::Response response;
  {
    // A plan prices in microseconds, an advise search or a boundary takes longer: other Python
    // threads (a training loop's data loader) run meanwhile.
    py::gil_scoped_release unlocked;
    response = trainfit::serve::handle(r, local_limits());
  }
  return py::make_tuple(response.status, response.content_type, py::bytes(response.body));
}

}  // namespace

PYBIND11_MODULE(_trainfit, m) {
  m.doc() = "trainfit's library: the web API (docs/serve.md) answered in this process";
  m.def("request", &request, py::arg("method"), py::arg("path"), py::arg("query"), py::arg("body"),
        "One API request (GET with a query, or POST with a JSON body): (status, content type, body bytes). "
        "Never raises for what a caller sends: an error is a 4xx with {\"error\": ...}.");
  m.attr("version") = TRAINFIT_VERSION;
}
